"""Cluster administration: topics, partitions, offsets and consumer groups.

Theory of operation:

:class:`Admin` is a thin layer over :class:`~gengroup.io.cluster.Cluster`.
Every operation builds the kio request for the version negotiated with the
broker it talks to, sends it, and turns per-item error codes into the typed
exceptions of :mod:`gengroup._errors`.

Topic-level operations (create, delete, add partitions) go to any broker (in
KRaft mode brokers forward them to the controller). They are followed by a
metadata wait: Kafka answers CreateTopics before every broker knows the topic,
so the call polls Metadata until each topic shows the requested partitions,
each with a leader, and then until every leader answers ListOffsets for its
partitions without error (a leader named in metadata may not have opened the
partition's log yet). Callers can therefore produce and fetch right after
``create_topics`` returns.

Group operations go to the group's coordinator, found with FindCoordinator;
coordinator errors (moved, loading, not available) and connection failures are
retried with backoff until the operation's timeout. ListOffsets goes to each
partition's leader; stale leadership refreshes the metadata and retries.

Every wait has a deadline: an operation that cannot complete in time raises
:class:`TimeoutError` naming the last error seen.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Self, TypeVar

import anyio

from ._errors import (
    BrokerError,
    CoordinatorError,
    KafkaConnectionError,
    RetriableBrokerError,
    StaleMetadataError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
    error_for_code,
)
from ._types import TopicPartition
from .io.cluster import Cluster, ms
from .protocol.consumer_protocol import PROTOCOL_TYPE, Assignment, decode_assignment
from .protocol.framing import build, request_module
from .protocol.versions import ApiKey, require

__all__ = [
    "Admin",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "NewTopic",
    "OffsetSpec",
]

T = TypeVar("T")

#: ``"earliest"``, ``"latest"`` or a timestamp in milliseconds since the epoch.
OffsetSpec = Literal["earliest", "latest"] | int

_EARLIEST_TIMESTAMP = -2
_LATEST_TIMESTAMP = -1
_UNKNOWN_TOPIC = 3


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create.

    Attributes:
        name: the topic name.
        partitions: the number of partitions.
        replication_factor: copies of each partition.
        configs: topic configuration overrides, e.g. ``{"cleanup.policy": "compact"}``.
    """

    name: str
    partitions: int
    replication_factor: int = 1
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GroupListing:
    """A group as listed by ListGroups.

    Attributes:
        group_id: the group id.
        protocol_type: ``"consumer"`` for consumer groups, ``""`` for offset-only groups.
        state: the group state (``Stable``, ``Empty`` ...), ``""`` if the broker did not say.
    """

    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """One member of a described group.

    Attributes:
        member_id: the coordinator-assigned member id.
        client_id: the member's client id.
        client_host: the address the member connected from.
        group_instance_id: the static membership id, or None.
        protocol_type: the group's protocol type (tells how to read the bytes).
        raw_metadata: the member's JoinGroup metadata for the chosen protocol.
        raw_assignment: the member's SyncGroup assignment bytes.
    """

    member_id: str
    client_id: str
    client_host: str
    group_instance_id: str | None
    protocol_type: str
    raw_metadata: bytes
    raw_assignment: bytes

    @property
    def assignment(self) -> Assignment | None:
        """The decoded assignment for ``consumer`` groups, None for other protocol types.

        Raises:
            ProtocolError: the group claims the ``consumer`` protocol type but
                the bytes are not a consumer-protocol assignment.
        """
        if self.protocol_type != PROTOCOL_TYPE:
            return None
        return decode_assignment(self.raw_assignment)

    @property
    def partitions(self) -> frozenset[TopicPartition]:
        """The assigned partitions (empty for non-consumer groups).

        Raises:
            ProtocolError: as :attr:`assignment`.
        """
        assignment = self.assignment
        if assignment is None:
            return frozenset()
        return frozenset(
            TopicPartition(topic, p) for topic, parts in assignment.partitions for p in parts
        )


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as described by DescribeGroups.

    Attributes:
        group_id: the group id.
        state: ``Empty``, ``PreparingRebalance``, ``CompletingRebalance``,
            ``Stable`` or ``Dead``.
        protocol_type: e.g. ``"consumer"``.
        protocol: the chosen protocol (for consumers: the assignor name).
        members: the members, in the coordinator's order.
    """

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]


def _remaining(deadline: float) -> float:
    return max(0.0, deadline - anyio.current_time())


class _Final(Exception):
    """Carries an error that must not be retried even though its class is retriable."""

    def __init__(self, error: BrokerError) -> None:
        super().__init__(str(error))
        self.error = error


def _is_retriable(exc: Exception) -> bool:
    if isinstance(exc, KafkaConnectionError):
        return True
    if isinstance(exc, BrokerError):
        return exc.retriable or isinstance(
            exc, CoordinatorError | RetriableBrokerError | StaleMetadataError
        )
    return False


class Admin:
    """Administrative operations on a Kafka cluster.

    Args:
        cluster: an open :class:`Cluster` to use (not closed by the admin), or
            bootstrap addresses (``"host:port"`` or a list of them) for a
            cluster the admin opens and closes itself.
        client_id: client id of an owned cluster.
        timeout: default seconds an operation may take, including its metadata wait.

    Example::

        async with Admin("127.0.0.1:9092") as admin:
            await admin.create_topics({"payments": 6}, exist_ok=True)
            print(await admin.list_offsets([TopicPartition("payments", 0)], "latest"))
    """

    def __init__(
        self,
        cluster: Cluster | Sequence[str] | str,
        *,
        client_id: str = "gengroup-admin",
        timeout: float = 30.0,
    ) -> None:
        if isinstance(cluster, Cluster):
            self.cluster = cluster
            self._owns_cluster = False
        else:
            self.cluster = Cluster(cluster, client_id=client_id)
            self._owns_cluster = True
        self.timeout = timeout

    async def __aenter__(self) -> Self:
        if self._owns_cluster:
            await self.cluster.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        # The body's exception is not handed to the cluster's task group, which
        # would wrap it in an ExceptionGroup; it propagates unchanged.
        if self._owns_cluster:
            await self.cluster.__aexit__(None, None, None)

    # ------------------------------------------------------------------ helpers

    async def _retrying(
        self,
        what: str,
        attempt_fn: Callable[[], Awaitable[T]],
        budget: float | None,
        *,
        on_stale: Callable[[], Awaitable[object]] | None = None,
    ) -> T:
        """Run ``attempt_fn`` until it succeeds, retrying retriable failures until the deadline."""
        limit = self.timeout if budget is None else budget
        last: Exception | None = None
        attempt = 0
        with anyio.move_on_after(limit):
            while True:
                try:
                    return await attempt_fn()
                except _Final as final:
                    raise final.error from None
                except (BrokerError, KafkaConnectionError) as exc:
                    if not _is_retriable(exc):
                        raise
                    last = exc
                if isinstance(last, StaleMetadataError) and on_stale is not None:
                    await on_stale()
                await self.cluster.backoff(attempt)
                attempt += 1
        raise TimeoutError(f"{what} did not complete within {limit} s (last error: {last})")

    async def _any_request(self, key: ApiKey, make: Callable[[Any], Any]) -> Any:
        conn = await self.cluster.any_connection()
        version = require(conn.versions, key)
        return await conn.request(make(request_module(key, version)))

    async def _coordinator_request(
        self, group_id: str, key: ApiKey, make: Callable[[Any], Any]
    ) -> Any:
        node = await self.cluster.find_coordinator(group_id)
        version = await self.cluster.version(node, key)
        return await self.cluster.request(node, make(request_module(key, version)))

    async def _wait_for_metadata(
        self,
        what: str,
        topics: Sequence[str],
        ready: Callable[[dict[str, Any]], bool],
        budget: float | None,
    ) -> None:
        limit = self.timeout if budget is None else budget
        attempt = 0
        last: Exception | None = None
        with anyio.move_on_after(limit):
            while True:
                try:
                    if ready(await self.cluster.refresh_metadata(topics)):
                        return
                except KafkaConnectionError as exc:
                    last = exc
                await self.cluster.backoff(attempt)
                attempt += 1
        suffix = f" (last error: {last})" if last is not None else ""
        raise TimeoutError(f"metadata did not show {what} within {limit} s{suffix}")

    # ------------------------------------------------------------------ topics

    async def create_topics(
        self,
        topics: Mapping[str, int] | Iterable[NewTopic],
        *,
        timeout: float | None = None,
        exist_ok: bool = False,
    ) -> None:
        """Create topics and wait until every partition has a leader that serves it.

        Args:
            topics: ``{name: partitions}`` or :class:`NewTopic` objects.
            timeout: seconds for the whole operation (default: the admin's timeout).
            exist_ok: do not raise for topics that already exist (their
                partition count is left as it is).

        Raises:
            TopicAlreadyExists: a topic exists and ``exist_ok`` is False.
            BrokerError: the broker refused a topic (invalid name, partitions,
                replication factor or config ...); the message names the topic.
            TimeoutError: the topics did not appear with serving leaders in time.
        """
        if isinstance(topics, Mapping):
            new = [NewTopic(name, int(count)) for name, count in topics.items()]
        else:
            new = list(topics)
        if not new:
            return
        limit = self.timeout if timeout is None else timeout

        def make(mod: Any, batch: list[NewTopic]) -> Any:
            return build(
                mod.CreateTopicsRequest,
                topics=tuple(
                    build(
                        mod.CreatableTopic,
                        name=t.name,
                        num_partitions=t.partitions,
                        replication_factor=t.replication_factor,
                        assignments=(),
                        configs=tuple(
                            build(mod.CreatableTopicConfig, name=k, value=v)
                            for k, v in t.configs.items()
                        ),
                    )
                    for t in batch
                ),
                timeout=ms(limit),
                validate_only=False,
            )

        pending = {t.name: t for t in new}

        async def attempt() -> None:
            nonlocal pending
            to_send = list(pending.values())
            if not to_send:
                return
            resp = await self._any_request(ApiKey.CREATE_TOPICS, lambda mod: make(mod, to_send))
            retry: dict[str, NewTopic] = {}
            first_error: BrokerError | None = None
            for result in resp.topics:
                code = int(result.error_code)
                if not code:
                    continue
                err = error_for_code(code, f"topic {result.name!r}: {result.error_message}")
                if isinstance(err, TopicAlreadyExists) and exist_ok:
                    continue
                if _is_retriable(err) and not isinstance(err, TopicAlreadyExists):
                    retry[result.name] = pending[result.name]
                    if first_error is None:
                        first_error = err
                    continue
                raise err
            pending = retry
            if first_error is not None:
                raise first_error

        deadline = anyio.current_time() + limit
        await self._retrying("CreateTopics", attempt, limit)
        counts = {t.name: t.partitions for t in new}

        def ready(md: dict[str, Any]) -> bool:
            for name, count in counts.items():
                info = md.get(name)
                if info is None or info.error_code:
                    return False
                if not exist_ok and len(info.partitions) < count:
                    return False
                if not info.partitions or any(p.leader < 0 for p in info.partitions.values()):
                    return False
            return True

        await self._wait_for_metadata(
            f"topics {sorted(counts)}", sorted(counts), ready, _remaining(deadline)
        )
        await self._wait_until_served(sorted(counts), deadline)

    async def _wait_until_served(self, topics: Sequence[str], deadline: float) -> None:
        """Wait until each partition's leader serves it (answers ListOffsets without error).

        Metadata names a leader slightly before that broker has opened the
        partition's log; requests in that window get NOT_LEADER_OR_FOLLOWER.
        """
        tps = {
            TopicPartition(name, p)
            for name in topics
            if name in self.cluster.topics
            for p in self.cluster.topics[name].partitions
        }
        await self._list_offsets(tps, _LATEST_TIMESTAMP, False, _remaining(deadline))

    async def delete_topics(
        self,
        names: Iterable[str],
        *,
        timeout: float | None = None,
        missing_ok: bool = False,
    ) -> None:
        """Delete topics and wait until metadata no longer shows them.

        Args:
            names: the topics to delete.
            timeout: seconds for the whole operation.
            missing_ok: do not raise for topics that do not exist.

        Raises:
            UnknownTopicOrPartition: a topic does not exist and ``missing_ok`` is False.
            BrokerError: the broker refused the deletion.
            TimeoutError: the topics were still listed when the deadline passed.
        """
        topics = sorted(set(names))
        if not topics:
            return
        limit = self.timeout if timeout is None else timeout
        pending = list(topics)

        async def attempt() -> None:
            nonlocal pending
            to_send = pending
            resp = await self._any_request(
                ApiKey.DELETE_TOPICS,
                lambda mod: build(
                    mod.DeleteTopicsRequest,
                    topic_names=tuple(to_send),
                    topics=tuple(
                        build(mod.DeleteTopicState, name=n, topic_id=None) for n in to_send
                    )
                    if hasattr(mod, "DeleteTopicState")
                    else (),
                    timeout=ms(limit),
                ),
            )
            retry: list[str] = []
            first_error: BrokerError | None = None
            for result in resp.responses:
                code = int(result.error_code)
                if not code:
                    continue
                err = error_for_code(code, f"topic {result.name!r}: {result.error_message}")
                if isinstance(err, UnknownTopicOrPartition):
                    if missing_ok:
                        continue
                    raise _Final(err)
                if _is_retriable(err):
                    retry.append(result.name)
                    first_error = first_error or err
                    continue
                raise err
            pending = retry
            if first_error is not None:
                raise first_error

        deadline = anyio.current_time() + limit
        await self._retrying("DeleteTopics", attempt, limit)

        def gone(md: dict[str, Any]) -> bool:
            return all(md.get(n) is None or md[n].error_code for n in topics)

        await self._wait_for_metadata(f"deletion of {topics}", topics, gone, _remaining(deadline))

    async def create_partitions(
        self,
        topic: str,
        total_count: int,
        *,
        timeout: float | None = None,
    ) -> None:
        """Grow ``topic`` to ``total_count`` partitions and wait until metadata shows them.

        Raises:
            BrokerError: e.g. INVALID_PARTITIONS when ``total_count`` is not
                larger than the current count, UNKNOWN_TOPIC_OR_PARTITION.
            TimeoutError: the new partitions did not get leaders in time.
        """
        limit = self.timeout if timeout is None else timeout

        async def attempt() -> None:
            resp = await self._any_request(
                ApiKey.CREATE_PARTITIONS,
                lambda mod: build(
                    mod.CreatePartitionsRequest,
                    topics=(
                        build(
                            mod.CreatePartitionsTopic,
                            name=topic,
                            count=total_count,
                            assignments=None,
                        ),
                    ),
                    timeout=ms(limit),
                    validate_only=False,
                ),
            )
            for result in resp.results:
                if result.error_code:
                    err = error_for_code(
                        int(result.error_code), f"topic {result.name!r}: {result.error_message}"
                    )
                    raise _Final(err) if isinstance(err, UnknownTopicOrPartition) else err

        deadline = anyio.current_time() + limit
        await self._retrying("CreatePartitions", attempt, limit)

        def ready(md: dict[str, Any]) -> bool:
            info = md.get(topic)
            return (
                info is not None
                and not info.error_code
                and len(info.partitions) >= total_count
                and all(p.leader >= 0 for p in info.partitions.values())
            )

        await self._wait_for_metadata(
            f"{total_count} partitions of {topic!r}", [topic], ready, _remaining(deadline)
        )
        await self._wait_until_served([topic], deadline)

    # ------------------------------------------------------------------ offsets

    async def list_offsets(
        self,
        tps: Iterable[TopicPartition],
        spec: OffsetSpec,
        *,
        read_committed: bool = False,
    ) -> dict[TopicPartition, int]:
        """Look up offsets by position or time.

        Args:
            tps: the partitions.
            spec: ``"earliest"`` (log start offset), ``"latest"`` (the high
                watermark, or the last stable offset under ``read_committed``),
                or a timestamp in ms: the first offset whose timestamp is at or
                after it, or -1 if no such record exists.
            read_committed: use READ_COMMITTED isolation (matters for ``"latest"``).

        Returns:
            The offset of each partition.

        Raises:
            UnknownTopicOrPartition: metadata does not know a topic.
            BrokerError: another non-retriable error.
            TimeoutError: leadership stayed stale for the admin's timeout.
        """
        if spec == "earliest":
            ts = _EARLIEST_TIMESTAMP
        elif spec == "latest":
            ts = _LATEST_TIMESTAMP
        elif isinstance(spec, int) and not isinstance(spec, bool) and spec >= 0:
            ts = spec
        else:
            raise ValueError(f"offset spec must be 'earliest', 'latest' or ms >= 0, not {spec!r}")
        return await self._list_offsets(set(tps), ts, read_committed, None)

    async def _list_offsets(
        self,
        wanted: set[TopicPartition],
        ts: int,
        read_committed: bool,
        budget: float | None,
    ) -> dict[TopicPartition, int]:
        result: dict[TopicPartition, int] = {}
        if not wanted:
            return result
        topics = sorted({tp.topic for tp in wanted})

        async def refresh() -> None:
            md = await self.cluster.refresh_metadata(topics)
            for name in topics:
                info = md.get(name)
                if info is not None and info.error_code == _UNKNOWN_TOPIC:
                    raise error_for_code(_UNKNOWN_TOPIC, f"topic {name!r}")

        if any(self.cluster.leader_for(tp) < 0 for tp in wanted):
            await refresh()

        async def attempt() -> None:
            todo = wanted - result.keys()
            by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
            stale: Exception | None = None
            for tp in todo:
                leader = self.cluster.leader_for(tp)
                if leader < 0:
                    stale = error_for_code(3, f"no leader known for {tp}")
                    continue
                by_leader[leader].append(tp)
            errors: list[Exception] = []

            async def one(node: int, parts: list[TopicPartition]) -> None:
                try:
                    await self._list_offsets_on(node, parts, ts, read_committed, result)
                except (BrokerError, KafkaConnectionError) as exc:
                    errors.append(exc)

            async with anyio.create_task_group() as tg:
                for node, parts in by_leader.items():
                    tg.start_soon(one, node, parts)
            for exc in errors:
                if not _is_retriable(exc):
                    raise exc
            if errors:
                raise errors[0]
            if stale is not None:
                raise stale

        await self._retrying("ListOffsets", attempt, budget, on_stale=refresh)
        return {tp: result[tp] for tp in wanted}

    async def _list_offsets_on(
        self,
        node: int,
        parts: list[TopicPartition],
        ts: int,
        read_committed: bool,
        out: dict[TopicPartition, int],
    ) -> None:
        version = await self.cluster.version(node, ApiKey.LIST_OFFSETS)
        mod = request_module(ApiKey.LIST_OFFSETS, version)
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in parts:
            by_topic[tp.topic].append(tp.partition)
        req = build(
            mod.ListOffsetsRequest,
            replica_id=-1,
            isolation_level=1 if read_committed else 0,
            topics=tuple(
                build(
                    mod.ListOffsetsTopic,
                    name=topic,
                    partitions=tuple(
                        build(mod.ListOffsetsPartition, partition_index=p, timestamp=ts)
                        for p in sorted(ps)
                    ),
                )
                for topic, ps in sorted(by_topic.items())
            ),
        )
        resp: Any = await self.cluster.request(node, req)
        first: BrokerError | None = None
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, int(p.partition_index))
                if p.error_code:
                    err = error_for_code(int(p.error_code), f"ListOffsets {tp} on broker {node}")
                    if not _is_retriable(err):
                        raise err
                    first = first or err
                    continue
                out[tp] = int(p.offset)
        if first is not None:
            raise first

    # ------------------------------------------------------------------ groups

    async def list_groups(self) -> list[GroupListing]:
        """List the groups of every broker in the cluster, sorted by id.

        Raises:
            BrokerError: a broker answered with a non-retriable error.
            TimeoutError: some broker could not be asked before the deadline.
        """
        await self.cluster.refresh_metadata([])
        nodes = sorted(self.cluster.brokers)
        found: dict[str, GroupListing] = {}
        for node in nodes:

            async def attempt(node: int = node) -> None:
                version = await self.cluster.version(node, ApiKey.LIST_GROUPS)
                mod = request_module(ApiKey.LIST_GROUPS, version)
                resp: Any = await self.cluster.request(
                    node, build(mod.ListGroupsRequest, states_filter=(), types_filter=())
                )
                if resp.error_code:
                    raise error_for_code(int(resp.error_code), f"ListGroups on broker {node}")
                for g in resp.groups:
                    state = str(getattr(g, "group_state", "") or "")
                    found[g.group_id] = GroupListing(g.group_id, g.protocol_type, state)

            await self._retrying(f"ListGroups on broker {node}", attempt, None)
        return [found[k] for k in sorted(found)]

    async def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        """Describe groups (state, protocol and members).

        A group that does not exist is described with state ``Dead`` and no
        members, as the broker reports it.

        Raises:
            BrokerError: a non-retriable error for a group (e.g. authorization).
            TimeoutError: the coordinator could not be reached in time.
        """
        out: dict[str, GroupDescription] = {}
        for group_id in dict.fromkeys(group_ids):

            async def attempt(group_id: str = group_id) -> GroupDescription:
                resp = await self._coordinator_request(
                    group_id,
                    ApiKey.DESCRIBE_GROUPS,
                    lambda mod: build(
                        mod.DescribeGroupsRequest,
                        groups=(group_id,),
                        include_authorized_operations=False,
                    ),
                )
                for g in resp.groups:
                    if g.group_id != group_id:
                        continue
                    if g.error_code:
                        raise error_for_code(int(g.error_code), f"group {group_id!r}")
                    members = tuple(
                        MemberDescription(
                            member_id=m.member_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            group_instance_id=m.group_instance_id,
                            protocol_type=g.protocol_type,
                            raw_metadata=bytes(m.member_metadata),
                            raw_assignment=bytes(m.member_assignment),
                        )
                        for m in g.members
                    )
                    return GroupDescription(
                        group_id, g.group_state, g.protocol_type, g.protocol_data, members
                    )
                raise error_for_code(
                    16, f"DescribeGroups response did not mention group {group_id!r}"
                )

            out[group_id] = await self._retrying(f"DescribeGroups {group_id!r}", attempt, None)
        return out

    async def delete_groups(self, group_ids: Iterable[str]) -> None:
        """Delete groups and their committed offsets.

        Raises:
            GroupIdNotFound: a group does not exist.
            BrokerError: e.g. NON_EMPTY_GROUP when the group still has members.
            TimeoutError: the coordinator could not be reached in time.
        """
        for group_id in dict.fromkeys(group_ids):

            async def attempt(group_id: str = group_id) -> None:
                resp = await self._coordinator_request(
                    group_id,
                    ApiKey.DELETE_GROUPS,
                    lambda mod: build(mod.DeleteGroupsRequest, groups_names=(group_id,)),
                )
                for r in resp.results:
                    if r.group_id == group_id and r.error_code:
                        raise error_for_code(int(r.error_code), f"group {group_id!r}")

            await self._retrying(f"DeleteGroups {group_id!r}", attempt, None)

    async def fetch_offsets(
        self,
        group_id: str,
        tps: Iterable[TopicPartition] | None = None,
    ) -> dict[TopicPartition, int]:
        """Fetch a group's committed offsets.

        Args:
            group_id: the group.
            tps: the partitions to look up (None: every partition the group
                committed for).

        Returns:
            The committed offset of each partition that has one; partitions
            without a committed offset are left out.

        Raises:
            BrokerError: a non-retriable error (group-level or per partition).
            TimeoutError: the coordinator could not be reached in time.
        """
        wanted = None if tps is None else sorted(set(tps))

        def make(mod: Any) -> Any:
            topics: tuple[Any, ...] | None = None
            if wanted is not None:
                by_topic: dict[str, list[int]] = defaultdict(list)
                for tp in wanted:
                    by_topic[tp.topic].append(tp.partition)
                topics = tuple(
                    build(mod.OffsetFetchRequestTopic, name=t, partition_indexes=tuple(ps))
                    for t, ps in sorted(by_topic.items())
                )
            return build(
                mod.OffsetFetchRequest, group_id=group_id, topics=topics, require_stable=False
            )

        async def attempt() -> dict[TopicPartition, int]:
            resp = await self._coordinator_request(group_id, ApiKey.OFFSET_FETCH, make)
            if getattr(resp, "error_code", 0):
                raise error_for_code(int(resp.error_code), f"OffsetFetch for {group_id!r}")
            out: dict[TopicPartition, int] = {}
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, int(p.partition_index))
                    if p.error_code:
                        raise error_for_code(int(p.error_code), f"OffsetFetch {group_id!r} {tp}")
                    if int(p.committed_offset) >= 0:
                        out[tp] = int(p.committed_offset)
            return out

        return await self._retrying(f"OffsetFetch {group_id!r}", attempt, None)
