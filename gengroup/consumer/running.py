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
gives the tasks ``rebalance_timeout`` seconds once the generation is ending;
past that it reports which task held the generation up and where it was
suspended (:class:`TaskStuckError`) instead of hanging silently.

Once every task has returned, marked offsets are committed once more,
shielded, with the ending generation's id; a retriable refusal (a coordinator
loading or moving, a timeout, a broken connection) is retried with backoff for
up to ``request_timeout``, a fencing answer ends it at once. Only then is the member machine
told the generation ended, so the member rejoins only after all of it
(semantic 1: one live generation per member).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from .._config import GroupConfig
from .._errors import (
    BrokerError,
    FencedInstanceId,
    KafkaConnectionError,
    MemberResetError,
    ProtocolError,
    RebalanceInProgress,
    TaskStuckError,
    error_for_code,
    is_retriable,
)
from ..io.retry import retry
from ..membership.member import Member, Outcome, outcome_for
from .forming import Formed, GroupClient
from .generation import Generation

__all__ = ["run_generation"]

log = logging.getLogger("gengroup")

#: Answers that end the final commit at once: this member no longer owns the
#: generation's partitions (ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID are
#: MemberResetError), or the group is assigning them anew.
_FENCED = (MemberResetError, FencedInstanceId, RebalanceInProgress)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions in ``exc``, groups flattened, in the order they were raised."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def first_failure(exc: BaseException, where: str) -> BaseException:
    """What a generation's failure comes out of ``async for`` as: the first exception itself.

    Tasks that fail together (one raises, another raises while being
    cancelled) reach the generation's task group as an exception group; the
    application gets the first one as itself, so ``except ValueError`` works.
    Each later one is logged once, with its traceback, and named in a note
    on the first (``add_note``), so nothing is lost.
    """
    first, *later = _leaves(exc)
    for other in later:
        log.error("%s: another task also raised %r", where, other, exc_info=other)
        first.add_note(f"{where}: another task also raised {type(other).__name__}: {other}")
    return first


async def run_generation(
    formed: Formed,
    member: Member,
    client: GroupClient,
    hand_over: Callable[[Generation], Awaitable[None]],
    report_stuck: Callable[[TaskStuckError], Awaitable[None]],
) -> BaseException | None:
    """Run ``formed`` until every task of it returned, then commit and end it.

    Args:
        formed: the generation, its prefetcher and the partition counts at join.
        member: the member machine, told when the generation ended.
        client: the group's requests (heartbeats, commits, metadata).
        hand_over: gives the generation to the application (once its tasks run).
        report_stuck: reports tasks that did not return in time after cancellation.

    Returns:
        What a task of the generation raised, or None.
    """
    return await _Run(formed, member, client).run(hand_over, report_stuck)


class _Run:
    """One generation's internal tasks."""

    def __init__(self, formed: Formed, member: Member, client: GroupClient) -> None:
        self.formed = formed
        self.gen = formed.generation
        self.member = member
        self.client = client
        self.config: GroupConfig = client.config
        #: The internal tasks whose requests are failing (each logged once).
        self.failing: set[str] = set()

    def _log_retry(self, what: str, exc: BaseException, then: str) -> None:
        """Log that ``what`` started failing: once, until :meth:`_log_recovered`."""
        if what not in self.failing:
            self.failing.add(what)
            self._log(f"{what} failed ({exc}); {then}")

    def _log_recovered(self, what: str) -> None:
        """Log that ``what`` works again, if it was failing."""
        if what in self.failing:
            self.failing.discard(what)
            self._log(f"{what} works again")

    def _log(self, message: str) -> None:
        gen = self.gen
        log.info(
            "group %s generation %d member %s: %s", gen.group_id, gen.id, gen.member_id, message
        )

    async def run(
        self,
        hand_over: Callable[[Generation], Awaitable[None]],
        report_stuck: Callable[[TaskStuckError], Awaitable[None]],
    ) -> BaseException | None:
        cfg = self.config
        gen = self.gen
        error: BaseException | None = None
        try:
            async with anyio.create_task_group() as outer:
                outer.start_soon(self._watchdog, report_stuck, name="gengroup-teardown-watchdog")
                # The except clause sits outside the generation's scope: the
                # scope first strips the Cancelled exceptions its own
                # cancellation caused, leaving only what the tasks raised.
                try:
                    async with gen.task_group() as tg:
                        if self.formed.classic:
                            tg.start_soon(self._heartbeat_loop, name="gengroup-heartbeat")
                        tg.start_soon(self.formed.prefetcher.run, name="gengroup-prefetcher")
                        if gen.is_leader and cfg.watch_partition_changes:
                            tg.start_soon(self._watch_partitions, name="gengroup-watcher")
                        if cfg.commit_interval > 0:
                            tg.start_soon(self._commit_loop, name="gengroup-committer")
                        await hand_over(gen)
                except Exception as exc:
                    error = first_failure(exc, f"group {gen.group_id} generation {gen.id}")
                    gen.end(Outcome.FATAL, f"task raised {error!r}")
                outer.cancel_scope.cancel()
        finally:
            await self._final_commit()
            gen.set_ended()
            self.member.generation_ended(
                gen.end_outcome if gen.end_outcome is not Outcome.FATAL else None, gen.end_reason
            )
            if gen.end_outcome is Outcome.FIND_COORDINATOR:
                self.client.forget_coordinator()
        return error

    async def _final_commit(self) -> None:
        """Commit the marks once more, shielded, retrying retriable refusals.

        A coordinator that is loading, moving or briefly unreachable (after a
        broker restart) refuses the commit for a moment; dropping it would make
        the next owner process everything since the last periodic commit
        again. So every refusal the error table retries (and a request that
        timed out) is sent again with the client's backoff, for at most
        ``request_timeout`` seconds in all. A fencing answer (ILLEGAL_GENERATION,
        UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID) or REBALANCE_IN_PROGRESS ends
        the attempt at once: the partitions may have a new owner already.
        """
        gen = self.gen
        limit = self.config.request_timeout
        refused: list[BaseException] = []

        def retriable(exc: BaseException) -> bool:
            if isinstance(exc, _FENCED) or not (is_retriable(exc) or isinstance(exc, TimeoutError)):
                return False
            if not refused:
                log.info(
                    "group %s generation %d member %s: final commit refused (%s); "
                    "retrying for up to %s s",
                    gen.group_id,
                    gen.id,
                    gen.member_id,
                    exc,
                    limit,
                )
            refused.append(exc)
            return True

        failure: BaseException | None = None
        with anyio.CancelScope(shield=True):
            async with self.client.said_if_slow(
                f"waiting for the coordinator to accept the final commit (up to {limit} s)"
            ):
                try:
                    await retry(
                        f"final commit of group {gen.group_id} generation {gen.id}",
                        gen.commit,
                        timeout=limit,
                        backoff=self.client.cluster.retry_backoff,
                        retriable=retriable,
                    )
                except (BrokerError, KafkaConnectionError, ProtocolError, TimeoutError) as exc:
                    failure = exc
        if failure is not None:
            log.warning(
                "group %s generation %d member %s: final commit failed: %s "
                "(uncommitted records will be processed again)",
                gen.group_id,
                gen.id,
                gen.member_id,
                failure,
            )

    async def _watchdog(self, report_stuck: Callable[[TaskStuckError], Awaitable[None]]) -> None:
        gen = self.gen
        await gen.wait_ending()
        deadline = anyio.current_time() + self.config.rebalance_timeout
        # A teardown longer than a heartbeat interval is said once, with what it waits for.
        await anyio.sleep(min(self.config.heartbeat_interval, self.config.rebalance_timeout))
        waiting = [name for name, _ in gen.stuck_tasks()]
        if waiting:
            self._log(
                f"waiting for {len(waiting)} task(s) to return after cancellation "
                f"({', '.join(repr(n) for n in waiting)}); TaskStuckError after "
                f"rebalance_timeout={self.config.rebalance_timeout} s"
            )
        await anyio.sleep_until(deadline)
        stuck = gen.stuck_tasks()
        detail = "\n".join(f"task {name!r} is suspended at:\n{stack}" for name, stack in stuck)
        err = TaskStuckError(
            f"group {gen.group_id} generation {gen.id}: {len(stuck)} task(s) did not return "
            f"within rebalance_timeout={self.config.rebalance_timeout} s after the generation "
            f"ended ({gen.end_reason}); the group stops with this error, and closing it "
            f"abandons them.\n{detail}"
        )
        log.error("%s", err)
        await report_stuck(err)

    # ------------------------------------------------------------------ the generation's tasks

    async def _heartbeat_loop(self) -> None:
        gen = self.gen
        member = self.member
        coordinator = self.client.coordinator
        started = anyio.current_time()
        node = coordinator.node
        if node is None:
            await anyio.sleep(self.config.heartbeat_interval)
            gen.end(Outcome.FIND_COORDINATOR, "no coordinator")
            return
        found: int | None = node
        # One beat, a lookup of the coordinator included, waits at most this long.
        limit = min(self.config.request_timeout, self.config.session_timeout)
        while True:
            await anyio.sleep(self.config.heartbeat_interval)
            if gen.lease_expired():
                return
            sent_at = anyio.current_time()
            try:
                with anyio.fail_after(limit):
                    # After a failed beat the coordinator is looked up again (a
                    # commit may have found it moved already): the broker that
                    # was coordinator may be gone, and the new one loads the
                    # group with its members and generation, which go on.
                    if found is None:
                        found = await coordinator.find()
                    code = await self.client.heartbeat(found, gen.identity)
            except (KafkaConnectionError, ProtocolError, TimeoutError) as exc:
                if found is not None and coordinator.node == found:
                    coordinator.forget()
                found = None
                outcome = member.on_heartbeat_failure(now=anyio.current_time(), started=started)
                if outcome is not None:
                    gen.end(outcome, f"no successful heartbeat for a session timeout ({exc})")
                    return
                self._log_retry("heartbeat", exc, "looking the coordinator up again")
                continue
            self._log_recovered("heartbeat")
            if code == 0:
                gen.renew_lease(sent_at)
            outcome = member.on_heartbeat(error_code=code, now=anyio.current_time())
            if outcome is None or outcome is Outcome.RETRY:
                continue
            if outcome is Outcome.FATAL:
                raise error_for_code(code, f"Heartbeat of {gen.group_id} generation {gen.id}")
            gen.end(outcome, f"heartbeat answered {error_for_code(code).name}")
            return

    async def _watch_partitions(self) -> None:
        gen = self.gen
        topics = self.member.subscribed_topics()
        at_join = self.formed.partition_counts
        while True:
            await anyio.sleep(self.config.partition_watch_interval)
            try:
                now = await self.client.partition_counts(topics)
            except (KafkaConnectionError, BrokerError, ProtocolError) as exc:
                self._log_retry("partition watch", exc, "retrying")
                continue
            self._log_recovered("partition watch")
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
        while True:
            await anyio.sleep(self.config.commit_interval)
            try:
                await gen.commit()
            except BrokerError as exc:
                outcome = outcome_for(exc.code)
                if outcome is Outcome.FATAL:
                    raise
                if outcome is Outcome.RETRY:  # e.g. a new coordinator still loading the group
                    self._log_retry("periodic commit", exc, "will retry")
                    continue
                gen.end(outcome, f"commit refused: {exc}")
                return
            except (KafkaConnectionError, ProtocolError, TimeoutError) as exc:
                self._log_retry("periodic commit", exc, "will retry")
            else:
                self._log_recovered("periodic commit")
