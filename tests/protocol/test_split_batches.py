"""``split_batches``: a partition's fetched data cut into pieces of at most N records.

Pieces end between record batches, keep offset order, and together hold every
record once; their ``next_offset`` is past their last batch (the last piece's
is the fetch's own), and their sizes add up to the fetch's.
"""

from __future__ import annotations

import itertools

import pytest

from gengroup.protocol.fetch import split_batches
from gengroup.protocol.records import RawBatch, Record, decode_raw, encode_batch, scan_batches


def _raw(counts: list[int], first: int = 0) -> list[RawBatch]:
    """Record batches of ``counts`` records each, at consecutive offsets from ``first``."""
    data = b""
    offset = first
    for n in counts:
        data += encode_batch(
            [(None, f"v{offset + i}".encode(), (), 0) for i in range(n)], base_offset=offset
        )
        offset += n
    batches, _ = scan_batches(data)
    return batches


def _offsets(records: list[Record], raw: list[RawBatch] | tuple[RawBatch, ...]) -> list[int]:
    return [r.offset for r in records] + [r.offset for r in decode_raw(tuple(raw))]


@pytest.mark.parametrize(
    ("counts", "most", "pieces"),
    [
        ([100] * 10, 250, [200, 200, 200, 200, 200]),
        ([100] * 10, 100, [100] * 10),
        ([1] * 7, 3, [3, 3, 1]),
        ([400, 10, 10], 100, [400, 20]),  # a batch larger than the limit comes whole
        ([10, 400, 10], 100, [10, 400, 10]),
        ([5, 5], 10, [10]),  # within the limit: one piece
        ([5, 5], None, [10]),  # no limit: one piece
    ],
)
def test_pieces_hold_every_record_once_in_order(
    counts: list[int], most: int | None, pieces: list[int]
) -> None:
    raw = _raw(counts, first=40)
    end = 40 + sum(counts) + 3  # past skipped (control) batches after the data
    size = sum(b.end - b.start for b in raw) + 17
    got = split_batches([], raw, end, size, most)
    assert [len(_offsets(p.records, p.raw)) for p in got] == pieces
    assert [o for p in got for o in _offsets(p.records, p.raw)] == list(range(40, end - 3))
    for before, after in itertools.pairwise(got):
        # A piece's next offset is where the next one starts.
        assert before.next_offset == _offsets(after.records, after.raw)[0]
    assert got[-1].next_offset == end
    assert sum(p.size for p in got) == size
    assert all(p.size >= 0 for p in got)


def test_decoded_records_stay_in_the_first_piece() -> None:
    decoded = decode_raw(tuple(_raw([6])))  # offsets 0..5, decoded already
    raw = _raw([2, 2, 2], first=6)
    got = split_batches(decoded, raw, 12, 600, 4)
    assert [[r.offset for r in p.records] for p in got] == [[0, 1, 2, 3, 4, 5], [], []]
    assert [_offsets(p.records, p.raw) for p in got] == [
        [0, 1, 2, 3, 4, 5],
        [6, 7, 8, 9],
        [10, 11],
    ]
    assert [p.next_offset for p in got] == [6, 10, 12]
    assert sum(p.size for p in got) == 600
