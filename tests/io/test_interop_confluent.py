"""Interop with librdkafka (confluent-kafka): each side reads what the other wrote, byte-exact."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import confluent_kafka
import pytest

from gengroup._types import TopicPartition
from gengroup.io.fetch import fetch_once, read_partition
from gengroup.producer import Producer, ProducerRecord
from gengroup.protocol.records import Compression, Header
from tests.io import admin_with_topics, cluster_with_topic, create_topic

BASE_TS = 1_700_000_000_456

CODEC_NAMES = {
    Compression.NONE: "none",
    Compression.GZIP: "gzip",
    Compression.SNAPPY: "snappy",
    Compression.LZ4: "lz4",
    Compression.ZSTD: "zstd",
}

Row = tuple[bytes | None, bytes | None, tuple[Header, ...], int]


# Edge cases first, then enough repetitive data for compression to matter.
ROWS: list[Row] = [
    (b"k", b"plain", (), BASE_TS),
    (b"tombstone", None, (), BASE_TS + 1),
    (None, b"", (), BASE_TS + 2),
    (None, None, (), BASE_TS + 3),
    (b"h", b"headers", (("a", b"1"), ("null", None), ("empty", b""), ("a", b"2")), BASE_TS + 4),
    (bytes(range(256)), bytes(range(256)) * 30, (("bin", bytes(range(256))),), BASE_TS - 9),
] + [
    (
        f"key-{i % 7}".encode(),
        (f"payload {i} " * 30).encode(),
        (("i", str(i).encode()),),
        BASE_TS + 100 + i,
    )
    for i in range(200)
]


def _confluent_produce(bootstrap: str, topic: str, codec: str, rows: Sequence[Row]) -> None:
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "linger.ms": 20,
            "acks": "all",
            "enable.idempotence": False,
        }
    )
    errors: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for key, value, headers, ts in rows:
        kwargs: dict[str, Any] = {"key": key, "value": value, "timestamp": ts, "partition": 0}
        if headers:
            kwargs["headers"] = list(headers)
        producer.produce(topic, on_delivery=on_delivery, **kwargs)
    assert producer.flush(30) == 0
    assert not errors, errors


def _confluent_consume(bootstrap: str, topic: str, count: int) -> list[Row]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        rows: list[Row] = []
        for _ in range(600):
            if len(rows) >= count:
                break
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            ts_type, ts = msg.timestamp()
            assert ts_type == confluent_kafka.TIMESTAMP_CREATE_TIME
            headers = tuple((k, v) for k, v in (msg.headers() or []))
            rows.append((msg.key(), msg.value(), headers, ts))
        return rows
    finally:
        consumer.close()


@pytest.mark.kafka
async def test_gengroup_reads_what_librdkafka_wrote(
    bootstrap: str, topic: str, codec: Compression
) -> None:
    tp = TopicPartition(topic, 0)
    async with cluster_with_topic(bootstrap, topic) as cluster:
        await anyio.to_thread.run_sync(
            _confluent_produce, bootstrap, topic, CODEC_NAMES[codec], ROWS
        )
        got = await read_partition(cluster, tp, 0, len(ROWS))
        assert [(r.key, r.value, r.headers, r.timestamp) for r in got] == ROWS
        assert [r.offset for r in got] == list(range(len(ROWS)))
        fetched = await fetch_once(cluster, cluster.leader_for(tp), {tp: 0}, max_wait=0.1)
        # librdkafka falls back to no compression when it does not pay off, so
        # only require that the bulk of the data came in the requested codec.
        assert codec in {b.compression for b in fetched[tp].batches}


@pytest.mark.kafka
async def test_librdkafka_reads_what_gengroup_wrote(
    bootstrap: str, topic: str, codec: Compression
) -> None:
    await create_topic(bootstrap, topic)
    async with Producer(bootstrap, compression=codec, linger=0.02) as producer:
        metas = await producer.send_many(
            topic,
            [ProducerRecord(v, k, h, partition=0, timestamp_ms=ts) for k, v, h, ts in ROWS],
        )
    assert [m.offset for m in metas] == list(range(len(ROWS)))
    got = await anyio.to_thread.run_sync(_confluent_consume, bootstrap, topic, len(ROWS))
    assert got == ROWS


def _transactions(bootstrap: str, topic: str) -> None:
    """Commit, abort, commit: 3 + 2 (aborted) + 1 records, with plain ones in between."""
    txn = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn", "linger.ms": 1}
    )
    plain = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    txn.init_transactions(30)
    txn.begin_transaction()
    for v in (b"c1", b"c2", b"c3"):
        txn.produce(topic, value=v, partition=0)
    txn.commit_transaction(30)
    txn.begin_transaction()
    for v in (b"a1", b"a2"):
        txn.produce(topic, value=v, partition=0)
    txn.flush(30)
    plain.produce(topic, value=b"p1", partition=0)
    assert plain.flush(30) == 0
    txn.abort_transaction(30)
    txn.begin_transaction()
    txn.produce(topic, value=b"c4", partition=0)
    txn.commit_transaction(30)


@pytest.mark.kafka
async def test_read_committed_skips_librdkafka_aborted_transactions(
    bootstrap: str, topic: str
) -> None:
    tp = TopicPartition(topic, 0)
    async with admin_with_topics(bootstrap, {topic: 1}) as admin:
        cluster = admin.cluster
        await anyio.to_thread.run_sync(_transactions, bootstrap, topic)
        # Seven data records and three control markers. The transaction
        # coordinator writes the last marker after EndTxn returns, so wait
        # for it rather than race it.
        with anyio.fail_after(30):
            while (end := (await admin.list_offsets([tp], "latest"))[tp]) < 7 + 3:
                await anyio.sleep(0.05)
        committed = await read_partition(cluster, tp, 0, end, isolation_level="read_committed")
        assert [r.value for r in committed] == [b"c1", b"c2", b"c3", b"p1", b"c4"]
        everything = await read_partition(cluster, tp, 0, end, isolation_level="read_uncommitted")
        assert [r.value for r in everything] == [b"c1", b"c2", b"c3", b"a1", b"a2", b"p1", b"c4"]
        assert end == 7 + 3
        assert (await admin.list_offsets([tp], "latest", read_committed=True))[tp] == end
