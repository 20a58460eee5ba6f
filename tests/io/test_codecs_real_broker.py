"""Every compression codec through a real broker, byte-exact; and the Fetch filter, sans-IO."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import pytest

from gengroup._errors import CorruptRecordError, NotLeaderOrFollower, OffsetOutOfRange
from gengroup._types import TopicPartition
from gengroup.io.fetch import (
    PartitionFetch,
    build_fetch_request,
    fetch_once,
    parse_fetch_response,
    read_partition,
)
from gengroup.producer import Producer, ProducerRecord
from gengroup.protocol.records import (
    Compression,
    ControlType,
    Header,
    encode_batch,
    encode_control_batch,
    with_base_offset,
)
from tests.io import cluster_with_topic
from tests.protocol.fetch_responses import fetch_response

BASE_TS = 1_700_000_000_123  # a millisecond timestamp with a non-zero ms part


def sample_records() -> list[ProducerRecord]:
    """Edge cases first, then enough repetitive data for compression to matter."""
    edge: list[ProducerRecord] = [
        ProducerRecord(b"plain", key=b"k", timestamp_ms=BASE_TS),
        ProducerRecord(None, key=b"tombstone", timestamp_ms=BASE_TS + 1),
        ProducerRecord(b"", key=None, timestamp_ms=BASE_TS + 2),
        ProducerRecord(None, key=None, timestamp_ms=BASE_TS + 3),
        ProducerRecord(b"v", key=b"", timestamp_ms=BASE_TS - 5000),  # earlier than the first
        ProducerRecord(
            b"with headers",
            key=b"h",
            headers=[
                ("trace", b"\x00\x01\xff"),
                ("empty", b""),
                ("null", None),
                ("dup", b"1"),
                ("dup", b"2"),
                ("ünïcode", "✓".encode()),
            ],
            timestamp_ms=BASE_TS + 999,
        ),
        ProducerRecord(bytes(range(256)) * 40, key=bytes(range(256)), timestamp_ms=BASE_TS + 7),
    ]
    bulk = [
        ProducerRecord(
            (f"payload {i} " * 20).encode(),
            key=f"key-{i % 13}".encode(),
            headers=[("i", str(i).encode())],
            timestamp_ms=BASE_TS + 10_000 + i,
        )
        for i in range(300)
    ]
    return edge + bulk


def as_tuple(key: bytes | None, value: bytes | None, headers: Sequence[Header], ts: int) -> Any:
    return (key, value, tuple((k, v) for k, v in headers), ts)


@pytest.mark.kafka
async def test_every_codec_round_trips_byte_exact(
    bootstrap: str, topic: str, codec: Compression
) -> None:
    tp = TopicPartition(topic, 0)
    records = sample_records()
    async with cluster_with_topic(bootstrap, topic) as cluster:
        async with Producer(cluster, compression=codec, linger=0.02) as producer:
            metas = await producer.send_many(
                topic,
                [ProducerRecord(r.value, r.key, r.headers, 0, r.timestamp_ms) for r in records],
            )
        assert [m.offset for m in metas] == list(range(len(records)))
        assert [m.timestamp for m in metas] == [r.timestamp_ms for r in records]

        got = await read_partition(cluster, tp, 0, len(records))
        assert [r.offset for r in got] == list(range(len(records)))
        assert [as_tuple(r.key, r.value, r.headers, r.timestamp) for r in got] == [
            as_tuple(r.key, r.value, r.headers, r.timestamp_ms or 0) for r in records
        ]

        # The broker kept our codec (compression.type=producer): look at the batches.
        leader = cluster.leader_for(tp)
        fetched = await fetch_once(cluster, leader, {tp: 0}, max_wait=0.1)
        batches = fetched[tp].batches
        assert batches and {b.compression for b in batches} == {codec}
        assert fetched[tp].high_watermark == len(records)

        # Reading from the middle of a (compressed) batch trims what is below.
        middle = await read_partition(cluster, tp, 5, 9)
        assert [r.offset for r in middle] == [5, 6, 7, 8]
        assert middle[0].headers == tuple(records[5].headers)


@pytest.mark.kafka
async def test_read_partition_errors_are_typed(bootstrap: str, topic: str) -> None:
    tp = TopicPartition(topic, 0)
    async with cluster_with_topic(bootstrap, topic) as cluster:
        async with Producer(cluster) as producer:
            await producer.send_many(topic, [b"a", b"b", b"c"])
        with pytest.raises(OffsetOutOfRange):
            await read_partition(cluster, tp, 10, 12)
        # end=None reads up to the high watermark of the first response.
        assert [r.value for r in await read_partition(cluster, tp, 1, None)] == [b"b", b"c"]
        # An empty range returns at once.
        assert await read_partition(cluster, tp, 3, 3) == []
        # A Fetch sent to a partition that does not exist comes back typed, per partition.
        leader = cluster.leader_for(tp)
        result = await fetch_once(cluster, leader, {TopicPartition(topic, 5): 0}, max_wait=0)
        err = result[TopicPartition(topic, 5)].error
        assert err is not None and err.code in (3, 6)  # UNKNOWN_TOPIC_OR_PARTITION


# ---------------------------------------------------------------------------- sans-IO filter

PID_A, PID_B = 1000, 2000


def _data(producer_id: int, first: int, n: int, *, txn: bool = True) -> bytes:
    batch = encode_batch(
        [(b"k", f"{producer_id}:{first + i}".encode(), (), BASE_TS) for i in range(n)],
        producer_id=producer_id if txn else -1,
        producer_epoch=0 if txn else -1,
        base_sequence=0 if txn else -1,
        transactional=txn,
    )
    return with_base_offset(batch, first)


def _marker(kind: ControlType, producer_id: int, offset: int) -> bytes:
    return encode_control_batch(
        kind, producer_id=producer_id, producer_epoch=0, timestamp=BASE_TS, base_offset=offset
    )


TP = TopicPartition("t", 0)


def _values(pf: PartitionFetch) -> list[str]:
    return [r.value.decode() for r in pf.records if r.value is not None]


def _log() -> bytes:
    # offsets: A0-1 (aborted txn), B2-3 (committed txn), A-ABORT@4, B-COMMIT@5,
    # A6-7 (new txn of A, committed), plain 8-9, A-COMMIT@10
    return b"".join(
        [
            _data(PID_A, 0, 2),
            _data(PID_B, 2, 2),
            _marker(ControlType.ABORT, PID_A, 4),
            _marker(ControlType.COMMIT, PID_B, 5),
            _data(PID_A, 6, 2),
            _data(-1, 8, 2, txn=False),
            _marker(ControlType.COMMIT, PID_A, 10),
        ]
    )


def test_read_committed_drops_aborted_batches_and_markers() -> None:
    resp = fetch_response(_log(), [(PID_A, 0)])
    pf = parse_fetch_response(resp, isolation_level="read_committed", positions={TP: 0})[TP]
    assert pf.error is None
    assert _values(pf) == ["2000:2", "2000:3", "1000:6", "1000:7", "-1:8", "-1:9"]
    assert pf.next_offset == 11  # past the last control batch
    assert (pf.high_watermark, pf.last_stable_offset, pf.log_start_offset) == (100, 90, 0)


def test_read_uncommitted_keeps_aborted_data_but_no_markers() -> None:
    resp = fetch_response(_log(), None)
    pf = parse_fetch_response(resp, isolation_level="read_uncommitted", positions={TP: 0})[TP]
    assert _values(pf) == [
        "1000:0",
        "1000:1",
        "2000:2",
        "2000:3",
        "1000:6",
        "1000:7",
        "-1:8",
        "-1:9",
    ]
    assert all(not b.is_control for b in pf.batches)
    assert pf.next_offset == 11


def test_aborted_transaction_opened_later_in_the_response() -> None:
    # A's second transaction (6-7) is the aborted one: the first stays visible.
    log = b"".join(
        [
            _data(PID_A, 0, 2),
            _marker(ControlType.COMMIT, PID_A, 2),
            _data(PID_A, 3, 2),
            _marker(ControlType.ABORT, PID_A, 5),
        ]
    )
    pf = parse_fetch_response(
        fetch_response(log, [(PID_A, 3)]), isolation_level=1, positions={TP: 0}
    )[TP]
    assert _values(pf) == ["1000:0", "1000:1"]
    assert pf.next_offset == 6


def test_only_control_batches_still_advance() -> None:
    log = _marker(ControlType.COMMIT, PID_B, 7)
    pf = parse_fetch_response(fetch_response(log, []), isolation_level=1, positions={TP: 7})[TP]
    assert pf.batches == [] and pf.next_offset == 8


def test_nothing_returned_keeps_the_requested_offset() -> None:
    pf = parse_fetch_response(fetch_response(b"", None), isolation_level=0, positions={TP: 42})[TP]
    assert pf.batches == [] and pf.next_offset == 42 and not pf.truncated


def test_records_below_the_position_are_trimmed() -> None:
    data = with_base_offset(
        encode_batch(
            [(None, str(i).encode(), (), BASE_TS) for i in range(5)],
            compression=Compression.LZ4,
        ),
        10,
    )
    pf = parse_fetch_response(fetch_response(data, None), isolation_level=0, positions={TP: 13})[TP]
    assert [r.offset for r in pf.records] == [13, 14]
    assert pf.next_offset == 15


def test_truncated_last_batch_is_reported() -> None:
    whole = _data(-1, 0, 3, txn=False)
    partial = _data(-1, 3, 3, txn=False)[:-7]
    pf = parse_fetch_response(
        fetch_response(whole + partial, None), isolation_level=0, positions={TP: 0}
    )[TP]
    assert [r.offset for r in pf.records] == [0, 1, 2]
    assert pf.truncated and pf.next_offset == 3
    only = parse_fetch_response(fetch_response(partial, None), isolation_level=0, positions={TP: 3})
    assert only[TP].batches == [] and only[TP].truncated and only[TP].next_offset == 3


def test_partition_errors_and_corruption_stay_on_the_partition() -> None:
    pf = parse_fetch_response(fetch_response(b"", None, error=6), isolation_level=0)[TP]
    assert isinstance(pf.error, NotLeaderOrFollower)
    corrupt = bytearray(_data(-1, 0, 2, txn=False))
    corrupt[-1] ^= 0xFF
    bad = parse_fetch_response(fetch_response(bytes(corrupt), None), isolation_level=0)[TP]
    assert isinstance(bad.error, CorruptRecordError)


def test_build_fetch_request_groups_partitions_by_topic() -> None:
    req = build_fetch_request(
        12,
        {TopicPartition("a", 0): 5, TopicPartition("b", 1): 7, TopicPartition("a", 2): 9},
        max_wait=0.25,
        min_bytes=1,
        max_bytes=1 << 40,
        partition_max_bytes=1024,
        isolation_level="read_committed",
    )
    assert req.isolation_level == 1 and req.session_epoch == -1 and req.session_id == 0
    assert req.max_wait == datetime.timedelta(milliseconds=250)
    assert req.max_bytes == 2**31 - 1
    layout = {t.topic: [(p.partition, p.fetch_offset) for p in t.partitions] for t in req.topics}
    assert layout == {"a": [(0, 5), (2, 9)], "b": [(1, 7)]}
    with pytest.raises(ValueError, match="isolation level"):
        build_fetch_request(
            12,
            {},
            max_wait=0,
            min_bytes=1,
            max_bytes=1,
            partition_max_bytes=1,
            isolation_level="snapshot",  # type: ignore[arg-type]
        )
