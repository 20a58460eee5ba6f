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
their marks reach it. Only marks move: a partition the application never
marked is left alone (an application that commits by itself, as the lake
sink does with its own probe, ``gengroup.lake.gaps``, decides alone; a
commit from a mark would also drop the metadata it commits with).

Contiguous ranges merge; ranges below the mark are forgotten, and only the
newest :data:`MAX_RANGES` are kept: a range further back lies before
batches handed out since, whose marks pass it anyway. A seek or a reset of
the position forgets them all.
"""

from __future__ import annotations

from collections import deque
from typing import Final

__all__ = ["MAX_RANGES", "Gaps"]

#: The ranges a partition keeps at most (the newest).
MAX_RANGES: Final = 16


class Gaps:
    """One partition's ranges of offsets without a record to hand out, in order."""

    def __init__(self) -> None:
        self._ranges: deque[tuple[int, int]] = deque()

    def __repr__(self) -> str:
        return f"<Gaps {list(self._ranges)}>"

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
        """Forget every range (the position was moved: a seek, a reset)."""
        self._ranges.clear()
