"""The embedded broker's server: connections, per-API handlers, the group driver.

Theory of operation:

One :class:`ClusterState` holds everything the brokers of one embedded cluster
share: settings, the topics and their logs (:class:`~gengroup.broker.log.Topics`),
which brokers are up and where they listen, the sans-IO
:class:`~gengroup.broker.coordinator.GroupCoordinator`, the fault controls and
a record of internal errors. Each :class:`BrokerServer` is one broker: it owns
a TCP listener on loopback and serves each accepted connection in its own
task. :meth:`BrokerServer.handle_stream` serves *any* anyio ``ByteStream``, so
tests can inject an in-memory transport instead of a socket.

Connections. A connection is served strictly in order, one request at a time,
exactly like Kafka (whose network layer mutes a channel while one of its
requests is in flight): read a frame, decode it, hand it to the fault controls,
run the handler -- which may wait, e.g. a long-poll Fetch or a parked
JoinGroup -- write the response, read the next frame. Responses therefore come
back in request order, and a client that multiplexes a long poll and a
heartbeat on one connection sees the heartbeat wait, as it would with Kafka.
Any failure is confined to its connection: a frame whose declared length is
negative or above ``socket.request.max.bytes``, a malformed request, an
unknown API key or an unsupported version all close that connection (Kafka's
behaviour), except ApiVersions with an unsupported version, which is answered
with an ApiVersions v0 response carrying UNSUPPORTED_VERSION and the
ApiVersions range, as Kafka does so a client can retry with a version the
broker knows. A bug in a handler is recorded in :attr:`ClusterState.errors`
and answered UNKNOWN_SERVER_ERROR; the server never crashes.

Long-poll Fetch. The handler computes the response; if it carries at least
``min_bytes`` of records, or any partition error, or ``max_wait`` is spent, it
is sent. Otherwise the handler waits on the cluster's *change event* (set and
replaced whenever records are appended, topics or partitions change or
leadership moves) until ``max_wait``'s deadline, and recomputes. No polling:
a produce wakes the waiting fetches at once.

Group requests. JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, DescribeGroups, ListGroups and DeleteGroups are checked against
the group's coordinator (the leader of ``__consumer_offsets`` partition
``abs(javaStringHash(group_id)) % offsets.topic.num.partitions``, unless a test
moved it) -- other brokers answer NOT_COORDINATOR -- then translated into the
coordinator's version-independent inputs. The coordinator answers with
:class:`~gengroup.broker.coordinator.Reply` objects keyed by *tokens*; the
driver (:meth:`ClusterState.group_call`) registers a token and an event per
request, delivers every reply to the event of its token (a reply may answer a
request parked earlier on another connection) and waits for its own. A
connection that closes while parked simply forgets its token; a late reply to
it is dropped. The timer task (:meth:`ClusterState.run_group_timer`) sleeps
until the coordinator's next deadline with ``anyio`` (so trio's ``MockClock``
drives it in virtual time) and calls ``advance``; every request wakes it so it
re-reads the deadline.

Time. Everything reads the event loop's clock. Coordinator time is integer
milliseconds since the cluster started; wall-clock timestamps (log-append
time) are that plus an epoch read once at start, or one given by the test.
"""

from __future__ import annotations

import base64
import datetime
import enum
import logging
import math
import random
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import anyio
import anyio.abc
from kio.schema.errors import ErrorCode

from .. import _java
from .._errors import ProtocolError, UnsupportedVersion
from ..protocol.framing import (
    API_VERSIONS_KEY,
    FrameBuffer,
    build,
    decode_request,
    encode_response,
    response_module,
)
from ..protocol.versions import ApiKey
from .coordinator import (
    CoordinatorConfig,
    DeleteGroupsInput,
    DescribeGroupsInput,
    GroupCoordinator,
    HeartbeatInput,
    JoinGroupInput,
    LeaveGroupInput,
    ListGroupsInput,
    MemberIdentity,
    OffsetCommitInput,
    OffsetCommitPartition,
    OffsetCommitTopic,
    OffsetFetchGroup,
    OffsetFetchGroupOutput,
    OffsetFetchInput,
    OffsetFetchTopic,
    Reply,
    Response,
    SyncGroupInput,
)
from .faults import (
    Delay,
    Disconnect,
    Drop,
    Fail,
    Faults,
    Intercepted,
    Respond,
    error_response,
)
from .log import LogError, Partition, Topic, Topics, topic_name_error

__all__ = [
    "OFFSETS_TOPIC",
    "SUPPORTED_VERSIONS",
    "BrokerServer",
    "BrokerSettings",
    "ClusterState",
    "coordinator_partition",
]

log = logging.getLogger("gengroup.broker")

OFFSETS_TOPIC: Final = "__consumer_offsets"

#: The versions the embedded broker implements, per API. Topic-ID-only
#: versions (Produce 13, Fetch 13+, OffsetCommit 10, OffsetFetch 10) are left
#: out; the rest covers gengroup's client table and librdkafka 2.x.
SUPPORTED_VERSIONS: Final[Mapping[ApiKey, tuple[int, int]]] = {
    ApiKey.PRODUCE: (3, 12),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 10),
    ApiKey.METADATA: (0, 13),
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
}

_ZERO: Final = datetime.timedelta(0)
_MS: Final = datetime.timedelta(milliseconds=1)
_NIL_UUID: Final = uuid.UUID(int=0)
_INT32_MIN: Final = -(2**31)
_NONE: Final = ErrorCode.none
_SOFTWARE_RE: Final = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
# Authorized-operation bit fields reported when a client asks for them
# (everything is allowed: there is no authorizer).
_TOPIC_OPS: Final = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
_CLUSTER_OPS: Final = sum(1 << op for op in (4, 5, 7, 8, 9, 10, 11, 12))
_GROUP_OPS: Final = sum(1 << op for op in (3, 6, 8))

T = TypeVar("T")


def coordinator_partition(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group: Kafka's ``partitionFor``.

    ``Utils.abs(groupId.hashCode()) % groupMetadataTopicPartitionCount``, where
    ``Utils.abs`` maps ``Integer.MIN_VALUE`` to 0.
    """
    h = _java.string_hash(group_id)
    return (0 if h == _INT32_MIN else abs(h)) % num_partitions


def _ms(value: Any) -> int:
    """Milliseconds from a kio duration field (timedelta) or a plain int."""
    if isinstance(value, datetime.timedelta):
        return value // _MS
    return int(value)


def _ec(code: int) -> ErrorCode:
    return ErrorCode(code)


_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _epoch_datetime(ms: int) -> datetime.datetime | None:
    """kio's representation of an epoch-milliseconds timestamp (-1: None)."""
    return None if ms < 0 else _EPOCH + datetime.timedelta(milliseconds=ms)


@dataclass(frozen=True)
class BrokerSettings:
    """Broker settings, named after the Kafka settings they mirror.

    Attributes:
        host: the loopback address to listen on and advertise.
        auto_create_topics: ``auto.create.topics.enable`` (Metadata creates
            unknown topics it is asked about, when the request allows it).
        num_partitions: ``num.partitions``, for auto-created topics and
            CreateTopics with ``num_partitions = -1``.
        default_replication_factor: ``default.replication.factor``.
        offsets_topic_num_partitions: ``offsets.topic.num.partitions``.
        offsets_topic_replication_factor: ``offsets.topic.replication.factor``
            (capped at the number of brokers).
        max_message_bytes: ``message.max.bytes``, the largest batch accepted.
        socket_request_max_bytes: ``socket.request.max.bytes``, the largest
            request frame; larger declared lengths close the connection.
        log_message_timestamp_type: ``log.message.timestamp.type``, the
            default of the topic config ``message.timestamp.type``.
        group_initial_rebalance_delay_ms: ``group.initial.rebalance.delay.ms``.
        group_min_session_timeout_ms: ``group.min.session.timeout.ms``.
        group_max_session_timeout_ms: ``group.max.session.timeout.ms``.
        group_max_size: ``group.max.size``.
        connections_max_idle: seconds after which an idle connection is
            closed (``connections.max.idle.ms``); ``None`` disables it.
        validate_records: decode every produced record to validate a batch
            (Kafka's ``LogValidator``); False checks only the batch header and
            CRC, for benchmarks.
        cluster_id: the cluster id reported in Metadata (generated if None).
    """

    host: str = "127.0.0.1"
    auto_create_topics: bool = True
    num_partitions: int = 1
    default_replication_factor: int = 1
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    max_message_bytes: int = 1048588
    socket_request_max_bytes: int = 104857600
    log_message_timestamp_type: str = "CreateTime"
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_max_size: int = 2**31 - 1
    connections_max_idle: float | None = None
    validate_records: bool = True
    cluster_id: str | None = None


@dataclass(eq=False)
class _Pending:
    """A request registered with the group driver, waiting for its reply."""

    group_ids: tuple[str, ...]
    broker_id: int
    event: anyio.Event
    response: Response | None = None
    moved: bool = False


class ClusterState:
    """Everything the brokers of one embedded cluster share.

    Create it outside the event loop if you like; call :meth:`start` inside it
    before serving.

    Args:
        node_ids: the brokers' node ids.
        settings: broker settings.
        seed: seeds topic ids, member ids and the cluster id (None: random).
        epoch_ms: the wall-clock time, in epoch milliseconds, at which the
            cluster starts (None: read ``time.time()`` once at start).
        faults: the fault controls (a new empty set if None).
    """

    def __init__(
        self,
        node_ids: Iterable[int],
        settings: BrokerSettings | None = None,
        *,
        seed: int | None = None,
        epoch_ms: int | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.settings = settings if settings is not None else BrokerSettings()
        self.node_ids: list[int] = sorted(node_ids)
        self._rng = random.Random(seed)
        self.cluster_id = self.settings.cluster_id or self._make_cluster_id()
        self.addresses: dict[int, tuple[str, int]] = {}
        self.online: set[int] = set()
        self.topics = Topics(self._uuid)
        self.coordinator = GroupCoordinator(
            CoordinatorConfig(
                initial_rebalance_delay_ms=self.settings.group_initial_rebalance_delay_ms,
                min_session_timeout_ms=self.settings.group_min_session_timeout_ms,
                max_session_timeout_ms=self.settings.group_max_session_timeout_ms,
                max_group_size=self.settings.group_max_size,
                member_id_generator=self._member_id,
            )
        )
        #: group id -> broker id, for groups moved by a test.
        self.coordinator_overrides: dict[str, int] = {}
        self.faults = faults if faults is not None else Faults()
        #: internal errors (bugs) met while serving; tests assert it stays empty.
        self.errors: list[BaseException] = []
        self._epoch_ms_arg = epoch_ms
        self._epoch_ms = 0
        self._t0: float | None = None
        self._last_ms = 0
        self._changed: anyio.Event | None = None
        self._timer_wake: anyio.Event | None = None
        self._pending: dict[int, _Pending] = {}
        self._tokens = 0

    # ------------------------------------------------------------------ identity

    def _uuid(self) -> uuid.UUID:
        return uuid.UUID(int=self._rng.getrandbits(128), version=4)

    def _make_cluster_id(self) -> str:
        raw = base64.urlsafe_b64encode(self._uuid().bytes).decode()[:22]
        return "A" + raw[1:] if raw.startswith("-") else raw

    def _member_id(self, prefix: str) -> str:
        return f"{prefix}-{self._uuid()}"

    # ------------------------------------------------------------------ time

    def start(self) -> None:
        """Bind the state to the running event loop (sets the time origin)."""
        if self._t0 is not None:
            return
        self._t0 = anyio.current_time()
        self._epoch_ms = (
            self._epoch_ms_arg if self._epoch_ms_arg is not None else int(time.time() * 1000)
        )
        self._changed = anyio.Event()
        self._timer_wake = anyio.Event()

    @property
    def started(self) -> bool:
        """Whether :meth:`start` was called."""
        return self._t0 is not None

    def now_ms(self) -> int:
        """Milliseconds since the cluster started, from the event loop's clock."""
        assert self._t0 is not None, "ClusterState.start() was not called"
        ms = math.floor((anyio.current_time() - self._t0) * 1000 + 1e-6)
        if ms > self._last_ms:
            self._last_ms = ms
        return self._last_ms

    def wall_ms(self) -> int:
        """The current wall-clock time in epoch milliseconds (event-loop based)."""
        return self._epoch_ms + self.now_ms()

    def loop_time(self, ms: int) -> float:
        """The event-loop time of coordinator time ``ms``."""
        assert self._t0 is not None
        return self._t0 + ms / 1000

    # ------------------------------------------------------------------ changes

    def notify(self) -> None:
        """Wake every long-poll Fetch: records, topics or leadership changed."""
        if self._changed is not None:
            self._changed.set()
            self._changed = anyio.Event()

    def changed_event(self) -> anyio.Event:
        """The event the next :meth:`notify` sets."""
        assert self._changed is not None, "ClusterState.start() was not called"
        return self._changed

    def record_error(self, exc: BaseException, context: str) -> None:
        """Remember an internal error (a bug) and log it."""
        self.errors.append(exc)
        log.error("embedded broker internal error in %s", context, exc_info=exc)

    # ------------------------------------------------------------------ brokers

    def set_online(self, node_id: int, online: bool) -> None:
        """Mark a broker up or down and re-elect partition leaders accordingly."""
        if online:
            self.online.add(node_id)
        else:
            self.online.discard(node_id)
        if self.topics.elect_leaders(self.online):
            self.notify()

    def live_brokers(self) -> list[int]:
        """The ids of the brokers that are up, sorted."""
        return [b for b in self.node_ids if b in self.online]

    # ------------------------------------------------------------------ topics

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        *,
        configs: Mapping[str, str] | None = None,
        assignments: Sequence[Sequence[int]] | None = None,
        validate_only: bool = False,
    ) -> Topic:
        """Create a topic; -1 means the broker default for a count.

        Raises:
            LogError: the topic cannot be created (the code says why).
        """
        if name == OFFSETS_TOPIC and not validate_only:
            if name in self.topics:
                raise LogError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
            return self.offsets_topic()  # internal topics get their own settings
        merged = {"message.timestamp.type": self.settings.log_message_timestamp_type}
        merged.update(configs or {})
        topic = self.topics.create(
            name,
            self.settings.num_partitions if num_partitions == -1 else num_partitions,
            (
                self.settings.default_replication_factor
                if replication_factor == -1
                else replication_factor
            ),
            brokers=self.node_ids,
            online=self.online,
            configs=merged,
            assignments=assignments,
            validate_only=validate_only,
        )
        if not validate_only:
            self.notify()
        return topic

    def offsets_topic(self) -> Topic:
        """``__consumer_offsets``, created on first use (partition p led by broker p mod n)."""
        topic = self.topics.get(OFFSETS_TOPIC)
        if topic is None:
            n = len(self.node_ids)
            rf = max(1, min(self.settings.offsets_topic_replication_factor, n))
            assignments = [
                [self.node_ids[(p + r) % n] for r in range(rf)]
                for p in range(self.settings.offsets_topic_num_partitions)
            ]
            topic = self.topics.create(
                OFFSETS_TOPIC,
                -1,
                -1,
                brokers=self.node_ids,
                online=self.online,
                configs={"cleanup.policy": "compact"},
                assignments=assignments,
                internal=True,
            )
            self.notify()
        return topic

    def coordinator_for(self, group_id: str) -> int:
        """The node id of the group's coordinator, or -1 if it is unavailable."""
        override = self.coordinator_overrides.get(group_id)
        if override is not None:
            return override if override in self.online else -1
        topic = self.offsets_topic()
        return topic.partitions[coordinator_partition(group_id, len(topic.partitions))].leader

    def move_coordinator(self, group_id: str, broker_id: int) -> None:
        """Make ``broker_id`` the group's coordinator; the group state is kept.

        Requests of the group parked on other brokers are answered
        NOT_COORDINATOR, as Kafka answers them when a coordinator resigns.
        """
        if broker_id not in self.node_ids:
            raise ValueError(f"unknown broker id {broker_id}")
        self.coordinator_overrides[group_id] = broker_id
        for pending in self._pending.values():
            if group_id in pending.group_ids and pending.broker_id != broker_id:
                pending.moved = True
                pending.event.set()

    # ------------------------------------------------------------------ group driver

    def _deliver(self, replies: Iterable[Reply]) -> None:
        for reply in replies:
            token = reply.token
            pending = self._pending.get(token) if isinstance(token, int) else None
            if pending is None or pending.event.is_set():
                continue  # its connection went away: drop the reply
            pending.response = reply.response
            pending.event.set()

    def _wake_timer(self) -> None:
        if self._timer_wake is not None:
            self._timer_wake.set()

    async def group_call(
        self,
        method: Callable[[int, object, T], list[Reply]],
        request: T,
        *,
        group_ids: Sequence[str | None],
        broker_id: int,
    ) -> Response | None:
        """Submit a request to the coordinator and wait for its reply.

        Args:
            method: a bound coordinator entry point (``join_group`` ...).
            request: its input.
            group_ids: the groups the request concerns (for coordinator moves).
            broker_id: the broker that received it.

        Returns:
            The coordinator's response, or ``None`` if the group's coordinator
            moved away from ``broker_id`` while the request was parked.
        """
        self._tokens += 1
        token = self._tokens
        pending = _Pending(tuple(g for g in group_ids if g is not None), broker_id, anyio.Event())
        self._pending[token] = pending
        try:
            self._deliver(method(self.now_ms(), token, request))
            self._wake_timer()
            await pending.event.wait()
        finally:
            del self._pending[token]
        return None if pending.moved and pending.response is None else pending.response

    def group_call_now(self, method: Callable[[int, object, T], list[Reply]], request: T) -> Any:
        """Submit a request that the coordinator answers at once (inspection helpers)."""
        self._tokens += 1
        token = self._tokens
        pending = _Pending((), -1, anyio.Event())
        self._pending[token] = pending
        try:
            self._deliver(method(self.now_ms(), token, request))
            self._wake_timer()
        finally:
            del self._pending[token]
        if pending.response is None:  # pragma: no cover - such calls never park
            raise RuntimeError("the coordinator parked a request expected to complete at once")
        return pending.response

    async def run_group_timer(self) -> None:
        """Fire the coordinator's timers on time, forever (run it in a task group)."""
        while True:
            wake = self._timer_wake = anyio.Event()
            deadline = self.coordinator.next_deadline()
            if deadline is None:
                await wake.wait()
                continue
            if self.now_ms() < deadline:
                with anyio.CancelScope(deadline=self.loop_time(deadline)):
                    await wake.wait()
                if wake.is_set():
                    continue
            try:
                replies = self.coordinator.advance(max(self.now_ms(), deadline))
            except Exception as exc:
                self.record_error(exc, "group coordinator timer")
                return
            self._deliver(replies)


# --------------------------------------------------------------------------- connections


class _Next(enum.Enum):
    """What a connection does after a request."""

    SERVE = "serve"
    CLOSE = "close"
    STALL = "stall"


class _NoResponse:
    """Handler result: send nothing (Produce with acks=0)."""


class _CloseConnection:
    """Handler result: close the connection without answering."""


_NO_RESPONSE: Final = _NoResponse()
_CLOSE: Final = _CloseConnection()


@dataclass(eq=False)
class _Connection:
    stream: anyio.abc.ByteStream
    client_host: str
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


Handler = Callable[[_Connection, Any, Any, int], Awaitable[Any]]


def _peer_host(stream: anyio.abc.ByteStream) -> str:
    try:
        address = stream.extra(anyio.abc.SocketAttribute.remote_address)
    except anyio.TypedAttributeLookupError:
        return "/memory"
    if isinstance(address, tuple):
        return f"/{address[0]}"
    return f"/{address}"


class BrokerServer:
    """One broker of an embedded cluster.

    Start :meth:`serve` in a task group (``await tg.start(server.serve)``); it
    listens on ``settings.host`` and ``port`` (0: any free port; the chosen one
    is kept so a restart comes back on it) and serves until cancelled.

    Args:
        state: the cluster's shared state.
        node_id: this broker's node id.
        port: the TCP port to listen on.
    """

    def __init__(self, state: ClusterState, node_id: int, port: int = 0) -> None:
        self.state = state
        self.node_id = node_id
        self.port = port
        self._connections: set[_Connection] = set()
        self._scope: anyio.CancelScope | None = None
        self._stopped: anyio.Event | None = None
        self._handlers: dict[int, Handler] = {
            ApiKey.API_VERSIONS: self._api_versions,
            ApiKey.METADATA: self._metadata,
            ApiKey.PRODUCE: self._produce,
            ApiKey.FETCH: self._fetch,
            ApiKey.LIST_OFFSETS: self._list_offsets,
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.JOIN_GROUP: self._join_group,
            ApiKey.SYNC_GROUP: self._sync_group,
            ApiKey.HEARTBEAT: self._heartbeat,
            ApiKey.LEAVE_GROUP: self._leave_group,
            ApiKey.OFFSET_COMMIT: self._offset_commit,
            ApiKey.OFFSET_FETCH: self._offset_fetch,
            ApiKey.DESCRIBE_GROUPS: self._describe_groups,
            ApiKey.LIST_GROUPS: self._list_groups,
            ApiKey.DELETE_GROUPS: self._delete_groups,
            ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.CREATE_PARTITIONS: self._create_partitions,
        }

    def __repr__(self) -> str:
        return f"<BrokerServer node={self.node_id} port={self.port}>"

    @property
    def running(self) -> bool:
        """Whether the broker is listening."""
        return self._scope is not None

    @property
    def connection_count(self) -> int:
        """The number of client connections being served."""
        return len(self._connections)

    # ------------------------------------------------------------------ lifecycle

    async def serve(self, *, task_status: anyio.abc.TaskStatus[BrokerServer]) -> None:
        """Listen and serve connections until cancelled or :meth:`stop` is called.

        Reports readiness (the port is bound and the broker marked online)
        through ``task_status``.
        """
        self.state.start()
        host = self.state.settings.host
        listener = await anyio.create_tcp_listener(local_host=host, local_port=self.port)
        self.port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
        self.state.addresses[self.node_id] = (host, self.port)
        stopped = self._stopped = anyio.Event()
        try:
            async with listener, anyio.create_task_group() as tg:
                self._scope = tg.cancel_scope
                self.state.set_online(self.node_id, True)
                task_status.started(self)
                await listener.serve(self.handle_stream, task_group=tg)
        finally:
            self._scope = None
            self.state.set_online(self.node_id, False)
            stopped.set()

    async def stop(self) -> None:
        """Stop listening and drop every connection; returns once stopped."""
        scope, stopped = self._scope, self._stopped
        if scope is None or stopped is None:
            return
        scope.cancel()
        await stopped.wait()

    def cut_connections(self) -> int:
        """Close every client connection (the listener keeps accepting).

        Returns:
            The number of connections cut.
        """
        conns = list(self._connections)
        for conn in conns:
            conn.scope.cancel()
        return len(conns)

    # ------------------------------------------------------------------ connections

    async def handle_stream(self, stream: anyio.abc.ByteStream) -> None:
        """Serve one client connection over any byte stream until it closes.

        Never raises (except cancellation): every failure closes this
        connection only.
        """
        conn = _Connection(stream, _peer_host(stream))
        self._connections.add(conn)
        try:
            with conn.scope:
                await self._serve_connection(conn)
        except (
            anyio.EndOfStream,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            OSError,
        ):
            pass
        except ProtocolError as exc:
            log.debug("broker %d: closing connection: %s", self.node_id, exc)
        except Exception as exc:
            self.state.record_error(exc, f"broker {self.node_id} connection")
        finally:
            self._connections.discard(conn)
            await anyio.aclose_forcefully(stream)

    async def _serve_connection(self, conn: _Connection) -> None:
        buf = FrameBuffer(max_frame=self.state.settings.socket_request_max_bytes)
        idle = self.state.settings.connections_max_idle
        stream = conn.stream
        while True:
            frame = buf.next_frame()
            if frame is None:
                if idle is None:
                    data = await stream.receive()
                else:
                    data = b""
                    with anyio.move_on_after(idle) as scope:
                        data = await stream.receive()
                    if scope.cancelled_caught:
                        return  # idle for too long: Kafka's connections.max.idle.ms
                buf.feed(data)
                continue
            out, after = await self._process(conn, frame)
            if out is not None:
                await stream.send(out)
            if after is _Next.CLOSE:
                return
            if after is _Next.STALL:
                # A dropped request: like a broker whose request never
                # completes, nothing more is answered on this connection (Kafka
                # answers in order). Discard input until the client gives up.
                while True:
                    await stream.receive()

    async def _process(self, conn: _Connection, frame: bytes) -> tuple[bytes | None, _Next]:
        """Handle one request frame: ``(bytes to send or None, what to do next)``."""
        try:
            header, request = decode_request(frame)
        except UnsupportedVersion as exc:
            if getattr(exc, "api_key", None) == API_VERSIONS_KEY:
                return self._api_versions_unsupported(
                    int(getattr(exc, "correlation_id", 0))
                ), _Next.SERVE
            log.debug("broker %d: closing connection: %s", self.node_id, exc)
            return None, _Next.CLOSE
        except ProtocolError as exc:
            log.debug("broker %d: closing connection: %s", self.node_id, exc)
            return None, _Next.CLOSE
        api_key = int(header.request_api_key)
        version = int(header.request_api_version)
        cid = int(header.correlation_id)
        supported = SUPPORTED_VERSIONS.get(ApiKey(api_key)) if api_key in _KEYS else None
        if supported is None or not supported[0] <= version <= supported[1]:
            if api_key == API_VERSIONS_KEY:
                return self._api_versions_unsupported(cid), _Next.SERVE
            log.debug(
                "broker %d: api %d v%d not supported: closing", self.node_id, api_key, version
            )
            return None, _Next.CLOSE

        call = Intercepted(
            broker_id=self.node_id,
            api_key=api_key,
            api_version=version,
            correlation_id=cid,
            client_id=getattr(header, "client_id", None),
            header=header,
            request=request,
        )
        try:
            action = self.state.faults.decide(call)
            while isinstance(action, Delay):
                await anyio.sleep(action.seconds)
                action = action.then
            if isinstance(action, Drop):
                return None, _Next.STALL
            if isinstance(action, Disconnect):
                return None, _Next.CLOSE
            if isinstance(action, Fail):
                response = error_response(
                    api_key, version, request, action.error_code, action.message
                )
            elif isinstance(action, Respond):
                response = action.response
            else:
                response = await self._handlers[api_key](conn, header, request, version)
            if response is _NO_RESPONSE:
                return None, _Next.SERVE
            if response is _CLOSE:
                return None, _Next.CLOSE
            return encode_response(response, correlation_id=cid), _Next.SERVE
        except Exception as exc:
            self.state.record_error(exc, f"broker {self.node_id} api {api_key} v{version}")
            try:
                response = error_response(api_key, version, request, ErrorCode.unknown_server_error)
                return encode_response(response, correlation_id=cid), _Next.SERVE
            except Exception:  # pragma: no cover - the error response itself failed
                return None, _Next.CLOSE

    # ------------------------------------------------------------------ helpers

    def _leader_error(self, part: Partition | None, current_epoch: int = -1) -> int:
        """The error for serving ``part`` here (0 if this broker leads it)."""
        if part is None:
            return ErrorCode.unknown_topic_or_partition
        if current_epoch >= 0:
            if current_epoch > part.leader_epoch:
                return ErrorCode.unknown_leader_epoch
            if current_epoch < part.leader_epoch:
                return ErrorCode.fenced_leader_epoch
        if part.leader != self.node_id:
            return ErrorCode.not_leader_or_follower
        return 0

    def _not_coordinator(self, group_id: str | None) -> int:
        """0 if this broker coordinates ``group_id``, else the error to answer."""
        node = self.state.coordinator_for(group_id or "")
        if node == self.node_id:
            return 0
        return ErrorCode.coordinator_not_available if node < 0 else ErrorCode.not_coordinator

    # ------------------------------------------------------------------ ApiVersions

    def _api_versions_unsupported(self, correlation_id: int) -> bytes:
        mod = response_module(API_VERSIONS_KEY, 0)
        lo, hi = SUPPORTED_VERSIONS[ApiKey.API_VERSIONS]
        response = mod.ApiVersionsResponse(
            error_code=ErrorCode.unsupported_version,
            api_keys=(mod.ApiVersion(api_key=API_VERSIONS_KEY, min_version=lo, max_version=hi),),
        )
        return encode_response(response, correlation_id=correlation_id)

    async def _api_versions(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        mod = response_module(ApiKey.API_VERSIONS, v)
        if v >= 3 and not (
            _SOFTWARE_RE.fullmatch(req.client_software_name or "")
            and _SOFTWARE_RE.fullmatch(req.client_software_version or "")
        ):
            return error_response(ApiKey.API_VERSIONS, v, req, ErrorCode.invalid_request)
        keys = tuple(
            mod.ApiVersion(api_key=int(key), min_version=lo, max_version=hi)
            for key, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
        )
        return build(
            mod.ApiVersionsResponse,
            error_code=_NONE,
            api_keys=keys,
            throttle_time=_ZERO,
            supported_features=(),
            finalized_features_epoch=-1,
            finalized_features=(),
            zk_migration_ready=False,
        )

    # ------------------------------------------------------------------ Metadata

    def _topic_metadata(self, mod: Any, topic: Topic, include_ops: bool) -> Any:
        online = self.state.online
        partitions = tuple(
            build(
                mod.MetadataResponsePartition,
                error_code=_NONE if p.leader >= 0 else ErrorCode.leader_not_available,
                partition_index=p.index,
                leader_id=p.leader,
                leader_epoch=p.leader_epoch,
                replica_nodes=tuple(p.replicas),
                isr_nodes=tuple(r for r in p.replicas if r in online),
                offline_replicas=tuple(r for r in p.replicas if r not in online),
            )
            for p in topic.partitions
        )
        return build(
            mod.MetadataResponseTopic,
            error_code=_NONE,
            name=topic.name,
            topic_id=topic.topic_id,
            is_internal=topic.internal,
            partitions=partitions,
            topic_authorized_operations=_TOPIC_OPS if include_ops else _INT32_MIN,
        )

    def _topic_error(
        self, mod: Any, code: int, name: str | None, topic_id: uuid.UUID | None = None
    ) -> Any:
        return build(
            mod.MetadataResponseTopic,
            error_code=_ec(code),
            name=name,
            topic_id=topic_id or _NIL_UUID,
            is_internal=name == OFFSETS_TOPIC,
            partitions=(),
            topic_authorized_operations=_INT32_MIN,
        )

    async def _metadata(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        mod = response_module(ApiKey.METADATA, v)
        state = self.state
        include_ops = bool(getattr(req, "include_topic_authorized_operations", False))
        requested = req.topics
        entries: list[Any] = []
        if requested is None or (v == 0 and not requested):
            entries = [
                self._topic_metadata(mod, t, include_ops) for t in state.topics.by_name.values()
            ]
        else:
            allow_auto = state.settings.auto_create_topics and (
                v < 4 or bool(req.allow_auto_topic_creation)
            )
            seen: set[object] = set()
            for entry in requested:
                name = entry.name
                topic_id = getattr(entry, "topic_id", None)
                if topic_id == _NIL_UUID:
                    topic_id = None
                key: object = name if name is not None else topic_id
                if key in seen:
                    continue
                seen.add(key)
                if name is None:
                    topic = state.topics.by_id.get(topic_id) if topic_id is not None else None
                    if topic is None:
                        code = ErrorCode.unknown_topic_id if topic_id else ErrorCode.invalid_request
                        entries.append(self._topic_error(mod, code, None, topic_id))
                    else:
                        entries.append(self._topic_metadata(mod, topic, include_ops))
                    continue
                topic = state.topics.get(name)
                if topic is not None:
                    entries.append(self._topic_metadata(mod, topic, include_ops))
                elif topic_name_error(name) is not None:
                    entries.append(self._topic_error(mod, ErrorCode.invalid_topic_exception, name))
                elif allow_auto:
                    try:
                        state.create_topic(name)
                    except LogError as exc:
                        entries.append(self._topic_error(mod, exc.code, name))
                    else:
                        # Kafka answers the request that triggered the creation
                        # with LEADER_NOT_AVAILABLE; the next one sees the topic.
                        entries.append(self._topic_error(mod, ErrorCode.leader_not_available, name))
                else:
                    entries.append(
                        self._topic_error(mod, ErrorCode.unknown_topic_or_partition, name)
                    )
        live = state.live_brokers()
        brokers = tuple(
            build(
                mod.MetadataResponseBroker,
                node_id=b,
                host=state.addresses[b][0],
                port=state.addresses[b][1],
                rack=None,
            )
            for b in live
        )
        return build(
            mod.MetadataResponse,
            throttle_time=_ZERO,
            brokers=brokers,
            cluster_id=state.cluster_id,
            controller_id=live[0] if live else -1,
            topics=tuple(entries),
            cluster_authorized_operations=(
                _CLUSTER_OPS
                if getattr(req, "include_cluster_authorized_operations", False)
                else _INT32_MIN
            ),
            error_code=_NONE,
        )

    # ------------------------------------------------------------------ Produce

    async def _produce(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        mod = response_module(ApiKey.PRODUCE, v)
        state = self.state
        acks = int(req.acks)
        any_error = False
        now = state.wall_ms()
        appended = False
        topics_out: list[Any] = []
        for tdata in req.topic_data:
            topic = state.topics.get(tdata.name)
            parts_out: list[Any] = []
            for pdata in tdata.partition_data:
                index = int(pdata.index)
                code = 0
                message: str | None = None
                base_offset, append_time, start_offset = -1, -1, -1
                part = state.topics.partition(tdata.name, index)
                if acks not in (-1, 0, 1):
                    code = ErrorCode.invalid_required_acks
                elif topic is None or part is None:
                    code = ErrorCode.unknown_topic_or_partition
                elif topic.internal:
                    code = ErrorCode.invalid_topic_exception
                    message = f"cannot append to internal topic {topic.name}"
                elif (code := self._leader_error(part)) != 0:
                    pass
                elif pdata.records is None:
                    code = ErrorCode.invalid_record
                    message = "a produce request must carry exactly one record batch"
                elif _is_transactional(pdata.records):
                    code = ErrorCode.invalid_txn_state
                    message = "transactions are not supported by the embedded broker"
                else:
                    try:
                        result = part.log.append(
                            pdata.records,
                            now_ms=now,
                            leader_epoch=part.leader_epoch,
                            log_append_time=topic.log_append_time,
                            max_message_bytes=topic.max_message_bytes(
                                state.settings.max_message_bytes
                            ),
                            validate_records=state.settings.validate_records,
                        )
                    except LogError as exc:
                        code, message = exc.code, str(exc)
                    else:
                        base_offset, append_time, start_offset = result
                        appended = True
                if code:
                    any_error = True
                parts_out.append(
                    build(
                        mod.PartitionProduceResponse,
                        index=index,
                        error_code=_ec(code),
                        base_offset=base_offset,
                        log_append_time=_epoch_datetime(append_time),
                        log_start_offset=start_offset,
                        record_errors=(),
                        error_message=message,
                    )
                )
            topics_out.append(
                build(
                    mod.TopicProduceResponse, name=tdata.name, partition_responses=tuple(parts_out)
                )
            )
        if appended:
            state.notify()
        if acks == 0:
            # Kafka sends nothing for acks=0, and closes the connection when a
            # partition failed so the producer refreshes its metadata.
            return _CLOSE if any_error else _NO_RESPONSE
        return build(
            mod.ProduceResponse, responses=tuple(topics_out), throttle_time=_ZERO, node_endpoints=()
        )

    # ------------------------------------------------------------------ Fetch

    def _fetch_once(self, mod: Any, req: Any, v: int) -> tuple[Any, int, bool]:
        """Build a Fetch response from the logs' current state.

        Returns:
            ``(response topics, record bytes, any partition error)``.
        """
        state = self.state
        remaining = int(req.max_bytes) if v >= 3 else 2**31 - 1
        read_committed = int(getattr(req, "isolation_level", 0)) == 1
        total = 0
        any_error = False
        first = True
        topics_out: list[Any] = []
        for ftopic in req.topics:
            parts_out: list[Any] = []
            for fpart in ftopic.partitions:
                index = int(fpart.partition)
                part = state.topics.partition(ftopic.topic, index)
                code = self._leader_error(part, int(getattr(fpart, "current_leader_epoch", -1)))
                records: bytes = b""
                hw, start = -1, -1
                if code == 0:
                    assert part is not None
                    plog = part.log
                    hw, start = plog.high_watermark, plog.log_start_offset
                    limit = max(0, min(int(fpart.partition_max_bytes), remaining))
                    try:
                        batches = plog.read(int(fpart.fetch_offset), limit, min_one=first)
                    except LogError as exc:
                        code = exc.code
                        # Kafka answers an out-of-range fetch without offsets.
                        hw, start = -1, -1
                    else:
                        if batches:
                            records = b"".join(batches)
                            first = False
                            remaining -= len(records)
                            total += len(records)
                if code:
                    any_error = True
                parts_out.append(
                    build(
                        mod.PartitionData,
                        partition_index=index,
                        error_code=_ec(code),
                        high_watermark=hw,
                        last_stable_offset=hw,
                        log_start_offset=start,
                        aborted_transactions=() if read_committed else None,
                        preferred_read_replica=-1,
                        records=records,
                    )
                )
            topics_out.append(
                build(mod.FetchableTopicResponse, topic=ftopic.topic, partitions=tuple(parts_out))
            )
        return tuple(topics_out), total, any_error

    async def _fetch(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        mod = response_module(ApiKey.FETCH, v)
        if v >= 7:
            # No incremental fetch sessions: a request to create one (epoch 0)
            # is answered with session id 0, i.e. "no session", which Kafka
            # also does when its session cache is full.
            if int(req.session_id) != 0:
                return error_response(ApiKey.FETCH, v, req, ErrorCode.fetch_session_id_not_found)
            if int(req.session_epoch) not in (-1, 0):
                return error_response(ApiKey.FETCH, v, req, ErrorCode.invalid_fetch_session_epoch)
        state = self.state
        max_wait_ms = max(0, _ms(req.max_wait))
        min_bytes = int(req.min_bytes)
        deadline = anyio.current_time() + max_wait_ms / 1000
        while True:
            changed = state.changed_event()
            topics_out, total, any_error = self._fetch_once(mod, req, v)
            if (
                total >= min_bytes
                or any_error
                or max_wait_ms == 0
                or anyio.current_time() >= deadline
            ):
                break
            with anyio.move_on_after(deadline - anyio.current_time()):
                await changed.wait()
        return build(
            mod.FetchResponse,
            throttle_time=_ZERO,
            error_code=_NONE,
            session_id=0,
            responses=topics_out,
        )

    # ------------------------------------------------------------------ ListOffsets

    async def _list_offsets(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        mod = response_module(ApiKey.LIST_OFFSETS, v)
        state = self.state
        topics_out: list[Any] = []
        for ltopic in req.topics:
            parts_out: list[Any] = []
            for lpart in ltopic.partitions:
                index = int(lpart.partition_index)
                part = state.topics.partition(ltopic.name, index)
                code = self._leader_error(part, int(getattr(lpart, "current_leader_epoch", -1)))
                offset, timestamp, epoch = -1, -1, -1
                if code == 0:
                    assert part is not None
                    offset, timestamp = part.log.offset_for(int(lpart.timestamp))
                    if offset >= 0:
                        epoch = part.log.epoch_at(offset, part.leader_epoch)
                parts_out.append(
                    build(
                        mod.ListOffsetsPartitionResponse,
                        partition_index=index,
                        error_code=_ec(code),
                        timestamp=timestamp,
                        offset=offset,
                        leader_epoch=epoch,
                    )
                )
            topics_out.append(
                build(mod.ListOffsetsTopicResponse, name=ltopic.name, partitions=tuple(parts_out))
            )
        return build(mod.ListOffsetsResponse, throttle_time=_ZERO, topics=tuple(topics_out))

    # ------------------------------------------------------------------ FindCoordinator

    def _coordinator_entry(self, key: str, key_type: int) -> tuple[int, int, str, int, str | None]:
        """``(error, node, host, port, message)`` for one coordinator key."""
        if key_type != 0:
            return (
                ErrorCode.invalid_request,
                -1,
                "",
                -1,
                "the embedded broker only has group coordinators (key type 0)",
            )
        node = self.state.coordinator_for(key)
        if node < 0:
            return ErrorCode.coordinator_not_available, -1, "", -1, None
        host, port = self.state.addresses[node]
        return 0, node, host, port, None

    async def _find_coordinator(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        mod = response_module(ApiKey.FIND_COORDINATOR, v)
        key_type = int(getattr(req, "key_type", 0))
        if v >= 4:
            coordinators = []
            for key in req.coordinator_keys:
                code, node, host, port, message = self._coordinator_entry(key, key_type)
                coordinators.append(
                    build(
                        mod.Coordinator,
                        key=key,
                        node_id=node,
                        host=host,
                        port=port,
                        error_code=_ec(code),
                        error_message=message,
                    )
                )
            return build(
                mod.FindCoordinatorResponse, throttle_time=_ZERO, coordinators=tuple(coordinators)
            )
        code, node, host, port, message = self._coordinator_entry(req.key, key_type)
        return build(
            mod.FindCoordinatorResponse,
            throttle_time=_ZERO,
            error_code=_ec(code),
            error_message=message,
            node_id=node,
            host=host,
            port=port,
        )

    # ------------------------------------------------------------------ group membership

    async def _join_group(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        key = ApiKey.JOIN_GROUP
        if code := self._not_coordinator(req.group_id):
            return error_response(key, v, req, code)
        session_ms = _ms(req.session_timeout)
        inp = JoinGroupInput(
            group_id=req.group_id,
            member_id=req.member_id,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=_ms(req.rebalance_timeout) if v >= 1 else session_ms,
            protocol_type=req.protocol_type,
            protocols=tuple((p.name, bytes(p.metadata)) for p in req.protocols),
            group_instance_id=getattr(req, "group_instance_id", None),
            client_id=getattr(header, "client_id", None) or "",
            client_host=conn.client_host,
            require_known_member_id=v >= 4,
            version=v,
            reason=getattr(req, "reason", None),
        )
        out: Any = await self.state.group_call(
            self.state.coordinator.handle, inp, group_ids=[req.group_id], broker_id=self.node_id
        )
        if out is None:
            return error_response(key, v, req, ErrorCode.not_coordinator)
        mod = response_module(key, v)
        return build(
            mod.JoinGroupResponse,
            throttle_time=_ZERO,
            error_code=out.error_code,
            generation_id=out.generation_id,
            protocol_type=out.protocol_type,
            protocol_name=out.protocol_name if v >= 7 else (out.protocol_name or ""),
            leader=out.leader,
            skip_assignment=out.skip_assignment,
            member_id=out.member_id,
            members=tuple(
                build(
                    mod.JoinGroupResponseMember,
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    metadata=m.metadata,
                )
                for m in out.members
            ),
        )

    async def _sync_group(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        key = ApiKey.SYNC_GROUP
        if code := self._not_coordinator(req.group_id):
            return error_response(key, v, req, code)
        inp = SyncGroupInput(
            group_id=req.group_id,
            generation_id=int(req.generation_id),
            member_id=req.member_id,
            group_instance_id=getattr(req, "group_instance_id", None),
            protocol_type=getattr(req, "protocol_type", None),
            protocol_name=getattr(req, "protocol_name", None),
            assignments=tuple((a.member_id, bytes(a.assignment)) for a in req.assignments),
            version=v,
        )
        out: Any = await self.state.group_call(
            self.state.coordinator.handle, inp, group_ids=[req.group_id], broker_id=self.node_id
        )
        if out is None:
            return error_response(key, v, req, ErrorCode.not_coordinator)
        mod = response_module(key, v)
        return build(
            mod.SyncGroupResponse,
            throttle_time=_ZERO,
            error_code=out.error_code,
            protocol_type=out.protocol_type,
            protocol_name=out.protocol_name,
            assignment=out.assignment,
        )

    async def _heartbeat(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        key = ApiKey.HEARTBEAT
        if code := self._not_coordinator(req.group_id):
            return error_response(key, v, req, code)
        inp = HeartbeatInput(
            group_id=req.group_id,
            generation_id=int(req.generation_id),
            member_id=req.member_id,
            group_instance_id=getattr(req, "group_instance_id", None),
        )
        out: Any = await self.state.group_call(
            self.state.coordinator.handle, inp, group_ids=[req.group_id], broker_id=self.node_id
        )
        if out is None:
            return error_response(key, v, req, ErrorCode.not_coordinator)
        mod = response_module(key, v)
        return build(mod.HeartbeatResponse, throttle_time=_ZERO, error_code=out.error_code)

    async def _leave_group(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        key = ApiKey.LEAVE_GROUP
        if code := self._not_coordinator(req.group_id):
            return error_response(key, v, req, code)
        if v < 3:
            members: tuple[MemberIdentity, ...] = (MemberIdentity(req.member_id),)
        else:
            members = tuple(
                MemberIdentity(m.member_id, m.group_instance_id, getattr(m, "reason", None))
                for m in req.members
            )
        out: Any = await self.state.group_call(
            self.state.coordinator.handle,
            LeaveGroupInput(req.group_id, members),
            group_ids=[req.group_id],
            broker_id=self.node_id,
        )
        if out is None:
            return error_response(key, v, req, ErrorCode.not_coordinator)
        mod = response_module(key, v)
        error = out.error_code
        if v < 3 and error is _NONE and out.members:
            error = out.members[0].error_code
        if v < 3:
            return build(mod.LeaveGroupResponse, throttle_time=_ZERO, error_code=error)
        return build(
            mod.LeaveGroupResponse,
            throttle_time=_ZERO,
            error_code=error,
            members=tuple(
                build(
                    mod.MemberResponse,
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    error_code=m.error_code,
                )
                for m in out.members
            ),
        )

    # ------------------------------------------------------------------ offsets

    async def _offset_commit(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        key = ApiKey.OFFSET_COMMIT
        if code := self._not_coordinator(req.group_id):
            return error_response(key, v, req, code)
        mod = response_module(key, v)
        # Partitions that do not exist are answered UNKNOWN_TOPIC_OR_PARTITION
        # before the coordinator sees the request, as Kafka does.
        known: list[OffsetCommitTopic] = []
        for t in req.topics:
            parts = tuple(
                OffsetCommitPartition(
                    int(p.partition_index),
                    int(p.committed_offset),
                    int(getattr(p, "committed_leader_epoch", -1)),
                    p.committed_metadata,
                )
                for p in t.partitions
                if self.state.topics.partition(t.name, int(p.partition_index)) is not None
            )
            if parts:
                known.append(OffsetCommitTopic(t.name, parts))
        results: dict[tuple[str, int], ErrorCode] = {}
        if known:
            out: Any = await self.state.group_call(
                self.state.coordinator.handle,
                OffsetCommitInput(
                    group_id=req.group_id,
                    topics=tuple(known),
                    generation_id=int(req.generation_id_or_member_epoch),
                    member_id=req.member_id,
                    group_instance_id=getattr(req, "group_instance_id", None),
                    version=v,
                ),
                group_ids=[req.group_id],
                broker_id=self.node_id,
            )
            if out is None:
                return error_response(key, v, req, ErrorCode.not_coordinator)
            for ot in out.topics:
                for op in ot.partitions:
                    results[(ot.name, op.partition_index)] = op.error_code
        return build(
            mod.OffsetCommitResponse,
            throttle_time=_ZERO,
            topics=tuple(
                build(
                    mod.OffsetCommitResponseTopic,
                    name=t.name,
                    partitions=tuple(
                        build(
                            mod.OffsetCommitResponsePartition,
                            partition_index=p.partition_index,
                            error_code=results.get(
                                (t.name, int(p.partition_index)),
                                ErrorCode.unknown_topic_or_partition,
                            ),
                        )
                        for p in t.partitions
                    ),
                )
                for t in req.topics
            ),
        )

    async def _fetch_offsets(
        self, groups: Sequence[OffsetFetchGroup], require_stable: bool
    ) -> dict[int, OffsetFetchGroupOutput]:
        """Ask the coordinator for the groups this broker coordinates, by request index."""
        mine = {i: g for i, g in enumerate(groups) if not self._not_coordinator(g.group_id)}
        if not mine:
            return {}
        out: Any = await self.state.group_call(
            self.state.coordinator.handle,
            OffsetFetchInput(tuple(mine.values()), require_stable),
            group_ids=[g.group_id for g in mine.values()],
            broker_id=self.node_id,
        )
        if out is None:
            return {}
        return dict(zip(mine, out.groups, strict=True))

    async def _offset_fetch(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        key = ApiKey.OFFSET_FETCH
        mod = response_module(key, v)
        require_stable = bool(getattr(req, "require_stable", False))
        if v < 8:
            if code := self._not_coordinator(req.group_id):
                return error_response(key, v, req, code)
            topics = (
                None
                if req.topics is None
                else tuple(OffsetFetchTopic(t.name, tuple(t.partition_indexes)) for t in req.topics)
            )
            got = await self._fetch_offsets(
                [OffsetFetchGroup(req.group_id, topics)], require_stable
            )
            if 0 not in got:
                return error_response(key, v, req, ErrorCode.not_coordinator)
            group = got[0]
            part_error = group.error_code if v < 2 else _NONE
            return build(
                mod.OffsetFetchResponse,
                throttle_time=_ZERO,
                error_code=group.error_code,
                topics=tuple(
                    build(
                        mod.OffsetFetchResponseTopic,
                        name=t.name,
                        partitions=tuple(
                            build(
                                mod.OffsetFetchResponsePartition,
                                partition_index=p.partition_index,
                                committed_offset=p.committed_offset,
                                committed_leader_epoch=p.committed_leader_epoch,
                                metadata=p.metadata,
                                error_code=p.error_code
                                if p.error_code is not _NONE
                                else part_error,
                            )
                            for p in t.partitions
                        ),
                    )
                    for t in group.topics
                ),
            )
        groups = [
            OffsetFetchGroup(
                g.group_id,
                None
                if g.topics is None
                else tuple(OffsetFetchTopic(t.name, tuple(t.partition_indexes)) for t in g.topics),
            )
            for g in req.groups
        ]
        got = await self._fetch_offsets(groups, require_stable)
        out_groups: list[Any] = []
        for i, g in enumerate(groups):
            result = got.get(i)
            if result is None:
                code = self._not_coordinator(g.group_id) or ErrorCode.not_coordinator
                out_groups.append(
                    build(
                        mod.OffsetFetchResponseGroup,
                        group_id=g.group_id,
                        topics=(),
                        error_code=_ec(code),
                    )
                )
                continue
            out_groups.append(
                build(
                    mod.OffsetFetchResponseGroup,
                    group_id=g.group_id,
                    error_code=result.error_code,
                    topics=tuple(
                        build(
                            mod.OffsetFetchResponseTopics,
                            name=t.name,
                            partitions=tuple(
                                build(
                                    mod.OffsetFetchResponsePartitions,
                                    partition_index=p.partition_index,
                                    committed_offset=p.committed_offset,
                                    committed_leader_epoch=p.committed_leader_epoch,
                                    metadata=p.metadata,
                                    error_code=p.error_code,
                                )
                                for p in t.partitions
                            ),
                        )
                        for t in result.topics
                    ),
                )
            )
        return build(mod.OffsetFetchResponse, throttle_time=_ZERO, groups=tuple(out_groups))

    # ------------------------------------------------------------------ group admin

    async def _describe_groups(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        key = ApiKey.DESCRIBE_GROUPS
        mod = response_module(key, v)
        include_ops = bool(getattr(req, "include_authorized_operations", False))
        ids = list(req.groups)
        mine = [g for g in ids if not self._not_coordinator(g)]
        described: dict[str, Any] = {}
        if mine:
            out: Any = await self.state.group_call(
                self.state.coordinator.handle,
                DescribeGroupsInput(tuple(mine)),
                group_ids=mine,
                broker_id=self.node_id,
            )
            if out is not None:
                described = {g.group_id: g for g in out.groups}
        groups_out: list[Any] = []
        for group_id in ids:
            g = described.get(group_id)
            if g is None:
                code = self._not_coordinator(group_id) or ErrorCode.not_coordinator
                groups_out.append(
                    build(
                        mod.DescribedGroup,
                        error_code=_ec(code),
                        error_message=None,
                        group_id=group_id,
                        group_state="",
                        protocol_type="",
                        protocol_data="",
                        members=(),
                        authorized_operations=_INT32_MIN,
                    )
                )
                continue
            error_code = g.error_code
            if v >= 6 and g.group_state == "Dead" and error_code == ErrorCode.none:
                # From v6 Kafka answers a missing group with GROUP_ID_NOT_FOUND.
                error_code = ErrorCode.group_id_not_found
            groups_out.append(
                build(
                    mod.DescribedGroup,
                    error_code=error_code,
                    error_message=None,
                    group_id=group_id,
                    group_state=g.group_state,
                    protocol_type=g.protocol_type,
                    protocol_data=g.protocol_data,
                    members=tuple(
                        build(
                            mod.DescribedGroupMember,
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.member_metadata,
                            member_assignment=m.member_assignment,
                        )
                        for m in g.members
                    ),
                    authorized_operations=_GROUP_OPS if include_ops else _INT32_MIN,
                )
            )
        return build(mod.DescribeGroupsResponse, throttle_time=_ZERO, groups=tuple(groups_out))

    async def _list_groups(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        mod = response_module(ApiKey.LIST_GROUPS, v)
        out: Any = await self.state.group_call(
            self.state.coordinator.handle,
            ListGroupsInput(
                tuple(getattr(req, "states_filter", ()) or ()),
                tuple(getattr(req, "types_filter", ()) or ()),
            ),
            group_ids=[],
            broker_id=self.node_id,
        )
        groups = tuple(
            build(
                mod.ListedGroup,
                group_id=g.group_id,
                protocol_type=g.protocol_type,
                group_state=g.group_state,
                group_type=g.group_type,
            )
            for g in out.groups
            if self.state.coordinator_for(g.group_id) == self.node_id
        )
        return build(
            mod.ListGroupsResponse, throttle_time=_ZERO, error_code=out.error_code, groups=groups
        )

    async def _delete_groups(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        mod = response_module(ApiKey.DELETE_GROUPS, v)
        ids = list(dict.fromkeys(req.groups_names))
        mine = [g for g in ids if not self._not_coordinator(g)]
        results: dict[str, ErrorCode] = {}
        if mine:
            out: Any = await self.state.group_call(
                self.state.coordinator.handle,
                DeleteGroupsInput(tuple(mine)),
                group_ids=mine,
                broker_id=self.node_id,
            )
            if out is not None:
                results = {r.group_id: r.error_code for r in out.results}
        return build(
            mod.DeleteGroupsResponse,
            throttle_time=_ZERO,
            results=tuple(
                build(
                    mod.DeletableGroupResult,
                    group_id=g,
                    error_code=results.get(
                        g, _ec(self._not_coordinator(g) or ErrorCode.not_coordinator)
                    ),
                )
                for g in ids
            ),
        )

    # ------------------------------------------------------------------ topic admin

    async def _create_topics(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        mod = response_module(ApiKey.CREATE_TOPICS, v)
        state = self.state
        counts: dict[str, int] = {}
        for t in req.topics:
            counts[t.name] = counts.get(t.name, 0) + 1
        results: list[Any] = []
        done: set[str] = set()
        for t in req.topics:
            if t.name in done:
                continue
            done.add(t.name)
            code, message = 0, None
            topic: Topic | None = None
            configs = {c.name: c.value for c in t.configs if c.value is not None}
            if counts[t.name] > 1:
                code, message = (
                    ErrorCode.invalid_request,
                    f"topic {t.name!r} appears more than once",
                )
            elif t.assignments and (int(t.num_partitions) != -1 or int(t.replication_factor) != -1):
                code = ErrorCode.invalid_request
                message = "both num_partitions or replication_factor and assignments were set"
            else:
                assignments = None
                if t.assignments:
                    by_index = {int(a.partition_index): list(a.broker_ids) for a in t.assignments}
                    if sorted(by_index) != list(range(len(by_index))):
                        code = ErrorCode.invalid_replica_assignment
                        message = "partition indexes of the assignment must be 0..n-1"
                    assignments = [by_index[i] for i in sorted(by_index)]
                if not code:
                    try:
                        topic = state.create_topic(
                            t.name,
                            int(t.num_partitions),
                            int(t.replication_factor),
                            configs=configs,
                            assignments=assignments,
                            validate_only=bool(req.validate_only),
                        )
                    except LogError as exc:
                        code, message = exc.code, str(exc)
            ok = topic is not None
            results.append(
                build(
                    mod.CreatableTopicResult,
                    name=t.name,
                    topic_id=topic.topic_id if topic is not None else _NIL_UUID,
                    error_code=_ec(code),
                    error_message=message,
                    topic_config_error_code=_NONE,
                    num_partitions=len(topic.partitions) if topic is not None else -1,
                    replication_factor=topic.replication_factor if topic is not None else -1,
                    configs=(
                        tuple(
                            build(
                                mod.CreatableTopicConfigs,
                                name=k,
                                value=val,
                                read_only=False,
                                config_source=1,
                                is_sensitive=False,
                            )
                            for k, val in topic.configs.items()
                        )
                        if ok and topic is not None and v >= 5
                        else None
                    ),
                )
            )
        return build(mod.CreateTopicsResponse, throttle_time=_ZERO, topics=tuple(results))

    async def _delete_topics(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        mod = response_module(ApiKey.DELETE_TOPICS, v)
        state = self.state
        if v >= 6:
            wanted = [(t.name, t.topic_id) for t in req.topics]
        else:
            wanted = [(name, None) for name in req.topic_names]
        results: list[Any] = []
        deleted = False
        for name, topic_id in wanted:
            code, message = 0, None
            if topic_id == _NIL_UUID:
                topic_id = None
            resolved = name
            if name is not None and topic_id is not None:
                code, message = ErrorCode.invalid_request, "give a topic name or an id, not both"
            elif name is None:
                topic = state.topics.by_id.get(topic_id) if topic_id is not None else None
                if topic is None:
                    code = ErrorCode.unknown_topic_id if topic_id else ErrorCode.invalid_request
                else:
                    resolved = topic.name
            if not code and resolved is not None:
                try:
                    topic = state.topics.delete(resolved)
                    topic_id = topic.topic_id
                    deleted = True
                except LogError as exc:
                    code, message = exc.code, str(exc)
            results.append(
                build(
                    mod.DeletableTopicResult,
                    name=resolved,
                    topic_id=topic_id or _NIL_UUID,
                    error_code=_ec(code),
                    error_message=message,
                )
            )
        if deleted:
            state.notify()
        return build(mod.DeleteTopicsResponse, throttle_time=_ZERO, responses=tuple(results))

    async def _create_partitions(self, conn: _Connection, header: Any, req: Any, v: int) -> Any:
        mod = response_module(ApiKey.CREATE_PARTITIONS, v)
        state = self.state
        counts: dict[str, int] = {}
        for t in req.topics:
            counts[t.name] = counts.get(t.name, 0) + 1
        results: list[Any] = []
        changed = False
        for t in req.topics:
            code, message = 0, None
            if counts[t.name] > 1:
                code, message = (
                    ErrorCode.invalid_request,
                    f"topic {t.name!r} appears more than once",
                )
            else:
                topic = state.topics.get(t.name)
                if topic is not None and topic.internal:
                    code = ErrorCode.invalid_topic_exception
                    message = "cannot add partitions to an internal topic"
                else:
                    try:
                        state.topics.add_partitions(
                            t.name,
                            int(t.count),
                            brokers=state.node_ids,
                            online=state.online,
                            assignments=(
                                None
                                if t.assignments is None
                                else [list(a.broker_ids) for a in t.assignments]
                            ),
                            validate_only=bool(req.validate_only),
                        )
                        changed = changed or not req.validate_only
                    except LogError as exc:
                        code, message = exc.code, str(exc)
            results.append(
                build(
                    mod.CreatePartitionsTopicResult,
                    name=t.name,
                    error_code=_ec(code),
                    error_message=message,
                )
            )
        if changed:
            state.notify()
        return build(mod.CreatePartitionsResponse, throttle_time=_ZERO, results=tuple(results))


_KEYS: Final[frozenset[int]] = frozenset(int(k) for k in ApiKey)


def _is_transactional(records: bytes) -> bool:
    """Whether a produced batch has the transactional attribute bit (0x10)."""
    return len(records) >= 23 and bool(records[22] & 0x10)
