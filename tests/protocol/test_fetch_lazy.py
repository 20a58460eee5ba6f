"""Undecoded fetching: ``scan_batches`` / ``decode_raw`` and ``parse_fetch_response(decode=False)``.

The lazy path must hand out exactly what the eager one does, and fail with the
same typed errors: header-level damage (CRC, length, magic, codec) when the
response is read, record-level damage under a correct CRC when the records
are decoded.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from crc32c import crc32c

from gengroup._errors import CorruptRecordError, ProtocolError
from gengroup._types import TopicPartition
from gengroup.protocol.fetch import PartitionFetch, parse_fetch_response
from gengroup.protocol.records import (
    Compression,
    ControlType,
    decode_batches,
    decode_raw,
    encode_batch,
    encode_control_batch,
    scan_batches,
    with_base_offset,
)
from tests.protocol.fetch_responses import fetch_response

TP = TopicPartition("t", 0)
TS = 1_700_000_000_000
PID_A, PID_B = 1000, 2000


def _data(pid: int, first: int, n: int, *, txn: bool = True, codec: int = 0) -> bytes:
    batch = encode_batch(
        [(b"k", f"{pid}:{first + i}".encode(), (("h", b"v"),), TS + i) for i in range(n)],
        producer_id=pid if txn else -1,
        producer_epoch=0 if txn else -1,
        base_sequence=0 if txn else -1,
        transactional=txn,
        compression=Compression(codec),
    )
    return with_base_offset(batch, first)


def _marker(kind: ControlType, pid: int, offset: int) -> bytes:
    return encode_control_batch(
        kind, producer_id=pid, producer_epoch=0, timestamp=TS, base_offset=offset
    )


def _both(data: bytes, aborted: Any, level: int, start: int) -> tuple[PartitionFetch, ...]:
    return tuple(
        parse_fetch_response(
            fetch_response(data, aborted), isolation_level=level, positions={TP: start}, decode=d
        )[TP]
        for d in (True, False)
    )


LOG = b"".join(
    [
        _data(PID_A, 0, 2),
        _data(PID_B, 2, 2, codec=Compression.LZ4),
        _marker(ControlType.ABORT, PID_A, 4),
        _marker(ControlType.COMMIT, PID_B, 5),
        _data(PID_A, 6, 2, codec=Compression.ZSTD),
        _data(-1, 8, 5, txn=False, codec=Compression.LZ4),
        _marker(ControlType.COMMIT, PID_A, 13),
        _data(-1, 14, 3, txn=False),
    ]
)


@pytest.mark.parametrize("level", [0, 1])
@pytest.mark.parametrize("start", [0, 1, 6, 9, 12, 13, 16])
@pytest.mark.parametrize("cut", [0, 7])
def test_lazy_parse_hands_out_what_the_eager_one_does(level: int, start: int, cut: int) -> None:
    data = LOG[: len(LOG) - cut]
    eager, lazy = _both(data, [(PID_A, 0)], level, start)
    assert eager.error is None and lazy.error is None
    assert lazy.records == eager.records
    assert (lazy.next_offset, lazy.truncated, lazy.size) == (
        eager.next_offset,
        eager.truncated,
        eager.size,
    )
    # Only a batch that starts below the position is decoded at once.
    assert all(b.base_offset < start for b in lazy.batches)
    assert all(b.base_offset >= start and b.count for b in lazy.raw)


def test_scan_then_decode_equals_decode() -> None:
    raws, used = scan_batches(LOG)
    assert used == len(LOG)
    assert [r.base_offset for r in raws] == [b.base_offset for b in decode_batches(LOG)]
    assert decode_raw(raws) == [r for b in decode_batches(LOG) for r in b.records]
    assert [raw.decode() for raw in raws] == decode_batches(LOG)
    assert decode_raw(raws, min_offset=9)[0].offset == 9
    assert decode_raw([]) == []


def test_header_damage_fails_the_scan_and_the_partition() -> None:
    bad = bytearray(_data(-1, 0, 3, txn=False))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        scan_batches(bytes(bad))
    _, lazy = _both(bytes(bad), None, 0, 0)
    assert isinstance(lazy.error, CorruptRecordError)
    magic = bytearray(_data(-1, 0, 1, txn=False))
    magic[16] = 1
    with pytest.raises(ProtocolError, match="magic"):
        scan_batches(bytes(magic))


@pytest.mark.parametrize("start", [0, 2, 3, 4])
def test_sound_batches_before_a_damaged_one_are_the_partitions_result(start: int) -> None:
    """Both parses hand out the sound batches (offsets 0-2) before the damaged
    one (3-5) without an error, the next Fetch starting at 3; an answer
    whose sound batches are all below the position is the damage, naming
    the partition (a Fetch from 3 or 4 of the same bytes)."""
    bad = bytearray(_data(-1, 3, 3, txn=False))
    bad[-1] ^= 0xFF
    data = _data(-1, 0, 3, txn=False) + bytes(bad)
    for parsed in _both(data, None, 0, start):
        if start < 3:
            assert parsed.error is None
            assert [r.offset for r in parsed.records] == list(range(start, 3))
            assert (parsed.next_offset, parsed.truncated, parsed.size) == (3, False, len(data))
        else:
            assert isinstance(parsed.error, CorruptRecordError)
            assert str(parsed.error).startswith("Fetch t[0]: record batch at offset 3")
            assert parsed.records == []


def _recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def test_record_damage_under_a_correct_crc_fails_when_decoded() -> None:
    good = bytearray(_data(-1, 0, 3, txn=False))
    good[61] = 0x03  # the first record's length: negative
    bad = _recrc(good)
    raws, _ = scan_batches(bad)  # the header is fine
    with pytest.raises(CorruptRecordError):
        decode_raw(raws)
    eager, lazy = _both(bad, None, 0, 0)
    assert isinstance(eager.error, CorruptRecordError)
    assert lazy.error is None and lazy.next_offset == 3
    with pytest.raises(CorruptRecordError):
        _ = lazy.records
    with pytest.raises(CorruptRecordError):  # again: nothing was half-decoded
        _ = lazy.records


def _record_damage(first: int, codec: int) -> bytes:
    """A batch of offsets ``first``..``first+2`` whose header and CRC are sound
    but whose records cannot be decoded: a negative record length, or (for a
    compressed batch) bytes that do not decompress."""
    bad = bytearray(_data(-1, first, 3, txn=False, codec=codec))
    if codec:
        bad[61:] = bytes(len(bad) - 61)
    else:
        bad[61] = 0x03
    return _recrc(bad)


@pytest.mark.parametrize("codec", [0, 1, 3])
@pytest.mark.parametrize("start", [0, 2, 3, 4])
def test_sound_batches_before_record_damage_are_handed_out_when_decoding(
    start: int, codec: int
) -> None:
    """Decoding hands out the sound batches (offsets 0-2) before one whose
    records are damaged under a correct CRC (3-5), and nothing after it
    (6-8): the next Fetch starts at 3 and its answer is the damage, naming
    partition and offset, as the undecoded parse does when the batch is
    read. It used to fail the partition, hiding the sound batches.

    Under ``decode=True`` every batch is decoded; under ``decode=False`` only
    a control batch and the batch the position lies inside (4), so the same
    damage there is the same error."""
    data = _data(-1, 0, 3, txn=False) + _record_damage(3, codec) + _data(-1, 6, 3, txn=False)
    eager, lazy = _both(data, None, 0, start)
    if start < 3:
        assert eager.error is None
        assert [r.offset for r in eager.records] == list(range(start, 3))
        assert (eager.next_offset, eager.truncated, eager.size) == (3, False, len(data))
        eager, lazy = _both(data[len(_data(-1, 0, 3, txn=False)) :], None, 0, 3)
    assert isinstance(eager.error, CorruptRecordError)
    assert str(eager.error).startswith("Fetch t[0]: record batch at offset 3")
    assert eager.records == [] and eager.raw == []
    if start == 4:  # the undecoded parse decodes a batch it trims: the same error
        assert isinstance(lazy.error, CorruptRecordError)
        assert str(lazy.error) == str(eager.error)
    else:  # the undecoded parse meets the damage when the batch is read
        assert lazy.error is None
        with pytest.raises(CorruptRecordError, match="record batch at offset 3"):
            _ = lazy.records


def test_sound_batches_before_a_damaged_transaction_marker_are_handed_out() -> None:
    """Under read_committed both parses decode a transaction marker (for its
    type): one whose record is damaged under a correct CRC ends the result
    there, the sound batches before it handed out; the next Fetch, starting
    at the marker, is its error. The undecoded parse used to fail the
    partition with it, unnamed, hiding the sound batches."""
    marker = bytearray(_marker(ControlType.COMMIT, PID_A, 3))
    marker[61] = 0x03  # the record's length: negative
    data = _data(PID_A, 0, 3) + _recrc(marker) + _data(-1, 4, 3, txn=False)
    for parsed in _both(data, [], 1, 0):
        assert parsed.error is None
        assert [r.offset for r in parsed.records] == [0, 1, 2]
        assert (parsed.next_offset, parsed.truncated) == (3, False)
    for parsed in _both(data[len(_data(PID_A, 0, 3)) :], [], 1, 3):
        assert isinstance(parsed.error, CorruptRecordError)
        assert str(parsed.error).startswith("Fetch t[0]: record batch at offset 3")
        assert parsed.records == []


def test_a_decoding_error_counts_its_bytes_from_the_batch(record_loop: str) -> None:
    """The byte a decoding error names counts from the damaged batch's start,
    wherever the batch lies in the answer: behind a sound batch it is the
    same byte as alone, in the record loop and in the Arrow columns alike.
    It used to count from the start of the whole answer."""
    from gengroup.protocol import arrow

    damaged = bytearray(_data(-1, 3, 3, txn=False))
    damaged[61] = 0x03  # the first record's length: negative
    alone = _recrc(damaged)
    behind = _data(-1, 0, 3, txn=False) + alone
    messages = set()
    for data, skip in ((alone, 0), (behind, 1)):
        raws = scan_batches(data)[0][skip:]
        with pytest.raises(CorruptRecordError) as caught:
            decode_raw(raws)
        messages.add(str(caught.value))
        saved = arrow._arrow_columns
        if record_loop == "python":
            arrow._arrow_columns = None
        try:
            with pytest.raises(CorruptRecordError) as caught:
                arrow.batches_to_arrow(raws)
        finally:
            arrow._arrow_columns = saved
        messages.add(str(caught.value))
    assert messages == {"record batch at offset 3: negative record length at byte 62"}
