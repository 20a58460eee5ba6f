"""Commits asked of a generation that ended: under the generations holding its spans.

Theory of operation:

A partition's ownership span can outlive the generation that started its
tasks (``docs/incremental-rebalancing.md``): a span task may keep calling
``commit()`` on the generation it started in after that one ended. Such a
commit is sent under the identity of the generation holding the span now
(:meth:`~gengroup.consumer.generation.Span.holder`), as ``mark`` and
``fetch`` follow the span; between generations it waits until the next one
is formed; a partition without a span that outlived the generation (or one
given up with the membership) raises :class:`~gengroup.GenerationEnded`
without sending anything. A commit of the marks (no offsets given) stays
one in the holder: it carries the holder's start marks of those partitions
(:mod:`~gengroup.consumer.recordless`) and, not being offsets the
application chose, does not drop them. A generation's own commit that is
being retried when it ends goes on the same way (``once``: one attempt per
holder, its retry loop and deadline the generation's, committing.py).

Under the consumer protocol a span may be revoked before the generation
revoking it formed (:mod:`~gengroup.consumer.early_revocation`): its
:class:`Revoker` holds it until that generation forms. Offsets given for
its partition are committed through the revocation at once, under the
member's newest epoch (after its acknowledgement they raise ``KeyError``, as
in a generation whose revocation is acknowledged); its marks are left to
the revocation, which commits them before acknowledging, so a commit of
marks never waits for them nor fails for them. Once the member was fenced
(the revocation ``lost``), a commit naming its partition raises the held
generation's ``GenerationEnded``, marks or offsets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

import anyio

from .._errors import GenerationEnded
from .._types import TopicPartition, checked_offset, show_partitions
from .commits import OffsetMetadata, Offsets

__all__ = ["Revoker", "commit_in_spans"]


class _Holder(Protocol):
    """What of a generation holding a span a commit uses (a Generation)."""

    @property
    def ended(self) -> bool: ...

    @property
    def marks(self) -> Mapping[TopicPartition, int]: ...

    async def _commit(
        self, offsets: Offsets | None, metadata: OffsetMetadata | None, *, forwarded: bool
    ) -> None: ...

    async def _commit_retried(
        self, offsets: Offsets | None, metadata: OffsetMetadata | None, *, forwarded: bool
    ) -> None: ...


class Revoker(Protocol):
    """What of a revocation begun before the generation revoking it formed
    (consumer/early_revocation.py) a commit uses."""

    @property
    def lost(self) -> bool: ...
    def ended(self, given: str) -> GenerationEnded: ...
    async def commit(
        self, offsets: Mapping[TopicPartition, int], metadata: OffsetMetadata | None, *, once: bool
    ) -> None: ...


class _Span(Protocol):
    """What of an ownership span a commit uses (a generation's Span)."""

    @property
    def gen(self) -> _Holder: ...
    @property
    def pending(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def moved(self) -> anyio.Event: ...
    @property
    def revoker(self) -> Revoker | None: ...
    def holder(self) -> _Holder | None: ...


async def commit_in_spans(
    where: str,
    assigned: Iterable[TopicPartition],
    span_of: Callable[[TopicPartition], _Span | None],
    offsets: Offsets | None,
    metadata: OffsetMetadata | None,
    *,
    once: bool = False,
) -> None:
    """A generation's ``commit(offsets, metadata=metadata)`` once it ended.

    Args:
        where: the generation, for the error (``generation 3 of g``).
        assigned: the partitions it assigned.
        span_of: a partition's span, if one outlived the generation.
        offsets, metadata: what the commit was asked for (None: the spans' marks).
        once: one attempt in each holder, for a retry of the generation's
            own commit that already runs under its deadline (committing.py);
            else each holder retries its retriable refusals.

    Raises:
        GenerationEnded: a partition to commit has no span that outlived
            ``gen``, or none has; nothing (more) was sent.
        KeyError: offsets given for a partition revoked before the
            generation revoking it formed, whose revocation is acknowledged.
        BrokerError, KafkaConnectionError: what the holder's commit raises
            (unless ``once``, its retriable refusals retried for
            ``request_timeout`` first).
    """
    how = "ended while its commit was retried; nothing more" if once else "has ended; nothing"
    ended = GenerationEnded(f"commit: {where} {how} was sent")
    wanted = None if offsets is None else {tp: checked_offset(tp, o) for tp, o in offsets.items()}
    spans: dict[TopicPartition, _Span] = {}
    for tp in assigned if wanted is None else wanted:
        span = span_of(tp)
        if span is not None:
            spans[tp] = span
        elif wanted is not None:
            raise ended
    if not spans:
        raise ended
    # Between generations: until the next one is formed (or the span is given up).
    while waiting := [s for s in spans.values() if s.holder() is None and not s.closed]:
        await waiting[0].moved.wait()
    # The member was fenced while it revoked one: the held generation's own
    # (a task raising it on its way out returned), whatever else is given up.
    lost = {tp: s.revoker for tp, s in spans.items() if s.revoker is not None and s.revoker.lost}
    for revoker in lost.values():
        raise revoker.ended(show_partitions(lost))
    holders: dict[_Holder, dict[TopicPartition, int]] = {}
    revokers: dict[Revoker, dict[TopicPartition, int]] = {}
    for tp, span in spans.items():
        if span.revoker is not None:  # revoked before the generation revoking it formed
            if wanted is not None:  # (its marks: the revocation commits them)
                revokers.setdefault(span.revoker, {})[tp] = wanted[tp]
            continue
        holder = span.holder()
        if holder is None:  # given up with every other span (the membership may be lost)
            raise ended
        marked = max(span.pending, span.gen.marks.get(tp, -1))
        offset = marked if wanted is None else wanted[tp]
        if offset >= 0:
            holders.setdefault(holder, {})[tp] = offset
    for revoker, given in revokers.items():
        await revoker.commit(given, metadata, once=once)
    for holder, due in holders.items():
        if holder.ended:  # while an earlier holder's commit was sent: under the next one
            again = None if wanted is None else due
            await commit_in_spans(where, due, span_of, again, metadata, once=once)
        elif once:
            await holder._commit(due, metadata, forwarded=wanted is None)
        else:
            # The spans' marks go as marks: with the holder's start marks of
            # their partitions, which only offsets the application gave drop.
            await holder._commit_retried(due, metadata, forwarded=wanted is None)
