"""The member's ownership of partitions across generations: spans and their tasks.

Theory of operation:

Partition-scoped tasks (``gen.start_soon(..., partition=tp)``) do not run in
the generation's task group but in the :class:`Ownership`'s, which lives as
long as the group's run loop; :mod:`gengroup.consumer.running` runs each
generation against it. Under a cooperative protocol a generation that ends
for a rebalance keeps its spans; the next generation first holds the
retained ones (:meth:`Ownership.hold_retained`: their workers are served
from its prefetcher and mark and commit under its id from then on), then
revokes the spans of the partitions it no longer assigns (cancels their
tasks, waits for them under the same watchdog, commits their marks with its
own id), adopts the retained ones, then is handed out; if it revoked
anything it ends at once so that the member rejoins without those
partitions. Every other end (an eager
protocol, a lost membership, closing, a task's exception) revokes every span
before the final commit's second pass.

Under a cooperative protocol the generation's prefetcher runs in the
:class:`Ownership`'s task group too (:meth:`Ownership.host_prefetcher`), so
that retained partitions are served while the member rejoins: an end that
keeps the spans leaves it running; the next generation's forming stops it
(:meth:`Ownership.stop_prefetcher`) just before it takes the spans'
positions, so no batch is handed out twice; it also stops once the local
lease ran out, and with every end that revokes the spans.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Set as AbstractSet
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID

import anyio
import anyio.abc

from .._config import GroupConfig
from .._errors import GenerationEnded
from .._types import TopicPartition
from ..io.cluster import Cluster
from ..membership.member import Outcome
from .detached import UserTask, first_failure, host, task_failed, told_it_ended
from .generation import Generation, Span, SpanHost
from .prefetch import Prefetcher

__all__ = ["Ownership", "kept_partitions", "known_topic_ids", "recreated_span"]

log = logging.getLogger("gengroup")


class Ownership:
    """The partitions a member owns across generations, and their spans' tasks.

    Implements :class:`~gengroup.consumer.generation.SpanHost`; open it with
    :meth:`hosting` around the run loop.

    Attributes:
        spans: each partition's open or closing span.
        owned: the partitions the member owns now.
        unseen: the owned partitions no generation handed to the application
            assigned yet: a generation added them and ended before the
            application took it. The next generation has them as added, not
            retained, so code that starts workers for ``gen.added`` starts them.
        current: the newest generation handed out (None once it released everything).
        lease_from: when the newest request the coordinator accepted was sent.
    """

    def __init__(self, config: GroupConfig) -> None:
        self.config = config
        self.spans: dict[TopicPartition, Span] = {}
        self.owned: set[TopicPartition] = set()
        self.unseen: set[TopicPartition] = set()
        self.current: Generation | None = None
        self.lease_from = 0.0
        self.failures: list[BaseException] = []
        #: Called when a span task raised while no generation was live.
        self.on_failure: Callable[[], None] = lambda: None
        self._tg: anyio.abc.TaskGroup | None = None
        #: The prefetcher running here (it outlives its generation) and its scope.
        self._prefetching: tuple[Prefetcher, anyio.CancelScope] | None = None

    @asynccontextmanager
    async def hosting(self) -> AsyncIterator[None]:
        """The task group of span tasks; on exit every span left is revoked (bounded)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield
            finally:
                with anyio.CancelScope(shield=True):
                    await self.drop_all("the group stopped")
                self._tg = None

    def start_span_task(
        self, gen: Generation, tp: TopicPartition, task: UserTask, coro: Awaitable[Any]
    ) -> None:
        """Start ``coro`` in ``tp``'s span, opening it (held by ``gen``) if there is none."""
        span = self.spans.get(tp)
        refused = None
        if self._tg is None:
            refused = "the group is not running"
        elif span is not None and span.closed:
            refused = f"{tp} is being revoked"
        elif span is None and (gen is not self.current or tp not in self.owned):
            refused = f"{tp} is no longer owned by generation {gen.label}"
        if refused is not None:
            if hasattr(coro, "close"):
                coro.close()
            raise GenerationEnded(f"start_soon: {refused}", gen.identity)
        assert self._tg is not None
        if span is None:
            span = self.spans[tp] = Span(tp, gen, position=gen.assignments[tp])
        span.running += 1
        span.tasks.append(task)
        self._tg.start_soon(self._run_span_task, span, task, coro, name=task.name)

    async def _run_span_task(self, span: Span, task: UserTask, coro: Awaitable[Any]) -> None:
        task.coro = coro
        returned = False
        try:
            with anyio.CancelScope() as scope:
                span.scopes.append(scope)
                if span.closed:
                    scope.cancel()
                try:
                    await host(task.hosted, coro)
                    returned = True
                except (Exception, BaseExceptionGroup) as exc:  # detached.Interrupted too
                    # Its holder's own GenerationEnded as the holder ends: as a return.
                    returned = span.gen.ending and told_it_ended(exc, span.gen.identity)
                    if not returned:
                        self._failed(span, task, exc)
        finally:
            task.done = True
            span.running -= 1
            if returned and not span.closed:
                # The first task of a span to exit gives the partition up and
                # ends the generation, so that the member rejoins without it.
                self.release([span.tp], why=f"task {task.name!r} of {span.tp} returned")
                if not span.gen.ending:
                    span.gen.end(Outcome.REJOIN, f"task {task.name!r} exited")
            if span.closed and not span.running:
                span.idle.set()

    def _failed(self, span: Span, task: UserTask, exc: BaseException) -> None:
        self.failures.append(exc)
        task_failed(f"group {span.gen.group_id} partition {span.tp}", task.name, exc)
        self.release([span.tp], why=f"task {task.name!r} of {span.tp} raised {exc!r}")
        # The span's holder: while a revocation runs, the generation revoking
        # (not yet ``current``), which holds the retained spans too.
        holder = span.gen if not span.gen.ending else self.current
        if holder is not None and not holder.ending:
            holder.end(Outcome.FATAL, f"task raised {exc!r}")
        else:  # between generations: stop forming the next one
            self.on_failure()

    def take_failure(self, where: str) -> BaseException | None:
        """The first span task's exception (the later ones in notes), once."""
        if not self.failures:
            return None
        failures = BaseExceptionGroup("span tasks", self.failures)
        failure = first_failure(failures, where, logged=self.failures)
        self.failures = []
        return failure

    def release(
        self, partitions: list[TopicPartition], by: Generation | None = None, *, why: str
    ) -> list[Span]:
        """Close the spans of ``partitions`` (cancelling their tasks); no longer owned.

        ``by``: the generation revoking them; it holds them while their tasks
        finish. ``why``: what closed them (the teardown watchdog says it).
        """
        closed = []
        for tp in partitions:
            self.owned.discard(tp)
            span = self.spans.get(tp)
            if span is not None and not span.closed:
                span.closed_why = why
                span.hand_to(None, by)
                closed.append(span)
        return closed

    async def wait_released(self) -> None:
        """Wait until every closed span's tasks all returned (or were abandoned)."""
        while closing := [s for s in self.spans.values() if s.closed]:
            for span in closing:
                await span.idle.wait()
                if self.spans.get(span.tp) is span:
                    del self.spans[span.tp]

    def closing_tasks(self) -> list[UserTask]:
        """The tasks of closed spans that have not returned yet."""
        return [t for t, _, _ in self.cancelled_tasks()]

    def cancelled_tasks(self) -> list[tuple[UserTask, float, str]]:
        """Each task of a closed span that has not returned yet: when and why it was cancelled."""
        return [
            (t, s.closed_at, s.closed_why)
            for s in self.spans.values()
            if s.closed
            for t in s.tasks
            if not t.done
        ]

    def hold_retained(self, gen: Generation) -> None:
        """``gen`` holds the open spans of the partitions it retained (once each).

        From here their workers' batches come from ``gen``'s prefetcher and
        their marks and commits go under ``gen``'s id, also while ``gen``
        still waits for the spans it revokes.
        """
        for tp in gen.retained:
            span = self.spans.get(tp)
            if span is not None and not span.closed and span.gen is not gen:
                span.hand_to(gen)

    def adopt(self, gen: Generation) -> None:
        """``gen`` holds the spans of the partitions it retained; it owns its assignment.

        A span whose tasks all returned while no generation was live (closed,
        never awaited by a revocation) is forgotten here, so that its
        partition, added again, can open a new span; a mark its task made
        then is carried into ``gen`` if ``gen`` assigns the partition.
        """
        for tp, done in list(self.spans.items()):
            if done.closed and not done.running:
                del self.spans[tp]
                if tp in gen.assignments and done.pending > gen._marks.get(tp, -1):
                    gen._marks[tp] = done.pending
        self.hold_retained(gen)
        self.owned = set(gen.assignments)
        self.unseen = (self.unseen | gen.added) & self.owned  # until gen is handed out
        self.current = gen

    def host_prefetcher(self, gen: Generation, prefetcher: Prefetcher) -> None:
        """Run ``gen``'s prefetcher here, so that it outlives ``gen``'s end.

        A cooperative rebalance keeps the spans, and their partitions go on
        being fetched and handed out while the next generation forms; the
        next generation's forming stops the prefetcher
        (:meth:`stop_prefetcher`) once it knows the retained positions. It
        also stops once the local lease ran out (``lease_from`` or ``gen``'s,
        whichever is newer, plus ``session_timeout``): the member may have
        been evicted. A failing prefetcher fails the holding generation, or,
        between generations, the next one's forming.
        """
        self.stop_prefetcher()
        assert self._tg is not None
        scope = anyio.CancelScope()
        self._prefetching = (prefetcher, scope)
        self._tg.start_soon(self._prefetch, gen, prefetcher, scope, name="gengroup-prefetcher")

    async def _prefetch(
        self, gen: Generation, prefetcher: Prefetcher, scope: anyio.CancelScope
    ) -> None:
        timeout = self.config.session_timeout

        async def lease_watch() -> None:
            # A sleep, not an event: every renewal moves the deadline further.
            while (deadline := max(self.lease_from, gen._lease_from) + timeout) > (  # noqa: ASYNC110
                anyio.current_time()
            ):
                await anyio.sleep_until(deadline)
            log.info(
                "group %s: no request accepted for session_timeout=%s s; stopped fetching",
                self.config.group_id,
                timeout,
            )
            self.stop_prefetcher(prefetcher)

        try:
            with scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lease_watch)
                    await prefetcher.run()
        except Exception as exc:
            self.failures.append(exc)
            if not gen.ending:
                gen.end(Outcome.FATAL, f"the prefetcher raised {exc!r}")
            else:  # between generations: stop forming the next one
                self.on_failure()
        finally:
            prefetcher.close()

    def stop_prefetcher(self, prefetcher: Prefetcher | None = None) -> None:
        """Stop the hosted prefetcher (only if it is ``prefetcher``, when given).

        Synchronous: from its return no batch is handed out, so each span's
        ``position`` is where the next generation fetches from.
        """
        if self._prefetching is None:
            return
        running, scope = self._prefetching
        if prefetcher is not None and running is not prefetcher:
            return
        self._prefetching = None
        running.close()
        scope.cancel()

    async def drop_all(self, reason: str) -> None:
        """Revoke every span between generations, waiting ``rebalance_timeout`` at most.

        Their marks made since the last commit are not committed (the member
        may no longer be in the group): the next owner processes them again.
        """
        self.current = None
        self.stop_prefetcher()
        if not self.release(list(self.spans), why=reason) and not self.closing_tasks():
            self.owned.clear()
            return
        log.info("group %s: revoking every partition's tasks: %s", self.config.group_id, reason)
        self.owned.clear()
        with anyio.move_on_after(self.config.rebalance_timeout):
            await self.wait_released()
        for task in self.closing_tasks():
            log.warning(
                "group %s: abandoned task %r, which did not return within rebalance_timeout "
                "after its partition was revoked",
                self.config.group_id,
                task.name,
            )
            task.hosted.abandon()
        await self.wait_released()


def kept_partitions(
    owned: AbstractSet[TopicPartition], host: SpanHost, *topic_ids: Mapping[str, UUID]
) -> set[TopicPartition]:
    """The partitions of ``owned`` a new generation retains, not adds: all but
    those a generation the application never took added (``host.unseen``),
    unless a span of theirs is open: the application took it after all (the
    send handing it out was cancelled after it was received) and started
    their tasks; and but those whose open span belongs to a topic deleted and
    created again (one of ``topic_ids``, the ids the new generation knows
    from each of its sources, names another id than the span was opened
    with; under the consumer protocol the heartbeat's and the metadata's: the
    prefetcher that ended a generation for a new id may be ahead of the
    heartbeat): their tasks would go on at the old topic's position in the new one.
    The new generation adds them: it revokes the old span first
    (``running.py``), then they start as any added partition does."""
    spans = host.spans
    unseen = {tp for tp in host.unseen if tp not in spans or spans[tp].closed}
    recreated = {tp for tp in owned if any(recreated_span(host, tp, i) for i in topic_ids)}
    return set(owned) - unseen - recreated


def recreated_span(host: SpanHost, tp: TopicPartition, topic_ids: Mapping[str, UUID]) -> bool:
    """Whether ``tp``'s open span was opened on a topic that ``topic_ids``
    (name to id) says was created again since."""
    span = host.spans.get(tp)
    if span is None or span.closed or span.topic_id is None:
        return False
    now = topic_ids.get(tp.topic)
    return now is not None and now != span.topic_id


def known_topic_ids(cluster: Cluster) -> dict[str, UUID]:
    """The topic ids in ``cluster``'s metadata, by name."""
    return {name: i.topic_id for name, i in cluster.topics.items() if i.topic_id is not None}
