"""ConsumerGroup: the run loop that turns rebalances into Generations.

Theory of operation:

``async with ConsumerGroup(...) as group`` opens the group's own task group
and starts two tasks there: one that holds the group's :class:`Cluster` open
(shielded, until the group closed: the teardown may need a new connection),
and the *run loop*. The run
loop alternates two steps, each in its own module: forming a generation
(:func:`~gengroup.consumer.forming.form_generation`: FindCoordinator,
JoinGroup, SyncGroup, OffsetFetch) and running it
(:func:`~gengroup.consumer.running.run_generation`: the generation's task
group, in the run loop's own task, until every task of it returned and the
final commit was made). The Generation object is handed over a
zero-capacity channel to ``async for gen in group`` (``group.next()``), so
user code never yields from inside a nursery. Under
``group_protocol="consumer"`` (KIP-848) the generations are formed by
:class:`~gengroup.consumer.consumer_protocol.ConsumerProtocolMember`, whose
heartbeat runs around the run loop, and run the same way.

A user task's exception, a fatal broker error or a :class:`TaskStuckError`
from the teardown watchdog stops the run loop and comes out of ``async for``.
``aclose()`` cancels a join in progress, ends the current generation, and
waits for the run loop to commit, leave the group and close the channel. Once
:class:`TaskStuckError` was reported, closing abandons the stuck tasks
(:meth:`Generation.abandon_tasks
<gengroup.consumer.generation.Generation.abandon_tasks>`), so the run loop can
finish within a bounded time. The run loop is shielded from the caller's
cancellation: leaving ``async with`` by one closes the group as
``aclose(handover=False)`` does (the watchdog, the beats while ending and the
final commit run as usual), and the cancellation goes on once it closed.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any, NamedTuple, Self, Unpack

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._config import GroupConfig, GroupSettings
from .._errors import GengroupError, GroupClosed, TaskStuckError
from .._types import GenerationIdentity, IdentityNames
from ..io.cluster import Cluster
from ..membership.member import Member, Outcome
from .cadence import handover_lead
from .consumer_protocol import ConsumerProtocolMember
from .detached import INTERRUPTS, interrupt_in
from .forming import Formed, GroupClient, form_generation
from .generation import Generation, RebalanceTimings
from .metrics import GroupMetrics, export as export_metrics, unexport as unexport_metrics
from .ownership import Ownership
from .running import run_generation

__all__ = ["ConsumerGroup", "GenerationRecord"]

log = logging.getLogger("gengroup")


class _IdentityAndTimings(NamedTuple):
    identity: GenerationIdentity
    timings: RebalanceTimings


class GenerationRecord(_IdentityAndTimings, IdentityNames):
    """One generation in :attr:`ConsumerGroup.history`: who the member was, and timings.

    Attributes:
        identity: the generation's identity (its id, and the member's
            sequence number, which tells apart two generations with one id).
        timings: how long forming it took.
    """

    __slots__ = ()


class _Failure:
    """An exception travelling from the run loop to the iterating code."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class ConsumerGroup:
    """A member of a Kafka consumer group; each rebalance yields a Generation.

    Example::

        async with ConsumerGroup("billing", topics=["payments"],
                                 brokers=["127.0.0.1:9092"]) as group:
            async for gen in group:
                for tp in gen.assignments:
                    gen.start_soon(handle, gen, tp)

    Args:
        group_id: the consumer group.
        topics: topics to subscribe to, or a compiled ``re.Pattern`` to
            subscribe to every topic whose whole name it matches (see
            ``topic_pattern``).
        brokers: bootstrap ``host:port`` addresses (a list or a comma-separated string).
        **settings: any other setting of :class:`~gengroup._config.GroupConfig`
            by keyword (``balancers``, ``session_timeout``, ``rebalance_timeout``,
            ``heartbeat_interval``, ``commit_interval``, ``start_offset``,
            ``group_instance_id``, ...); meanings and defaults are listed there.

    Attributes:
        config: the validated settings.
        history: the last 100 generations this member took part in, oldest
            first, as :class:`GenerationRecord` (identity, timings) pairs;
            ``record.label`` names one in logs.

    A task that ignores cancellation for longer than ``rebalance_timeout``
    after its generation ended makes ``async for`` raise
    :class:`~gengroup.TaskStuckError`, and the group stops. Leaving
    ``async with`` (or :meth:`aclose`) then abandons the stuck task: the group
    stops waiting for it, its cancel scope stays cancelled and it runs on in
    the background until it returns by itself (what it raises then is logged).
    The final commit is made with the marks set up to then and the member
    leaves the group; both are bounded by ``request_timeout``.

    Leaving ``async with`` by an exception or a cancellation (a cancel scope
    or ``asyncio.timeout`` around it, ``task.cancel()``) closes the group as
    ``aclose(handover=False)`` does, within the same bounds, shielded from
    that cancellation (the member beats while the tasks return, and the final
    commit is made); the exception or cancellation goes on once the group
    closed.

    Raises:
        ConfigError: a setting is invalid (before any I/O).
    """

    def __init__(
        self,
        group_id: str,
        topics: Sequence[str] | re.Pattern[str] | None,
        brokers: Sequence[str] | str,
        **settings: Unpack[GroupSettings],
    ) -> None:
        self.config = GroupConfig.create(group_id, topics, brokers, **settings)
        self._member = Member(self.config.member_config())
        self._client = GroupClient(self.config)
        # The partitions owned across generations and their span-scoped tasks.
        self._ownership = Ownership(self.config)
        self._ownership.on_failure = lambda: self._join_scope.cancel()
        # group_protocol="consumer" (KIP-848): its member loop instead of the classic one.
        self._kip848 = (
            ConsumerProtocolMember(self._client, self._ownership)
            if self.config.group_protocol == "consumer"
            else None
        )
        # How many generations this member formed (each generation's sequence).
        self._sequence = 0
        # The open cluster and task group, from ``__aenter__`` to ``__aexit__``.
        self._stack: AsyncExitStack | None = None
        self._closing = False
        # aclose() is waiting to time the leave (``handover``).
        self._handing_over = False
        self._failure: BaseException | None = None
        # A KeyboardInterrupt or SystemExit failure: raised by next() (to the
        # iterating code) or, once nobody was waiting in next() for it, the
        # block was cancelled so that ``__aexit__`` raises it.
        self._receiving = 0
        self._interrupt_raised = False
        self._interrupting = False
        self._current: Generation | None = None
        # Set once the watchdog reported TaskStuckError: closing then abandons the stuck tasks.
        self._stuck = False
        # Event-loop objects are made in ``__aenter__``: constructing a group
        # needs no running loop.
        # The channel from the run loop to ``next()``.
        self._send: MemoryObjectSendStream[Generation | _Failure]
        self._recv: MemoryObjectReceiveStream[Generation | _Failure]
        self._done: anyio.Event
        # Set once the group closed: the task hosting the Cluster closes it.
        self._release_cluster: anyio.Event
        self._join_scope: anyio.CancelScope
        self._block_scope: anyio.CancelScope
        self.history: deque[GenerationRecord] = deque(maxlen=100)

    def __repr__(self) -> str:
        return f"<ConsumerGroup {self.config.group_id!r} member={self.member_id!r}>"

    @property
    def member_id(self) -> str:
        """This member's current id ("" before the first join under the classic protocol;
        under the consumer protocol the member makes its own at construction)."""
        if self._kip848 is not None:
            return self._kip848.member_id
        return self._member.member_id

    @property
    def cluster(self) -> Cluster:
        """The group's cluster connection pool (metadata, admin requests)."""
        return self._client.cluster

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        if self._stack is not None:
            raise GengroupError("a ConsumerGroup can be entered only once")
        if self._closing:
            raise GengroupError(
                f"consumer group {self.config.group_id!r} was closed (aclose()) before it was "
                "entered; make a new ConsumerGroup"
            )
        self._send, self._recv = anyio.create_memory_object_stream[Generation | _Failure](0)
        self._done = anyio.Event()
        self._join_scope = anyio.CancelScope()
        self._warm_up_scope = anyio.CancelScope()
        self._last_teardown = 0.0
        # The latest generations' teardowns or revocations, whichever took
        # longer: what a handover's lead allows for (see ``_hand_over``).
        self._teardowns: deque[float] = deque(maxlen=5)
        self._release_cluster = anyio.Event()
        async with AsyncExitStack() as stack:
            stack.callback(self._recv.close)
            tg = await stack.enter_async_context(anyio.create_task_group())
            self._block_scope = tg.cancel_scope  # around the block's body too
            try:
                # Shielded: trio does not move a task started from a cancelled
                # scope into the task group, and would wait for this one to end.
                with anyio.CancelScope(shield=True):
                    await tg.start(
                        self._host_cluster, name=f"gengroup-cluster-{self.config.group_id}"
                    )
                tg.start_soon(self._run, name=f"gengroup-run-{self.config.group_id}")
                tg.start_soon(self._warm_up, name=f"gengroup-warm-up-{self.config.group_id}")
            except BaseException:  # not opened: the cluster's host must end too
                self._closing = True
                self._release_cluster.set()
                raise
            self._stack = stack.pop_all()
        export_metrics(self, self.config.group_id, self.config.client_id, self._client.metrics)
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        if self._stack is None:
            raise GengroupError(
                f"consumer group {self.config.group_id!r} was not entered (async with)"
            )
        try:
            if exc_info[0] is None:
                await self.aclose()
        finally:
            # Leaving on an exception or a cancellation (also one that cut a
            # handover short): at once. The run loop is shielded from the
            # caller's cancellation and ends by itself once closing, within
            # the bounds aclose() has (the watchdog, the final commit, the
            # leave), so it is waited for shielded: a cancellation neither
            # cuts the teardown, the beats while ending or the final commit
            # short, nor is it lost (it propagates once the group closed).
            self._close_now()
            with anyio.CancelScope(shield=True):
                await self._done.wait()
            unexport_metrics(self)
            self._release_cluster.set()
            try:
                # The stack is closed without the body's exception, so that
                # exception propagates as itself instead of being wrapped by
                # the group's task group.
                await self._stack.aclose()
            finally:
                self._raise_interrupt(exc_info[1])
        return None

    def _raise_interrupt(self, leaving: BaseException | None) -> None:
        """Raise a task's KeyboardInterrupt or SystemExit that the block has not seen.

        It wins over what the block is left by (which becomes its context);
        one that ``next()`` raised into the block goes on as the block lets it.
        """
        failure = self._failure
        if not isinstance(failure, INTERRUPTS) or leaving is failure:
            return
        if self._interrupting or not self._interrupt_raised:
            raise failure

    def metrics(self) -> GroupMetrics:
        """This member's counters now: fetches, records, bytes, commits, generations.

        Cheap (a copy of a few integers): log it periodically. While the
        group is open its counters are exported to Prometheus by the
        process-wide collector, once registered with
        :func:`gengroup.consumer.metrics.register_prometheus`.
        """
        return self._client.metrics.snapshot()

    async def aclose(self, *, handover: bool = True) -> None:
        """End the current generation, commit what is marked, leave the group.

        The other members learn of a leave only at their next heartbeat. So
        with ``handover`` (the default) the current generation goes on working
        until just before the group's next heartbeat, and only then ends,
        commits and leaves: the others take its partitions over at that
        heartbeat, instead of up to a heartbeat interval after this member
        stopped. Closing takes up to one heartbeat period longer (under the
        consumer protocol, the coordinator's interval; one and a half just
        after a generation formed). The lead allows for
        the longest of the member's latest teardowns (see
        :func:`~gengroup.consumer.cadence.handover_lead`). It closes at once
        when no generation is running, when the next heartbeat is too close
        to leave before it, for a static member, when the group has failed,
        and when the generation ends meanwhile (a rebalance, a failure,
        ``aclose(handover=False)``).

        After :class:`~gengroup.TaskStuckError`, the stuck tasks are abandoned
        (see the class docstring) rather than waited for.

        Static members (``group_instance_id``) do not send LeaveGroup: the
        coordinator keeps their partitions for the session timeout.

        Args:
            handover: Time the leave just before the group's next heartbeat
                (see above); False: end the generation at once.
        """
        if self._stack is None:
            # Closed before being entered: entering it later raises.
            self._closing = True
            return
        if not self._closing:
            if handover and not self._handing_over:
                self._handing_over = True
                try:
                    await self._hand_over()
                finally:
                    self._close_now()
            elif not handover:
                self._close_now()  # a handover under way included
        await self._done.wait()
        unexport_metrics(self)

    def _close_now(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._join_scope.cancel()
        self._warm_up_scope.cancel()
        if self._current is not None:
            self._current.end(Outcome.REJOIN, "the group is closing", release=True)
        if self._stuck:
            self._abandon_stuck()

    async def _hand_over(self) -> None:
        """Wait until the leave can be timed just before the group's next heartbeat."""
        gen = self._current
        if gen is None or gen.ending or self._failure is not None:
            return
        if self.config.group_instance_id is not None:
            return
        now = anyio.current_time()
        if self._kip848 is not None:
            beat: float | None = self._kip848.next_grid_beat()
        else:
            beat = gen._next_beat
        lead = handover_lead(max(self._teardowns, default=0.0))
        if beat is None or beat - now < lead:
            return
        with anyio.CancelScope(deadline=beat - lead):
            await gen.wait_ending()  # a rebalance, a failure, aclose(handover=False)

    # ------------------------------------------------------------------ iteration

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Generation:
        try:
            return await self.next()
        except GroupClosed:
            raise StopAsyncIteration from None

    async def next(self) -> Generation:
        """Wait for the next generation.

        Raises:
            Exception: whatever a task of the previous generation raised, a
                fatal broker error, or :class:`TaskStuckError`.
            KeyboardInterrupt: a task raised it (or, on trio, Ctrl-C landed
                in one of the group's tasks); SystemExit likewise. Either
                comes as itself, after the final commit and the leave.
            GroupClosed: the group is closed.
            GengroupError: the group was not entered (``async with``) yet.
        """
        if self._failure is not None:
            raise self._raised(self._failure)
        if self._stack is None:
            raise GengroupError(
                f"consumer group {self.config.group_id!r} is not open: use it inside "
                "`async with ConsumerGroup(...) as group:`"
            )
        self._receiving += 1
        try:
            item = await self._recv.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            item = None
        finally:
            self._receiving -= 1
        if item is None:
            # Raised outside the except clause: a task's exception keeps its
            # own cause and context (``raise ... from None`` would clear them).
            if self._failure is not None:
                raise self._raised(self._failure)
            raise GroupClosed(f"consumer group {self.config.group_id!r} is closed")
        if isinstance(item, _Failure):
            self._failure = item.error
            raise item.error
        return item

    def _raised(self, failure: BaseException) -> BaseException:
        """``failure``, noted as raised to the iterating code (see ``_raise_interrupt``)."""
        if isinstance(failure, INTERRUPTS):
            self._interrupt_raised = True
        return failure

    # ------------------------------------------------------------------ run loop

    async def _host_cluster(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Keep the group's Cluster open until the group closed, out of reach of
        a cancellation of the block's scope.

        New connections are started in the Cluster's task group: entered in
        the caller's scope, that task group would be cancelled with the block,
        and a connection the teardown needs (a broken one replaced during the
        final commit or the LeaveGroup) would close itself at once.
        """
        with anyio.CancelScope(shield=True):
            async with self._client.cluster:
                task_status.started()
                await self._release_cluster.wait()

    async def _warm_up(self) -> None:
        """Beside the first JoinGroup: see :meth:`GroupClient.warm_up`.

        A KeyboardInterrupt raised in it (trio raises Ctrl-C in the task that
        runs) or a SystemExit ends the group as a task's does, instead of
        failing the group's task group (which would wrap it).
        """
        try:
            with self._warm_up_scope:
                await self._client.warm_up(self._member.subscribed_topics())
        except BaseException as exc:
            interrupt = interrupt_in(exc, f"group {self.config.group_id}")
            if interrupt is None:
                raise
            self._ownership.failures.append(interrupt)
            gen = self._current
            if gen is not None and not gen.ending:
                gen.end(Outcome.FATAL, f"the warm-up raised {interrupt!r}")
            else:  # joining: stop forming the generation
                self._ownership.on_failure()

    async def _run(self) -> None:
        # Shielded: a cancellation of the code around ``async with`` reaches
        # the run loop as closing does (``__aexit__``), not as a cancellation
        # that would stop the teardown's watchdog, its beats and its commit.
        with anyio.CancelScope(shield=True):
            await self._run_shielded()
        if isinstance(self._failure, INTERRUPTS) and not self._receiving:
            # Nobody waits in next() to be told: the block is cancelled, and
            # leaving it raises the interrupt (``_raise_interrupt``).
            self._interrupting = True
            self._block_scope.cancel()

    async def _run_shielded(self) -> None:
        try:
            async with self._ownership.hosting():
                # Caught here, not raised through the span tasks' task group
                # (which would wrap it in an exception group).
                try:
                    if self._kip848 is not None:
                        await self._kip848.run(self._generations)
                    else:
                        await self._generations()
                except Exception as exc:
                    self._report(exc)
            failure = self._ownership.take_failure(f"group {self.config.group_id}")
            if failure is not None:
                self._report(failure)
        except Exception as exc:
            self._report(exc)
        except BaseException as exc:
            # A KeyboardInterrupt in an internal task (trio raises Ctrl-C in
            # the task that runs): reported as a task's is, not wrapped.
            interrupt = interrupt_in(exc, f"group {self.config.group_id}")
            if interrupt is None:
                raise
            self._report(interrupt)
        finally:
            try:
                with anyio.CancelScope(shield=True):
                    await self._leave()
            except Exception as exc:
                self._report(exc)
            finally:
                # Whatever happened, next() and aclose() must not wait forever.
                self._send.close()
                self._done.set()

    async def _form(self) -> Formed | None:
        if self._kip848 is not None:
            formed = await self._kip848.form_generation(
                self._is_closing,
                previous_teardown=self._last_teardown,
                sequence=self._sequence + 1,
            )
        else:
            formed = await form_generation(
                self._member,
                self._client,
                self._is_closing,
                previous_teardown=self._last_teardown,
                ownership=self._ownership,
                sequence=self._sequence + 1,
            )
        if formed is not None:
            self._sequence += 1
        return formed

    async def _generations(self) -> None:
        """Form and run generations until the group closes or fails."""
        while not self._is_closing():
            formed: Formed | None = None
            with self._join_scope:  # cancelled by aclose() during a join
                formed = await self._form()
            if formed is None:
                break
            gen = formed.generation
            self.history.append(GenerationRecord(gen.identity, gen.timings))
            self._client.metrics.generations += 1
            self._client.metrics.last_timings = formed.generation.timings
            self._client.metrics.last_generation = formed.generation.label
            if self._closing:
                break
            await self._run_generation(formed)
            self._last_teardown = formed.generation.teardown or 0.0
            self._teardowns.append(max(self._last_teardown, gen.timings.revocation))
            if self._failure is not None:
                break
            self._join_scope = anyio.CancelScope()

    def _is_closing(self) -> bool:
        return self._closing or bool(self._ownership.failures)

    def _report(self, exc: BaseException) -> None:
        """Record a failure; ``next()`` raises it once the run loop closes the channel.

        Only the first is raised: a later one is logged once (at ERROR, with its
        traceback) unless the first carries it (a TaskStuckError's cause).
        """
        first = self._failure
        if first is None:
            self._failure = exc
            return
        if isinstance(exc, INTERRUPTS) and not isinstance(first, INTERRUPTS):
            # An interrupt wins: it is never held back behind another failure.
            said = (str(first).splitlines() or [""])[0]
            exc.add_note(
                f"group {self.config.group_id}: raised after {type(first).__name__}: {said}"
            )
            self._failure = exc
            return
        carried: BaseException | None = first
        seen: list[BaseException] = []
        while carried is not None and not any(carried is s for s in seen):
            if carried is exc:
                return
            seen.append(carried)
            carried = carried.__cause__ or carried.__context__
        log.error(
            "group %s: %r also failed, after %r (which the group raises)",
            self.config.group_id,
            exc,
            first,
            exc_info=exc,
        )

    async def _report_stuck(self, err: TaskStuckError) -> None:
        """The watchdog's report: ``next()`` raises it at once; closing abandons the tasks."""
        if not isinstance(self._failure, INTERRUPTS):
            self._failure = err
        self._stuck = True
        if self._closing:
            self._abandon_stuck()
        # Cancelled once the generation's tasks are abandoned (the group closes).
        await self._send.send(_Failure(err))

    def _abandon_stuck(self) -> None:
        gen = self._current
        if gen is None:
            return
        for name in gen.abandon_tasks():
            log.warning(
                "group %s generation %s member %s: abandoned task %r, which did not return "
                "after cancellation; it runs on in the background, cancelled, until it returns",
                gen.group_id,
                gen.label,
                gen.member_id,
                name,
            )

    async def _leave(self) -> None:
        if self._kip848 is not None:
            return  # the consumer protocol's member left as its loop ended
        params = self._member.leave_params()
        if params is not None:
            await self._client.leave(params[0])

    async def _run_generation(self, formed: Formed) -> None:
        gen = self._current = formed.generation
        if self._closing:
            gen.end(Outcome.REJOIN, "the group is closing", release=True)
        try:
            error = await run_generation(
                formed,
                self._member,
                self._client,
                self._send.send,
                self._report_stuck,
                self._ownership,
            )
        finally:
            self._current = None
        if error is not None:
            self._report(error)
