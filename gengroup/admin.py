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
``create_topics`` returns. Sending those requests and waiting for the metadata is
:mod:`gengroup.admin_topics`'.

Group operations go to the group's coordinator through a
:class:`~gengroup.io.coordinator.CoordinatorClient` per group, which finds the
coordinator and follows it when it moves; coordinator errors (moved, loading,
not available) and connection failures are retried with backoff until the
operation's timeout (on a :class:`~gengroup.io.cluster.Cluster` given to the
admin with an ``unreachable_timeout``, a coordinator unavailable that long
already, counted across calls, is
:class:`~gengroup._errors.CoordinatorUnavailable` sooner); an attempt waits
``request_timeout`` at most (or the time left), and one that timed out looks
the coordinator up again (a hung coordinator's group moves). ListOffsets,
DeleteRecords and OffsetFetch are :mod:`gengroup.io.offsets`' (ListOffsets and
DeleteRecords to each partition's leader, one request per leader; stale
leadership refreshes metadata). The requests that describe and delete groups,
and reading their answers, are :mod:`gengroup.admin_groups`'.

Every request goes out through :meth:`Cluster.call
<gengroup.io.cluster.Cluster.call>`, every retry loop is
:func:`gengroup.io.retry.retry`, and what is retried is the error table's
decision (:func:`gengroup._errors.is_retriable`). Every wait has a deadline: an
operation that cannot complete in time raises :class:`TimeoutError` naming the
last error seen.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Self, TypeVar, Unpack

from kio.schema.errors import ErrorCode

from . import admin_groups as group_ops, admin_topics as topic_ops
from ._config import check_idle_limit, check_seconds, config_or_default
from ._errors import (
    BrokerError,
    GengroupError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
    error_for_code,
)
from ._types import GenerationIdentity, TopicPartition
from .admin_types import (
    INT32_MAX,
    INT64_MAX,
    GroupDescription,
    GroupLag,
    GroupListing,
    MemberDescription,
    NewTopic,
    PartitionLag,
    check_int,
    check_offsets,
    check_partitions,
    names_of,
    new_topics,
)
from .io import offsets
from .io.cluster import Cluster, TopicInfo
from .io.coordinator import CoordinatorClient
from .io.offsets import OffsetSpec
from .io.request import MakeRequest
from .io.retry import GiveUp, retry, seconds_left
from .io.security import Security, SecuritySettings
from .io.shared import shared_or_own
from .membership import requests
from .protocol.framing import build, check_client_id, wait_ms
from .protocol.versions import ApiKey

__all__ = [
    "Admin",
    "AdminSettings",
    "GroupDescription",
    "GroupLag",
    "GroupListing",
    "PartitionLag",
    "AdminConfig",
    "MemberDescription",
    "NewTopic",
    "OffsetSpec",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AdminConfig(Security):
    """The settings of an :class:`Admin` (validated at construction).

    Attributes:
        client_id: client id of a cluster the admin opens itself.
        timeout: default seconds an operation may take, including its metadata wait.
        connections_max_idle: seconds after which a cluster the admin opens
            itself closes a connection that has had no request in flight,
            before the broker's own idle limit does (None: never).
        security_protocol, ssl_*, sasl_*: :class:`~gengroup.io.security.Security`'s, inherited.

    Raises:
        ConfigError: ``timeout`` is not a positive number of seconds,
            ``connections_max_idle`` neither that nor None, or
            ``client_id`` is not a string a request header holds.
    """

    client_id: str = "gengroup-admin"
    timeout: float = 30.0
    connections_max_idle: float | None = 540.0

    def __post_init__(self) -> None:
        Security.__post_init__(self)
        check_seconds("timeout", self.timeout)
        check_idle_limit(self.connections_max_idle)
        check_client_id(self.client_id)


class AdminSettings(SecuritySettings, total=False):
    """:class:`AdminConfig`'s fields as keyword arguments of :class:`Admin` (for type checkers)."""

    client_id: str
    timeout: float
    connections_max_idle: float | None


class Admin:
    """Administrative operations on a Kafka cluster.

    Args:
        cluster: an open :class:`Cluster` to use (not closed by the admin), or
            bootstrap addresses (``"host:port"`` or a list of them) for a
            cluster the admin opens and closes itself.
        config: the settings (default: :class:`AdminConfig`'s defaults).
        **settings: settings to use instead of ``config``'s, by
            :class:`AdminConfig` field name (``client_id``, ``timeout``).

    Every operation takes ``timeout=``, its seconds (default: the admin's
    ``timeout``), checked as :class:`AdminConfig`'s: a value that is not a
    positive finite number is a :class:`ConfigError` (a ValueError) before
    anything is sent.

    Raises:
        ConfigError: an invalid setting (see :class:`AdminConfig`), or a security
            setting a shared ``cluster`` lacks.
        TypeError: a ``config`` that is not an :class:`AdminConfig`.

    An operation called after the admin's ``async with`` exited, or after
    the shared ``cluster`` was closed, raises
    :class:`~gengroup.ConnectionClosed` at once: nothing is sent or retried.
    An Admin is entered once: entering it again, or leaving it unentered,
    raises :class:`~gengroup.GengroupError`.

    Example::

        async with Admin("127.0.0.1:9092") as admin:
            await admin.create_topics({"payments": 6}, exist_ok=True)
            print(await admin.list_offsets([TopicPartition("payments", 0)], "latest"))
    """

    def __init__(
        self,
        cluster: Cluster | Sequence[str] | str,
        config: AdminConfig | None = None,
        **settings: Unpack[AdminSettings],
    ) -> None:
        config = config_or_default(AdminConfig, config)
        self.config = replace(config, **settings) if settings else config
        self.cluster, self._owns_cluster = shared_or_own(
            cluster,
            client_id=self.config.client_id,
            connections_max_idle=self.config.connections_max_idle,
            security=self.config,
        )
        self._coordinators: dict[str, CoordinatorClient] = {}
        self._stack = AsyncExitStack()
        self._entered = False

    @property
    def timeout(self) -> float:
        """Default seconds an operation may take (:attr:`AdminConfig.timeout`)."""
        return self.config.timeout

    async def __aenter__(self) -> Self:
        if self._entered:
            raise GengroupError("an Admin can be entered only once; make a new Admin")
        self._entered = True
        if self._owns_cluster:
            await self._stack.enter_async_context(self.cluster)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self._entered:
            raise GengroupError("the Admin was not entered (async with)")
        # The body's exception is not handed to the cluster's task group, which
        # would wrap it in an ExceptionGroup; it propagates unchanged.
        await self._stack.aclose()

    # ------------------------------------------------------------------ helpers

    async def _retrying(
        self,
        what: str,
        attempt: Callable[[], Awaitable[T]],
        timeout: float | None,
        *,
        refresh_metadata: Callable[[], Awaitable[object]] | None = None,
    ) -> T:
        """Run ``attempt`` until it succeeds, retrying what the error table retries."""
        return await retry(
            what,
            attempt,
            timeout=self._limit(timeout)[0],
            backoff=self.cluster.retry_backoff,
            refresh_metadata=refresh_metadata,
            waiting_on=self.cluster.waiting_on,
        )

    def _limit(self, timeout: float | None) -> tuple[float, Callable[[], float]]:
        """An operation's time limit (``timeout`` or the default) and its seconds left.

        Raises:
            ConfigError: ``timeout`` is not a positive finite number of seconds
                (checked as :class:`AdminConfig`'s, before anything is sent).
        """
        if timeout is not None:
            check_seconds("timeout", timeout)
        limit = self.timeout if timeout is None else timeout
        return limit, seconds_left(limit)

    def coordinator(self, group_id: str) -> CoordinatorClient:
        """The client of ``group_id``'s coordinator (one per group, kept by the admin)."""
        client = self._coordinators.get(group_id)
        if client is None:
            client = self._coordinators[group_id] = CoordinatorClient(self.cluster, group_id)
        return client

    # ------------------------------------------------------------------ topics

    async def metadata(
        self, topics: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> dict[str, TopicInfo]:
        """The cluster's metadata of ``topics`` (None: every topic), by name.

        Connection failures are retried with backoff until ``timeout``
        (default: the admin's), so a call made while the brokers restart
        waits for them. The admin's cluster caches the answer.

        Returns:
            Each topic in the answer (its partitions, leaders, ``is_internal``),
            a topic that does not exist with error code UNKNOWN_TOPIC_OR_PARTITION.
            A partition the cache knows at a newer leader epoch (a broker that
            has not heard of a leadership change yet answered) is as cached.

        Raises:
            TypeError: ``topics`` is one string, not a list of them.
            TimeoutError: no broker answered within ``timeout`` (naming the last error).
        """
        names = None if topics is None else names_of(topics, "metadata")
        return await self._retrying(
            "metadata", partial(self.cluster.refresh_metadata, names), timeout
        )

    async def create_topics(
        self,
        topics: Mapping[str, int] | Iterable[NewTopic],
        *,
        timeout: float | None = None,
        exist_ok: bool = False,
    ) -> None:
        """Create topics and wait until every partition has a leader that serves it.

        Args:
            topics: ``{name: partitions}`` (with the broker's default
                replication factor) or :class:`NewTopic` objects.
            timeout: seconds for the whole operation (default: the admin's timeout).
            exist_ok: do not raise for topics that already exist (their
                partition count is left as it is).

        Raises:
            TypeError: ``topics`` is neither of those (a name, one NewTopic ...).
            TopicAlreadyExists: a topic exists and ``exist_ok`` is False.
            BrokerError: the broker refused a topic (invalid name, partitions,
                replication factor or config ...); the message names the topic.
            TimeoutError: the topics did not appear with serving leaders in time.
        """
        new = new_topics(topics)
        if not new:
            return

        def make(mod: Any, batch: list[str], limit: float) -> Any:
            return build(
                mod.CreateTopicsRequest,
                topics=tuple(
                    build(
                        mod.CreatableTopic,
                        name=new[name].name,
                        num_partitions=new[name].partitions,
                        replication_factor=new[name].replication_factor,
                        assignments=(),
                        configs=tuple(
                            build(mod.CreatableTopicConfig, name=k, value=v)
                            for k, v in new[name].configs.items()
                        ),
                    )
                    for name in batch
                ),
                timeout=wait_ms(limit),
                validate_only=False,
            )

        remaining = await topic_ops.topic_requests(
            self.cluster,
            ApiKey.CREATE_TOPICS,
            list(new),
            make,
            "topics",
            lambda err: exist_ok and isinstance(err, TopicAlreadyExists),
            self._limit(timeout)[0],
        )
        counts = {name: t.partitions for name, t in new.items()}

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

        await topic_ops.wait_for_metadata(
            self.cluster, f"topics {sorted(counts)}", sorted(counts), ready, remaining()
        )
        await topic_ops.wait_until_served(self.cluster, sorted(counts), remaining())

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
            TypeError: ``names`` is one string, not a list of them.
            UnknownTopicOrPartition: a topic does not exist and ``missing_ok`` is False.
            BrokerError: the broker refused the deletion.
            TimeoutError: the topics were still listed when the deadline passed.
        """
        topics = sorted(names_of(names, "delete_topics"))
        if not topics:
            return

        def make(mod: Any, batch: list[str], limit: float) -> Any:
            return build(
                mod.DeleteTopicsRequest,
                topic_names=tuple(batch),
                topics=tuple(build(mod.DeleteTopicState, name=n, topic_id=None) for n in batch)
                if hasattr(mod, "DeleteTopicState")
                else (),
                timeout=wait_ms(limit),
            )

        def accept(err: BrokerError) -> bool:
            if isinstance(err, UnknownTopicOrPartition):
                if missing_ok:
                    return True
                raise GiveUp(err)
            return False

        remaining = await topic_ops.topic_requests(
            self.cluster,
            ApiKey.DELETE_TOPICS,
            topics,
            make,
            "responses",
            accept,
            self._limit(timeout)[0],
        )

        def gone(md: dict[str, Any]) -> bool:
            return all(md.get(n) is None or md[n].error_code for n in topics)

        await topic_ops.wait_for_metadata(
            self.cluster, f"deletion of {topics}", topics, gone, remaining()
        )

    async def create_partitions(
        self,
        topic: str,
        total_count: int,
        *,
        timeout: float | None = None,
    ) -> None:
        """Grow ``topic`` to ``total_count`` partitions and wait until metadata shows them.

        Raises:
            ValueError: ``total_count`` is not from 1 to 2**31 - 1.
            BrokerError: e.g. INVALID_PARTITIONS when ``total_count`` is not
                larger than the current count, UNKNOWN_TOPIC_OR_PARTITION.
            TimeoutError: the new partitions did not get leaders in time.
        """
        total_count = check_int("total_count", total_count, 1, INT32_MAX)

        def make(mod: Any, batch: list[str], limit: float) -> Any:
            return build(
                mod.CreatePartitionsRequest,
                topics=tuple(
                    build(mod.CreatePartitionsTopic, name=n, count=total_count, assignments=None)
                    for n in batch
                ),
                timeout=wait_ms(limit),
                validate_only=False,
            )

        def accept(err: BrokerError) -> bool:
            if isinstance(err, UnknownTopicOrPartition):
                raise GiveUp(err)
            return False

        remaining = await topic_ops.topic_requests(
            self.cluster,
            ApiKey.CREATE_PARTITIONS,
            [topic],
            make,
            "results",
            accept,
            self._limit(timeout)[0],
        )

        def ready(md: dict[str, Any]) -> bool:
            info = md.get(topic)
            return (
                info is not None
                and not info.error_code
                and len(info.partitions) >= total_count
                and all(p.leader >= 0 for p in info.partitions.values())
            )

        await topic_ops.wait_for_metadata(
            self.cluster, f"{total_count} partitions of {topic!r}", [topic], ready, remaining()
        )
        await topic_ops.wait_until_served(self.cluster, [topic], remaining())

    # ------------------------------------------------------------------ offsets

    async def list_offsets(
        self,
        tps: Iterable[TopicPartition],
        spec: OffsetSpec,
        *,
        read_committed: bool = False,
        timeout: float | None = None,
    ) -> dict[TopicPartition, int]:
        """Look up offsets by position or time, within ``timeout`` (default: the admin's).

        Args, returns and raises: see :func:`gengroup.io.offsets.list_offsets`
        (``spec`` is ``"earliest"``, ``"latest"`` or a timestamp in ms; a
        ``spec`` or a partition index the wire cannot carry is a ValueError;
        a topic name or anything else than TopicPartition objects in place
        of ``tps`` is a TypeError); a partition that the topic does not have
        is UnknownTopicOrPartition at once, as a topic that does not exist.
        """
        return await offsets.list_offsets(
            self.cluster,
            check_partitions(tps, "list_offsets"),
            spec,
            read_committed=read_committed,
            timeout=self._limit(timeout)[0],
            missing_partitions=True,
        )

    async def delete_records(
        self, before: Mapping[TopicPartition, int], *, timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """Delete the records below an offset of each partition, as retention does (DeleteRecords).

        Each partition's log start offset moves up to the offset given (never
        back): consumers can no longer fetch the records below it. The
        requests go to the partitions' leaders, one per leader, and follow
        leadership that moved (metadata refreshed, retried with backoff) until
        ``timeout``. Calling it again with the same offsets changes nothing,
        so a call that failed part-way can simply be repeated.

        Args:
            before: per partition, the new log start offset; ``-1`` deletes
                every record up to the high watermark.
            timeout: seconds for the whole operation (default: the admin's timeout).

        Returns:
            Each partition's low watermark (log start offset) after the
            deletion: the offset asked for, or more if it already was higher.

        Raises:
            TypeError: ``before`` is not a mapping of TopicPartition to offset
                (a topic name, a list ...), or an offset that is not an int.
            ValueError: an offset beyond an int64, a partition index beyond an int32.
            UnknownTopicOrPartition: a topic or partition that does not exist.
            OffsetOutOfRange: an offset above the partition's high watermark
                (or below -1).
            BrokerError: another refusal, naming the partition: POLICY_VIOLATION
                for a compacted topic (``cleanup.policy`` without ``delete``),
                INVALID_TOPIC_EXCEPTION for an internal topic,
                TOPIC_AUTHORIZATION_FAILED. Partitions of other leaders may
                have been deleted already.
            TimeoutError: leadership stayed stale (or followers did not catch
                up) until the deadline.

        Example::

            low = await admin.delete_records({TopicPartition("payments", 0): 1000})
            assert low[TopicPartition("payments", 0)] >= 1000
        """
        wanted = check_offsets(before, "delete_records")
        return await offsets.delete_records(self.cluster, wanted, timeout=self._limit(timeout)[0])

    # ------------------------------------------------------------------ groups

    async def _group_call(
        self,
        group_id: str,
        what: str,
        key: ApiKey,
        make: MakeRequest,
        parse: Callable[[Any], T],
        timeout: float | None = None,
    ) -> T:
        """A request to ``group_id``'s coordinator, retried until ``timeout`` (the admin's);
        see :meth:`CoordinatorClient.call_until`."""
        return await self.coordinator(group_id).call_until(
            f"{what} {group_id!r}", key, make, parse, timeout=self._limit(timeout)[0]
        )

    async def list_groups(self, *, timeout: float | None = None) -> list[GroupListing]:
        """List the groups of every broker in the cluster, sorted by id, within
        ``timeout`` (default: the admin's).

        Raises:
            BrokerError: a broker answered with a non-retriable error.
            TimeoutError: some broker could not be asked before the deadline.
        """
        left = self._limit(timeout)[1]  # one deadline: the metadata, then each broker
        await self._retrying(
            "metadata", partial(self.cluster.refresh_metadata, []), max(left(), 0.001)
        )
        found: dict[str, GroupListing] = {}
        for node in sorted(self.cluster.brokers):

            async def attempt(node: int = node) -> None:
                resp: Any = await self.cluster.call(
                    node,
                    ApiKey.LIST_GROUPS,
                    lambda mod: build(mod.ListGroupsRequest, states_filter=(), types_filter=()),
                    check=f"ListGroups on broker {node}",
                )
                for g in resp.groups:
                    state = str(getattr(g, "group_state", "") or "")
                    found[g.group_id] = GroupListing(g.group_id, g.protocol_type, state)

            await self._retrying(f"ListGroups on broker {node}", attempt, max(left(), 0.001))
        return [found[k] for k in sorted(found)]

    async def describe_groups(
        self, group_ids: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, GroupDescription]:
        """Describe groups (state, protocol and members), all within ``timeout``
        (default: the admin's).

        As Java's AdminClient: a group of the consumer group protocol
        (KIP-848) is described by ConsumerGroupDescribe (its members with
        their epochs and the partitions they hold, the group and assignment
        epochs, the assignor as ``protocol``), a classic group by
        DescribeGroups (see :mod:`gengroup.admin_groups`). A group that does
        not exist is described with state ``Dead`` and no members, as the
        broker reports it.

        Raises:
            TypeError: ``group_ids`` is one string, not a list of them.
            GroupIdNotFound: the one group asked for is of another type (a
                share or streams group, Kafka 4.1 and later), which neither
                request describes; among several, such a group is described
                as DescribeGroups reports it, ``Dead`` with no members.
            BrokerError: a non-retriable error for a group (e.g. authorization).
            TimeoutError: the coordinator could not be reached in time.
        """
        left = self._limit(timeout)[1]
        names = names_of(group_ids, "describe_groups")
        return {g: await self._describe_group(g, left, len(names) == 1) for g in names}

    async def _describe_group(
        self, group_id: str, left: Callable[[], float], other_types: bool = True
    ) -> GroupDescription:
        """ConsumerGroupDescribe of ``group_id``; DescribeGroups if not a consumer group."""
        return await group_ops.describe_group(
            self._group_call, self.cluster, group_id, left, other_types=other_types
        )

    async def delete_groups(
        self, group_ids: Iterable[str], *, timeout: float | None = None
    ) -> None:
        """Delete groups and their committed offsets, all within ``timeout``
        (default: the admin's).

        Every group is tried (several at once, each at its coordinator), as
        Java's ``deleteConsumerGroups`` does: one that fails does not keep the
        others from being deleted.

        Raises:
            TypeError: ``group_ids`` is one string, not a list of them.
            GroupsNotDeleted: of several groups, some could not be deleted:
                its ``deleted`` lists those that were, its ``errors`` holds
                each other group's error (one of those below).
            GroupIdNotFound: the one group asked for does not exist.
            BrokerError: the one group's refusal, e.g. NON_EMPTY_GROUP when it
                still has members.
            TimeoutError: the one group's coordinator could not be reached in time.
        """
        names = names_of(group_ids, "delete_groups")
        left = self._limit(timeout)[1]

        async def delete(group_id: str) -> None:
            await self._group_call(
                group_id,
                "DeleteGroups",
                ApiKey.DELETE_GROUPS,
                partial(group_ops.delete_groups_request, group_ids=(group_id,)),
                partial(group_ops.read_deleted_group, group_id=group_id),
                max(left(), 0.001),
            )

        await group_ops.delete_each(names, delete)

    async def fetch_offsets(
        self,
        group_id: str,
        tps: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
        timeout: float | None = None,
    ) -> dict[TopicPartition, int]:
        """Fetch a group's committed offsets (within ``timeout``, default: the admin's).

        Args:
            group_id: the group.
            tps: the partitions to look up (None: every partition the group
                committed for).
            require_stable: the newest offsets, answered once replicated, as
                members read them; a plain read is answered at the coordinator's
                high watermark, which just after a coordinator move can lag
                behind offsets the old one acknowledged (reads can go back).

        Returns:
            The committed offset of each partition that has one; partitions
            without a committed offset are left out.

        Raises:
            TypeError: ``tps`` is a topic name, or holds something else than
                TopicPartition objects.
            ValueError: a partition index beyond an int32.
            BrokerError: a non-retriable error (group-level or per partition).
            TimeoutError: the coordinator could not be reached in time.
        """
        wanted = None if tps is None else set(check_partitions(tps, "fetch_offsets"))
        committed = await self._group_call(
            group_id,
            "OffsetFetch",
            ApiKey.OFFSET_FETCH,
            lambda mod: offsets.offset_fetch_request(
                mod, group_id, wanted, require_stable=require_stable
            ),
            lambda resp: offsets.parse_offset_fetch(resp, group_id),
            timeout,
        )
        return {tp: off for tp, (off, _) in committed.items() if off >= 0}

    # ------------------------------------------------------------------ group offsets

    async def group_lag(
        self, group_id: str, topics: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> GroupLag:
        """A group's lag per partition: end offset minus committed offset.

        As ``kafka-consumer-groups --describe``: every partition the group
        committed for, and every partition assigned to a live member (named,
        committed or not: a member still on its first batch owns partitions
        with lag None), from OffsetFetch and :meth:`describe_groups` (a
        consumer-protocol group's members name their partitions in every state).

        Args:
            group_id: the group.
            topics: also report these topics' partitions the group has not
                committed for (lag None).
            timeout: seconds for the whole operation (default: the admin's timeout).

        A commit left for a partition that no longer exists (its topic was
        deleted, or has fewer partitions now; the coordinator keeps such
        offsets until offsets retention removes them, or
        :meth:`delete_offsets`) is listed with ``end`` and ``lag`` None, as
        Kafka's tool shows it (``-``) since KAFKA-17218: the other partitions'
        lag is reported all the same.

        Returns:
            Each partition's :class:`PartitionLag`, sorted, and the group's
            state; its ``total`` is the sum of the lags above 0, ``partial``
            when some lag is not known or the group is rebalancing.

        Raises:
            TypeError: ``topics`` is one string, not a list of them.
            BrokerError: a non-retriable error (e.g. authorization, such as
                TopicAuthorizationFailed for a topic the admin may not
                describe; a topic of ``topics`` that does not exist is
                UnknownTopicOrPartition). A retriable topic error (a topic
                still being created) is retried until the timeout.
            ProtocolError: a member's assignment is not a consumer-protocol one.
            TimeoutError: the cluster could not be asked in time.
        """
        left = self._limit(timeout)[1]  # one deadline for every step

        def rest() -> float:
            return max(left(), 0.001)

        committed = await self.fetch_offsets(group_id, timeout=rest())
        group = (await self.describe_groups([group_id], timeout=rest()))[group_id]
        asked = [] if topics is None else names_of(topics, "group_lag")
        tps = set(committed) | set(group.owners)
        for attempt in range(2):  # a topic deleted after the metadata: once more without it
            names = sorted({tp.topic for tp in tps} | set(asked))
            md = await self._retrying(
                "metadata", partial(topic_ops.lag_metadata, self.cluster, names), rest()
            )
            for name in asked:
                info = md.get(name)
                if info is None or info.error_code:
                    raise error_for_code(
                        info.error_code if info else int(ErrorCode.unknown_topic_or_partition),
                        f"topic {name!r}",
                    )
                tps.update(TopicPartition(name, p) for p in info.partitions)
            # Commits left for a deleted topic or a partition it no longer has
            # (kept until offsets retention): shown with end and lag unknown.
            gone = {tp for tp in tps if not topic_ops.listed(md, tp)}
            try:
                live = sorted(tps - gone)
                ends = await self.list_offsets(live, "latest", timeout=rest()) if live else {}
                # Nothing committed: a log with records has an unknown lag (the
                # member starts at its start_offset), an empty one a lag of 0.
                fresh = [tp for tp, end in ends.items() if end > 0 and tp not in committed]
                starts = await self.list_offsets(fresh, "earliest", timeout=rest()) if fresh else {}
            except UnknownTopicOrPartition:
                if attempt:
                    raise
                continue
            return GroupLag.of(committed, ends, group, gone, starts)
        raise AssertionError("unreachable")  # pragma: no cover

    async def reset_offsets(
        self,
        group_id: str,
        tps: Iterable[TopicPartition],
        *,
        to: OffsetSpec | None = None,
        offset: int | None = None,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> dict[TopicPartition, int]:
        """Move a group's committed offsets, as Kafka's ``kafka-consumer-groups --reset-offsets``.

        Refused while the group has members, classic or consumer-protocol
        (a live member would overwrite the new offsets with its next commit),
        as Kafka's tool does.

        Args:
            group_id: the group (with no live members).
            tps: the partitions to move.
            to: ``"earliest"``, ``"latest"``, or a timestamp in ms (the first
                offset at or after it; the end offset where there is none).
            offset: an explicit offset instead of ``to``, clamped to each
                partition's earliest..latest like Kafka's tool.
            dry_run: compute and return the plan without committing it.
            timeout: seconds for the whole operation (default: the admin's timeout).

        Returns:
            The new offset of each partition, in (topic, partition) order.

        Raises:
            TypeError: ``tps`` is a topic name, or holds something else than
                TopicPartition objects.
            ValueError: neither or both of ``to`` and ``offset``; an offset,
                timestamp or partition index beyond what the wire carries
                (int64, int64, int32).
            GroupIdNotFound: the group is of another type (share, streams).
            BrokerError: NON_EMPTY_GROUP when the group has members; an
                unknown topic or partition; a refused commit.
        """
        wanted = sorted(set(check_partitions(tps, "reset_offsets")))
        if (to is None) == (offset is None):
            raise ValueError("give exactly one of to= ('earliest', 'latest', ms) or offset=")
        if offset is not None:
            offset = check_int("offset", offset, 0, INT64_MAX)
        if to is not None:
            offsets.timestamp_for(to)  # a bad spec before any request
        left = self._limit(timeout)[1]  # one deadline for every step

        def rest() -> float:
            return max(left(), 0.001)

        described = (await self.describe_groups([group_id], timeout=rest()))[group_id]
        if described.members:
            raise error_for_code(
                int(ErrorCode.non_empty_group),
                f"group {group_id!r} has {len(described.members)} live member(s) "
                f"(state {described.state}); stop them before resetting its offsets",
            )
        if not wanted:
            return {}
        if offset is not None:
            low = await self.list_offsets(wanted, "earliest", timeout=rest())
            high = await self.list_offsets(wanted, "latest", timeout=rest())
            plan = {tp: min(max(offset, low[tp]), high[tp]) for tp in wanted}
        else:
            assert to is not None
            found = await self.list_offsets(wanted, to, timeout=rest())
            missing = [tp for tp, o in found.items() if o < 0]
            latest = await self.list_offsets(missing, "latest", timeout=rest()) if missing else {}
            plan = {tp: latest.get(tp, found[tp]) if found[tp] < 0 else found[tp] for tp in wanted}
        if not dry_run:
            identity = GenerationIdentity(group_id, -1, "", None)

            def parse(resp: Any) -> None:
                for tp, code in requests.parse_offset_commit(resp).items():
                    if code:
                        raise error_for_code(code, f"OffsetCommit of {group_id!r} for {tp}")

            await self._group_call(
                group_id,
                "OffsetCommit",
                ApiKey.OFFSET_COMMIT,
                partial(requests.offset_commit_request, identity=identity, offsets=plan),
                parse,
                rest(),
            )
        return plan

    async def delete_offsets(
        self, group_id: str, tps: Iterable[TopicPartition], *, timeout: float | None = None
    ) -> None:
        """Delete a group's committed offsets of some partitions (OffsetDelete),
        within ``timeout`` (default: the admin's); the group starts them from
        its ``start_offset`` next time.

        Raises:
            TypeError: ``tps`` is a topic name, or holds something else than
                TopicPartition objects.
            ValueError: a partition index beyond an int32.
            GroupIdNotFound: the group does not exist.
            BrokerError: GROUP_SUBSCRIBED_TO_TOPIC for a partition of a topic
                the group's live members subscribe to (its offsets are kept).
        """
        limit = self._limit(timeout)[0]
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(set(check_partitions(tps, "delete_offsets"))):
            by_topic.setdefault(tp.topic, []).append(tp.partition)

        if by_topic:
            await self._group_call(
                group_id,
                "OffsetDelete",
                ApiKey.OFFSET_DELETE,
                partial(group_ops.offset_delete_request, group_id=group_id, by_topic=by_topic),
                partial(group_ops.read_offset_delete, group_id=group_id),
                limit,
            )
