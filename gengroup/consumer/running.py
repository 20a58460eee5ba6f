"""Running a generation: its internal tasks, the teardown watchdog, the final commit.

Theory of operation:

:func:`run_generation` runs a formed generation's task group (inside the
generation's cancel scope) *in the caller's task* -- the group's run loop. It
starts the internal tasks there (the heartbeat loop, the prefetcher, the
leader's partition watcher, the periodic committer), then hands the
:class:`~gengroup.consumer.generation.Generation` to the application, which
never runs inside that task group: it receives the object over the group's
channel, so user code never yields from inside a nursery.

Then it simply waits for the task group to finish. It finishes when the first
task exits (a user task returns or raises, the heartbeat sees a rebalance, the
watcher sees a partition change, the group is closed), because every exit
cancels the generation's scope. A watchdog started beside the task group
gives each task ``rebalance_timeout`` seconds from its own cancellation (the
generation's end for its tasks; for a span's, the span's closing, which may
come earlier, in a revocation, or later); past that it reports which task
held the generation up, what cancelled it, and where it was suspended
(:class:`TaskStuckError`) instead of hanging silently. It reports tasks
only: if every task has returned by then, nothing is reported. Under the
classic protocol the member goes on beating meanwhile (beside the task
group, on the same grid), so that a teardown longer than ``session_timeout``
does not get it evicted while its tasks still run (both the heartbeat loop
and these beats are in :mod:`~gengroup.consumer.beating`).

The final commit is made in two passes, both shielded, with the ending
generation's id. When the member rejoins or closes after an end that
revokes every span (every such end under an eager balancer; closing, a
task's exception and an expired lease under any), what is marked at that
instant is committed at once, beside the teardown: the commit's round trip (several milliseconds
under Kafka's coordinator, which writes it to its log) overlaps the tasks'
returning instead of following it. Once every task has returned, what is
not committed yet (the marks made meanwhile by a task on its way out, or
all of them if the first pass failed) is committed; if nothing is left,
there is no second pass. A retriable refusal (a coordinator loading or
moving, a timeout, a broken connection) is retried with backoff, by the
first pass for up to ``request_timeout`` after the end, by the second until
``request_timeout`` after the teardown (as a lone final commit would); a
fencing answer ends a pass at once, and a fenced first pass is not
followed by a second; nor is one left less than a backoff to try (the
first pass, retrying, held the teardown up that long). A failure is logged
once, as a WARNING naming the pass that said most (the first, if the second
heard no answer), and is the generation's ``commit_error``. Only then is
the member machine told the generation ended, so the member rejoins only
after all of it (semantic 1: one live generation per member).

Partition-scoped tasks (``gen.start_soon(..., partition=tp)``) and, under a
cooperative protocol, the prefetcher run in the member's
:class:`~gengroup.consumer.ownership.Ownership`, which outlives generations
(see its module). Under a cooperative protocol a generation that ends for a
rebalance keeps its spans; the next generation first holds the retained
ones (their workers go on with its prefetcher's batches, and their marks and
commits go under its id), then revokes the spans of the partitions it no
longer assigns (cancels their tasks, waits for them under the same watchdog,
commits their marks with its own id), adopts the retained ones, then is
handed out; if it revoked anything it ends at once so that the member
rejoins without those partitions. The revocation's commit is not shielded
from the generation's end: an end stops it, and the end's final commit
sends its marks, within the bounds above. Every other end (an eager
protocol, a lost membership, closing, a task's exception) revokes every span
before the final commit's second pass.

Under the consumer protocol (KIP-848, ``Formed.classic`` False) the
membership lives in the heartbeat beside the generations, so every end but a
lost membership (``RESET_MEMBER``), a failure or closing keeps the spans;
after revoking, the runner calls ``Formed.acknowledge`` (the heartbeat stops
reporting the revoked partitions) and does not end the generation: the
coordinator assigns the released partitions without a second rebalance. The
coordinator fences a member that has not acknowledged within its
``rebalance_timeout``, so the commits on the way (the ending generation's
second pass, the revocation's) give up by ``Formed.revoke_deadline``, and the
revoked partitions' marks not stored by then are dropped: no later commit
under the member's newest epoch may move their new owner's offsets. Spans
the member released before the generation formed (its forming failed at
first: :mod:`~gengroup.consumer.early_revocation`) and handed to it are
revoked as its own: awaited, their marks committed, then acknowledged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial

import anyio
import anyio.abc

from .._config import GroupConfig
from .._errors import (
    BrokerError,
    KafkaConnectionError,
    ProtocolError,
    RequestTimedOut,
    TaskStuckError,
)
from .._types import show_partitions
from ..io.cluster import LONG_UNAVAILABLE
from ..io.retry import ClientClosed
from ..membership.member import Member, Outcome, outcome_for
from ..membership.pattern import describe_change
from .beating import Heartbeats
from .committing import FENCED, retriable_refusal
from .detached import INTERRUPTS, UserTask, bare, describe_stack, first_failure, interrupt_in
from .forming import Formed, GroupClient
from .generation import Generation, Span
from .ownership import Ownership

__all__ = ["CLOSED_UNDER_THE_GROUP", "run_generation"]

log = logging.getLogger("gengroup")

#: Why a final commit failed with :class:`~gengroup.io.retry.ClientClosed`: the
#: group closes its Cluster only once its run loop ended, after the final
#: commit and the LeaveGroup, so the Cluster was closed under it.
CLOSED_UNDER_THE_GROUP = (
    "the group's Cluster was closed under it, before the final commit (the group "
    "closes it only after that): by `group.cluster.aclose()`, or by an interrupt that "
    "ended its connections' tasks (under asyncio a KeyboardInterrupt that reaches the "
    "event loop, such as a second Ctrl-C while the group closes, makes it cancel every "
    "task at once, shielded or not); nothing was sent"
)


async def run_generation(
    formed: Formed,
    member: Member,
    client: GroupClient,
    hand_over: Callable[[Generation], Awaitable[None]],
    report_stuck: Callable[[TaskStuckError], Awaitable[None]],
    ownership: Ownership | None = None,
) -> BaseException | None:
    """Run ``formed`` until every task of it returned, then commit and end it.

    Args:
        formed: the generation, its prefetcher and the partition counts at join.
        member: the member machine, told when the generation ended.
        client: the group's requests (heartbeats, commits, metadata).
        hand_over: gives the generation to the application (once its tasks run).
        report_stuck: reports tasks that did not return in time after cancellation.
        ownership: the member's spans across generations (a private one if None).

    Returns:
        What a task of the generation raised, or None.
    """
    own = ownership if ownership is not None else Ownership(client.config)
    if ownership is None:
        async with own.hosting():
            return await _Run(formed, member, client, own).run(hand_over, report_stuck)
    return await _Run(formed, member, client, own).run(hand_over, report_stuck)


class _Run:
    """One generation's internal tasks."""

    def __init__(
        self, formed: Formed, member: Member, client: GroupClient, ownership: Ownership
    ) -> None:
        self.formed = formed
        self.gen = formed.generation
        self.member = member
        self.client = client
        self.own = ownership
        self.config: GroupConfig = client.config
        #: The internal tasks whose requests are failing, with when they
        #: started to (each logged once), and those said to fail for long.
        self.failing: dict[str, float] = {}
        self.warned: set[str] = set()
        #: Why the final commit's first pass (at the end, beside the
        #: teardown) failed, if it did: reported unless the second succeeds.
        self.first_pass_failure: BaseException | None = None
        #: The refusals the final commit's passes at the end retried.
        self.end_refusals: list[BaseException] = []
        #: The cancelled tasks logged as awaited by the teardown, and those
        #: reported stuck (each said once, across the revocation and the end).
        self.said_waiting: set[UserTask] = set()
        self.reported: set[UserTask] = set()
        #: The classic protocol's heartbeats (while running and while ending).
        self.beats = Heartbeats(formed, member, client, self._log_retry, self._log_recovered)

    def _log_retry(
        self, what: str, exc: BaseException, then: str, long: tuple[float, str] | None = None
    ) -> None:
        """Log that ``what`` started failing: once, until :meth:`_log_recovered`;
        with ``long`` (seconds, consequence), a WARNING too, once, when it has
        failed for that long."""
        now = anyio.current_time()
        since = self.failing.get(what)
        if since is None:
            self.failing[what] = now
            self._log(f"{what} failed ({exc}); {then}")
        elif long is not None and what not in self.warned and now - since >= long[0]:
            self.warned.add(what)
            lasted = f"{what} has failed for {now - since:.0f} s ({exc}): {long[1]}; {then}"
            self._log(lasted, logging.WARNING)

    def _log_recovered(self, what: str) -> None:
        """Log that ``what`` works again, if it was failing."""
        since = self.failing.pop(what, None)
        if since is not None:
            self.warned.discard(what)
            self._log(f"{what} works again after {anyio.current_time() - since:.1f} s")

    def _log(self, message: str, level: int = logging.INFO) -> None:
        gen = self.gen
        log.log(
            level,
            "group %s generation %s member %s: %s",
            gen.group_id,
            gen.label,
            gen.member_id,
            message,
        )

    async def run(
        self,
        hand_over: Callable[[Generation], Awaitable[None]],
        report_stuck: Callable[[TaskStuckError], Awaitable[None]],
    ) -> BaseException | None:
        cfg = self.config
        gen = self.gen
        error: BaseException | None = None
        where = f"group {gen.group_id} generation {gen.label}"
        torn_down_at: float | None = None
        try:
            async with anyio.create_task_group() as outer:
                outer.start_soon(self._watchdog, report_stuck, name="gengroup-teardown-watchdog")
                outer.start_soon(self._commit_at_the_end, name="gengroup-final-commit")
                if self.formed.classic:
                    outer.start_soon(self.beats.while_ending, name="gengroup-teardown-heartbeat")
                try:
                    error = await self._run_tasks(hand_over, report_stuck, where)
                    await self._settle_spans()
                finally:
                    # Also when an exception or a cancellation escapes: the
                    # final commit's second pass is timed from here.
                    torn_down_at = anyio.current_time()
                    outer.cancel_scope.cancel()
        finally:
            # The second pass ends request_timeout after the teardown at the
            # latest, as a lone final commit would (the first pass, ended by
            # then, may have taken part of that).
            if torn_down_at is None:
                torn_down_at = anyio.current_time()
            left = torn_down_at + cfg.request_timeout - anyio.current_time()
            revoke_by = self._revoke_deadline()
            revoking = revoke_by is not None and revoke_by - anyio.current_time() < left
            if revoke_by is not None and revoking:
                # Partitions kept beside the revoked ones carry what is not
                # stored to the next generation, the revoked ones to the revocation.
                left = revoke_by - anyio.current_time()
            first = self.first_pass_failure
            # With nothing left (no mark since the first pass) there is no
            # second pass: its shielded retry loop would send nothing.
            pending = first is not None or any(
                offset > gen._committed.get(tp, -1)
                for marks in (gen._marks, gen._start_marks)
                for tp, offset in marks.items()
            )
            too_late = left < self.client.cluster.retry_backoff
            if isinstance(first, FENCED):
                self._commit_failed(first)
            elif pending and revoking and gen.keeps_spans():
                # What open spans hold goes with the revocation's commit (revoked
                # partitions) or the next generation's (retained ones).
                carried = (
                    self._no_time_left(left, "its marks")
                    if too_late
                    else await self._final_commit(left, refused=self.end_refusals, report=False)
                )
                if carried is not None and not self._carried_by_spans():
                    self._commit_failed(carried)  # (marks of generation-scoped tasks)
                elif carried is not None:
                    gen.commit_error = carried
                    log.info(
                        "group %s generation %s member %s: final commit failed before the "
                        "revocation's deadline: %s; its marks go with the next commit",
                        gen.group_id,
                        gen.label,
                        gen.member_id,
                        carried,
                    )
            elif pending and too_late:
                # Too little time left to try (the first pass, still retrying,
                # held the teardown up): a second pass could only fail, and
                # say less than the first did.
                self._commit_failed(
                    first or self._no_time_left(left, "its marks" if revoking else "")
                )
            elif pending:
                second = await self._final_commit(left, refused=self.end_refusals, report=False)
                if second is not None:
                    # A second pass that heard no answer says less than the first.
                    unanswered = isinstance(second, RequestTimedOut) and second.__cause__ is None
                    self._commit_failed(first if first is not None and unanswered else second)
            gen.set_ended()
            self.member.generation_ended(
                gen.end_outcome if gen.end_outcome is not Outcome.FATAL else None, gen.end_reason
            )
            if gen.end_outcome is Outcome.FIND_COORDINATOR:
                self.client.forget_coordinator()
        span_error = self.own.take_failure(where)
        if error is not None and span_error is not None:
            if isinstance(span_error, INTERRUPTS) and not isinstance(error, INTERRUPTS):
                span_error.add_note(f"{where}: a task of the generation also raised {error!r}")
                return span_error  # an interrupt wins
            error.add_note(f"{where}: a partition's task also raised {span_error!r}")
        return error if error is not None else span_error

    async def _run_tasks(
        self,
        hand_over: Callable[[Generation], Awaitable[None]],
        report_stuck: Callable[[TaskStuckError], Awaitable[None]],
        where: str,
    ) -> BaseException | None:
        """Run the generation's task group until it ends; what a task raised, if one did."""
        cfg = self.config
        gen = self.gen
        error: BaseException | None = None
        # The except clause sits outside the generation's scope: the
        # scope first strips the Cancelled exceptions its own
        # cancellation caused, leaving only what the tasks raised.
        try:
            async with gen.task_group() as tg:
                if self.formed.classic:
                    tg.start_soon(self.beats.while_running, name="gengroup-heartbeat")
                if gen._span_host is self.own and (
                    not self.formed.classic or gen.rebalance_protocol == "cooperative"
                ):
                    # Fetching outlives a generation whose end keeps the spans.
                    gen._fetch_across = True
                    self.own.host_prefetcher(gen, self.formed.prefetcher)
                else:
                    tg.start_soon(self.formed.prefetcher.run, name="gengroup-prefetcher")
                tg.start_soon(self._lease_watch, name="gengroup-lease-watch")
                if (gen.is_leader and cfg.watch_partition_changes) or (
                    cfg.topic_pattern is not None and self.formed.classic
                ):
                    tg.start_soon(self._watch_partitions, name="gengroup-watcher")
                if cfg.commit_interval > 0:
                    tg.start_soon(self._commit_loop, name="gengroup-committer")
                await self._revoke_first(report_stuck)
                if self.formed.acknowledge is not None:
                    self.formed.acknowledge()
                    gen._released = gen.revoked  # their new owner commits them
                self.own.adopt(gen)
                if self.own.failures:  # a revoked partition's task raised: it ends the group
                    gen.end(Outcome.FATAL, f"task raised {self.own.failures[0]!r}")
                # A generation whose forming outlived the session (an
                # offset fetch that crawled while the coordinator
                # moved) may already have a new owner for its
                # partitions: it is never handed out.
                elif not gen.lease_expired():
                    await hand_over(gen)
                    self.own.unseen.clear()  # the application has them now
                if self.formed.classic and gen.revoked and gen.rebalance_protocol == "cooperative":
                    gen.end(
                        Outcome.REJOIN,
                        f"{len(gen.revoked)} partition(s) revoked: rejoining so that "
                        "they are assigned anew",
                    )
        except Exception as exc:
            error = first_failure(exc, where, logged=gen._failures)
            gen.end(Outcome.FATAL, f"task raised {error!r}")
        except BaseException as exc:
            # A task's KeyboardInterrupt or SystemExit (with exceptions beside
            # it, or alone): the teardown and the final commit as for an
            # exception, then it comes out of ``async for`` as itself.
            error = interrupt_in(exc, where, logged=gen._failures)
            if error is None:
                raise
            gen.end(Outcome.FATAL, f"task raised {error!r}")
        return error

    async def _revoke_first(
        self, report_stuck: Callable[[TaskStuckError], Awaitable[None]]
    ) -> None:
        """Cooperative phase one: revoke the spans this generation no longer assigns.

        The retained spans are held by this generation first, so that they
        are served meanwhile. The revoked spans' tasks are cancelled and
        awaited (``rebalance_timeout`` at most, then TaskStuckError), and
        their marks committed with this generation's id, before the
        generation is handed out.
        """
        gen = self.gen
        # Spans released before ``gen`` formed, which it took over (the consumer
        # protocol: early_revocation.py).
        closed = [s for s in self.own.spans.values() if s.closed and s.gen is gen]
        closed += self.own.release(
            [tp for tp in self.own.spans if tp not in gen.assignments],
            gen,
            why=f"generation {gen.label} revoked its partition",
        )
        # A partition the generation adds while a span of it is open: its
        # topic was deleted and created again (forming.kept_partitions). The
        # old span's tasks end here; the partition starts again as added, from
        # the new topic's committed offset. Its marks are the old topic's:
        # not carried into the generation (it does not revoke it).
        recreated = sorted(
            tp for tp in gen.added if (s := self.own.spans.get(tp)) is not None and not s.closed
        )
        if recreated:
            log.info(
                "group %s generation %s member %s: [%s] of topic(s) created again: their "
                "tasks are cancelled and they start again on the new topic",
                gen.group_id,
                gen.label,
                gen.member_id,
                show_partitions(recreated),
            )
            closed += self.own.release(
                recreated, gen, why=f"generation {gen.label} found its topic created again"
            )
        # The marks of spans released before ``gen`` formed whose tasks returned already.
        carried = [tp for tp in gen.revoked if gen._marks.get(tp, -1) > gen._committed.get(tp, -1)]
        if not closed and not self.own.closing_tasks() and not carried:
            return
        # The retained spans are served meanwhile: their batches come from
        # ``gen``'s prefetcher, their marks and commits go under its id.
        self.own.hold_retained(gen)
        started = anyio.current_time()
        async with anyio.create_task_group() as watch:
            watch.start_soon(self._watch, report_stuck)
            await self.own.wait_released()
            watch.cancel_scope.cancel()
        for span in closed:
            _carry(span, gen, only_revoked=True)
        # Not shielded from the generation's end: an end stops it, and the
        # end's final commit sends these marks instead (running.py's
        # docstring), so the teardown is not held up by a commit that may
        # retry for request_timeout (a lost coordinator, an expired lease).
        revoke_by = self._revoke_deadline()
        if revoke_by is None:
            await self._final_commit(shielded=False)
        else:
            # The consumer protocol: the acknowledgement must reach the
            # coordinator before it fences the member (rebalance_timeout).
            left = min(self.config.request_timeout, revoke_by - anyio.current_time())
            failure: BaseException | None = self._no_time_left(left, "the revoked marks")
            if left >= self.client.cluster.retry_backoff:
                failure = await self._final_commit(left, shielded=False, report=False)
            if failure is not None:
                self._revocation_commit_failed(failure)
        gen.timings.revocation = anyio.current_time() - started

    def _carried_by_spans(self) -> bool:
        """Whether every mark not stored is of an open span, which carries it to
        the next generation (a generation-scoped task's marks end with it)."""
        gen = self.gen
        return all(
            (span := self.own.spans.get(tp)) is not None and not span.closed
            for marks in (gen._marks, gen._start_marks)
            for tp, offset in marks.items()
            if offset > gen._committed.get(tp, -1)
        )

    def _revoke_deadline(self) -> float | None:
        """When commits on the way to acknowledging a revocation give up (consumer protocol)."""
        deadline = self.formed.revoke_deadline
        return None if deadline is None else deadline()

    def _revocation_commit_failed(self, failure: BaseException) -> None:
        """The revocation's commit failed (the consumer protocol): drop the revoked
        partitions' marks not stored, and say so.

        Once the revocation is acknowledged another member owns them, and a
        later commit of this generation (it carries the newest epoch) would
        move that member's committed offsets. The retained partitions' marks
        go with the next commit.
        """
        gen = self.gen
        gen.commit_error = failure
        dropped = sorted(
            tp
            for tp in gen.revoked
            if max(gen._marks.get(tp, -1), gen._start_marks.get(tp, -1))
            > gen._committed.get(tp, -1)
        )
        for tp in gen.revoked:
            gen._marks.pop(tp, None)
            gen._start_marks.pop(tp, None)
        where = f"group {gen.group_id} generation {gen.label} member {gen.member_id}"
        if dropped:
            log.warning(
                "%s: commit of revoked [%s] failed: %s; their marks are dropped (their new "
                "owner processes their records since the last commit again)",
                where,
                show_partitions(dropped),
                failure,
            )
        else:
            log.info("%s: commit at the revocation failed: %s", where, failure)

    async def _settle_spans(self) -> None:
        """At the generation's end: keep the spans (cooperative rebalance) or revoke them all.

        Either way every closed span's tasks have returned before the final
        commit's second pass, so its marks are in it.
        """
        gen = self.gen
        if not gen.keeps_spans():
            self.own.stop_prefetcher()
            self.own.current = None
            self.own.release(
                list(self.own.spans), why=f"generation {gen.label} ended ({gen.end_reason})"
            )
            self.own.owned.clear()
        # A revocation that the generation's end interrupted: its spans' marks
        # go into the final commit once their tasks returned.
        interrupted = [s for s in self.own.spans.values() if s.closed and s.tp in gen.revoked]
        await self.own.wait_released()
        for span in interrupted:
            _carry(span, gen)
        self.own.lease_from = gen._lease_from
        if self.formed.classic and gen.rebalance_protocol == "cooperative":
            self.member.retain_owned(self.own.owned)

    async def _commit_at_the_end(self) -> None:
        """The final commit's first pass: the marks as the generation ends, beside the teardown.

        Only for an end after which the member rejoins or closes (``REJOIN``;
        ``FATAL``: a task raised, the group stops) and that revokes every
        span: the commit's round trip need not wait for the tasks to return.
        An end that keeps the spans goes on processing them; a lost
        membership (``RESET_MEMBER``) or a moved coordinator
        (``FIND_COORDINATOR``) has the second pass alone. A failure is not
        logged here: the second pass tries again (unless this one was fenced)
        and says how it ended.
        """
        gen = self.gen
        await gen.wait_ending()
        if gen.end_outcome in (Outcome.REJOIN, Outcome.FATAL) and not gen.keeps_spans():
            self.first_pass_failure = await self._final_commit(
                refused=self.end_refusals, report=False
            )

    async def _final_commit(
        self,
        limit: float | None = None,
        *,
        refused: list[BaseException] | None = None,
        report: bool = True,
        shielded: bool = True,
    ) -> BaseException | None:
        """Commit the marks once more, shielded, retrying retriable refusals.

        A coordinator that is loading, moving or briefly unreachable (after a
        broker restart) refuses the commit for a moment; dropping it would make
        the next owner process everything since the last periodic commit
        again. So every refusal the error table retries (and a request that
        timed out) is sent again with the client's backoff, for at most
        ``limit`` seconds in all (``request_timeout`` by default). A fencing
        answer (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID) or
        REBALANCE_IN_PROGRESS ends the attempt at once: the partitions may
        have a new owner already.

        Args:
            limit: Seconds of retries (default: ``request_timeout``).
            refused: The refusals retried so far (the first is logged, once).
            report: Log a failure (a WARNING).
            shielded: Shielded from cancellation (False: the revocation's
                commit, which the generation's end stops).

        Returns:
            Why the commit failed, or None.
        """
        gen = self.gen
        if limit is None:
            limit = self.config.request_timeout
        if refused is None:
            refused = []

        def retriable(exc: BaseException) -> bool:
            if not retriable_refusal(exc):
                return False
            if not refused:
                log.info(
                    "group %s generation %s member %s: final commit refused (%s); "
                    "retrying for up to %s s",
                    gen.group_id,
                    gen.label,
                    gen.member_id,
                    exc,
                    limit,
                )
            refused.append(exc)
            return True

        failure: BaseException | None = None
        with anyio.CancelScope(shield=shielded):
            async with self.client.said_if_slow(
                f"waiting for the coordinator to accept the final commit (up to {limit} s)"
            ):
                try:
                    await gen._retried(
                        partial(gen._commit, None, None, forwarded=False),
                        f"final commit of group {gen.group_id} generation {gen.label}",
                        timeout=limit,
                        retriable=retriable,
                    )
                except (BrokerError, KafkaConnectionError, ProtocolError, TimeoutError) as exc:
                    failure = exc
        if failure is not None and report:
            self._commit_failed(failure)
        return failure

    def _no_time_left(self, left: float, revoking: str = "") -> RequestTimedOut:
        """Why a commit was not tried: too little time left of ``request_timeout``
        after the teardown, or before a revocation's deadline (``revoking``: what
        it would have sent)."""
        gen = self.gen
        of = (
            f"before the coordinator's rebalance_timeout={self.config.rebalance_timeout} s "
            "for the revocation runs out"
            if revoking
            else f"of request_timeout={self.config.request_timeout} s after the teardown"
        )
        return RequestTimedOut(
            f"{'commit' if revoking else 'final commit'} of group {gen.group_id} generation "
            f"{gen.label}: {max(left, 0.0):.3f} s were left {of}, too little to send "
            + (revoking or "the marks made during it")
        )

    def _commit_failed(self, failure: BaseException) -> None:
        """Log the final commit's failure (once) and record it as the commit error."""
        gen = self.gen
        gen.commit_error = failure
        closed = isinstance(failure, ClientClosed) or isinstance(failure.__cause__, ClientClosed)
        log.warning(
            "group %s generation %s member %s: final commit failed: %s "
            "(uncommitted records will be processed again)",
            gen.group_id,
            gen.label,
            gen.member_id,
            CLOSED_UNDER_THE_GROUP if closed else failure,
        )

    async def _watchdog(self, report_stuck: Callable[[TaskStuckError], Awaitable[None]]) -> None:
        await self.gen.wait_ending()
        await self._watch(report_stuck)

    def _cancelled(self) -> list[tuple[UserTask, float, str]]:
        """Each task cancelled that has not returned yet: when and what cancelled it.

        The generation's own tasks are cancelled by its end; a span's tasks
        when the span is closed (``Span.closed_at``): by a revocation, by
        another task of the partition exiting, or by an end that keeps no span.
        """
        gen = self.gen
        cancelled = []
        if gen._ending_at is not None:
            why = f"generation {gen.label} ended ({gen.end_reason})"
            cancelled = [(t, gen._ending_at, why) for t in gen._tasks if not t.done]
        return [c for c in cancelled + self.own.cancelled_tasks() if c[0] not in self.reported]

    async def _watch(self, report_stuck: Callable[[TaskStuckError], Awaitable[None]]) -> None:
        """Report the tasks still running ``rebalance_timeout`` after their cancellation.

        Each task is timed from its own cancellation (:meth:`_cancelled`),
        wherever the watch started: one cancelled later gets its whole
        ``rebalance_timeout`` too, and one cancelled earlier (by a revocation
        that the generation's end interrupted) keeps its deadline. The report
        comes at the first deadline of a task that has not returned then, and
        names every task past its own (and those cancelled since); a task
        named once is not reported again (by the end's watch, after a
        revocation's). Only tasks are reported: if none is left, nothing is
        (what holds the teardown is not a task, and is bounded on its own),
        and the watch goes on for tasks cancelled later.
        """
        gen = self.gen
        timeout = self.config.rebalance_timeout
        # A teardown longer than a heartbeat interval is said once, with what it waits for.
        say_at = anyio.current_time() + min(self.config.heartbeat_interval, timeout)
        while True:
            cancelled = self._cancelled()
            now = anyio.current_time()
            if due := [c for c in cancelled if c[1] + timeout <= now]:
                break
            if now >= say_at:
                say_at = float("inf")
                self._say_waiting([t for t, _, _ in cancelled])
            # None left: any task cancelled from now on is due after now + timeout.
            deadline = min((at + timeout for _, at, _ in cancelled), default=now + timeout)
            await anyio.sleep_until(min(deadline, say_at))
        detail = "\n".join(
            f"task {t.name!r}, cancelled {now - at:.1f} s ago ({why}), is suspended at:\n"
            f"{describe_stack(t.coro)}"
            for t, at, why in due
        )
        if later := [t.name for t, _, _ in cancelled if all(t is not d for d, _, _ in due)]:
            detail += (
                f"\n{len(later)} task(s) cancelled less than rebalance_timeout ago have not "
                f"returned either: {', '.join(repr(n) for n in later)}"
            )
        err = TaskStuckError(
            f"group {gen.group_id} generation {gen.label}: {len(due)} task(s) did not return "
            f"within rebalance_timeout={timeout} s of their cancellation; the group stops "
            f"with this error, and closing it abandons them.\n{detail}"
        )
        self.reported.update(t for t, _, _ in cancelled)
        # The task's exception that ended the generation (logged as it happened).
        err.__cause__ = next(map(bare, [*gen._failures, *self.own.failures]), None)
        log.error("%s", err)
        await report_stuck(err)

    def _say_waiting(self, tasks: list[UserTask]) -> None:
        """Log the tasks the teardown waits for (each once, across watches)."""
        if new := [t for t in tasks if t not in self.said_waiting]:
            self.said_waiting.update(new)
            self._log(
                f"waiting for {len(new)} task(s) to return after cancellation "
                f"({', '.join(repr(t.name) for t in new)}); TaskStuckError after "
                f"rebalance_timeout={self.config.rebalance_timeout} s"
            )

    # ------------------------------------------------------------------ the generation's tasks

    async def _lease_watch(self) -> None:
        """End the generation the moment its local lease runs out.

        The heartbeat loop renews the lease, but a beat can hang for up to
        ``session_timeout`` itself (a broker that took the connection and went
        silent), and a member must not go on working past the instant the
        coordinator may have evicted it.
        """
        gen = self.gen
        # A sleep, not an event: every renewal moves the deadline further.
        while not gen.ending and not gen.lease_expired():  # noqa: ASYNC110
            await anyio.sleep_until(gen.lease_deadline())

    async def _watch_partitions(self) -> None:
        gen = self.gen
        topics = self.member.subscribed_topics()
        at_join = self.formed.partition_counts
        counts = gen.is_leader and self.config.watch_partition_changes
        while True:
            await anyio.sleep(self.config.partition_watch_interval)
            try:
                # Subscribed by pattern (every member): rejoin when the matches change.
                if self.config.topic_pattern is not None:
                    before = self.member.matched
                    if self.member.match(await self.client.matching_topics()):
                        gen.end(
                            Outcome.REJOIN,
                            "topics matching the pattern changed: "
                            + describe_change(before, self.member.matched),
                        )
                        return
                if not counts:
                    continue
                now = await self.client.partition_counts(topics)
            except (KafkaConnectionError, BrokerError, ProtocolError) as exc:
                self._log_retry("partition watch", exc, "retrying")
                continue
            self._log_recovered("partition watch")
            cached = self.client.cluster.topics
            if again := [
                t for t in sorted(now) if t in cached and gen._recreated(t, cached[t].topic_id)
            ]:
                # Deleted and created again between two checks: the same count, another id.
                gen.end(Outcome.REJOIN, f"topic(s) re-created: {', '.join(again)}")
                return
            if now != at_join:
                changed = sorted(t for t in set(now) | set(at_join) if now.get(t) != at_join.get(t))
                gen.end(
                    Outcome.REJOIN,
                    "partitions changed: "
                    + ", ".join(f"{t} {at_join.get(t, 0)}->{now.get(t, 0)}" for t in changed),
                )
                return

    async def _commit_loop(self) -> None:
        gen = self.gen
        # Commits failing for three intervals (10 s at least) are said once
        # more, as a WARNING: what is processed meanwhile would be handed out
        # again after a restart or a rebalance.
        long = (
            max(LONG_UNAVAILABLE, 3 * self.config.commit_interval),
            "the offsets processed since are not committed (a restart or a rebalance would "
            "hand their records out again)",
        )
        while True:
            await anyio.sleep(self.config.commit_interval)
            try:
                # One commit per interval, not retried within it: the next
                # interval retries it, with the marks made meanwhile.
                await gen._commit(None, None, forwarded=False)
            except BrokerError as exc:
                outcome = outcome_for(exc.code)
                if outcome is Outcome.FATAL:
                    gen.end(outcome, f"commit refused: {exc}")
                    raise
                if outcome in (Outcome.RETRY, Outcome.FIND_COORDINATOR):
                    # A new coordinator still loading the group, or one that
                    # moved again (its broker shutting down): the commit
                    # follows it at the next interval; the generation goes on.
                    self._log_retry("periodic commit", exc, "will retry", long)
                    continue
                gen.end(outcome, f"commit refused: {exc}")
                return
            except (KafkaConnectionError, ProtocolError, TimeoutError) as exc:
                self._log_retry("periodic commit", exc, "will retry", long)
            else:
                self._log_recovered("periodic commit")


def _carry(span: Span, gen: Generation, *, only_revoked: bool = False) -> None:
    """Carry a closed span's last mark into ``gen``, which commits it."""
    tp = span.tp
    if only_revoked and tp not in gen.revoked:
        return
    carried = max(span.pending, span.gen._marks.get(tp, -1))
    if carried > gen._marks.get(tp, -1):
        gen._marks[tp] = carried
