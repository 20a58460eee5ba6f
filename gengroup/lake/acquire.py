"""Step 1 of the landing protocol: what a partition's new owner publishes, deletes and
lands again, worked out from the files in the partition's folder.

Theory of operation:

The worker that acquires a partition starts from ``start``: the group's
committed offset (or where ``start_offset`` says, when the group has none).
Once it published the staged file the committed offset's note names
(``LakeSink._acquire``), the folder holds published files, which never
overlap, and staged files of any writer. :func:`plan` sorts the staged files
in offset order and the published ones by where they end:

* *Fillers.* A staged file that starts below ``start`` and overlaps no
  published file (nor a filler taken before it) holds records the lake lacks,
  in a range the group committed past: a stored commit named it, and the note
  that names it was lost when the group's offsets were reset, expired or were
  deleted before the file was published. (A staged file whose commit was never
  stored lies there only if the group's offsets moved past it before the
  partition's next acquisition, by a reset, or if a writer frozen past its
  session wrote it into offsets committed without a file.) Every file is
  written from a fetch of the partition, so whatever writer wrote it, a file
  that reads back whole (:meth:`LakeStore.readable`; a writer killed while
  writing leaves a partial one) holds the log's records of its range: the
  filler is published, and no file lands the same offsets again, since the
  worker lands from ``start`` on. A filler reaching past ``start`` (offsets
  reset into the file) is handled as a published file reaching past
  ``start``.
* *Ahead.* Published files reaching past ``start``, and such a filler: they
  are deleted and their range is landed again, from the lowest base.
* *Stale.* Every other staged file: no stored commit that is still the
  group's names it (or it is unreadable). It is deleted, unless it reads back
  and holds offsets that no published file or filler holds (:func:`uncovered`)
  below the start offset (the group committed past them: the file overlaps a
  kept one, and a commit that named it may have been lost with a reset) or
  below the partition's log start: records only that file still has, which
  ``LakeSink._acquire`` refuses to delete (LakeError).

:func:`unsettled` is the same reading from outside the partition's owner
(``lake sink --until-caught-up``): the staged files holding offsets below
the committed offset that no published file holds, which the partition's
next acquisition publishes or settles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .layout import Landed

__all__ = ["Plan", "plan", "uncovered", "unsettled"]

#: A file as the store lists it: its range (and a staged file's token) and its path.
Entry = tuple[Landed, str]


@dataclass
class Plan:
    """What a partition's new owner does with the files of its folder (step 1).

    Attributes:
        fillers: staged files below the start offset to publish, by base.
        ahead: files reaching past the start offset, to delete and land again
            (published ones, and a staged one the start offset falls into).
        stale: staged files no stored commit names (or unreadable), to delete.
    """

    fillers: list[Entry] = field(default_factory=list)
    ahead: list[Entry] = field(default_factory=list)
    stale: list[Entry] = field(default_factory=list)

    def lake(self, published: Iterable[Entry]) -> list[tuple[int, int]]:
        """The ranges the lake holds once the fillers are published."""
        return sorted((landed.base, landed.end) for landed, _ in [*published, *self.fillers])


def uncovered(base: int, end: int, ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``[base, end)`` that none of ``ranges`` covers, in order."""
    holes, at = [], base
    for lo, hi in sorted(ranges):
        if hi <= at or lo >= end:
            continue
        if lo > at:
            holes.append((at, lo))
        at = max(at, hi)
        if at >= end:
            return holes
    if at < end:
        holes.append((at, end))
    return holes


def plan(
    start: int,
    published: list[Entry],
    staged: list[Entry],
    readable: Callable[[Landed, str], bool],
) -> Plan:
    """Sort a partition's files for the owner starting at ``start`` (see the module).

    ``readable`` is asked only about staged files that would fill the lake.
    """
    out = Plan()
    taken = [(landed.base, landed.end) for landed, _ in published]
    for landed, path in sorted(staged, key=lambda e: (e[0].base, -e[0].end, e[1])):
        fits = landed.base < start and uncovered(landed.base, landed.end, taken) == [
            (landed.base, landed.end)
        ]
        if fits and readable(landed, path):
            taken.append((landed.base, landed.end))
            (out.fillers if landed.end <= start else out.ahead).append((landed, path))
        else:
            out.stale.append((landed, path))
    out.ahead += [(landed, path) for landed, path in published if landed.end > start]
    out.ahead.sort(key=lambda e: e[0].base)
    return out


def unsettled(published: list[Entry], staged: list[Entry], committed: int) -> list[Entry]:
    """The staged files holding offsets below ``committed`` that no published file holds."""
    ranges = [(landed.base, landed.end) for landed, _ in published]
    return [
        (landed, path)
        for landed, path in staged
        if landed.base < committed and uncovered(landed.base, min(landed.end, committed), ranges)
    ]
