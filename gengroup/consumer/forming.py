"""Forming a generation: coordinator lookup, JoinGroup, SyncGroup, start positions.

Theory of operation:

:func:`form_generation` drives the sans-IO :class:`~gengroup.membership.member.Member`
through FindCoordinator, JoinGroup, SyncGroup and OffsetFetch until a
generation forms. Each failed step is handed back to the member machine,
which says what to do about it (rejoin at once, reset the member id, look the
coordinator up again, retry after a jittered exponential backoff, or give up
with the error); a lost coordinator is looked up again. The result is a
:class:`Formed`: the :class:`~gengroup.consumer.generation.Generation` handed
to the application, its prefetcher (started from each partition's committed
offset, or per ``start_offset`` where none is) and the partition counts the
leader assigned from (which its partition watcher compares against).

Every request the member sends goes through one :class:`GroupClient`:
forming, the running generation's heartbeats and commits, and the final
LeaveGroup. It owns the group's
:class:`~gengroup.io.coordinator.CoordinatorClient`, which looks the
coordinator up, forgets it and follows it when a commit finds it moved. The
pause between failed attempts is the client's one backoff
(:class:`~gengroup.io.retry.Backoff`), from ``join_backoff``.

While a new member waits for its first JoinGroup answer (often for the other
members to notice the rebalance), :meth:`GroupClient.warm_up` opens the fetch
connections to the subscribed topics' leaders and the coordinator's
connection, and loads the schemas of the requests a generation sends, which a
fresh process would otherwise do once its partitions were handed over.

Nothing else waits on the rebalance's path: every JoinGroup is sent with a
refresh of the topics' metadata beside it, which the leader assigns from (no
Metadata round trip between JoinGroup and SyncGroup, which every follower
would wait for) and the prefetcher starts from (its partitions' cached
leaders). Every SyncGroup is sent with an OffsetFetch of every partition the
member may be assigned beside it (:meth:`GroupClient.sync` says why those
offsets cannot change meanwhile), so a generation starts fetching the moment
SyncGroup answers.
"""

from __future__ import annotations

import logging
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from functools import partial
from typing import Final, Generic, NamedTuple, TypeVar

import anyio
from kio.schema.errors import ErrorCode

from .._config import GroupConfig
from .._errors import (
    BrokerError,
    CoordinatorUnavailable,
    GengroupError,
    KafkaConnectionError,
    ProtocolError,
    error_for_code,
    exhausted_unreachable,
)
from .._types import GenerationIdentity, TopicPartition, show_partitions
from ..io import offsets
from ..io.cluster import Cluster, TopicInfo
from ..io.coordinator import REFUSALS, CoordinatorClient
from ..io.request import preload
from ..io.retry import Backoff
from ..membership import requests
from ..membership.member import Joined, JoinParams, Member, Outcome, Retry, outcome_for
from ..membership.pattern import describe_change, matching_topics
from ..protocol.versions import ApiKey
from . import diagnosis
from .commits import TopicIds
from .committing import send_offset_commit
from .generation import CommitCodes, Generation, OffsetMetadata, Offsets, RebalanceTimings, SpanHost
from .metrics import GroupMetrics
from .ownership import kept_partitions, known_topic_ids
from .prefetch import FIRST_FETCH_CHANNELS, Prefetcher

__all__ = ["Formed", "GroupClient", "form_generation", "generation_identity"]

log = logging.getLogger("gengroup")

T = TypeVar("T")

#: Committed offsets: partition -> (offset, metadata), offset -1 where none.
Committed = dict[TopicPartition, tuple[int, str]]


class _Beside(Generic[T]):
    """A request sent beside a wait of the member (JoinGroup, SyncGroup) that
    the member can do without: its result, or None if it failed (logged at
    DEBUG; the caller asks again, and meets the failure there)."""

    def __init__(self, group_id: str, what: str) -> None:
        self.result: T | None = None
        self.done = anyio.Event()
        self._group_id = group_id
        self._what = what

    async def run(self, request: Callable[[], Awaitable[T]]) -> None:
        try:
            self.result = await request()
        except (GengroupError, OSError, TimeoutError) as exc:
            log.debug("group %s: %s: %r", self._group_id, self._what, exc)
        finally:
            self.done.set()


class SyncAnswer(NamedTuple):
    """What :meth:`GroupClient.sync` learnt."""

    #: SyncGroup's error code.
    error_code: int
    #: This member's encoded assignment.
    assignment: bytes
    #: When SyncGroup answered (``anyio.current_time()``): a classic
    #: generation's first heartbeat (and a cooperative one's early beats)
    #: count from it.
    at: float
    #: The committed offsets fetched beside SyncGroup, or None.
    committed: Committed | None


#: The most partitions whose committed offsets a member fetches beside
#: SyncGroup (every partition of its subscription, before it knows which are
#: its own); with more, it fetches its own once SyncGroup answered.
OFFSETS_BESIDE_SYNC_LIMIT: Final = 2048


def generation_identity(
    cfg: GroupConfig, generation_id: int, member_id: str, sequence: int
) -> GenerationIdentity:
    """The member's identity in its generation number ``sequence`` of ``cfg``'s group."""
    return GenerationIdentity(
        cfg.group_id, generation_id, member_id, cfg.group_instance_id, sequence
    )


#: The requests a generation sends once formed (the join's own are loaded by
#: joining), by group protocol: :meth:`GroupClient.warm_up` loads their schemas.
_GENERATION_APIS: Final[Mapping[str, tuple[ApiKey, ...]]] = {
    "classic": (
        ApiKey.SYNC_GROUP,
        ApiKey.OFFSET_FETCH,
        ApiKey.FETCH,
        ApiKey.HEARTBEAT,
        ApiKey.OFFSET_COMMIT,
        ApiKey.LIST_OFFSETS,
        ApiKey.LEAVE_GROUP,
    ),
    "consumer": (ApiKey.OFFSET_FETCH, ApiKey.FETCH, ApiKey.OFFSET_COMMIT, ApiKey.LIST_OFFSETS),
}


class GroupClient:
    """The group member's requests, sent to the group's coordinator.

    Implements :class:`~gengroup.consumer.generation.Committer`.

    Attributes:
        cluster: the group's connection pool.
        coordinator: the group's coordinator: looked up, forgotten and
            followed there. JoinGroup, SyncGroup, OffsetFetch, Heartbeat and
            LeaveGroup go to the node the member works with (their errors are
            the member machine's to act on); OffsetCommit goes through
            :meth:`CoordinatorClient.call
            <gengroup.io.coordinator.CoordinatorClient.call>`, which follows a
            moved coordinator once.
    """

    def __init__(self, config: GroupConfig) -> None:
        self.config = config
        self.cluster = Cluster(
            list(config.brokers),
            client_id=config.client_id,
            request_timeout=config.request_timeout,
            unreachable_timeout=config.unreachable_timeout,
            connections_max_idle=config.connections_max_idle,
            security=config,
        )
        self._missing_topics: set[str] = set()
        #: Whether forming logged the coordinator unreachable since a generation formed.
        self.coordinator_lost = False
        #: The member's counters (``ConsumerGroup.metrics()``).
        self.metrics = GroupMetrics()
        #: Fetch sessions of ended prefetchers, closed by the next ones.
        self.retired_fetch_sessions: dict[tuple[int, str], int] = {}
        self.coordinator = CoordinatorClient(
            self.cluster,
            config.group_id,
            timeout=max(config.request_timeout, config.session_timeout),
        )

    async def warm_up(self, topics: set[str]) -> None:
        """Make a new member ready for its partitions while its first JoinGroup waits.

        A member's first generation used to connect for its first Fetch, and
        to its coordinator for its first OffsetFetch, once its partitions
        were handed over, and to import the schemas of SyncGroup, OffsetFetch
        and Fetch (a few milliseconds each) there too, while they waited. Now
        the fetch connections to the subscribed topics' leaders, and the
        coordinator's connection if the join found it by then, are opened
        and the schemas of the requests a generation sends are loaded (at
        the versions a fetch connection negotiated) before the partitions
        come. Best effort: a broker that cannot be reached now is met, and
        reported, by the requests themselves.
        """
        if not topics:
            return
        try:
            metadata = await self.cluster.refresh_metadata(topics)
            leaders = {p.leader for info in metadata.values() for p in info.partitions.values()} - {
                -1
            }
            conns = [
                await self.cluster.connection(node, channel)
                for node in sorted(leaders)
                for channel in FIRST_FETCH_CHANNELS
            ]
            if conns:
                await preload(conns[0], _GENERATION_APIS[self.config.group_protocol])
            if self.coordinator.node is not None:
                await self.cluster.connection(self.coordinator.node)
        except (GengroupError, OSError, TimeoutError) as exc:  # the join meets it too
            log.debug("group %s: not warmed up: %r", self.config.group_id, exc)

    def forget_coordinator(self) -> None:
        """The coordinator moved or is unreachable: look it up again before the next request."""
        self.coordinator.forget()

    def refused(self, error: BrokerError, request: str, node: int, sent_at: float) -> bool:
        """Count ``error`` if coordinator ``node`` refused ``request``, sent at
        ``sent_at`` (False if it is another error); raise
        :class:`CoordinatorUnavailable` once the refusals have lasted
        ``unreachable_timeout`` with no generation formed between.
        FindCoordinator's own refusals are the cluster's to count."""
        if error.code not in REFUSALS or isinstance(error, CoordinatorUnavailable):
            return False
        unavailable = self.coordinator.refused(error, request, node, sent_at)
        if unavailable.exhausted:
            raise unavailable from error
        return True

    async def find_coordinator(self, timings: RebalanceTimings) -> int:
        """The coordinator's node id, looked up (and timed) if unknown."""
        if self.coordinator.node is not None:
            return self.coordinator.node
        t0 = anyio.current_time()
        async with self.said_if_slow("looking up the group's coordinator"):
            node = await self.coordinator.find()
        timings.find_coordinator += anyio.current_time() - t0
        return node

    @asynccontextmanager
    async def said_if_slow(self, waiting_for: str) -> AsyncIterator[anyio.abc.TaskGroup]:
        """Log once (INFO) if the body takes longer than a heartbeat interval.

        Every wait of the member longer than that is said, once, with what it
        waits for. The body's exception comes out as itself. The body may
        start tasks beside it in the task group it is given: they are
        cancelled when it ends.
        """

        async def say() -> None:
            await anyio.sleep(self.config.heartbeat_interval)
            log.info("group %s: still %s", self.config.group_id, waiting_for)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(say)
                try:
                    yield tg
                finally:
                    tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    # ------------------------------------------------------------------ join and sync

    async def join(
        self, node: int, params: JoinParams, topics: set[str]
    ) -> tuple[requests.JoinResult, dict[str, TopicInfo] | None]:
        """JoinGroup (the coordinator may hold it for the rebalance timeout), and
        the metadata of ``topics`` refreshed while it waited.

        The refresh runs beside the JoinGroup, off the rebalance's critical
        path: a leader assigns from it (it is as fresh as the join; a change
        after it is the partition watcher's to find), and every member's
        prefetcher starts from the leaders it cached. The metadata is None if
        the refresh failed, or had not finished when a follower's JoinGroup
        answered (a follower does not wait for it).
        """
        refresh = _Beside[dict[str, TopicInfo]](self.config.group_id, "metadata beside JoinGroup")
        async with self.said_if_slow("waiting for the coordinator to answer JoinGroup") as tg:
            if topics:
                tg.start_soon(refresh.run, partial(self.cluster.refresh_metadata, topics))
            resp = await self.cluster.call(
                node,
                ApiKey.JOIN_GROUP,
                partial(requests.join_request, params=params),
                timeout=self._rebalance_wait,
                channel="group",
            )
            result = requests.parse_join(resp)
            if topics and result.leader == result.member_id and not result.error_code:
                await refresh.done.wait()  # the leader assigns from it
        return result, refresh.result

    async def sync(
        self,
        node: int,
        identity: GenerationIdentity,
        protocol: str,
        assignments: Mapping[str, bytes],
        offsets_of: Sequence[TopicPartition] = (),
    ) -> SyncAnswer:
        """SyncGroup: its answer, when it came, and committed offsets.

        The committed offsets of ``offsets_of`` (every partition this member
        may be assigned) are fetched beside SyncGroup, while the coordinator
        holds it for the leader's; none of the partitions SyncGroup hands this
        member can have its committed offset change in that time. Their
        previous owner committed them before it sent the JoinGroup of this
        round (an eager member in its teardown; a cooperative one revoked them
        in the round before, committed, and rejoined), and once JoinGroup
        answered the coordinator refuses the ending generation's commits
        (REBALANCE_IN_PROGRESS, then ILLEGAL_GENERATION), while the new
        generation's members commit only partitions SyncGroup handed them. So
        the offsets are those an OffsetFetch sent after SyncGroup would read,
        one round trip sooner. They are None if ``offsets_of`` is empty,
        SyncGroup was refused, or the fetch failed (the caller fetches again,
        and meets the failure there).
        """
        group_id = self.config.group_id
        fetch = _Beside[Committed](group_id, "offsets beside SyncGroup")
        async with self.said_if_slow("waiting for the coordinator to answer SyncGroup") as tg:
            if offsets_of:
                tg.start_soon(
                    fetch.run,
                    partial(offsets.fetch_committed, self.cluster, node, group_id, offsets_of),
                )
            resp = await self.cluster.call(
                node,
                ApiKey.SYNC_GROUP,
                partial(
                    requests.sync_request,
                    identity=identity,
                    protocol=protocol,
                    assignments=assignments,
                ),
                timeout=self._rebalance_wait,
                channel="group",
            )
            at = anyio.current_time()
            code, raw = requests.parse_sync(resp)
            if offsets_of and not code:
                await fetch.done.wait()
        return SyncAnswer(code, raw, at, fetch.result)

    @property
    def _rebalance_wait(self) -> float:
        """How long JoinGroup and SyncGroup may wait: the coordinator holds them."""
        return self.config.rebalance_timeout + self.config.request_timeout

    async def matching_topics(self) -> set[str]:
        """The topics ``topic_pattern`` matches now (every topic's metadata is fetched)."""
        pattern = self.config.topic_pattern
        assert pattern is not None
        md = await self.cluster.refresh_metadata(None)
        return matching_topics(
            pattern, ((t, info.is_internal) for t, info in md.items() if info.error_code == 0)
        )

    async def partition_counts(
        self, topics: set[str], metadata: Mapping[str, TopicInfo] | None = None
    ) -> dict[str, int]:
        """Topic -> partition count, for the topics that exist.

        From ``metadata`` if given (a refresh made while this member's
        JoinGroup waited), with the topics it does not cover refreshed now (a
        leader learns the other members' subscriptions from JoinGroup's
        answer: topics only they subscribe to are assigned in this round, as
        the Java and librdkafka leaders do), else from a new refresh. A
        subscribed topic that does not exist gets one WARNING when it goes
        missing (and one INFO when it appears), not one per check: its
        partitions are assigned to nobody until it exists, when the leader's
        partition watcher starts a rebalance.
        """
        if metadata is None:
            md: Mapping[str, TopicInfo] = await self.cluster.refresh_metadata(topics)
        elif unasked := topics - set(metadata):
            md = {**metadata, **await self.cluster.refresh_metadata(unasked)}
        else:
            md = metadata
        counts = {t: len(info.partitions) for t, info in md.items() if info.error_code == 0}
        missing = topics - set(counts)
        gone, back = sorted(missing - self._missing_topics), sorted(self._missing_topics - missing)
        if gone:
            causes = ", ".join(
                f"{t} ({error_for_code(md[t].error_code).name})" if t in md else t for t in gone
            )
            log.warning(
                "group %s: subscribed topic(s) %s not available; their partitions are "
                "assigned once they exist",
                self.config.group_id,
                causes,
            )
        if back:
            log.info("group %s: subscribed topic(s) %s now exist", self.config.group_id, back)
        self._missing_topics = missing
        return counts

    # ------------------------------------------------------------------ offsets

    async def start_positions(
        self, node: int, partitions: list[TopicPartition], known: Committed | None = None
    ) -> tuple[dict[TopicPartition, int], Committed]:
        """Where each partition starts, and what is already committed (offset, metadata).

        ``known``: committed offsets fetched already (beside SyncGroup), used
        if they name every partition; else they are fetched now.
        """
        if not partitions:
            return {}, {}
        if known is not None and all(tp in known for tp in partitions):
            committed = {tp: known[tp] for tp in partitions}
        else:
            committed = await offsets.fetch_committed(
                self.cluster, node, self.config.group_id, partitions
            )
        positions = {tp: committed.get(tp, (-1, ""))[0] for tp in partitions}
        missing = [tp for tp, off in positions.items() if off < 0]
        if missing:
            positions.update(await self.reset_offsets(missing))
        return positions, {tp: c for tp, c in committed.items() if c[0] >= 0}

    async def reset_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Where partitions without a usable offset start, per ``start_offset``."""
        cfg = self.config
        if cfg.start_offset == "error":
            raise error_for_code(
                1, f"no committed offset for {', '.join(map(str, tps))} and start_offset='error'"
            )
        return await offsets.list_offsets(
            self.cluster,
            tps,
            cfg.start_offset,
            read_committed=cfg.isolation_level == "read_committed",
            timeout=cfg.request_timeout,
        )

    async def reset_one(self, tp: TopicPartition) -> int:
        """:meth:`reset_offsets` for one partition (the prefetcher's OFFSET_OUT_OF_RANGE)."""
        return (await self.reset_offsets([tp]))[tp]

    def prefetcher(
        self, positions: Mapping[TopicPartition, int], on_first_batch: Callable[[], None]
    ) -> Prefetcher:
        """A prefetcher for a generation's partitions, starting at ``positions``."""
        return Prefetcher(
            self.cluster,
            self.config,
            positions,
            self.reset_one,
            on_first_batch,
            self.metrics,
            self.retired_fetch_sessions,
        )

    # ------------------------------------------------------------------ the running generation

    async def heartbeat(self, node: int, identity: GenerationIdentity) -> int:
        """Heartbeat; its error code.

        On the connection of JoinGroup and SyncGroup, free while a generation
        runs: the beats keep it from being closed as idle (the next rebalance
        would open it again on its path: TCP, TLS, SASL), and are not held
        behind a slow commit or metadata request on the other one.
        """
        cfg = self.config
        resp = await self.cluster.call(
            node,
            ApiKey.HEARTBEAT,
            partial(requests.heartbeat_request, identity=identity),
            timeout=min(cfg.request_timeout, cfg.session_timeout),
            channel="group",
        )
        return requests.error_code(resp)

    async def commit_offsets(
        self,
        identity: GenerationIdentity,
        offsets: Offsets,
        metadata: OffsetMetadata | None = None,
        topic_ids: TopicIds | None = None,
    ) -> CommitCodes:
        """OffsetCommit under ``identity``; each partition's error code (0 = stored).

        See :func:`~gengroup.consumer.committing.send_offset_commit`.
        """
        return await send_offset_commit(
            self.coordinator, self.metrics, identity, offsets, metadata, topic_ids
        )

    async def leave(self, member_id: str) -> None:
        """LeaveGroup for a dynamic member, if the coordinator is known (bounded, never raises
        a broker answer or a connection failure: it is logged)."""
        cfg = self.config
        node = self.coordinator.node
        if node is None:
            return
        with anyio.move_on_after(cfg.request_timeout):
            try:
                resp = await self.cluster.call(
                    node,
                    ApiKey.LEAVE_GROUP,
                    partial(
                        requests.leave_request,
                        group_id=cfg.group_id,
                        member_id=member_id,
                        reason="the consumer is closing",
                    ),
                )
                code = requests.parse_leave(resp)
                if code:
                    log.info(
                        "group %s member %s: LeaveGroup answered %s",
                        cfg.group_id,
                        member_id,
                        error_for_code(code),
                    )
            except (KafkaConnectionError, ProtocolError) as exc:
                log.info("group %s: LeaveGroup failed: %s", cfg.group_id, exc)


@dataclass(slots=True)
class Formed:
    """A formed generation and what running it needs.

    Attributes:
        generation: the generation handed to the application.
        prefetcher: the generation's prefetcher (a task of the generation).
        partition_counts: topic -> partition count the leader assigned from
            (empty on followers).
        classic: whether the generation runs the classic protocol's Heartbeat
            loop; False under ``group_protocol="consumer"``, whose heartbeat
            runs beside the generations
            (:mod:`~gengroup.consumer.consumer_protocol`).
        acknowledge: called once the partitions the generation revoked were
            released (their tasks returned, their marks committed), before it
            is handed out: the consumer protocol then reports the smaller
            owned set (None under the classic protocol).
        revoke_deadline: under the consumer protocol, when commits on the
            way to acknowledging a revocation must give up (None: nothing
            is being revoked; the attribute is None under the classic one).
        synced_at: when SyncGroup answered (``anyio.current_time()``): a
            classic generation's first heartbeat (and a cooperative one's
            early beats) count from there (None: from the heartbeat loop's
            start).
    """

    generation: Generation
    prefetcher: Prefetcher
    partition_counts: dict[str, int]
    classic: bool = True
    acknowledge: Callable[[], None] | None = None
    revoke_deadline: Callable[[], float | None] | None = None
    synced_at: float | None = None


async def form_generation(
    member: Member,
    client: GroupClient,
    closing: Callable[[], bool],
    *,
    previous_teardown: float = 0.0,
    ownership: SpanHost | None = None,
    sequence: int = 0,
) -> Formed | None:
    """Join and sync until a generation forms; None if ``closing()`` turned true.

    ``ownership`` holds the spans a cooperative member kept from its previous
    generation: they are revoked before joining if the member may have lost
    its membership (its member id was reset, or no request was accepted for
    a session timeout), and before SyncGroup if the group chose an eager
    balancer. A retained partition's fetch continues where its span is.
    ``sequence`` is the member's count of generations, this one included.

    Raises:
        BrokerError: a fatal answer (FENCED_INSTANCE_ID, authorization, ...).
    """
    cfg = client.config
    backoff = _join_backoff(cfg)
    timings = RebalanceTimings(previous_teardown=previous_teardown)
    while not closing():
        try:
            if ownership is not None and ownership.spans:
                if not member.member_id:
                    await ownership.drop_all("the member lost its member id")
                elif anyio.current_time() >= ownership.lease_from + cfg.session_timeout:
                    await ownership.drop_all("no request accepted for a session timeout")
            offsets_sent: float | None = None
            node = await client.find_coordinator(timings)
            t0 = anyio.current_time()
            if cfg.topic_pattern is not None:
                await _match(member, client)
            params = member.join_params()
            join_sent = anyio.current_time()
            try:
                res, metadata = await client.join(node, params, member.subscribed_topics())
            except BaseException:
                member.on_io_failure()
                raise
            joined = member.on_join(**asdict(res))  # JoinResult's fields are on_join's arguments
            timings.join += anyio.current_time() - t0
            if ownership is not None and not isinstance(joined, Retry):
                ownership.lease_from = max(ownership.lease_from, t0)
                if ownership.spans and member.rebalance_protocol(joined.protocol) == "eager":
                    await ownership.drop_all(f"the group chose the eager {joined.protocol!r}")
            if isinstance(joined, Retry):
                if joined.error.code == ErrorCode.inconsistent_group_protocol:
                    offered = [b.name for b in member.config.balancers]
                    raise await diagnosis.explain_inconsistent(
                        client.cluster, cfg, node, joined.error, offered
                    )
                await _retry_pause(member, client, joined, backoff, ("JoinGroup", node, join_sent))
                continue
            t0 = anyio.current_time()
            counts: dict[str, int] = {}
            assignments: dict[str, bytes] = {}
            if joined.is_leader:
                await diagnosis.report_unreadable(client.cluster, cfg, node, joined)
                counts = await client.partition_counts(member.subscribed_topics(), metadata)
                assignments = member.assign(counts)
            identity = generation_identity(cfg, joined.generation_id, joined.member_id, sequence)
            candidates = _assignable(joined, counts, member.subscribed_topics(), metadata)
            sync_sent = anyio.current_time()
            try:
                answer = await client.sync(node, identity, joined.protocol, assignments, candidates)
            except BaseException:
                member.on_io_failure()
                raise
            synced_at = answer.at
            synced = member.on_sync(error_code=answer.error_code, assignment=answer.assignment)
            timings.sync += anyio.current_time() - t0
            if isinstance(synced, Retry):
                await _retry_pause(member, client, synced, backoff, ("SyncGroup", node, sync_sent))
                continue
            t0 = offsets_sent = anyio.current_time()
            partitions = synced.partitions()
            positions, committed = await client.start_positions(node, partitions, answer.committed)
            timings.offset_fetch += anyio.current_time() - t0
            client.coordinator.accepted()
            client.coordinator_lost = False
        except (KafkaConnectionError, TimeoutError) as exc:
            unreachable = exhausted_unreachable(exc)
            if unreachable is not None:
                raise unreachable from None
            if offsets_sent is not None and not isinstance(exc, KafkaConnectionError):
                # ListOffsets to the partitions' leaders ran out of time (the
                # coordinator's OffsetFetch fails with a connection error).
                log.info("group %s: start offsets: %s; rejoining", cfg.group_id, exc)
                member.abandon(Outcome.REJOIN, "start offsets not found")
            else:
                # Said once until a generation forms (the coordinator's node may
                # stay named by FindCoordinator for seconds after it died), and
                # not at all if the cluster said the coordinator is unavailable.
                said = (
                    client.coordinator_lost
                    or (cfg.group_id, 0) in client.cluster.coordinator_outages
                )
                client.coordinator_lost = True
                text = "group %s: coordinator unreachable (%s); looking it up again"
                log.log(logging.DEBUG if said else logging.INFO, text, cfg.group_id, exc)
                client.forget_coordinator()
                member.abandon(Outcome.REJOIN, "coordinator lost")
            await backoff.sleep()
            continue
        except BrokerError as exc:
            outcome = outcome_for(exc.code)
            if outcome is Outcome.FATAL or exhausted_unreachable(exc) is not None:
                raise
            member.abandon(outcome, str(exc))
            if offsets_sent is None or not client.refused(exc, "OffsetFetch", node, offsets_sent):
                if outcome is Outcome.FIND_COORDINATOR:
                    client.forget_coordinator()
                log.info("group %s: %s; rejoining", cfg.group_id, exc)
            await backoff.sleep()
            continue
        rebalance = member.rebalance_protocol(joined.protocol)
        if ownership is not None:
            # The previous generation's prefetcher went on handing out the
            # spans' batches until now; from here their positions are final.
            ownership.stop_prefetcher()
        owned = ownership.owned if ownership is not None and rebalance == "cooperative" else set()
        kept = (
            kept_partitions(owned, ownership, known_topic_ids(client.cluster))
            if ownership is not None
            else owned
        )
        for tp in set(positions) & kept:
            span = ownership.spans.get(tp) if ownership is not None else None
            if span is not None and not span.closed:
                positions[tp] = span.position
        formed = _formed(client, identity, joined, positions, committed, counts, timings)
        gen = formed.generation
        gen.rebalance_protocol = rebalance
        gen.added = frozenset(set(positions) - kept)
        gen.retained = frozenset(set(positions) & kept)
        gen.revoked = frozenset(owned - set(positions))
        if ownership is not None:
            gen._spans = ownership.spans
            gen._span_host = ownership
            gen.know_spans()
        _say_formed(gen, timings, cooperative=ownership is not None and rebalance == "cooperative")
        formed.generation.renew_lease(sync_sent)
        formed.synced_at = synced_at
        return formed
    return None


def _say_formed(gen: Generation, timings: RebalanceTimings, *, cooperative: bool) -> None:
    """Log a classic generation's forming once: its partitions (under a
    cooperative balancer, those added and revoked too) and its timings."""
    change = ""
    if cooperative:
        change = (
            f" (added [{show_partitions(gen.added)}], revoked [{show_partitions(gen.revoked)}])"
        )
    log.info(
        "group %s generation %s formed: member %s%s, %d partition(s) [%s]%s, protocol %s; "
        "previous teardown %.3f s, coordinator %.3f s, join %.3f s, sync %.3f s, "
        "offsets %.3f s",
        gen.group_id,
        gen.label,
        gen.member_id,
        " (leader)" if gen.is_leader else "",
        len(gen.assignments),
        show_partitions(gen.assignments),
        change,
        gen.protocol,
        timings.previous_teardown,
        timings.find_coordinator,
        timings.join,
        timings.sync,
        timings.offset_fetch,
    )


def _assignable(
    joined: Joined,
    counts: Mapping[str, int],
    topics: set[str],
    metadata: Mapping[str, TopicInfo] | None,
) -> list[TopicPartition]:
    """Every partition the member may be assigned: those the leader assigned
    from, or for a follower those of ``topics`` in the metadata refreshed
    beside its JoinGroup.

    Empty for a follower without that metadata (its JoinGroup answered
    first), or past :data:`OFFSETS_BESIDE_SYNC_LIMIT` partitions.
    """
    if not joined.is_leader:
        if metadata is None:
            return []
        counts = {
            topic: len(info.partitions)
            for topic, info in metadata.items()
            if topic in topics and info.error_code == 0
        }
    if sum(counts.values()) > OFFSETS_BESIDE_SYNC_LIMIT:
        return []
    return [TopicPartition(topic, p) for topic in sorted(counts) for p in range(counts[topic])]


async def _match(member: Member, client: GroupClient) -> None:
    """Subscribe to what the pattern matches now (logged when it changes)."""
    cfg = client.config
    before = member.matched
    if member.match(await client.matching_topics()):
        log.info(
            "group %s: topics matching %r: %s (%s)",
            cfg.group_id,
            cfg.topic_pattern.pattern if cfg.topic_pattern is not None else "",
            ", ".join(member.subscription()) or "none",
            describe_change(before, member.matched),
        )


#: The longest pause between two failed join attempts, in seconds.
_JOIN_BACKOFF_CAP = 30.0


def _join_backoff(cfg: GroupConfig) -> Backoff:
    """The backoff between failed join attempts: from ``join_backoff``, doubling
    five times at most, never over :data:`_JOIN_BACKOFF_CAP`."""
    return Backoff(cfg.join_backoff, cap=min(cfg.join_backoff * 2**5, _JOIN_BACKOFF_CAP))


#: A refused request: its name, the node it went to, when it was sent.
_Sent = tuple[str, int, float]


async def _retry_pause(
    member: Member, client: GroupClient, retry: Retry, backoff: Backoff, sent: _Sent
) -> None:
    """Act on a failed JoinGroup or SyncGroup (``sent``); back off if due."""
    if _handle_retry(member, client, retry, sent):
        await backoff.sleep()


def _handle_retry(member: Member, client: GroupClient, retry: Retry, sent: _Sent) -> bool:
    """Act on a failed step; True if the next attempt should wait a backoff."""
    if retry.outcome is Outcome.FATAL:
        raise retry.error
    if client.refused(retry.error, *sent):
        return True
    if retry.outcome is Outcome.FIND_COORDINATOR:
        client.forget_coordinator()
        return True
    if retry.outcome is Outcome.REJOIN:
        return False
    log.info(
        "group %s member %s: %s; rejoining",
        client.config.group_id,
        member.member_id or "(new)",
        retry.error,
    )
    return retry.outcome is Outcome.RETRY


def _formed(
    client: GroupClient,
    identity: GenerationIdentity,
    joined: Joined,
    positions: dict[TopicPartition, int],
    committed: dict[TopicPartition, tuple[int, str]],
    counts: dict[str, int],
    timings: RebalanceTimings,
) -> Formed:
    t_ready = anyio.current_time()

    def first_batch() -> None:
        timings.first_record = anyio.current_time() - t_ready
        log.info(
            "group %s generation %s member %s: first records after %.3f s",
            identity.group_id,
            identity.label,
            identity.member_id,
            timings.first_record,
        )

    prefetcher = client.prefetcher(positions, first_batch)
    gen = Generation(
        identity=identity,
        is_leader=joined.is_leader,
        protocol=joined.protocol,
        assignments=dict(positions),
        timings=timings,
        _committer=client,
        _prefetcher=prefetcher,
        _committed={tp: off for tp, (off, _) in committed.items()},
        _committed_metadata={tp: note for tp, (_, note) in committed.items() if note},
        _session_timeout=client.config.session_timeout,
        _request_timeout=client.config.request_timeout,
        _retry_backoff=client.cluster.retry_backoff,
    )
    gen.know_topics(client.cluster)
    prefetcher.on_reset = gen.offset_reset
    prefetcher.on_damage = gen.records_damaged
    prefetcher.on_gap = gen.gaps_found
    prefetcher.on_recreated = gen.topic_recreated
    # A range without records at a committed start offset is passed (consumer/recordless.py).
    prefetcher.start_from({tp: off for tp, (off, _) in committed.items()})
    return Formed(gen, prefetcher, counts)
