"""Sans-IO tests of the embedded broker's partition logs and topic registry."""

from __future__ import annotations

import itertools
import struct
import uuid

import pytest

from gengroup.broker.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    LogError,
    PartitionLog,
    Topics,
    topic_name_error,
)
from gengroup.protocol.records import Compression, decode_batches, encode_batch


def batch(*values: bytes, ts: int = 1000, step: int = 1, **kw: object) -> bytes:
    return encode_batch(
        [(None, v, (), ts + i * step) for i, v in enumerate(values)],
        **kw,  # type: ignore[arg-type]
    )


def test_append_restamps_offset_and_epoch_keeping_the_crc() -> None:
    log = PartitionLog()
    assert log.append(batch(b"a", b"b"), now_ms=5, leader_epoch=3).base_offset == 0
    result = log.append(batch(b"c", base_offset=77), now_ms=5, leader_epoch=3)
    assert result == (2, -1, 0)
    assert log.high_watermark == 3
    stored = log.batches[1]
    assert (stored.base_offset, stored.last_offset) == (2, 2)
    decoded = decode_batches(stored.data)[0]  # verifies the CRC
    assert decoded.base_offset == 2
    assert decoded.partition_leader_epoch == 3
    assert [r.offset for r in decoded.records] == [2]


def test_log_append_time_rewrites_attributes_max_timestamp_and_crc() -> None:
    log = PartitionLog()
    result = log.append(batch(b"a", b"b", ts=10), now_ms=99_000, log_append_time=True)
    assert result.log_append_time == 99_000
    decoded = decode_batches(log.batches[0].data)[0]  # CRC recomputed
    assert decoded.timestamp_type == 1
    assert decoded.max_timestamp == 99_000
    assert [r.timestamp for r in decoded.records] == [99_000, 99_000]


def test_compressed_batch_is_stored_verbatim() -> None:
    log = PartitionLog()
    data = batch(b"x" * 100, b"y" * 100, compression=Compression.ZSTD)
    log.append(data, now_ms=0)
    assert log.batches[0].data[8:12] == data[8:12]
    assert log.batches[0].data[21:] == data[21:]
    assert [r.value for r in decode_batches(log.batches[0].data)[0].records] == [
        b"x" * 100,
        b"y" * 100,
    ]


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]), 2),  # payload flipped: CRC mismatch
        (lambda b: b + b, 87),  # two batches
        (lambda b: b[:-3], 87),  # truncated
        (lambda b: b"", 87),  # no batch
        (lambda b: b[:16] + b"\x01" + b[17:], 87),  # magic 1
    ],
)
def test_append_rejects_bad_input(mutate: object, code: int) -> None:
    log = PartitionLog()
    with pytest.raises(LogError) as info:
        log.append(mutate(batch(b"a", b"b")), now_ms=0)  # type: ignore[operator]
    assert info.value.code == code
    assert log.high_watermark == 0


def test_append_rejects_inconsistent_counts_control_batches_and_big_batches() -> None:
    log = PartitionLog()
    with pytest.raises(LogError) as info:
        log.append(batch(b"a", last_offset_delta=5), now_ms=0)
    assert info.value.code == 87
    with pytest.raises(LogError) as info:
        log.append(batch(b"\x00\x00\x00\x01", control=True), now_ms=0)
    assert info.value.code == 87
    with pytest.raises(LogError) as info:
        log.append(batch(b"z" * 2000), now_ms=0, max_message_bytes=1000)
    assert info.value.code == 10


def test_read_returns_whole_batches_from_the_one_holding_the_offset() -> None:
    log = PartitionLog()
    sizes = []
    for i in range(4):
        data = batch(*[bytes([i]) * 50] * 3)
        log.append(data, now_ms=0)
        sizes.append(len(data))
    assert log.high_watermark == 12
    # offset 4 is inside batch 1 (offsets 3..5): the whole batch is returned
    out = log.read(4, 10**6, min_one=False)
    assert len(out) == 3
    assert decode_batches(out[0])[0].base_offset == 3
    # byte limits: whole batches only, at least one with min_one
    assert log.read(0, sizes[0] + sizes[1] - 1, min_one=False) == [log.batches[0].data]
    assert log.read(0, 1, min_one=False) == []
    assert log.read(0, 1, min_one=True) == [log.batches[0].data]
    assert log.read(12, 100, min_one=True) == []
    for bad in (-1, 13):
        with pytest.raises(LogError) as info:
            log.read(bad, 100, min_one=True)
        assert info.value.code == 1


def test_offset_lookups() -> None:
    log = PartitionLog()
    assert log.offset_for(LATEST_TIMESTAMP) == (0, -1)
    assert log.offset_for(MAX_TIMESTAMP) == (-1, -1)
    log.append(batch(b"a", b"b", b"c", ts=100, step=10), now_ms=0)  # 100 110 120
    log.append(batch(b"d", b"e", ts=500, step=-300), now_ms=0)  # 500 200
    assert log.offset_for(LATEST_TIMESTAMP) == (5, -1)
    assert log.offset_for(EARLIEST_TIMESTAMP) == (0, -1)
    assert log.offset_for(LATEST_TIERED_TIMESTAMP) == (-1, -1)
    assert log.offset_for(MAX_TIMESTAMP) == (3, 500)
    assert log.offset_for(105) == (1, 110)
    assert log.offset_for(121) == (3, 500)
    assert log.offset_for(501) == (-1, -1)
    assert log.bytes_from(0) == log.size_bytes
    assert log.bytes_from(0, limit=1) == 1
    assert log.bytes_from(3, limit=10**9) == log.size_bytes - len(log.batches[0].data)
    assert log.epoch_at(4, 9) == 0
    assert log.epoch_at(5, 9) == 9


def test_delete_records_moves_the_log_start() -> None:
    log = PartitionLog()
    for _ in range(3):
        log.append(batch(b"a", b"b"), now_ms=0)
    assert log.delete_records(3) == 3
    assert len(log.batches) == 2  # batch 0..1 dropped, 2..3 kept (holds offset 3)
    assert log.offset_for(EARLIEST_TIMESTAMP) == (3, -1)
    with pytest.raises(LogError):
        log.read(2, 100, min_one=True)
    assert log.delete_records(-1) == 6
    assert log.batches == []


def _topics() -> Topics:
    counter = itertools.count(1)
    return Topics(lambda: uuid.UUID(int=next(counter)))


def test_topic_names_and_creation_errors() -> None:
    assert topic_name_error("ok.name_1-x") is None
    for bad in ("", ".", "..", "a" * 250, "bad/name", "sp ace"):
        assert topic_name_error(bad) is not None
    topics = _topics()
    topics.create("a.b", 1, 1, brokers=[0], online={0})
    cases = [
        (("a.b", 1, 1), 36),
        (("a_b", 1, 1), 17),
        (("x", 0, 1), 37),
        (("x", 1, 0), 38),
        (("x", 1, 2), 38),
        (("bad/", 1, 1), 17),
    ]
    for (name, parts, rf), code in cases:
        with pytest.raises(LogError) as info:
            topics.create(name, parts, rf, brokers=[0], online={0})
        assert info.value.code == code, name
    with pytest.raises(LogError) as info:
        topics.create(
            "c", 1, 1, brokers=[0], online={0}, configs={"message.timestamp.type": "Nope"}
        )
    assert info.value.code == 40


def test_placement_spreads_leaders_and_elections_follow_brokers() -> None:
    topics = _topics()
    t = topics.create("t", 6, 2, brokers=[0, 1, 2], online={0, 1, 2})
    assert [p.leader for p in t.partitions] == [0, 1, 2, 0, 1, 2]
    assert [p.replicas for p in t.partitions[:3]] == [[0, 1], [1, 2], [2, 0]]
    u = topics.create("u", 3, 1, brokers=[0, 1, 2], online={0, 1, 2})
    assert [p.leader for p in u.partitions] == [1, 2, 0]  # the next topic starts further on
    assert topics.elect_leaders({1, 2})
    assert [p.leader for p in t.partitions] == [1, 1, 2, 1, 1, 2]
    assert [p.leader_epoch for p in t.partitions] == [1, 0, 0, 1, 0, 0]
    assert [p.leader for p in u.partitions] == [1, 2, -1]  # single replica: offline
    assert topics.elect_leaders({0, 1, 2})
    assert u.partitions[2].leader == 0
    assert u.partitions[2].leader_epoch == 2
    assert not topics.elect_leaders({0, 1, 2})


def test_add_partitions_delete_and_move_leader() -> None:
    topics = _topics()
    topics.create("t", 2, 1, brokers=[0, 1], online={0, 1})
    with pytest.raises(LogError) as info:
        topics.add_partitions("t", 2, brokers=[0, 1], online={0, 1})
    assert info.value.code == 37
    with pytest.raises(LogError) as info:
        topics.add_partitions("nope", 3, brokers=[0, 1], online={0, 1})
    assert info.value.code == 3
    topics.add_partitions("t", 4, brokers=[0, 1], online={0, 1}, validate_only=True)
    assert len(topics.by_name["t"].partitions) == 2
    topics.add_partitions("t", 4, brokers=[0, 1], online={0, 1}, assignments=[[1], [0]])
    assert [p.leader for p in topics.by_name["t"].partitions] == [0, 1, 1, 0]
    part = topics.move_leader("t", 0, 1)
    assert (part.leader, part.leader_epoch, part.replicas) == (1, 1, [0, 1])
    topics.delete("t")
    assert "t" not in topics
    assert topics.by_id == {}


def test_batch_header_layout_assumptions() -> None:
    # The log patches fields in place; pin the offsets it relies on.
    data = batch(b"a", partition_leader_epoch=7, base_offset=5)
    assert struct.unpack_from(">qii", data, 0)[0] == 5
    assert struct.unpack_from(">qii", data, 0)[2] == 7
    assert data[16] == 2


def test_header_only_validation() -> None:
    log = PartitionLog()
    good = batch(b"a", b"b", b"c")
    assert log.append(good, now_ms=0, validate_records=False).base_offset == 0
    assert log.high_watermark == 3
    with pytest.raises(LogError) as info:
        log.append(good[:-1] + bytes([good[-1] ^ 1]), now_ms=0, validate_records=False)
    assert info.value.code == 2
    with pytest.raises(LogError) as info:
        log.append(batch(b"a", last_offset_delta=3), now_ms=0, validate_records=False)
    assert info.value.code == 87
