"""Offsets that hold no record for the application, and the marks that reach them.

Theory of operation:

A Fetch answer may move a partition's position without a record to hand out:
it held only transaction markers (control batches), only aborted transactions
(under ``read_committed``), or offsets that compaction removed. A worker marks
the ``next_offset`` of the batches it processed, so with nothing handed out
after such offsets it would never mark past them: the committed offset,
``gen.lag()`` and the group's lag would stay behind the end of the log for
good, and every restart would fetch them again. (Within an answer that holds
records, the batch's ``next_offset`` already lies past the offsets without
records after them.)

The prefetcher records each such range ``[start, end)`` of a partition in
the partition's :class:`Gaps` as it moves past it; ``start`` is where the
answer was asked from, right after the batches it buffered before. A mark
that reaches a range (``start <= mark < end``) moves to its ``end``, when it
is made or when the range is found, whichever comes last: everything before
the mark was processed and the range holds nothing to process, so the
committed offset never passes a record that was not processed, and a range
found while the worker is still busy with batches before it waits until
their marks reach it.

The offset a partition started from in the generation counts as marked when
it is the group's committed offset: everything before it was processed. A
generation that starts right before such a range (its group committed just
before a transaction's marker, or an aborted transaction was written while
it was down) hands nothing out before it, so no mark of the application
would ever reach it. Its *start mark* (:attr:`Gaps.start`) passes the range
that begins exactly there (:meth:`Gaps.from_start`), on two conditions: no
batch was handed out and the position was not moved (a seek, a reset)
since the generation started, and the partition's worker asked for a batch
(``gen.fetch(tp)``), as the Java consumer's position moves in ``poll()``. A
worker asks once it is ready to process from there: an application that
commits by itself first settles what its committed offset names (the lake
sink, :mod:`gengroup.lake.sink`, publishes the file its commit metadata
names, or seeks back before it). The generation keeps the range's end apart
from the application's marks (:func:`with_start_marks`) and commits it like
a mark, periodically and when it ends, with the metadata committed with the
offset it passes, so an application's commit metadata is not dropped; a
mark of the application at or past it wins (committed as marks are, with no
metadata), and an explicit commit of the partition drops it (the
application decides alone). A span task's commit of the marks on the
generation it started in, ended since, is a commit of the marks in the
generation holding the span (:mod:`~gengroup.consumer.span_commits`): it
carries that generation's start mark and does not drop it. A partition
started from ``start_offset`` (no committed offset) has no start mark:
gengroup commits nothing for a position it only reset to, until the
application marks.

Otherwise only marks move: a partition the application never marked is
left alone (an application that commits by itself, as the lake sink does
with its own probe, ``gengroup.lake.gaps``, decides alone; a commit from a
mark would also drop the metadata it commits with).

Contiguous ranges merge; ranges below the mark are forgotten, and only the
newest :data:`MAX_RANGES` are kept: a range further back lies before
batches handed out since, whose marks pass it anyway. A seek or a reset of
the position forgets them all, and the start mark with them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Final, TypeVar

from .._types import TopicPartition, checked_offset

__all__ = ["MAX_RANGES", "Gaps", "to_commit", "with_start_marks"]

_K = TypeVar("_K")

#: The ranges a partition keeps at most (the newest).
MAX_RANGES: Final = 16


class Gaps:
    """One partition's ranges of offsets without a record to hand out, in order."""

    def __init__(self) -> None:
        self._ranges: deque[tuple[int, int]] = deque()
        #: The committed offset the partition started from, until a batch is
        #: handed out or the position is moved (-1: none).
        self.start = -1
        #: The partition's worker asked for a batch.
        self.asked = False

    def __repr__(self) -> str:
        return f"<Gaps {list(self._ranges)} start={self.start}>"

    def from_start(self) -> int:
        """The end of the range that begins at the start offset, once the
        worker asked for a batch (-1: none, or not asked yet)."""
        if self.start < 0 or not self.asked:
            return -1
        end = self.past(self.start)
        return end if end > self.start else -1

    def add(self, start: int, end: int) -> None:
        """Offsets ``start`` to ``end - 1`` hold no record to hand out."""
        if end <= start:
            return
        if self._ranges and self._ranges[-1][1] >= start:
            first, last = self._ranges[-1]
            self._ranges[-1] = (min(first, start), max(last, end))
            return
        self._ranges.append((start, end))
        if len(self._ranges) > MAX_RANGES:
            self._ranges.popleft()

    def past(self, offset: int) -> int:
        """``offset`` moved past the ranges it reaches (``offset`` if none)."""
        for start, end in self._ranges:
            if start <= offset < end:
                offset = end
        return offset

    def forget_below(self, offset: int) -> None:
        """Forget the ranges that end at ``offset`` or before."""
        while self._ranges and self._ranges[0][1] <= offset:
            self._ranges.popleft()

    def clear(self) -> None:
        """Forget every range and the start (the position was moved: a seek, a reset)."""
        self._ranges.clear()
        self.start = -1


def with_start_marks(
    marks: Mapping[_K, int], starts: Mapping[_K, int], metadata: Mapping[_K, str]
) -> tuple[dict[_K, int], dict[_K, str]]:
    """What a commit of the marks sends: each partition's mark, or its start
    mark where that is higher; and the metadata those start marks carry
    (``metadata``: what is committed with each partition's offset now)."""
    wanted, notes = dict(marks), {}
    for tp, end in starts.items():
        if end > wanted.get(tp, -1):
            wanted[tp] = end
            if tp in metadata:
                notes[tp] = metadata[tp]
    return wanted, notes


def to_commit(
    offsets: Mapping[TopicPartition, int] | None,
    forwarded: bool,
    marks: Mapping[TopicPartition, int],
    starts: Mapping[TopicPartition, int],
    metadata: Mapping[TopicPartition, str],
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, str]]:
    """What a generation's commit sends, and the metadata its start marks carry.

    ``offsets`` None: the marks (checked when made) with the start marks
    (:func:`with_start_marks`). ``forwarded``: ``offsets`` are marks of an
    ended generation's spans (:mod:`~gengroup.consumer.span_commits`), sent
    with the start marks of their partitions. Else ``offsets`` are what the
    application gave, checked here, without start marks (the caller drops them).

    Raises:
        TypeError, ValueError: an offset the application gave is not an offset.
    """
    if offsets is None:
        return with_start_marks(marks, starts, metadata)
    if forwarded:
        return with_start_marks(
            offsets, {tp: starts[tp] for tp in offsets if tp in starts}, metadata
        )
    return {tp: checked_offset(tp, o) for tp, o in offsets.items()}, {}
