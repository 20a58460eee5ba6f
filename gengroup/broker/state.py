"""The embedded cluster's shared state: settings, topics, brokers, the group driver.

Theory of operation:

One :class:`ClusterState` holds everything the brokers of one embedded cluster
share: settings, the topics and their logs (:class:`~gengroup.broker.log.Topics`),
which brokers are up and where they listen, the sans-IO
:class:`~gengroup.broker.coordinator.GroupCoordinator`, the fault controls and
a record of internal errors. Each :class:`~gengroup.broker.server.BrokerServer`
is one broker serving connections against it, and the per-API handlers of
:mod:`gengroup.broker.apis` read and change it.

Group requests. The group APIs' handlers translate requests into the
coordinator's version-independent inputs. The coordinator answers with
:class:`~gengroup.broker.coordinator.Reply` objects keyed by *tokens*; the
driver (:meth:`ClusterState.group_call`) registers a token and an event per
request, delivers every reply to the event of its token (a reply may answer a
request parked earlier on another connection) and waits for its own. A
connection that closes while parked simply forgets its token; a late reply to
it is dropped. The timer task (:meth:`ClusterState.run_group_timer`) sleeps
until the coordinator's next deadline with ``anyio`` (so trio's ``MockClock``
drives it in virtual time) and calls ``advance``; every request wakes it so it
re-reads the deadline. A group's coordinator is the leader of
``__consumer_offsets`` partition
``abs(javaStringHash(group_id)) % offsets.topic.num.partitions``
(:func:`coordinator_partition`), unless a test moved it
(:meth:`ClusterState.move_coordinator`).

Time. Everything reads the event loop's clock. Coordinator time is integer
milliseconds since the cluster started; wall-clock timestamps (log-append
time) are that plus an epoch read once at start, or one given by the test.
"""

from __future__ import annotations

import base64
import logging
import math
import random
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import anyio
from kio.schema.errors import ErrorCode

from .. import _java
from .coordinator import CoordinatorConfig, GroupCoordinator, Reply, Request, Response
from .faults import Faults
from .fetch_sessions import DEFAULT_CACHE_SLOTS, DEFAULT_EVICTION_MS
from .log import DEFAULT_MAX_MESSAGE_BYTES, LogError, Topic, Topics
from .producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS

__all__ = [
    "OFFSETS_TOPIC",
    "BrokerSettings",
    "ClusterState",
    "coordinator_partition",
]

log = logging.getLogger("gengroup.broker")

OFFSETS_TOPIC: Final = "__consumer_offsets"

_INT32_MIN: Final = -(2**31)

#: The coordinator's defaults: a ``group_*`` setting's default is the coordinator's.
_GROUP: Final = CoordinatorConfig()

T = TypeVar("T")


def coordinator_partition(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group: Kafka's ``partitionFor``.

    ``Utils.abs(groupId.hashCode()) % groupMetadataTopicPartitionCount``, where
    ``Utils.abs`` maps ``Integer.MIN_VALUE`` to 0.
    """
    h = _java.string_hash(group_id)
    return (0 if h == _INT32_MIN else abs(h)) % num_partitions


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
        group_consumer_session_timeout_ms: ``group.consumer.session.timeout.ms``
            (consumer groups, KIP-848).
        group_consumer_heartbeat_interval_ms:
            ``group.consumer.heartbeat.interval.ms``.
        group_consumer_assignment_interval_ms:
            ``group.consumer.assignment.interval.ms`` (Kafka 4.3, KIP-1263): a
            consumer group's target assignment is recomputed at most once
            per interval.
        group_coordinator_rebalance_protocols:
            ``group.coordinator.rebalance.protocols``: without ``"consumer"``
            the broker neither advertises nor serves ConsumerGroupHeartbeat
            and ConsumerGroupDescribe.
        connections_max_idle: seconds after which an idle connection is
            closed (``connections.max.idle.ms``); ``None`` disables it.
        validate_records: decode every produced record to validate a batch
            (Kafka's ``LogValidator``); False checks only the batch header and
            CRC, for benchmarks.
        max_incremental_fetch_session_cache_slots:
            ``max.incremental.fetch.session.cache.slots``: fetch sessions
            each broker keeps (KIP-227); 0 disables them.
        min_incremental_fetch_session_eviction_ms:
            ``min.incremental.fetch.session.eviction.ms``: how long a fetch
            session must be idle before a new one may evict it.
        producer_id_expiration_ms: ``producer.id.expiration.ms``: a
            restarted broker forgets the idempotent producers whose last
            batch's max timestamp is that old (Kafka also checks every ten
            minutes, which the embedded broker does not).
        cluster_id: the cluster id reported in Metadata (generated if None).
    """

    host: str = "127.0.0.1"
    auto_create_topics: bool = True
    num_partitions: int = 1
    default_replication_factor: int = 1
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    socket_request_max_bytes: int = 100 * 1024 * 1024
    log_message_timestamp_type: str = "CreateTime"
    group_initial_rebalance_delay_ms: int = _GROUP.initial_rebalance_delay_ms
    group_min_session_timeout_ms: int = _GROUP.min_session_timeout_ms
    group_max_session_timeout_ms: int = _GROUP.max_session_timeout_ms
    group_max_size: int = _GROUP.max_group_size
    group_consumer_session_timeout_ms: int = _GROUP.consumer_session_timeout_ms
    group_consumer_heartbeat_interval_ms: int = _GROUP.consumer_heartbeat_interval_ms
    group_consumer_assignment_interval_ms: int = _GROUP.consumer_assignment_interval_ms
    group_coordinator_rebalance_protocols: tuple[str, ...] = ("classic", "consumer")
    connections_max_idle: float | None = None
    validate_records: bool = True
    max_incremental_fetch_session_cache_slots: int = DEFAULT_CACHE_SLOTS
    min_incremental_fetch_session_eviction_ms: int = DEFAULT_EVICTION_MS
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
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
                consumer_session_timeout_ms=self.settings.group_consumer_session_timeout_ms,
                consumer_heartbeat_interval_ms=self.settings.group_consumer_heartbeat_interval_ms,
                consumer_assignment_interval_ms=self.settings.group_consumer_assignment_interval_ms,
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
        self._next_producer_id = 0

    # ------------------------------------------------------------------ identity

    def _uuid(self) -> uuid.UUID:
        return uuid.UUID(int=self._rng.getrandbits(128), version=4)

    def _make_cluster_id(self) -> str:
        raw = base64.urlsafe_b64encode(self._uuid().bytes).decode()[:22]
        return "A" + raw[1:] if raw.startswith("-") else raw

    def _member_id(self, prefix: str) -> str:
        return f"{prefix}-{self._uuid()}"

    def allocate_producer_id(self) -> int:
        """A producer id no producer of the cluster had (InitProducerId), from 0 up."""
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id

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
        """Mark a broker up or down and re-elect partition leaders accordingly.

        A broker coming up rebuilds the idempotent producer state of the
        partitions it then leads, as Kafka does from its snapshot
        (:meth:`~gengroup.broker.producer_state.ProducerStates.reload`). The
        partitions another replica kept leading keep their state, as their
        leader's is in Kafka: the embedded broker has one state per
        partition, not one per replica.
        """
        if online:
            self.online.add(node_id)
        else:
            self.online.discard(node_id)
        if self.topics.elect_leaders(self.online):
            self.notify()
        if online:
            now = self.wall_ms()
            for part in self.topics.led_by(node_id):
                part.log.producers.reload(now, self.settings.producer_id_expiration_ms)

    def live_brokers(self) -> list[int]:
        """The ids of the brokers that are up, sorted."""
        return [b for b in self.node_ids if b in self.online]

    # ------------------------------------------------------------------ topics

    def delete_topic(self, name: str) -> Topic:
        """Delete topic ``name`` and every group's committed offsets of it, as Kafka does.

        Raises:
            LogError: as :meth:`Topics.delete <gengroup.broker.log.Topics.delete>`.
        """
        topic = self.topics.delete(name)
        self.coordinator.topic_deleted(name)
        return topic

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        *,
        configs: Mapping[str, str | None] | None = None,
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
        merged: dict[str, str | None] = {
            "message.timestamp.type": self.settings.log_message_timestamp_type
        }
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
        request: Request,
        *,
        group_ids: Sequence[str | None],
        broker_id: int,
    ) -> Response | None:
        """Submit a request to the coordinator and wait for its reply.

        Args:
            request: the coordinator's input (``JoinGroupInput`` ...).
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
            self._deliver(self.coordinator.handle(self.now_ms(), token, request))
            self._wake_timer()
            await pending.event.wait()
        finally:
            del self._pending[token]
        return None if pending.moved and pending.response is None else pending.response

    def group_call_now(self, request: Request) -> Any:
        """Submit a request that the coordinator answers at once (inspection helpers)."""
        self._tokens += 1
        token = self._tokens
        pending = _Pending((), -1, anyio.Event())
        self._pending[token] = pending
        try:
            self._deliver(self.coordinator.handle(self.now_ms(), token, request))
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
