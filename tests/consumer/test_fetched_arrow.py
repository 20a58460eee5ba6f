"""``FetchedBatch.to_arrow()``: a worker reads its batches as Arrow tables.

The table holds exactly the records ``FetchedBatch.records`` holds: a batch
the fetch already decoded and trimmed to the requested position comes first,
the undecoded batches after it, and control batches never appear. End to end,
a group whose workers read only tables sees every record exactly once, with
its key, value, headers and timestamp, whatever the codec and wherever the
worker seeks to (inside a compressed batch too).
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import anyio
import pyarrow as pa
import pytest
import trio
import trio.testing

from gengroup import (
    ConsumerGroup,
    FetchedBatch,
    Generation,
    Producer,
    TopicPartition,
    fetched_to_arrow,
)
from gengroup.broker import FakeCluster
from gengroup.consumer.columnar import fetched_schema
from gengroup.protocol import arrow, records
from gengroup.protocol.records import (
    Compression,
    ControlType,
    NewRecord,
    decode_raw,
    encode_batch,
    encode_control_batch,
    scan_batches,
)

from ..embedded import connect, produce as produce_request
from ..protocol.test_records import GO_HEADER_NAME, batch_with_header_name
from .helpers import EMBEDDED_SETTINGS

SETTINGS = {**EMBEDDED_SETTINGS, "commit_interval": 0.0}


@pytest.fixture(params=["compiled", "python"])
def arrow_path(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test with the compiled Arrow columns and with the pure-Python path."""
    saved = arrow._arrow_columns, records._decode_records
    if request.param == "python":
        arrow._arrow_columns = None
        records._decode_records = records._decode_records_py
    else:  # even under GENGROUP_PURE_PYTHON; fails, never skips, if it is not built
        speedups = importlib.import_module("gengroup.protocol._speedups")
        speedups.configure(records.Record, records.CorruptRecordError)
        arrow._arrow_columns = speedups.arrow_columns
        records._decode_records = speedups.decode_records
    try:
        yield request.param
    finally:
        arrow._arrow_columns, records._decode_records = saved


def rows(table: Any) -> list[tuple[int, int, bytes | None, bytes | None, Any]]:
    """(offset, timestamp, key, value, headers) per row, headers as (key, value) tuples."""
    columns = [
        table.column("offset").to_pylist(),
        table.column("timestamp").cast(pa.int64()).to_pylist(),
        table.column("key").to_pylist(),
        table.column("value").to_pylist(),
        [tuple((h["key"], h["value"]) for h in hs) for hs in table.column("headers").to_pylist()],
    ]
    return list(zip(*columns, strict=True))


def as_rows(recs: list[records.Record]) -> list[tuple[int, int, bytes | None, bytes | None, Any]]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs]


def test_a_trimmed_first_batch_then_raw_batches(arrow_path: str) -> None:
    first = encode_batch(
        [(b"a", b"1", (), 10), (b"b", b"2", [("h", b"x")], 11), (None, b"3", (), 12)],
        base_offset=0,
        compression=Compression.LZ4,
    )
    marker = encode_control_batch(
        ControlType.COMMIT, producer_id=1, producer_epoch=0, timestamp=13, base_offset=3
    )
    rest = encode_batch([(None, None, [("k", None)], 14)] * 2, base_offset=4)
    (batch0,), _ = scan_batches(first)
    raw, _ = scan_batches(rest)
    trimmed = decode_raw([batch0], min_offset=1)
    fetched = FetchedBatch("t", 0, trimmed, 6, 6, raw=raw)
    table = fetched.to_arrow()
    table.validate(full=True)
    assert table.schema == arrow.arrow_schema()
    assert rows(table) == as_rows(fetched.records)
    assert table.column("offset").to_pylist() == [1, 2, 4, 5]
    # once the records were read, the table is built from them, the same
    assert fetched.to_arrow().equals(table)
    # the control batch a fetch drops never reaches a FetchedBatch; a table of
    # raw batches holds what decode_raw holds, the marker's record included
    raws, _ = scan_batches(first + marker + rest)
    assert rows(arrow.batches_to_arrow(raws)) == as_rows(decode_raw(raws))


def test_an_empty_fetched_batch_gives_an_empty_table(arrow_path: str) -> None:
    table = FetchedBatch("t", 0, [], 5, 5).to_arrow()
    assert table.num_rows == 0 and table.schema == arrow.arrow_schema()


def test_many_fetched_batches_stack_into_one_table_with_topic_and_partition(
    arrow_path: str,
) -> None:
    raw_a, _ = scan_batches(encode_batch([(b"k", b"a", (), 1)] * 3, base_offset=4))
    raw_b, _ = scan_batches(encode_batch([(None, b"b", [("h", None)], 2)] * 2, base_offset=0))
    batches = [FetchedBatch("t", 2, [], 7, 7, raw=raw_a), FetchedBatch("u", 0, [], 2, 2, raw=raw_b)]
    table = fetched_to_arrow(batches)
    table.validate(full=True)
    assert table.schema == fetched_schema()
    assert table.column("topic").to_pylist() == ["t"] * 3 + ["u"] * 2
    assert table.column("partition").to_pylist() == [2] * 3 + [0] * 2
    assert rows(table.drop_columns(["topic", "partition"])) == as_rows(
        batches[0].records + batches[1].records
    )
    assert fetched_to_arrow([]).schema == fetched_schema()


CODECS = [Compression.NONE, Compression.LZ4, Compression.ZSTD, Compression.GZIP]
PER_BATCH = 7
BATCHES = 8


def _produce(cluster: FakeCluster, partitions: int) -> dict[tuple[int, int], NewRecord]:
    """Batches of every codec with null keys and values and headers; what is at each offset."""
    produced: dict[tuple[int, int], NewRecord] = {}
    for p in range(partitions):
        offset = 0
        for i in range(BATCHES):
            batch = [
                NewRecord(
                    None if j % 3 == 0 else b"k%d" % j,
                    None if j == 4 else f"{p}-{i}-{j}".encode() * (j + 1),
                    (("h", b"x"), ("n", None)) if j % 2 else (),
                    1_700_000_000_000 + 100 * i + j,
                )
                for j in range(PER_BATCH)
            ]
            cluster.produce("t", batch, partition=p, compression=CODECS[i % len(CODECS)])
            for j, record in enumerate(batch):
                produced[(p, offset + j)] = record
            offset += PER_BATCH
    return produced


async def test_workers_reading_arrow_tables_see_every_record_exactly_once(
    autojump_clock: trio.testing.MockClock, arrow_path: str
) -> None:
    partitions = 3
    # partition 1 starts inside its second batch (LZ4): the fetch trims it
    starts = {0: 0, 1: PER_BATCH + 3, 2: 2 * PER_BATCH}
    async with FakeCluster(topics={"t": partitions}, initial_rebalance_delay_ms=0) as cluster:
        produced = _produce(cluster, partitions)
        wanted = {(p, o) for p, o in produced if o >= starts[p]}
        seen: Counter[tuple[int, int]] = Counter()
        tables = 0
        everything = anyio.Event()

        async def worker(gen: Generation, tp: TopicPartition) -> None:
            nonlocal tables
            gen.seek(tp, starts[tp.partition])
            async for batch in gen.fetch(tp):
                table = batch.to_arrow()
                tables += 1
                table.validate(full=True)
                assert table.schema == arrow.arrow_schema()
                for offset, timestamp, key, value, headers in rows(table):
                    record = produced[(tp.partition, offset)]
                    assert (key, value, headers) == (record.key, record.value, record.headers)
                    assert timestamp == record.timestamp
                    seen[(tp.partition, offset)] += 1
                gen.mark(tp, batch.next_offset)
                if set(seen) >= wanted:
                    everything.set()

        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            for tp in gen.assignments:
                gen.start_soon(worker, gen, tp)
            with trio.fail_after(60):
                await everything.wait()
            await gen.commit()
        assert set(seen) == wanted
        assert all(n == 1 for n in seen.values())
        assert tables >= partitions
        committed = cluster.committed_offsets("g")
        assert committed == {TopicPartition("t", p): BATCHES * PER_BATCH for p in range(partitions)}


async def test_a_header_name_that_is_not_utf8_is_read_and_can_be_sent_again(
    autojump_clock: trio.testing.MockClock, arrow_path: str
) -> None:
    """A Go producer's record whose header name is not UTF-8, between two
    ordinary records of its batch (Kafka takes it: it does not check header
    names): the worker reads all three, as records and as a table, the name's
    bad bytes as U+FFFD (the Java consumer's reading), and a producer can send
    them on unchanged. The batch used to be CorruptRecordError for the group
    at every restart, the good records lost with it."""
    sent = batch_with_header_name(GO_HEADER_NAME, Compression.LZ4)
    name = "\ufffd\ufffd-trace"
    expected = [
        (b"before", (("ok", b"1"),)),
        (b"binary-header-name", ((name, b"x"),)),
        (b"after", ()),
    ]
    async with FakeCluster(topics={"t": 1, "copy": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with connect(cluster) as conn:
            answer = await conn.request(produce_request(9, "t", 0, sent))
        assert answer.responses[0].partition_responses[0].error_code == 0
        async with (
            ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group,
            Producer(cluster.bootstrap) as producer,
        ):
            gen = await group.next()
            with trio.fail_after(30):
                batch = await anext(gen.fetch(TopicPartition("t", 0)))
            assert [(r.value, r.headers) for r in batch.records] == expected
            assert rows(batch.to_arrow()) == as_rows(batch.records)
            for record in batch.records:
                await producer.send("copy", record.value, headers=record.headers)
            with pytest.raises(ValueError, match="header name"):  # not a name Kafka can hold
                await producer.send("copy", b"v", headers=[("\udcff\udcfe-trace", b"x")])
            gen.cancel("test over")
        assert [(r.value, r.headers) for r in cluster.records("copy")] == expected
