"""A small raw Kafka protocol client for the conformance suite.

Theory of operation:

Each simulated group member (and the "admin" that creates topics, describes
groups and fetches) owns one TCP connection, opened with
:func:`gengroup.io.connection.open_connection`. A broker serves the requests
of one connection strictly in order, so a member whose JoinGroup or SyncGroup
is parked blocks only its own connection, exactly as a real consumer does.

Requests are built with kio at explicit versions (:data:`VERSIONS`, each one
supported by both Apache Kafka 4.3 and the embedded broker) and the answers are
*normalised* into plain values that are equal whenever the two brokers
behaved the same:

* error codes become their names (``"REBALANCE_IN_PROGRESS"``);
* member ids, random on both brokers, become labels. A member's first id is
  labelled with the member's name (``"A"``); a later, different id given to a
  member of the same name gets a prime (``"A'"``, ``"A''"``); an id nobody was
  given is labelled ``"?1"``, ``"?2"``... in order of appearance;
* topic names, unique per scenario, become their aliases (``"t"``);
* JoinGroup protocol metadata and SyncGroup/DescribeGroups assignments are
  decoded with :mod:`gengroup.protocol.consumer_protocol` into short strings
  (``"A:t"`` = member A subscribed to ``t``; ``"t:0,1"`` = partitions 0 and 1
  of ``t``), falling back to hex for bytes that are not consumer-protocol data;
* lists whose order is a HashMap's iteration order in Kafka (group members)
  are sorted.

Nothing here judges the answers: a scenario records what the broker answered
and the test compares transcripts.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Final, Generic, TypeVar

import anyio
import anyio.abc
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from gengroup._errors import ProtocolError
from gengroup.io.cluster import parse_address
from gengroup.io.connection import BrokerConnection, open_connection
from gengroup.membership.requests import commit_request
from gengroup.protocol import consumer_protocol
from gengroup.protocol.consumer_protocol import PROTOCOL_TYPE, Assignment, Subscription
from gengroup.protocol.framing import (
    FrameBuffer,
    build,
    decode_response,
    encode_request,
    request_module,
)
from gengroup.protocol.versions import ApiKey

from .. import embedded as rq

__all__ = [
    "VERSIONS",
    "Admin",
    "Member",
    "Names",
    "CLOSED",
    "Pending",
    "RawConnection",
    "Session",
    "Transcript",
    "assignment_bytes",
    "by_name",
    "error_name",
    "id_shape",
    "open_session",
    "subscription_bytes",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

Transcript = list[tuple[str, Any]]
"""What a scenario observed: ``(step, normalised answer)`` in scenario order."""

VERSIONS: Final[Mapping[ApiKey, int]] = {
    ApiKey.JOIN_GROUP: 9,
    ApiKey.SYNC_GROUP: 5,
    ApiKey.HEARTBEAT: 4,
    ApiKey.LEAVE_GROUP: 5,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 8,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 4,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.CREATE_TOPICS: 7,
    ApiKey.FIND_COORDINATOR: 4,
    ApiKey.FETCH: 12,
    ApiKey.LIST_OFFSETS: 7,
}
"""The version of each API used unless a step asks for another one."""

DEFAULT_SESSION_MS: Final = 10_000
"""Session timeout of members that must not expire during a scenario."""

DEFAULT_REBALANCE_MS: Final = 5_000
"""Rebalance timeout of members unless a scenario needs another one."""

REQUEST_TIMEOUT: Final = 30.0
"""Seconds a single request may take before the connection gives up (hang guard)."""

POLL_INTERVAL: Final = 0.05
"""Seconds between two polls while waiting for a broker-side condition."""

VISIBILITY_WAIT: Final = 10.0
"""Seconds :meth:`Admin.wait_visible` waits for a new group to show in DescribeGroups."""

_UUID_RE: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def by_name(*scenarios: F) -> dict[str, F]:
    """``scenarios`` keyed by their function names (the ids the tests run them by)."""
    return {f.__name__: f for f in scenarios}


def error_name(code: Any) -> str:
    """The Kafka name of an error code, e.g. ``"ILLEGAL_GENERATION"``."""
    return ErrorCode(int(code)).name.upper()


def id_shape(member_id: str) -> str:
    """A member id with its trailing UUID replaced by ``<uuid>`` (``"conf-A-<uuid>"``)."""
    return _UUID_RE.sub("<uuid>", member_id)


def subscription_bytes(*topics: str) -> bytes:
    """JoinGroup protocol metadata: a consumer-protocol subscription to ``topics``."""
    return consumer_protocol.encode_subscription(Subscription(topics=tuple(topics)))


def assignment_bytes(partitions: Mapping[str, Sequence[int]]) -> bytes:
    """SyncGroup assignment bytes for ``{topic: partitions}``."""
    return consumer_protocol.encode_assignment(Assignment.from_mapping(partitions))


class Names:
    """Stable labels for broker-generated member ids and per-scenario topic names."""

    def __init__(self) -> None:
        self._labels: dict[str, str] = {}
        self._used: set[str] = set()
        self._unknown = 0

    def bind(self, value: str, label: str) -> str:
        """Label ``value`` (a member id or a topic name) as ``label``, primed until unique.

        Returns:
            The label of ``value`` (its existing one if it already had one).
        """
        if value in self._labels:
            return self._labels[value]
        while label in self._used:
            label += "'"
        self._labels[value] = label
        self._used.add(label)
        return label

    def label(self, value: str | None) -> str | None:
        """The label of ``value``; ``None`` and ``""`` are kept as they are."""
        if value is None or value == "":
            return value
        found = self._labels.get(value)
        if found is None:
            self._unknown += 1
            found = self.bind(value, f"?{self._unknown}")
        return found

    def member(self, member_id: str, instance_id: str | None, *details: str) -> str:
        """A described member as ``"label[/instance] detail..."``."""
        static = f"/{instance_id}" if instance_id else ""
        return " ".join((f"{self.label(member_id)}{static}", *details))

    def subscription(self, data: bytes) -> str:
        """Consumer-protocol subscription bytes as ``"t,u"`` (topic aliases), else hex."""
        if not data:
            return "-"
        try:
            sub = consumer_protocol.decode_subscription(bytes(data))
        except ProtocolError:
            return f"0x{bytes(data).hex()}"
        return ",".join(str(self.label(t)) for t in sub.topics)

    def assignment(self, data: bytes) -> str | None:
        """Assignment bytes as ``"t:0,1;u:2"``; ``None`` for the empty byte string."""
        if not data:
            return None
        try:
            decoded = consumer_protocol.decode_assignment(bytes(data))
        except ProtocolError:
            return f"0x{bytes(data).hex()}"
        return ";".join(
            f"{topic}:{','.join(str(p) for p in parts)}"
            for topic, parts in sorted(
                (str(self.label(t)), ps) for t, ps in decoded.as_mapping().items()
            )
        )


class Pending(Generic[T]):
    """The eventual result of a request running in the background."""

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        """Whether the request was answered (or failed)."""
        return self._event.is_set()

    async def _run(self, fn: Callable[[], Awaitable[T]]) -> None:
        try:
            self._value = await fn()
        except Exception as exc:
            self._error = exc
        finally:
            self._event.set()

    async def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the answer; return whether it came."""
        with anyio.move_on_after(timeout):
            await self._event.wait()
        return self.done

    async def result(self) -> T:
        """Wait for the answer; re-raises the request's failure."""
        await self._event.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


class _Client:
    """One connection, sending kio requests at explicit versions."""

    def __init__(self, conn: BrokerConnection, names: Names) -> None:
        self.conn = conn
        self.names = names

    def module(self, key: ApiKey, version: int | None) -> tuple[int, ModuleType]:
        """The kio request module of ``key`` at ``version`` (default :data:`VERSIONS`)."""
        v = VERSIONS[key] if version is None else version
        lo, hi = self.conn.broker_versions.get(int(key), (0, -1))
        if not lo <= v <= hi:
            raise AssertionError(f"the broker does not accept {key.name} v{v} (it has {lo}-{hi})")
        return v, request_module(key, v)

    async def send(self, request: Any) -> Any:
        """Send one request and return the decoded response."""
        return await self.conn.request(request)

    # -- group requests, raw: every field is explicit -----------------------

    async def join_raw(
        self,
        group_id: str,
        member_id: str,
        *,
        protocols: Sequence[tuple[str, bytes]],
        session_ms: int,
        rebalance_ms: int,
        instance_id: str | None,
        protocol_type: str,
        version: int | None,
    ) -> Any:
        _, mod = self.module(ApiKey.JOIN_GROUP, version)
        return await self.send(
            build(
                mod.JoinGroupRequest,
                group_id=group_id,
                session_timeout=datetime.timedelta(milliseconds=session_ms),
                rebalance_timeout=datetime.timedelta(milliseconds=rebalance_ms),
                member_id=member_id,
                group_instance_id=instance_id,
                protocol_type=protocol_type,
                protocols=tuple(
                    build(mod.JoinGroupRequestProtocol, name=name, metadata=metadata)
                    for name, metadata in protocols
                ),
                reason=None,
            )
        )

    async def commit(
        self,
        group_id: str,
        *,
        generation: int,
        member_id: str,
        instance_id: str | None,
        topic: str,
        offsets: Mapping[int, tuple[int, str | None]],
        version: int | None = None,
    ) -> dict[str, str]:
        """OffsetCommit of ``{partition: (offset, metadata)}`` in one topic.

        Returns:
            ``{"t[0]": "NONE", ...}``.
        """
        _, mod = self.module(ApiKey.OFFSET_COMMIT, version)
        resp = await self.send(
            commit_request(
                mod,
                group_id=group_id,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=instance_id,
                offsets=((topic, p, o, metadata) for p, (o, metadata) in sorted(offsets.items())),
            )
        )
        return {
            f"{self.names.label(t.name)}[{p.partition_index}]": error_name(p.error_code)
            for t in resp.topics
            for p in t.partitions
        }


class Member(_Client):
    """A simulated group member: one connection, its member id and generation.

    Every method sends one request with the member's current state unless
    overridden (``member_id=``, ``generation=``) and returns the normalised
    answer. A successful JoinGroup updates the member id and generation; a
    JoinGroup answered MEMBER_ID_REQUIRED updates the member id only.
    """

    def __init__(
        self,
        name: str,
        conn: BrokerConnection,
        names: Names,
        *,
        group_id: str,
        client_id: str,
        topics: Sequence[str],
        instance_id: str | None = None,
    ) -> None:
        super().__init__(conn, names)
        self.name = name
        self.group_id = group_id
        self.client_id = client_id
        self.topics = tuple(topics)
        self.instance_id = instance_id
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None

    def _adopt(self, member_id: str) -> None:
        if member_id:
            self.names.bind(member_id, self.name)
            self.member_id = member_id

    @property
    def label(self) -> str:
        """The label of the member's current id."""
        return str(self.names.label(self.member_id))

    def default_protocols(self) -> tuple[tuple[str, bytes], ...]:
        """``range`` with a subscription to the member's topics."""
        return (("range", subscription_bytes(*self.topics)),)

    async def join(
        self,
        *,
        protocols: Sequence[tuple[str, bytes]] | None = None,
        session_ms: int = DEFAULT_SESSION_MS,
        rebalance_ms: int = DEFAULT_REBALANCE_MS,
        member_id: str | None = None,
        group_id: str | None = None,
        protocol_type: str = PROTOCOL_TYPE,
        version: int | None = None,
    ) -> dict[str, Any]:
        """JoinGroup.

        Returns:
            ``error``, ``member`` (the id the answer carries), ``generation``,
            ``protocol_type``, ``protocol``, ``leader``, ``members`` (sorted
            ``"label[/instance]:topics"``, only the leader gets them) and
            ``skip_assignment``.
        """
        resp = await self.join_raw(
            self.group_id if group_id is None else group_id,
            self.member_id if member_id is None else member_id,
            protocols=self.default_protocols() if protocols is None else protocols,
            session_ms=session_ms,
            rebalance_ms=rebalance_ms,
            instance_id=self.instance_id,
            protocol_type=protocol_type,
            version=version,
        )
        error = error_name(resp.error_code)
        if member_id is None and error in ("NONE", "MEMBER_ID_REQUIRED"):
            self._adopt(resp.member_id)
        if member_id is None and error == "NONE":
            self.generation = int(resp.generation_id)
            self.protocol = resp.protocol_name
        members = sorted(
            f"{self.names.label(m.member_id)}"
            + (f"/{m.group_instance_id}" if getattr(m, "group_instance_id", None) else "")
            + f":{self.names.subscription(m.metadata)}"
            for m in resp.members
        )
        return {
            "error": error,
            "member": self.names.label(resp.member_id),
            "generation": int(resp.generation_id),
            "protocol_type": getattr(resp, "protocol_type", None),
            "protocol": resp.protocol_name,
            "leader": self.names.label(resp.leader),
            "members": members,
            "skip_assignment": bool(getattr(resp, "skip_assignment", False)),
        }

    async def sync(
        self,
        assignments: Mapping[Member | str, Mapping[str, Sequence[int]] | bytes] | None = None,
        *,
        generation: int | None = None,
        member_id: str | None = None,
        protocol_name: str | None = None,
        protocol_type: str | None = PROTOCOL_TYPE,
        version: int | None = None,
    ) -> dict[str, Any]:
        """SyncGroup; the leader passes ``{member: {topic: partitions}}``.

        Returns:
            ``error``, ``protocol_type``, ``protocol`` and ``assignment``
            (decoded, ``None`` when empty).
        """
        _, mod = self.module(ApiKey.SYNC_GROUP, version)
        items: list[Any] = []
        for who, value in (assignments or {}).items():
            mid = who.member_id if isinstance(who, Member) else who
            data = value if isinstance(value, bytes) else assignment_bytes(value)
            items.append(build(mod.SyncGroupRequestAssignment, member_id=mid, assignment=data))
        resp = await self.send(
            build(
                mod.SyncGroupRequest,
                group_id=self.group_id,
                generation_id=self.generation if generation is None else generation,
                member_id=self.member_id if member_id is None else member_id,
                group_instance_id=self.instance_id,
                protocol_type=protocol_type,
                protocol_name=self.protocol if protocol_name is None else protocol_name,
                assignments=tuple(items),
            )
        )
        return {
            "error": error_name(resp.error_code),
            "protocol_type": getattr(resp, "protocol_type", None),
            "protocol": getattr(resp, "protocol_name", None),
            "assignment": self.names.assignment(resp.assignment),
        }

    async def heartbeat(
        self,
        *,
        generation: int | None = None,
        member_id: str | None = None,
        group_id: str | None = None,
        version: int | None = None,
    ) -> str:
        """Heartbeat; returns the error name."""
        _, mod = self.module(ApiKey.HEARTBEAT, version)
        resp = await self.send(
            build(
                mod.HeartbeatRequest,
                group_id=self.group_id if group_id is None else group_id,
                generation_id=self.generation if generation is None else generation,
                member_id=self.member_id if member_id is None else member_id,
                group_instance_id=self.instance_id,
            )
        )
        return error_name(resp.error_code)

    async def heartbeat_until_not(self, answer: str, *, interval: float = 0.2) -> str:
        """Heartbeat every ``interval`` seconds while the answer is ``answer``; return the next."""
        first = await self.heartbeat()
        while first == answer:
            await anyio.sleep(interval)
            first = await self.heartbeat()
        return first

    async def leave(
        self,
        *,
        member_id: str | None = None,
        instance_id: str | bool | None = True,
        group_id: str | None = None,
        version: int | None = None,
    ) -> dict[str, Any]:
        """LeaveGroup of this member (v3+: a one-member batch; older: the top level).

        Args:
            member_id: the id to send (default: the member's).
            instance_id: ``True`` for the member's own, else the value to send.
            group_id: the group (default: the member's).
            version: the LeaveGroup version.

        Returns:
            ``error`` and, on v3+, ``members``: ``[(label, instance, error)]``.
        """
        v, mod = self.module(ApiKey.LEAVE_GROUP, version)
        mid = self.member_id if member_id is None else member_id
        gid = self.group_id if group_id is None else group_id
        instance = self.instance_id if instance_id is True else instance_id
        if v < 3:
            resp = await self.send(build(mod.LeaveGroupRequest, group_id=gid, member_id=mid))
            return {"error": error_name(resp.error_code)}
        resp = await self.send(
            build(
                mod.LeaveGroupRequest,
                group_id=gid,
                members=(
                    build(
                        mod.MemberIdentity, member_id=mid, group_instance_id=instance, reason=None
                    ),
                ),
            )
        )
        return {
            "error": error_name(resp.error_code),
            "members": [
                (self.names.label(m.member_id), m.group_instance_id, error_name(m.error_code))
                for m in resp.members
            ],
        }

    async def commit_offsets(
        self,
        topic: str,
        offsets: Mapping[int, tuple[int, str | None]],
        *,
        generation: int | None = None,
        member_id: str | None = None,
        version: int | None = None,
    ) -> dict[str, str]:
        """OffsetCommit as this member (its generation and id unless overridden)."""
        return await self.commit(
            self.group_id,
            generation=self.generation if generation is None else generation,
            member_id=self.member_id if member_id is None else member_id,
            instance_id=self.instance_id,
            topic=topic,
            offsets=offsets,
            version=version,
        )


class Admin(_Client):
    """The connection that is no group member: topics, group admin, fetches."""

    async def create_topic(
        self, name: str, partitions: int, *, wait: bool = True
    ) -> dict[str, Any]:
        """CreateTopics of one topic; with ``wait``, until its partitions are led.

        Returns:
            ``error``, ``num_partitions``, ``replication_factor``.
        """
        v, _ = self.module(ApiKey.CREATE_TOPICS, None)
        resp = await self.send(rq.create_topics(v, (name, partitions), rf=-1, timeout=30_000))
        (result,) = resp.topics
        answer = {
            "error": error_name(result.error_code),
            "num_partitions": int(getattr(result, "num_partitions", -1)),
            "replication_factor": int(getattr(result, "replication_factor", -1)),
        }
        if wait and answer["error"] == "NONE":
            for p in range(partitions):
                while (await self.list_offsets(name, p, -1))["error"] != "NONE":
                    await anyio.sleep(POLL_INTERVAL)
        return answer

    async def find_coordinator(self, group_id: str) -> str:
        """FindCoordinator of a group; returns the error name."""
        _, mod = self.module(ApiKey.FIND_COORDINATOR, None)
        resp = await self.send(
            build(mod.FindCoordinatorRequest, key_type=0, coordinator_keys=(group_id,))
        )
        (coordinator,) = resp.coordinators
        return error_name(coordinator.error_code)

    async def wait_coordinator(self, group_id: str) -> None:
        """Wait until the group's coordinator is found and loaded (a setup step)."""
        while await self.find_coordinator(group_id) != "NONE":
            await anyio.sleep(POLL_INTERVAL)
        while (await self.describe(group_id))["error"] != "NONE":
            await anyio.sleep(POLL_INTERVAL)

    async def describe(self, group_id: str, *, version: int | None = None) -> dict[str, Any]:
        """DescribeGroups of one group.

        Returns:
            ``error``, ``state``, ``protocol_type``, ``protocol`` and
            ``members``: sorted ``"label[/instance] client_id@host sub=... assign=..."``.
        """
        _, mod = self.module(ApiKey.DESCRIBE_GROUPS, version)
        resp = await self.send(
            build(
                mod.DescribeGroupsRequest, groups=(group_id,), include_authorized_operations=False
            )
        )
        (group,) = resp.groups
        return {
            "error": error_name(group.error_code),
            "state": group.group_state,
            "protocol_type": group.protocol_type,
            "protocol": group.protocol_data,
            "members": sorted(
                self.names.member(
                    m.member_id,
                    m.group_instance_id,
                    f"{m.client_id}@{m.client_host}",
                    f"sub={self.names.subscription(m.member_metadata)}",
                    f"assign={self.names.assignment(m.member_assignment)}",
                )
                for m in group.members
            ),
        }

    async def state(self, group_id: str) -> str:
        """The group's state name as DescribeGroups reports it."""
        return str((await self.describe(group_id))["state"])

    async def wait_state(self, group_id: str, state: str) -> None:
        """Poll DescribeGroups until the group is in ``state`` (a synchronisation step)."""
        while await self.state(group_id) != state:
            await anyio.sleep(POLL_INTERVAL)

    async def wait_visible(self, group_id: str, *, timeout: float = VISIBILITY_WAIT) -> None:
        """Wait (at most ``timeout`` seconds) until DescribeGroups sees the group.

        Kafka's group coordinator serves DescribeGroups and ListGroups from its
        last committed state. A group created by a request that writes no
        record (a JoinGroup answered MEMBER_ID_REQUIRED) only becomes visible
        to them a moment later, once the coordinator commits again; the
        embedded broker shows it at once. Scenarios call this before looking
        at such a group so that both brokers are observed in the same state.
        """
        with anyio.move_on_after(timeout):
            while await self.state(group_id) == "Dead":
                await anyio.sleep(POLL_INTERVAL)

    async def list_group(
        self,
        group_id: str,
        *,
        states: Sequence[str] = (),
        types: Sequence[str] = (),
        version: int | None = None,
    ) -> tuple[str, ...] | str:
        """ListGroups (with optional state and, v5+, type filters), reduced to one group.

        Returns:
            ``(state, protocol_type)`` of ``group_id`` if listed (v5+: and its
            group type), else ``"absent"``.
        """
        _, mod = self.module(ApiKey.LIST_GROUPS, version)
        resp = await self.send(
            build(mod.ListGroupsRequest, states_filter=tuple(states), types_filter=tuple(types))
        )
        if resp.error_code != ErrorCode.none:
            return error_name(resp.error_code)
        for g in resp.groups:
            if g.group_id == group_id:
                group_type = getattr(g, "group_type", None)
                if group_type is None:
                    return (g.group_state, g.protocol_type)
                return (g.group_state, g.protocol_type, group_type)
        return "absent"

    async def delete_group(self, group_id: str) -> str:
        """DeleteGroups of one group; returns its error name."""
        _, mod = self.module(ApiKey.DELETE_GROUPS, None)
        resp = await self.send(build(mod.DeleteGroupsRequest, groups_names=(group_id,)))
        (result,) = resp.results
        return error_name(result.error_code)

    async def fetch_offsets(
        self, group_id: str, topic: str, partitions: Sequence[int], *, version: int | None = None
    ) -> dict[str, Any]:
        """OffsetFetch of some partitions of one topic.

        Returns:
            ``error`` and ``offsets``: ``{"t[0]": (offset, leader_epoch, metadata, error)}``.
        """
        v, _ = self.module(ApiKey.OFFSET_FETCH, version)
        resp = await self.send(rq.offset_fetch(v, group_id, [(topic, p) for p in partitions]))
        (group,) = resp.groups
        return {
            "error": error_name(group.error_code),
            "offsets": {
                f"{self.names.label(t.name)}[{p.partition_index}]": (
                    int(p.committed_offset),
                    int(p.committed_leader_epoch),
                    p.metadata,
                    error_name(p.error_code),
                )
                for t in group.topics
                for p in t.partitions
            },
        }

    async def list_offsets(self, topic: str, partition: int, timestamp: int) -> dict[str, Any]:
        """ListOffsets of one partition (``-2`` earliest, ``-1`` latest, ``-3`` max timestamp).

        Returns:
            ``error``, ``offset``, ``timestamp``, ``leader_epoch``.
        """
        v, _ = self.module(ApiKey.LIST_OFFSETS, None)
        resp = await self.send(rq.list_offsets(v, topic, partition, timestamp))
        ((part,),) = (t.partitions for t in resp.topics)
        return {
            "error": error_name(part.error_code),
            "offset": int(part.offset),
            "timestamp": int(part.timestamp),
            "leader_epoch": int(part.leader_epoch),
        }

    async def fetch(
        self, topic: str, partition: int, offset: int, *, max_wait_ms: int = 100
    ) -> dict[str, Any]:
        """A sessionless Fetch of one partition.

        Returns:
            ``error`` (top level), ``partition_error``, ``high_watermark``,
            ``last_stable_offset``, ``log_start_offset``, ``records`` (bytes
            of record data returned).
        """
        _, mod = self.module(ApiKey.FETCH, None)
        resp = await self.send(
            build(
                mod.FetchRequest,
                replica_id=-1,
                max_wait=datetime.timedelta(milliseconds=max_wait_ms),
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=(
                    build(
                        mod.FetchTopic,
                        topic=topic,
                        partitions=(
                            build(
                                mod.FetchPartition,
                                partition=partition,
                                current_leader_epoch=-1,
                                fetch_offset=offset,
                                last_fetched_epoch=-1,
                                log_start_offset=-1,
                                partition_max_bytes=1 << 20,
                            ),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
                rack_id="",
            )
        )
        ((part,),) = (t.partitions for t in resp.responses)
        records = part.records
        return {
            "error": error_name(resp.error_code),
            "partition_error": error_name(part.error_code),
            "high_watermark": int(part.high_watermark),
            "last_stable_offset": int(part.last_stable_offset),
            "log_start_offset": int(part.log_start_offset),
            "records": 0 if records is None else len(bytes(records)),
        }


@dataclass
class Session:
    """One scenario's connections, labels, transcript and background requests."""

    bootstrap: str
    _stack: AsyncExitStack
    _tg: anyio.abc.TaskGroup
    names: Names
    admin: Admin
    transcript: Transcript = field(default_factory=list)

    def record(self, step: str, answer: T) -> T:
        """Append ``(step, answer)`` to the transcript and return the answer."""
        self.transcript.append((step, answer))
        return answer

    def topic(self, name: str, alias: str) -> str:
        """Label the topic ``name`` as ``alias`` and return ``name``."""
        self.names.bind(name, alias)
        return name

    async def connect(self, client_id: str) -> BrokerConnection:
        """A new connection to the first bootstrap broker, closed with the session."""
        return await self._stack.enter_async_context(_connection(self.bootstrap, client_id))

    async def member(
        self,
        name: str,
        group_id: str,
        *,
        topics: Sequence[str] = (),
        instance_id: str | None = None,
    ) -> Member:
        """A new simulated member with its own connection (client id ``conf-<name>``)."""
        client_id = f"conf-{name}"
        conn = await self.connect(client_id)
        return Member(
            name,
            conn,
            self.names,
            group_id=group_id,
            client_id=client_id,
            topics=topics,
            instance_id=instance_id,
        )

    def spawn(self, fn: Callable[[], Awaitable[T]]) -> Pending[T]:
        """Run a request in the background (e.g. a JoinGroup that will be parked)."""
        pending: Pending[T] = Pending()
        self._tg.start_soon(pending._run, fn)
        return pending


def _connection(bootstrap: str, client_id: str) -> AbstractAsyncContextManager[BrokerConnection]:
    """A connection to the first broker of ``bootstrap``."""
    host, port = parse_address(bootstrap.split(",")[0])
    return open_connection(host, port, client_id=client_id, request_timeout=REQUEST_TIMEOUT)


@asynccontextmanager
async def open_session(bootstrap: str) -> AsyncIterator[Session]:
    """Open a scenario session: an admin connection and a task group for parked requests."""
    names = Names()
    async with AsyncExitStack() as stack:
        tg = await stack.enter_async_context(anyio.create_task_group())
        conn = await stack.enter_async_context(_connection(bootstrap, "conf-admin"))
        yield Session(bootstrap, stack, tg, names, Admin(conn, names))


CLOSED: Final = "closed"
"""The answer :class:`RawConnection` gives when the broker closed the connection instead."""


class RawConnection:
    """One connection driven frame by frame, without the client's ApiVersions or SASL steps.

    For the SASL scenarios, which send requests a client never sends (before
    ApiVersions, in the middle of an exchange) and raw SASL tokens (after a
    SaslHandshake v0). An answer of :data:`CLOSED` means the broker closed the
    connection without answering.
    """

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self._buf = FrameBuffer()
        self._cid = 0

    async def _frame(self) -> bytes | None:
        try:
            while (frame := self._buf.next_frame()) is None:
                self._buf.feed(await self.stream.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return None
        return frame

    async def _send(self, data: bytes) -> bool:
        try:
            await self.stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return False
        return True

    async def send(self, request: Any) -> Any:
        """Send a kio request; its decoded answer, or :data:`CLOSED`."""
        self._cid += 1
        frame = encode_request(request, correlation_id=self._cid, client_id="conf-raw")
        if not await self._send(frame) or (answer := await self._frame()) is None:
            return CLOSED
        key, version = int(type(request).__api_key__), int(type(request).__version__)
        cid, response = decode_response(load_response_schema(key, version), answer)
        assert cid == self._cid, (cid, self._cid)
        return response

    async def token(self, data: bytes) -> bytes | str:
        """Send a raw SASL token; the raw answer, or :data:`CLOSED`."""
        if not await self._send(len(data).to_bytes(4, "big") + data):
            return CLOSED
        answer = await self._frame()
        return CLOSED if answer is None else answer

    async def closed(self) -> bool:
        """Whether the broker closed the connection (nothing more to read)."""
        return await self._frame() is None
