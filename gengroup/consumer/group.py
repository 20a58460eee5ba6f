"""ConsumerGroup: the run loop that turns rebalances into Generations.

Theory of operation:

``async with ConsumerGroup(...) as group`` opens a :class:`Cluster` and the
group's own task group, and starts one task there: the *run loop*. The run
loop drives the sans-IO :class:`~gengroup.group.member.Member` through
FindCoordinator, JoinGroup, SyncGroup and OffsetFetch, builds a
:class:`~gengroup.consumer.generation.Generation`, and runs the generation's
task group (inside the generation's cancel scope) *in the run loop's own
task*. The user never runs inside that task group: the Generation object is
handed over a zero-capacity channel to ``async for gen in group``
(``group.next()``), so user code never yields from inside a nursery.

The run loop then simply waits for the generation's task group to finish.
It finishes when the first task exits (user task returns or raises,
heartbeat sees a rebalance, the watcher sees a partition change, the group is
closed), because every exit cancels the generation's scope. A watchdog task
started when the scope is cancelled gives the tasks ``rebalance_timeout``
seconds; past that it reports, through the same channel, which task held the
generation up and where it was suspended (:class:`TaskStuckError`) instead of
hanging silently.

Once every task has returned, marked offsets are committed once more,
shielded, with the ending generation's id; only then does the member rejoin
(semantic 1: one live generation per member). A user task's exception stops
the run loop and comes out of ``async for``.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Self

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._config import GroupConfig, IsolationLevel, StartOffset
from .._errors import (
    BrokerError,
    GengroupError,
    KafkaConnectionError,
    NotCoordinator,
    ProtocolError,
    TaskStuckError,
    error_for_code,
)
from .._types import TopicPartition
from ..admin import Admin
from ..group.balancers import Balancer, RangeBalancer, RoundRobinBalancer
from ..group.member import Joined, Member, MemberConfig, Outcome, Retry, outcome_for
from ..io import group_api
from ..io.cluster import Cluster
from .fetcher import Fetcher
from .generation import Generation, RebalanceTimings

__all__ = ["ConsumerGroup"]

log = logging.getLogger("gengroup")


class _Failure:
    """An exception travelling from the run loop to the iterating code."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _unwrap(exc: BaseException) -> BaseException:
    """A group holding exactly one (possibly nested) exception: that exception."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


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
        topics: topics to subscribe to.
        brokers: bootstrap ``host:port`` addresses (a list or a comma-separated string).
        balancers: assignment strategies offered, most preferred first
            (default: range, then roundrobin, like the Java client's default list).
        session_timeout: seconds without heartbeat before the coordinator evicts us.
        rebalance_timeout: seconds the coordinator waits for members to rejoin;
            also how long tasks get to finish after a generation is cancelled.
        heartbeat_interval: seconds between heartbeats (must be below session_timeout).
        watch_partition_changes: whether the leader watches subscribed topics for
            partition-count changes and new topics.
        partition_watch_interval: seconds between the leader's metadata checks.
        join_backoff: base seconds between failed join attempts (jittered).
        commit_interval: seconds between periodic commits of marked offsets
            (0: only on generation end and explicit ``commit()``).
        start_offset: where a partition without a committed offset starts:
            ``"earliest"``, ``"latest"`` or ``"error"`` (raise).
        group_instance_id: a static member id (KIP-345), or None.
        isolation_level: ``"read_committed"`` or ``"read_uncommitted"``.
        client_id: client id sent to brokers.
        rack: this member's rack, sent in the subscription.
        request_timeout: seconds to wait for an ordinary response.
        fetch_max_wait: seconds a Fetch may wait on the broker for data.
        fetch_min_bytes: bytes a Fetch waits for.
        fetch_max_bytes: bytes one Fetch response may carry.
        partition_buffer_bytes: fetched-but-unprocessed bytes held per partition.

    Raises:
        ConfigError: a setting is invalid (before any I/O).
    """

    def __init__(
        self,
        group_id: str,
        topics: Sequence[str],
        brokers: Sequence[str] | str,
        *,
        balancers: Sequence[Balancer] | None = None,
        session_timeout: float = 45.0,
        rebalance_timeout: float = 60.0,
        heartbeat_interval: float = 3.0,
        watch_partition_changes: bool = True,
        partition_watch_interval: float = 5.0,
        join_backoff: float = 1.0,
        commit_interval: float = 5.0,
        start_offset: StartOffset = "earliest",
        group_instance_id: str | None = None,
        isolation_level: IsolationLevel = "read_committed",
        client_id: str = "gengroup",
        rack: str | None = None,
        request_timeout: float = 30.0,
        fetch_max_wait: float = 0.5,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 50 * 1024 * 1024,
        partition_buffer_bytes: int = 1024 * 1024,
    ) -> None:
        if isinstance(brokers, str):
            brokers = [b for b in brokers.split(",") if b]
        self.config = GroupConfig(
            group_id=group_id,
            topics=tuple(topics) if not isinstance(topics, str) else topics,  # type: ignore[arg-type]
            brokers=tuple(brokers),
            session_timeout=session_timeout,
            rebalance_timeout=rebalance_timeout,
            heartbeat_interval=heartbeat_interval,
            watch_partition_changes=watch_partition_changes,
            partition_watch_interval=partition_watch_interval,
            join_backoff=join_backoff,
            commit_interval=commit_interval,
            start_offset=start_offset,
            group_instance_id=group_instance_id,
            isolation_level=isolation_level,
            client_id=client_id,
            rack=rack,
            request_timeout=request_timeout,
            fetch_max_wait=fetch_max_wait,
            fetch_min_bytes=fetch_min_bytes,
            fetch_max_bytes=fetch_max_bytes,
            partition_buffer_bytes=partition_buffer_bytes,
        )
        chosen = tuple(balancers) if balancers else (RangeBalancer(), RoundRobinBalancer())
        self._member = Member(
            MemberConfig(
                group_id=group_id,
                topics=self.config.topics,
                balancers=chosen,
                session_timeout=session_timeout,
                rebalance_timeout=rebalance_timeout,
                heartbeat_interval=heartbeat_interval,
                group_instance_id=group_instance_id,
                rack=rack,
            )
        )
        self._cluster = Cluster(
            list(self.config.brokers), client_id=client_id, request_timeout=request_timeout
        )
        self._admin = Admin(self._cluster, timeout=request_timeout)
        self._coordinator: int | None = None
        # The channel from the run loop to ``next()``; made in ``__aenter__``.
        self._send: MemoryObjectSendStream[Generation | _Failure]
        self._recv: MemoryObjectReceiveStream[Generation | _Failure]
        self._tg: anyio.abc.TaskGroup | None = None
        self._tg_cm: Any = None
        self._closing = False
        self._failure: BaseException | None = None
        self._current: Generation | None = None
        # Event-loop objects are made in ``__aenter__``: constructing a group
        # needs no running loop.
        self._done: anyio.Event
        self._join_scope: anyio.CancelScope
        #: The last 100 generations this member took part in, oldest first (id, timings).
        self.history: deque[tuple[int, RebalanceTimings]] = deque(maxlen=100)

    def __repr__(self) -> str:
        return f"<ConsumerGroup {self.config.group_id!r} member={self._member.member_id!r}>"

    @property
    def member_id(self) -> str:
        """This member's current id ("" before the first join)."""
        return self._member.member_id

    @property
    def cluster(self) -> Cluster:
        """The group's cluster connection pool (metadata, admin requests)."""
        return self._cluster

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        if self._tg_cm is not None:
            raise GengroupError("a ConsumerGroup can be entered only once")
        self._send, self._recv = anyio.create_memory_object_stream[Generation | _Failure](0)
        self._done = anyio.Event()
        self._join_scope = anyio.CancelScope()
        await self._cluster.__aenter__()
        self._tg_cm = anyio.create_task_group()
        self._tg = await self._tg_cm.__aenter__()
        self._tg.start_soon(self._run, name=f"gengroup-run-{self.config.group_id}")
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        try:
            await self.aclose()
        finally:
            assert self._tg_cm is not None
            try:
                # aclose() ended the run loop; the body's exception propagates
                # as itself instead of being wrapped by the group's task group.
                await self._tg_cm.__aexit__(None, None, None)
            finally:
                self._recv.close()
                await self._cluster.__aexit__(None, None, None)
        return None

    async def aclose(self) -> None:
        """End the current generation, commit what is marked, leave the group.

        Static members (``group_instance_id``) do not send LeaveGroup: the
        coordinator keeps their partitions for the session timeout.
        """
        if self._tg is None:
            self._closing = True
            return
        if not self._closing:
            self._closing = True
            self._join_scope.cancel()
            if self._current is not None:
                self._current._end(Outcome.REJOIN, "the group is closing")
        await self._done.wait()

    # ------------------------------------------------------------------ iteration

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Generation:
        try:
            return await self.next()
        except _GroupClosed:
            raise StopAsyncIteration from None

    async def next(self) -> Generation:
        """Wait for the next generation.

        Raises:
            Exception: whatever a task of the previous generation raised, a
                fatal broker error, or :class:`TaskStuckError`.
            GengroupError: the group is closed.
        """
        if self._failure is not None:
            raise self._failure
        try:
            item = await self._recv.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            if self._failure is not None:
                raise self._failure from None
            raise _GroupClosed(f"consumer group {self.config.group_id!r} is closed") from None
        if isinstance(item, _Failure):
            self._failure = item.error
            raise item.error
        return item

    # ------------------------------------------------------------------ run loop

    async def _run(self) -> None:
        try:
            while not self._closing:
                gen: Generation | None = None
                with self._join_scope:  # cancelled by aclose() during a join
                    gen = await self._form_generation()
                if gen is None or self._closing:
                    break
                await self._run_generation(gen)
                if self._failure is not None:
                    break
                self._join_scope = anyio.CancelScope()
        except Exception as exc:
            self._report(exc)
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

    def _report(self, exc: BaseException) -> None:
        """Record a failure; ``next()`` raises it once the run loop closes the channel."""
        if self._failure is None:
            self._failure = exc

    async def _leave(self) -> None:
        params = self._member.leave_params()
        if params is None or self._coordinator is None:
            return
        with anyio.move_on_after(self.config.request_timeout):
            try:
                code = await group_api.leave_group(
                    self._cluster,
                    self._coordinator,
                    group_id=self.config.group_id,
                    member_id=params[0],
                    reason="the consumer is closing",
                )
                if code:
                    log.info(
                        "group %s member %s: LeaveGroup answered %s",
                        self.config.group_id,
                        params[0],
                        error_for_code(code),
                    )
            except (KafkaConnectionError, ProtocolError) as exc:
                log.info("group %s: LeaveGroup failed: %s", self.config.group_id, exc)

    async def _coordinator_node(self, timings: RebalanceTimings) -> int:
        if self._coordinator is None:
            t0 = anyio.current_time()
            self._coordinator = await self._cluster.find_coordinator(
                self.config.group_id,
                timeout=max(self.config.request_timeout, self.config.session_timeout),
            )
            timings.find_coordinator += anyio.current_time() - t0
        return self._coordinator

    async def _backoff(self, attempt: int) -> None:
        base = min(self.config.join_backoff * (2 ** min(attempt, 5)), 30.0)
        await anyio.sleep(base * random.uniform(0.5, 1.0))

    async def _retry_pause(self, retry: Retry, attempt: int) -> int:
        """Act on a failed join or sync; back off if due. Returns the next attempt number."""
        if self._handle_retry(retry):
            await self._backoff(attempt)
            return attempt + 1
        return attempt

    def _handle_retry(self, retry: Retry) -> bool:
        """Act on a failed step; True if the next attempt should wait a backoff."""
        if retry.outcome is Outcome.FATAL:
            raise retry.error
        if retry.outcome is Outcome.FIND_COORDINATOR:
            self._coordinator = None
            return True
        if retry.outcome is Outcome.REJOIN:
            return False
        log.info(
            "group %s member %s: %s; rejoining",
            self.config.group_id,
            self._member.member_id or "(new)",
            retry.error,
        )
        return retry.outcome is Outcome.RETRY

    async def _form_generation(self) -> Generation | None:
        """Join and sync until a generation forms; None if the group is closing."""
        cfg = self.config
        member = self._member
        attempt = 0
        timings = RebalanceTimings()
        while not self._closing:
            try:
                node = await self._coordinator_node(timings)
                t0 = anyio.current_time()
                params = member.join_params()
                try:
                    res = await group_api.join_group(
                        self._cluster,
                        node,
                        params,
                        client_timeout=cfg.rebalance_timeout + cfg.request_timeout,
                    )
                except BaseException:
                    member.on_io_failure()
                    raise
                joined = member.on_join(
                    error_code=res.error_code,
                    member_id=res.member_id,
                    generation_id=res.generation_id,
                    protocol=res.protocol,
                    leader=res.leader,
                    members=res.members,
                )
                timings.join += anyio.current_time() - t0
                if isinstance(joined, Retry):
                    attempt = await self._retry_pause(joined, attempt)
                    continue
                t0 = anyio.current_time()
                counts: dict[str, int] = {}
                assignments: dict[str, bytes] = {}
                if joined.is_leader:
                    counts = await self._partition_counts(member.subscribed_topics())
                    assignments = member.assign(counts)
                try:
                    code, raw = await group_api.sync_group(
                        self._cluster,
                        node,
                        group_id=cfg.group_id,
                        generation_id=joined.generation_id,
                        member_id=joined.member_id,
                        group_instance_id=cfg.group_instance_id,
                        protocol=joined.protocol,
                        assignments=assignments,
                        client_timeout=cfg.rebalance_timeout + cfg.request_timeout,
                    )
                except BaseException:
                    member.on_io_failure()
                    raise
                synced = member.on_sync(error_code=code, assignment=raw)
                timings.sync += anyio.current_time() - t0
                if isinstance(synced, Retry):
                    attempt = await self._retry_pause(synced, attempt)
                    continue
                t0 = anyio.current_time()
                partitions = synced.partitions()
                positions, committed = await self._start_positions(node, partitions)
                timings.offset_fetch += anyio.current_time() - t0
            except (KafkaConnectionError, NotCoordinator, TimeoutError) as exc:
                log.info(
                    "group %s: coordinator unreachable (%s); looking it up again", cfg.group_id, exc
                )
                self._coordinator = None
                member.abandon(Outcome.REJOIN, "coordinator lost")
                await self._backoff(attempt)
                attempt += 1
                continue
            except BrokerError as exc:
                outcome = outcome_for(exc.code)
                if outcome is Outcome.FATAL:
                    raise
                member.abandon(outcome, str(exc))
                if outcome is Outcome.FIND_COORDINATOR:
                    self._coordinator = None
                log.info("group %s: %s; rejoining", cfg.group_id, exc)
                await self._backoff(attempt)
                attempt += 1
                continue
            return self._make_generation(joined, positions, committed, counts, timings)
        return None

    async def _partition_counts(self, topics: set[str]) -> dict[str, int]:
        md = await self._cluster.refresh_metadata(topics)
        return {t: len(info.partitions) for t, info in md.items() if info.error_code == 0}

    async def _start_positions(
        self, node: int, partitions: list[TopicPartition]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """Where each partition starts, and what is already committed."""
        if not partitions:
            return {}, {}
        committed = await group_api.fetch_committed(
            self._cluster, node, group_id=self.config.group_id, partitions=partitions
        )
        positions = {tp: committed.get(tp, -1) for tp in partitions}
        missing = [tp for tp, off in positions.items() if off < 0]
        if missing:
            positions.update(await self._reset_offsets(missing))
        return positions, {tp: off for tp, off in committed.items() if off >= 0}

    async def _reset_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        policy = self.config.start_offset
        if policy == "error":
            raise error_for_code(
                1, f"no committed offset for {', '.join(map(str, tps))} and start_offset='error'"
            )
        return await self._admin.list_offsets(
            tps, policy, read_committed=self.config.isolation_level == "read_committed"
        )

    async def _reset_one(self, tp: TopicPartition) -> int:
        return (await self._reset_offsets([tp]))[tp]

    def _make_generation(
        self,
        joined: Joined,
        positions: dict[TopicPartition, int],
        committed: dict[TopicPartition, int],
        counts: dict[str, int],
        timings: RebalanceTimings,
    ) -> Generation:
        t_ready = anyio.current_time()

        def first_batch() -> None:
            timings.first_record = anyio.current_time() - t_ready
            log.info(
                "group %s generation %d member %s: first records after %.3f s",
                self.config.group_id,
                joined.generation_id,
                joined.member_id,
                timings.first_record,
            )

        fetcher = Fetcher(self._cluster, self.config, positions, self._reset_one, first_batch)
        gen = Generation(
            id=joined.generation_id,
            member_id=joined.member_id,
            group_id=self.config.group_id,
            is_leader=joined.is_leader,
            protocol=joined.protocol,
            assignments=dict(positions),
            timings=timings,
            _group=self,
            _fetcher=fetcher,
        )
        gen._committed.update(committed)
        gen._partition_counts = counts
        self.history.append((gen.id, timings))
        log.info(
            "group %s generation %d formed: member %s%s, %d partition(s), protocol %s; "
            "coordinator %.3f s, join %.3f s, sync %.3f s, offsets %.3f s",
            self.config.group_id,
            gen.id,
            gen.member_id,
            " (leader)" if gen.is_leader else "",
            len(positions),
            gen.protocol,
            timings.find_coordinator,
            timings.join,
            timings.sync,
            timings.offset_fetch,
        )
        return gen

    async def _run_generation(self, gen: Generation) -> None:
        cfg = self.config
        self._current = gen
        if self._closing:
            gen._end(Outcome.REJOIN, "the group is closing")
        error: BaseException | None = None
        try:
            async with anyio.create_task_group() as outer:
                outer.start_soon(self._watchdog, gen, name="gengroup-teardown-watchdog")
                # The except clause sits outside the generation's scope: the
                # scope first strips the Cancelled exceptions its own
                # cancellation caused, leaving only what the tasks raised.
                try:
                    with gen._scope:
                        async with anyio.create_task_group() as tg:
                            gen._tg = tg
                            tg.start_soon(self._heartbeat_loop, gen, name="gengroup-heartbeat")
                            tg.start_soon(gen._fetcher.run, name="gengroup-fetcher")
                            if gen.is_leader and cfg.watch_partition_changes:
                                tg.start_soon(self._watch_partitions, gen, name="gengroup-watcher")
                            if cfg.commit_interval > 0:
                                tg.start_soon(self._commit_loop, gen, name="gengroup-committer")
                            await self._send.send(gen)
                except Exception as exc:
                    error = _unwrap(exc)
                    gen._end(Outcome.FATAL, f"task raised {error!r}")
                outer.cancel_scope.cancel()
        finally:
            gen._tg = None
            await self._final_commit(gen)
            gen._ended.set()
            self._current = None
            self._member.generation_ended(
                gen.end_outcome if gen.end_outcome is not Outcome.FATAL else None, gen.end_reason
            )
            if gen.end_outcome is Outcome.FIND_COORDINATOR:
                self._coordinator = None
        if error is not None:
            self._report(error)

    async def _final_commit(self, gen: Generation) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.request_timeout):
            try:
                await gen.commit()
            except (BrokerError, KafkaConnectionError, ProtocolError, TimeoutError) as exc:
                log.warning(
                    "group %s generation %d member %s: final commit failed: %s "
                    "(uncommitted records will be processed again)",
                    gen.group_id,
                    gen.id,
                    gen.member_id,
                    exc,
                )

    async def _watchdog(self, gen: Generation) -> None:
        await gen._ending.wait()
        deadline = anyio.current_time() + self.config.rebalance_timeout
        await anyio.sleep_until(deadline)
        stuck = gen.stuck_tasks()
        detail = "\n".join(f"task {name!r} is suspended at:\n{stack}" for name, stack in stuck)
        err = TaskStuckError(
            f"group {gen.group_id} generation {gen.id}: {len(stuck)} task(s) did not return "
            f"within rebalance_timeout={self.config.rebalance_timeout} s after the generation "
            f"ended ({gen.end_reason}); the next generation cannot start until they do.\n{detail}"
        )
        log.error("%s", err)
        self._failure = err
        await self._send.send(_Failure(err))

    # ------------------------------------------------------------------ generation tasks

    async def _heartbeat_loop(self, gen: Generation) -> None:
        cfg = self.config
        member = self._member
        started = anyio.current_time()
        node = self._coordinator
        while True:
            await anyio.sleep(cfg.heartbeat_interval)
            if node is None:
                gen._end(Outcome.FIND_COORDINATOR, "no coordinator")
                return
            try:
                code = await group_api.heartbeat(
                    self._cluster,
                    node,
                    group_id=cfg.group_id,
                    generation_id=gen.id,
                    member_id=gen.member_id,
                    group_instance_id=cfg.group_instance_id,
                    timeout=min(cfg.request_timeout, cfg.session_timeout),
                )
            except (KafkaConnectionError, ProtocolError) as exc:
                outcome = member.on_heartbeat_failure(now=anyio.current_time(), started=started)
                if outcome is not None:
                    gen._end(outcome, f"no successful heartbeat for a session timeout ({exc})")
                    return
                log.info(
                    "group %s generation %d member %s: heartbeat failed (%s); retrying",
                    cfg.group_id,
                    gen.id,
                    gen.member_id,
                    exc,
                )
                continue
            outcome = member.on_heartbeat(error_code=code, now=anyio.current_time())
            if outcome is None or outcome is Outcome.RETRY:
                continue
            if outcome is Outcome.FATAL:
                raise error_for_code(code, f"Heartbeat of {cfg.group_id} generation {gen.id}")
            gen._end(outcome, f"heartbeat answered {error_for_code(code).name}")
            return

    async def _watch_partitions(self, gen: Generation) -> None:
        cfg = self.config
        topics = self._member.subscribed_topics()
        at_join = gen._partition_counts
        while True:
            await anyio.sleep(cfg.partition_watch_interval)
            try:
                now = await self._partition_counts(topics)
            except (KafkaConnectionError, BrokerError, ProtocolError) as exc:
                log.info(
                    "group %s generation %d member %s: partition watch failed (%s); retrying",
                    cfg.group_id,
                    gen.id,
                    gen.member_id,
                    exc,
                )
                continue
            if now != at_join:
                changed = sorted(t for t in set(now) | set(at_join) if now.get(t) != at_join.get(t))
                gen._end(
                    Outcome.REJOIN,
                    "partitions changed: "
                    + ", ".join(f"{t} {at_join.get(t, 0)}->{now.get(t, 0)}" for t in changed),
                )
                return

    async def _commit_loop(self, gen: Generation) -> None:
        while True:
            await anyio.sleep(self.config.commit_interval)
            try:
                await gen.commit()
            except BrokerError as exc:
                outcome = outcome_for(exc.code)
                if outcome is Outcome.FATAL:
                    raise
                gen._end(outcome, f"commit refused: {exc}")
                return
            except (KafkaConnectionError, ProtocolError, TimeoutError) as exc:
                log.info(
                    "group %s generation %d member %s: periodic commit failed (%s); will retry",
                    gen.group_id,
                    gen.id,
                    gen.member_id,
                    exc,
                )

    async def _commit(
        self, gen: Generation, offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """OffsetCommit under ``gen``'s ids; follows a moved coordinator once."""
        retried = False
        while True:
            node = self._coordinator
            if node is None:
                node = self._coordinator = await self._cluster.find_coordinator(
                    gen.group_id, timeout=self.config.request_timeout
                )
            try:
                results = await group_api.commit_offsets(
                    self._cluster,
                    node,
                    group_id=gen.group_id,
                    generation_id=gen.id,
                    member_id=gen.member_id,
                    group_instance_id=self.config.group_instance_id,
                    offsets=offsets,
                )
            except KafkaConnectionError:
                if retried:
                    raise
            else:
                moved = results and all(
                    outcome_for(code) is Outcome.FIND_COORDINATOR for code in results.values()
                )
                if not moved or retried:
                    return results
            self._coordinator = None
            retried = True


class _GroupClosed(GengroupError):
    """The group is closed (ends ``async for``)."""
