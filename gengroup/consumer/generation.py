"""A Generation: one rebalance's worth of membership, owning a nursery of tasks.

Theory of operation:

The group forms a :class:`Generation` after SyncGroup and OffsetFetch
(:mod:`~gengroup.consumer.forming`); the generation runner
(:mod:`~gengroup.consumer.running`) opens the generation's task group inside
its cancel scope (:meth:`Generation.task_group`), starts the internal tasks
(heartbeat, partition watcher, committer, prefetcher) in it and hands the object
to the user. Tasks the user starts with :meth:`Generation.start_soon` run in the
same task group, wrapped so that the first one to exit -- returning or raising
-- cancels the generation's scope (kafka-go's "the first goroutine to return
closes the generation"); its own :class:`GenerationEnded` out of one of its
tasks while it is ending is an exit. Each user task is hosted
(:mod:`~gengroup.consumer.detached`): its host in the task group waits for it,
so that after :class:`~gengroup.TaskStuckError` the group can stop waiting for
a task that ignores cancellation (:meth:`Generation.abandon_tasks`).

A generation moves through three stages: *live* (its scope is not cancelled),
*ending* (cancelled: tasks are finishing; commits are still allowed, since the
coordinator accepts commits of the current generation while the group
rebalances, and we do not rejoin before every task returned) and *ended* (every
task returned and the final commit of marked offsets was made). From then on
:meth:`commit` raises :class:`GenerationEnded` without sending anything.

A partition's *ownership span* can outlive a generation (cooperative
rebalancing, see ``docs/incremental-rebalancing.md``). Tasks started with
``start_soon(..., partition=tp)`` belong to ``tp``'s :class:`Span`, hosted by
a :class:`SpanHost` that lives across generations (the run loop's
:class:`~gengroup.consumer.ownership.Ownership`). A span is *held* by the newest
generation that assigns its partition; ``fetch``, ``mark``, ``seek``,
``commit`` and ``lag`` of that partition on any generation object act on the
holder, so a retained partition's worker goes on fetching across generations
and its marks are committed under the current generation's id. Between
generations there is no holder: a commit waits until the next generation is
formed (:meth:`Span.holder`), which holds its retained spans at once, before
it waits for the spans it revokes; while a span is being revoked, the
generation revoking it holds it.

Marks only move forward; commits never send an offset lower than one this
member already committed for the partition, so a late commit cannot move a
committed offset backwards. A mark that reaches offsets the prefetcher found
without a record to hand out moves past them, and so does the committed offset
a partition started from, once its worker asks for a batch (a *start mark*,
committed with the metadata committed with it: :mod:`.recordless`). A
generation sends its commits through a :class:`Committer` under its
:class:`~gengroup._types.GenerationIdentity`; it knows nothing of the group
that formed it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

import anyio
import anyio.abc

from .._errors import GenerationEnded, ProtocolError
from .._types import GenerationIdentity, IdentityNames, TopicPartition, checked_offset
from ..membership.member import Outcome
from .commits import CommitCodes, Committer, OffsetMetadata, Offsets
from .committing import GenerationCommits, commit_lock
from .detached import (
    IN_USER_TASK,
    UserTask,
    abandon,
    awaitable,
    host,
    start_and_wait,
    start_or_drop,
    task_failed,
    told_it_ended,
)
from .span_commits import Revoker, commit_in_spans
from .timings import RebalanceTimings

if TYPE_CHECKING:
    from .fetched import FetchedBatch
    from .prefetch import Prefetcher

__all__ = [
    "CommitCodes",
    "Committer",
    "Generation",
    "OffsetMetadata",
    "Offsets",
    "RebalanceTimings",
    "Span",
    "SpanHost",
]

log = logging.getLogger("gengroup")


class SpanHost(Protocol):
    """Hosts span-scoped tasks across generations (the run loop's ownership registry).

    Attributes:
        spans: each partition's open (or closing) span.
        owned: the partitions the member owns now.
        unseen: those of them a generation the application never took added.
        lease_from: when the newest request the coordinator accepted was sent.
    """

    spans: dict[TopicPartition, Span]
    owned: set[TopicPartition]
    unseen: set[TopicPartition]
    lease_from: float

    async def drop_all(self, reason: str) -> None:
        """Revoke every span between generations (the membership may be lost)."""
        ...

    def start_span_task(
        self, gen: Generation, tp: TopicPartition, task: UserTask, coro: Awaitable[Any]
    ) -> None:
        """Start ``coro`` in ``tp``'s span (opened, held by ``gen``, if none is)."""
        ...

    def closing_tasks(self) -> list[UserTask]:
        """The tasks of revoked spans that have not returned yet."""
        ...

    def stop_prefetcher(self) -> None:
        """Stop the prefetcher that outlived its generation (positions are final now)."""
        ...


@dataclass(eq=False)
class Span:
    """One partition's ownership span: its tasks, its holder, where its fetch continues.

    Attributes:
        tp: the partition.
        gen: the newest generation that holds it (while it is being revoked:
            the generation revoking it, which commits its marks).
        position: the offset its next batch starts at (after the last one handed out).
        pending: a mark made while no live generation held it (-1: none).
        closed: the span ended (its tasks cancelled) at ``closed_at``, for ``closed_why``.
        first: the sequence of the generation that opened it; older generations never reach it.
        topic_id: the id its topic had for that generation (None: not known).
        reset: where the partition was reset for an out-of-range offset, until
            a commit of it is stored (-1: none); see :meth:`Generation.offset_reset`.
        revoker: the revocation holding it, begun before the generation revoking
            it formed (the consumer protocol: consumer/early_revocation.py).
    """

    tp: TopicPartition
    gen: Generation
    position: int
    tasks: list[UserTask] = field(default_factory=list)
    pending: int = -1
    closed: bool = False
    closed_at: float = 0.0
    closed_why: str = ""
    scopes: list[anyio.CancelScope] = field(default_factory=list)
    moved: anyio.Event = field(default_factory=anyio.Event)
    idle: anyio.Event = field(default_factory=anyio.Event)
    running: int = 0
    first: int = field(init=False)
    topic_id: UUID | None = field(init=False)
    reset: int = -1
    revoker: Revoker | None = None

    def __post_init__(self) -> None:
        self.first = self.gen.sequence
        self.topic_id = self.gen._topic_ids.get(self.tp.topic)

    def hand_to(self, gen: Generation | None, revoker: Generation | None = None) -> None:
        """``gen`` holds the span now (None: the span is closed); wakes its fetching task.

        ``revoker``: the generation closing the span, which holds it (if it
        revokes the partition) while its tasks finish, so that their marks and
        commits go under its id.
        """
        if gen is None and revoker is not None and self.tp in revoker.revoked:
            self.hand_to(revoker)
        if gen is None:
            self.closed, self.closed_at = True, anyio.current_time()
            for scope in self.scopes:
                scope.cancel()
            if not self.running:
                self.idle.set()
        else:
            old, self.gen, tp = self.gen, gen, self.tp
            if (carried := max(self.pending, old._marks.get(tp, -1))) > gen._marks.get(tp, -1):
                gen._marks[tp] = carried
            # What ``old`` knew stored (a revoker fetched only its own partitions' offsets).
            if (stored := old._committed.get(tp, -1)) > gen._committed.get(tp, -1):
                gen._committed[tp] = stored
            if self.reset >= 0:  # what the next generation found committed is stale
                gen._committed[tp] = min(gen._committed.get(tp, -1), self.reset - 1)
            self.pending = -1
        self.moved.set()
        self.moved = anyio.Event()

    def holder(self) -> Generation | None:
        """The generation whose id a commit of the span carries now (None: between generations)."""
        return None if self.gen.ended else self.gen

    def mark(self, offset: int) -> None:
        offset = self.gen._prefetcher.past_gaps(self.tp, offset)  # (consumer/recordless.py)
        if self.gen.ended:
            self.pending = max(self.pending, offset)
        elif offset > self.gen._marks.get(self.tp, -1):
            self.gen._marks[self.tp] = offset


def _span_ending(span: Span, holder: Generation) -> bool:
    """Whether ``span``'s batches stop (``holder`` holds it).

    They stop once the span is closed, or once the holder is ending -- unless
    its prefetcher outlives it (:attr:`Generation._fetch_across`) and its end
    keeps the spans (a cooperative rebalance): then they flow on between
    generations until the next one forms, and stop only if the member's local
    lease runs out meanwhile (it may have been evicted: a new owner may be
    processing the partition).
    """
    if span.closed:
        return True
    if not holder.ending:
        return holder.lease_expired()
    if not holder._fetch_across or not holder.keeps_spans():
        return True
    host = holder._span_host
    since = max(holder._lease_from, host.lease_from if host is not None else 0.0)
    return anyio.current_time() >= since + holder._session_timeout


class _SpanBatches:
    """A span's batches, from whichever generation holds it (waiting between generations)."""

    def __init__(self, span: Span) -> None:
        self._span = span
        self._holder: Generation | None = None
        self._it: AsyncIterator[FetchedBatch] | None = None

    def __aiter__(self) -> _SpanBatches:
        return self

    async def __anext__(self) -> FetchedBatch:
        span = self._span
        while True:
            if span.closed:
                raise StopAsyncIteration
            holder = span.gen
            if self._it is None or self._holder is not holder:
                self._holder = holder
                self._it = holder._prefetcher.iterate(span.tp, partial(_span_ending, span, holder))
            try:
                batch = await anext(self._it)
            except StopAsyncIteration:
                # The holder is ending: wait to be adopted by the next generation or revoked.
                moved = span.moved
                if span.gen is holder and not span.closed:
                    await moved.wait()
                continue
            span.position = batch.next_offset
            return batch


@dataclass(eq=False)
class Generation(IdentityNames, GenerationCommits):
    """One generation of the group, as seen by this member.

    Obtained from ``async for gen in group``; never constructed by users.

    Attributes:
        identity: group id, generation id, member id and group instance id,
            which every commit carries.
        is_leader: whether this member ran the balancer.
        protocol: the balancer chosen by the coordinator.
        assignments: each assigned partition and the offset its fetch starts at.
        added: partitions owned now and not when the generation formed (under
            the eager protocol: every assigned partition).
        retained: partitions owned before and now; their span-scoped tasks ran on.
        revoked: partitions owned before and not now; their span-scoped tasks
            had all returned and their marks were committed before the
            generation was handed out.
        rebalance_protocol: ``"eager"`` or ``"cooperative"``, as the chosen
            balancer moves partitions.
        timings: how long forming the generation took.
        end_outcome: what the member does once the generation ended (None while live).
        end_reason: why the generation ended (None while live).
        commit_error: why the newest commit of this generation failed -- periodic,
            explicit or final -- or None if it succeeded (or none was sent):
            the refusal, the connection failure, or the ``RequestTimedOut``
            of a commit whose retries ran out of time (never a cancellation).
            A periodic commit's failure is otherwise only logged; code can
            check this, e.g. after ``wait_ended()`` for the final commit.
        commits_ok: commits of this generation the coordinator accepted.
        commits_failed: commits of this generation that failed or were refused.
        teardown: seconds from the generation's end to its tasks all returned
            and its final commit done (None until it ended); the next
            generation's ``timings.previous_teardown``.
    """

    identity: GenerationIdentity
    is_leader: bool
    protocol: str
    assignments: Mapping[TopicPartition, int]
    timings: RebalanceTimings
    _committer: Committer = field(repr=False)
    _prefetcher: Prefetcher = field(repr=False)
    _committed: dict[TopicPartition, int] = field(default_factory=dict, repr=False)
    _committed_metadata: dict[TopicPartition, str] = field(default_factory=dict, repr=False)
    _scope: anyio.CancelScope = field(default_factory=anyio.CancelScope, repr=False)
    _tg: anyio.abc.TaskGroup | None = field(default=None, repr=False)
    _marks: dict[TopicPartition, int] = field(default_factory=dict, repr=False)
    #: Start marks: where a range without records that starts at the committed
    #: offset a partition started from ends (consumer/recordless.py).
    _start_marks: dict[TopicPartition, int] = field(default_factory=dict, repr=False)
    _tasks: list[UserTask] = field(default_factory=list, repr=False)
    #: What its tasks raised (each logged as it happened), the first first.
    _failures: list[BaseException] = field(default_factory=list, repr=False)
    _ended: anyio.Event = field(default_factory=anyio.Event, repr=False)
    _commit_lock: anyio.Lock = field(default_factory=commit_lock, repr=False)
    _ending: anyio.Event = field(default_factory=anyio.Event, repr=False)
    end_outcome: Outcome | None = None
    end_reason: str | None = None
    commit_error: BaseException | None = None
    commits_ok: int = 0
    commits_failed: int = 0
    teardown: float | None = None
    _ending_at: float | None = field(default=None, repr=False)
    #: The local lease: a member at ``_lease_from`` (the newest accepted request's
    #: sending), it may have been evicted ``_session_timeout`` later.
    _session_timeout: float = field(default=float("inf"), repr=False)
    #: How long a commit's retriable refusals are retried (``request_timeout``),
    #: and the base of their backoff (the cluster's ``retry_backoff``).
    _request_timeout: float = field(default=30.0, repr=False)
    _retry_backoff: float = field(default=0.1, repr=False)
    _lease_from: float = field(default=0.0, repr=False)
    #: When the next heartbeat is due (``anyio.current_time()``; classic: on the
    #: members' shared grid, early beats aside); None before one is due.
    _next_beat: float | None = field(default=None, repr=False)
    added: frozenset[TopicPartition] = frozenset()
    retained: frozenset[TopicPartition] = frozenset()
    revoked: frozenset[TopicPartition] = frozenset()
    rebalance_protocol: str = "eager"
    #: True once the generation ended in a way that releases every partition
    #: (lost membership, lease expired, closing): no span outlives it.
    release_all: bool = field(default=False, repr=False)
    _spans: dict[TopicPartition, Span] = field(default_factory=dict, repr=False)
    _span_host: SpanHost | None = field(default=None, repr=False)
    #: Formed by the classic protocol (False: the consumer protocol, KIP-848).
    _classic: bool = field(default=True, repr=False)
    #: The prefetcher runs in the span host, not in the generation: it goes
    #: on fetching the spans' partitions after an end that keeps them.
    _fetch_across: bool = field(default=False, repr=False)

    @property
    def member_id(self) -> str:
        """This member's id in the generation."""
        return self.identity.member_id

    @property
    def group_id(self) -> str:
        """The group."""
        return self.identity.group_id

    def __post_init__(self) -> None:
        if not (self.added or self.retained or self.revoked):
            # Formed without ownership information: nothing owned before (eager).
            self.added = frozenset(self.assignments)

    # ------------------------------------------------------------------ state

    @property
    def ending(self) -> bool:
        """True once the generation was cancelled (tasks may still be finishing)."""
        return self._scope.cancel_called

    @property
    def ended(self) -> bool:
        """True once every task returned and the final commit was made."""
        return self._ended.is_set()

    async def wait_ended(self) -> None:
        """Wait until the generation has fully ended."""
        await self._ended.wait()

    def cancel(self, reason: str = "cancelled by the application") -> None:
        """End the generation: cancel its tasks (the group then rejoins)."""
        self.end(Outcome.REJOIN, reason)

    # ------------------------------------------------------------------ the runner's side

    def renew_lease(self, sent_at: float) -> None:
        """The coordinator accepted a request of this generation sent at ``sent_at``."""
        self._lease_from = max(self._lease_from, sent_at)

    def lease_deadline(self) -> float:
        """When the local lease runs out unless renewed, in ``anyio.current_time()`` terms."""
        return self._lease_from + self._session_timeout

    def lease_expired(self) -> bool:
        """Whether the coordinator may have evicted this member; if so, end the generation.

        A member frozen past its session timeout (a stopped process, a long
        pause) has most likely lost its partitions to another member, which
        may be processing them already. Rather than wait for the coordinator
        to say so, the generation ends itself (and hands out no further batch)
        once a session timeout passed since the newest accepted request was sent.
        """
        if self.ending or anyio.current_time() < self.lease_deadline():  # not now - from: rounding
            return False
        self.end(
            Outcome.REJOIN,
            f"local lease expired: no answer from the coordinator for "
            f"session_timeout={self._session_timeout} s, the partitions may have a new owner",
            release=True,
        )
        return True

    def end(self, outcome: Outcome, reason: str, *, release: bool = False) -> None:
        """Cancel the generation; the first call's ``outcome`` and ``reason`` stick.

        Args:
            outcome: what the member does next (rejoin, reset its member id,
                look the coordinator up again).
            reason: why, for logs and :attr:`end_reason`.
            release: the member gives up every partition (no span outlives the
                generation, even under a cooperative protocol).
        """
        self.release_all = self.release_all or release
        if self.end_outcome is None:
            self.end_outcome = outcome
            self.end_reason = reason
            self._ending_at = anyio.current_time()
            log.info(
                "group %s generation %s member %s ending: %s",
                self.group_id,
                self.label,
                self.member_id,
                reason,
            )
        self._scope.cancel()
        self._ending.set()
        if self._fetch_across:
            # The prefetcher runs on: iterators of the generation's own tasks
            # waiting for a batch (shielded, or outside it) stop now.
            self._prefetcher.wake()

    def offset_reset(self, tp: TopicPartition, offset: int) -> None:
        """The prefetcher reset ``tp`` to ``offset``: its position was out of range.

        The committed offset and the mark may point into a log that is gone (a
        topic deleted and created again, a log truncated), so the mark is
        dropped and the committed baseline lowered below ``offset``: the marks
        of the records processed from there are committed even if lower, or
        every restart would reset and process the same records again. The
        only case a commit moves a committed offset backwards; and only once
        a record from the reset position was processed and marked (nothing is
        committed for a reset alone: an application that refuses a reset, as
        the lake sink does, keeps its committed offset). A span carries the
        reset to the next holder until a commit of the partition is stored.
        """
        span = self._span(tp)
        gen = self if span is None else span.gen
        if span is not None:
            span.reset, span.pending = offset, -1
        gen._marks.pop(tp, None)
        gen._start_marks.pop(tp, None)
        gen._committed[tp] = min(gen._committed.get(tp, -1), offset - 1)

    def records_damaged(self, tp: TopicPartition, offset: int, error: ProtocolError) -> None:
        """A worker found ``tp``'s records at ``offset`` damaged, and this generation's
        prefetcher stopped there: a span goes on from there too, and so does its
        holder's prefetcher if a later generation holds it."""
        span = self._span(tp)
        if span is not None:
            span.position = min(span.position, offset)
            if span.gen is not self:
                span.gen._prefetcher.damaged(tp, offset, error)

    def keeps_spans(self) -> bool:
        """Whether the partitions' spans outlive this generation's end.

        Under the classic protocol: a cooperative rebalance (``REJOIN``).
        Under the consumer protocol, whose membership lives in its heartbeat
        beside the generations: every end but a lost membership
        (``RESET_MEMBER``) or a failure. Never once the member gives up
        every partition (:attr:`release_all`: lease expired, closing).
        """
        if self.release_all:
            return False
        if self._classic:
            return self.rebalance_protocol == "cooperative" and self.end_outcome is Outcome.REJOIN
        return self.end_outcome not in (Outcome.RESET_MEMBER, Outcome.FATAL)

    async def wait_ending(self) -> None:
        """Wait until the generation is cancelled."""
        await self._ending.wait()

    @asynccontextmanager
    async def task_group(self) -> AsyncIterator[anyio.abc.TaskGroup]:
        """The generation's task group, inside its cancel scope (opened once, by the runner).

        The block's exit waits for every task; :meth:`start_soon` works until then.
        """
        try:
            with self._scope:
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    yield tg
        finally:
            self._tg = None

    def set_ended(self) -> None:
        """Every task returned and the final commit was made: later commits raise."""
        if self._ending_at is not None:
            self.teardown = anyio.current_time() - self._ending_at
        self._ended.set()

    # ------------------------------------------------------------------ tasks

    def _ended_error(self, what: str, how: str = "has ended") -> GenerationEnded:
        message = f"{what}: generation {self.label} of {self.group_id} {how}"
        return GenerationEnded(message, self.identity)

    def _check_live(self, what: str) -> anyio.abc.TaskGroup:
        if self.ended or self._tg is None or self.lease_expired():
            raise self._ended_error(what)
        return self._tg

    def start_soon(
        self,
        fn: Callable[..., Awaitable[Any]],
        *args: Any,
        name: str | None = None,
        partition: TopicPartition | None = None,
    ) -> None:
        """Start a task in the generation's nursery, or in a partition's ownership span.

        The first task to exit, returning or raising, ends the generation; an
        exception reaches the code iterating the group. A generation-scoped
        task started while the generation is ending starts cancelled, or not
        at all once its other tasks have returned.

        Args:
            fn: an async function, called with ``args`` at once (TypeError if no awaitable).
            name: the task's name (default: the function's).
            partition: scope the task to this assigned partition's ownership
                span instead of the generation: under a cooperative protocol it
                keeps running while the partition stays assigned to this member
                across generations, and is cancelled (and awaited, and its
                marks committed) when the partition is revoked. A span task
                that returns gives the partition up. Under the eager protocol
                the span ends with the generation.

        Raises:
            GenerationEnded: the generation has ended (not while it is ending).
            KeyError: ``partition`` is not assigned in this generation.
        """
        task = UserTask(name or str(getattr(fn, "__qualname__", repr(fn))))
        if partition is None:
            self._start_in_generation(task, fn, args)
            return
        if self.ended:
            raise self._ended_error("start_soon")
        if partition not in self.assignments:
            raise self._unassigned(partition)
        if self._span_host is None:
            # No span outlives a generation formed without a host: the task is
            # the generation's, which under the eager protocol is the same.
            self._start_in_generation(task, fn, args)
            return
        self._span_host.start_span_task(self, partition, task, awaitable(fn, fn(*args)))

    def _start_in_generation(
        self, task: UserTask, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...]
    ) -> None:
        tg = self._tg
        if self.ended or self.lease_expired() or (tg is None and not self.ending):
            raise self._ended_error("start_soon")
        if not start_or_drop(tg, task, awaitable(fn, fn(*args)), self._run_task, self.ending):
            log.debug("generation %s: task %r not started (ending)", self.label, task.name)

    async def start(
        self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str | None = None
    ) -> Any:
        """Start a task and wait until it calls ``task_status.started(value)``.

        ``fn`` must accept a ``task_status`` keyword argument.

        Returns:
            The value passed to ``task_status.started``.

        Raises:
            Exception: what ``fn`` raised before it started, as itself (no
                exception group but ``fn``'s own), to the caller alone. Called
                from the block, the generation then ends as when a task returns;
                from one of its tasks, it goes on, so that the caller gets the
                exception (under asyncio a caller cancelled by something else at
                that moment gets the cancellation, and the exception is logged).
                Raised after it started, it ends the generation as a failure,
                as a ``start_soon`` task's does.
            KeyboardInterrupt, SystemExit: raised by ``fn`` before it started (also
                inside a task group of its own), as itself; ``async with`` then
                commits, leaves and raises it.
        """
        tg = self._check_live("start")
        if self.ending:
            raise self._ended_error("start", "is ending")
        task = UserTask(name or str(getattr(fn, "__qualname__", repr(fn))))
        task.caller_in_task = IN_USER_TASK.get()
        where = f"group {self.group_id} generation {self.label}"
        return await start_and_wait(tg, task, fn, args, self._run_task, where)

    async def _run_task(self, task: UserTask, coro: Awaitable[Any]) -> None:
        self._tasks.append(task)
        task.coro = coro
        try:
            await host(task.hosted, coro)
        except (Exception, BaseExceptionGroup) as exc:  # detached.Interrupted
            if task.starting:  # raised to the caller of start(), which may handle it
                raise
            if self.ending and told_it_ended(exc, self.identity):
                return  # told so before its cancellation came: it exits as cancelled
            self._failures.append(exc)
            task_failed(f"group {self.group_id} generation {self.label}", task.name, exc)
            self.end(Outcome.FATAL, f"task {task.name!r} raised {exc!r}")
            raise
        finally:
            task.done = True
            # A task that never started, whose caller is one of the application's
            # tasks, leaves the generation to that caller: ending it would cancel
            # the caller, which asyncio would hand the cancellation instead of the
            # task's exception. Called from the block, it ends the generation as a
            # returning task does (a loop handling the failure gets the next one).
            if not (task.starting and task.caller_in_task):
                self.end(Outcome.REJOIN, f"task {task.name!r} exited")

    def abandon_tasks(self) -> list[str]:
        """Stop waiting for the user tasks that have not returned (after TaskStuckError).

        Each one's cancel scope stays cancelled and it runs on in the background
        until it returns by itself; the generation's task group no longer waits
        for it, so the generation can end (its final commit is made with the
        marks so far) and the group can close.

        Returns:
            The names of the tasks abandoned.
        """
        closing = self._span_host.closing_tasks() if self._span_host is not None else []
        return abandon([*self._tasks, *closing])

    # ------------------------------------------------------------------ records

    def fetch(self, tp: TopicPartition) -> AsyncIterator[FetchedBatch]:
        """Iterate the batches of an assigned partition from its start offset.

        Each batch carries ``records`` and ``next_offset`` (the offset to mark
        once the batch is processed). Each step of the iteration is a
        cancellation point. Once the generation is ending no further batch is
        handed out, even one already buffered: a task of the generation is
        cancelled at its next step (the task's ``async for`` raises the
        cancellation, which the generation absorbs); code shielded from that
        cancellation, or outside the generation, sees the iteration stop.
        A batch already handed out is the worker's to finish and mark.

        Raises:
            KeyError: ``tp`` is not assigned to this member in this generation.
            GenerationEnded: the generation is over.
        """
        span = self._span(tp)
        if span is not None:
            return _SpanBatches(span)
        self._check_live("fetch")
        if tp not in self.assignments:
            raise self._unassigned(tp)
        return self._prefetcher.iterate(tp, lambda: self.ending or self.lease_expired())

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make ``tp``'s next batch start at ``offset`` (replay, or skip ahead).

        Batches of ``tp`` already buffered are dropped; the worker iterating ``fetch(tp)``
        gets a batch starting at ``offset`` next (an offset below the log start or past the
        end is handled as ``start_offset`` says). Marks are not changed: seeking back
        replays records without moving the committed offset backwards; seeking ahead commits
        nothing until the worker marks.

        Raises:
            KeyError: ``tp`` is not assigned to this member in this generation.
            ValueError: ``offset`` is negative.
            GenerationEnded: the generation is over.
        """
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an integer >= 0, got {offset!r}")
        span = self._span(tp)
        if span is not None:
            span.position = offset
            if not span.closed and (span.gen._fetch_across or not span.gen.ending):
                span.gen._prefetcher.seek(tp, offset)
            return
        self._check_live("seek")
        if tp not in self.assignments:
            raise self._unassigned(tp)
        self._prefetcher.seek(tp, offset)

    def lag(self) -> dict[TopicPartition, int]:
        """Each assigned partition's lag: records between its mark and the high watermark.

        The high watermark is the one in the newest fetch answer for the
        partition, so this costs no request; a partition not fetched yet
        is left out. The position is the partition's mark (or its start offset
        while unmarked, past the offsets without records there once its worker
        asked: consumer/recordless.py). ``sum(gen.lag().values())`` is the total.
        A partition whose ownership span outlived this generation is reported
        as the generation holding it now sees it (as ``mark`` and ``fetch``
        follow the span); one being revoked is left out.
        """
        lag: dict[TopicPartition, int] = {}
        for tp, start in self.assignments.items():
            span = self._span(tp)
            if span is not None and span.closed:
                continue
            gen = self if span is None else span.gen
            hw = gen._prefetcher.high_watermark(tp)
            if hw >= 0:
                mark = max(
                    gen._marks.get(tp, -1),
                    gen._start_marks.get(tp, -1),
                    span.pending if span is not None else -1,
                )
                lag[tp] = max(0, hw - max(mark, gen.assignments.get(tp, start)))
        return lag

    def mark(self, tp: TopicPartition, offset: int) -> None:
        """Record that everything before ``offset`` in ``tp`` was processed.

        The mark is committed with this generation's id by the periodic
        committer, by :meth:`commit` and when the generation ends. Marks only
        move forward (but for a reset of an out-of-range position: :meth:`offset_reset`).
        A mark that reaches offsets with no record to hand out (transaction
        markers, aborted transactions) moves past them once they were fetched.
        A partition with an open ownership span is marked in the generation
        holding it now (between generations: in the next one).

        Raises:
            TypeError, ValueError: ``offset`` is not an offset (an integer from 0).
            KeyError: ``tp`` is not assigned to this member in this generation.
            GenerationEnded: the generation's final commit is done; a mark now
                would never be committed.
        """
        offset = checked_offset(tp, offset)
        span = self._span(tp)
        if span is not None:
            span.mark(offset)
            return
        if tp not in self.assignments:
            raise self._unassigned(tp)
        if self.ended:
            raise self._ended_error("mark", "has ended; its marks were already committed")
        if offset > self._marks.get(tp, -1):
            self._marks[tp] = self._prefetcher.past_gaps(tp, offset)

    def gaps_found(self, tp: TopicPartition) -> None:
        """The prefetcher moved past offsets of ``tp`` that hold no record to
        hand out: a mark that reached them passes them, and so may the start
        mark (consumer/recordless.py)."""
        span = self._span(tp)
        start = self._prefetcher.start_passed(tp)
        holder = span is None or span.gen is self
        if start > self._start_marks.get(tp, -1) and holder and not self.ended:
            self._start_marks[tp] = start
        if span is not None:
            if span.gen is self:  # (else a newer holder's prefetcher fetches it)
                span.mark(max(span.pending, self._marks.get(tp, -1)))
        elif not self.ended and (mark := self._marks.get(tp, -1)) >= 0:
            self._marks[tp] = self._prefetcher.past_gaps(tp, mark)

    def position(self, tp: TopicPartition) -> int:
        """The offset ``fetch(tp)`` hands out from next (the Java consumer's ``position()``).

        It lies past every batch handed out, and past the offsets after them
        that hold no record (transaction markers, aborted transactions under
        ``read_committed``): a worker that marked every batch it got has read
        up to here. A span that outlived this generation is reported as the
        generation holding it now fetches it; one being revoked, where it ends.

        Raises:
            KeyError: ``tp`` is not assigned to this member in this generation.
        """
        if tp not in self.assignments:
            raise self._unassigned(tp)
        span = self._span(tp)
        if span is not None and span.closed:  # being revoked: no batch comes any more
            return span.position
        return (self if span is None else span.gen)._prefetcher.position(tp)

    def _unassigned(self, tp: TopicPartition) -> KeyError:
        return KeyError(
            f"{tp} is not assigned to member {self.member_id} in generation {self.label}"
        )

    def _stops_fetching(self) -> bool:
        return self.ending or self.lease_expired()

    def _span(self, tp: TopicPartition) -> Span | None:
        """``tp``'s span (open, or closing), if this generation assigned ``tp``."""
        span = self._spans.get(tp)
        if span is None or tp not in self.assignments or span.first > self.sequence:
            return None  # (a span opened later, after ``tp`` was revoked and added again)
        return span

    @property
    def marks(self) -> Mapping[TopicPartition, int]:
        """The offsets marked so far."""
        return dict(self._marks)

    @property
    def committed(self) -> Mapping[TopicPartition, int]:
        """The offsets this member has committed (or found committed) per partition."""
        return dict(self._committed)

    @property
    def committed_metadata(self) -> Mapping[TopicPartition, str]:
        """The metadata committed with each partition's offset (partitions with none left out).

        Read from the coordinator when the generation formed, then updated by
        this generation's commits that carried metadata. A sink that publishes
        its output through the commit keeps its bookkeeping here (the lake
        sink names its newest file).
        """
        return dict(self._committed_metadata)

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int] | None = None,
        *,
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        """Commit offsets with this generation's id and member id.

        A partition whose ownership span outlived this generation (a
        span-scoped task's partition, retained by a cooperative rebalance) is
        committed under the identity of the generation holding it now, as
        ``mark`` and ``fetch`` follow the span: a span task may keep the
        generation it started in. Between generations the commit waits until
        the next generation holds the span (there is no generation whose id it
        could carry meanwhile); while the span is being revoked, it is
        committed under the generation revoking it (before that one formed,
        see ``docs/incremental-rebalancing.md``, the consumer protocol).

        A refusal worth retrying (COORDINATOR_LOAD_IN_PROGRESS,
        NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT, a
        broken connection) is retried with the client's jittered backoff
        for up to ``request_timeout``, the coordinator looked up again after
        a move; each retry commits what is due then (the marks made
        meanwhile too). A fencing answer or REBALANCE_IN_PROGRESS is raised
        at once, and so is STALE_MEMBER_EPOCH (consumer protocol: the commit
        was already sent again under the member's newer epoch if there was
        one). Retries go on while the generation is ending; once it has ended
        they go under the generations holding its spans, as a commit on an
        ended generation does, within the same ``request_timeout``.

        Args:
            offsets: what to commit; default: every marked offset (on an
                ended generation: its spans' marks), with start marks
                (consumer/recordless.py), which explicit offsets drop. Offsets not
                above what this member already committed are left out, so a
                committed offset never moves backwards.
            metadata: a string stored with a partition's offset (Kafka's
                commit metadata, at most ``offset.metadata.max.bytes``,
                4096 by default), for partitions of ``offsets``. The
                coordinator stores offset and metadata together, fenced by
                the generation like any commit.

        Raises:
            TypeError, ValueError: an offset of ``offsets`` is not an offset.
            GenerationEnded: the generation has ended and a partition to
                commit has no span that outlived it (or that span was given
                up with the membership); nothing was sent.
                Also raised so when it ended while the commit was retried.
            BrokerError: refused, not retried (IllegalGeneration,
                UnknownMemberId, FencedInstanceId, RebalanceInProgress,
                StaleMemberEpoch, FencedMemberEpoch, an authorization error).
            RequestTimedOut: retriable refusals or connection failures went
                on for ``request_timeout``; its ``__cause__`` is the last one
                (it is a ``KafkaConnectionError``). ClusterUnreachable,
                CoordinatorUnavailable: an outage lasted ``unreachable_timeout``.
                Marks stay in every case.
            TopicDeleted: partitions of ``offsets`` whose topic was deleted (or
                created again) since the generation formed were not stored (its
                ``partitions``); the rest was. The generation ends.
        """
        if self.ended:
            where = f"generation {self.label} of {self.group_id}"
            await commit_in_spans(where, self.assignments, self._span, offsets, metadata)
            return
        await self._commit_retried(offsets, metadata, forwarded=False)
