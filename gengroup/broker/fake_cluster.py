"""``FakeCluster``: an in-process, Kafka-compatible cluster for tests, demos and development.

Theory of operation:

A :class:`FakeCluster` is what franz-go's ``kfake`` is to Go: N brokers in one
process, each a :class:`~gengroup.broker.server.BrokerServer` listening on its
own loopback port and speaking the real Kafka wire protocol, all sharing one
:class:`~gengroup.broker.state.ClusterState` (topics and their logs, the group
coordinator, fault controls). Node ids are ``0 .. N-1``. Entering the context
starts, in one task group, every broker (``tg.start`` so that each port is
bound before the next starts) and the group coordinator's timer task, then
creates the seed topics; leaving it cancels the task group, which closes every
listener and connection.

Placement is deterministic: partition leaders of successive topics are spread
round-robin over the brokers, and partition ``p`` of ``__consumer_offsets`` is
led by broker ``p mod N``, so a group's coordinator is
``brokers[(abs(javaStringHash(group_id)) % offsets_topic_num_partitions) mod N]``
(Kafka's ``partitionFor``). Since every replica of a partition is the same
in-memory log, replicas are always in sync; stopping a broker moves
leadership of its partitions to their next online replica, or makes them
offline (leader -1) when it was their only replica, exactly what a client of a
real cluster sees.

Tests steer the cluster without touching sockets:

* :meth:`FakeCluster.control` installs a fault control for an API (see
  :mod:`gengroup.broker.faults`): delay, drop, fail with an error code, answer
  with a custom response, or disconnect -- once or persistently;
* :meth:`FakeCluster.move_coordinator` moves a group to another broker, whose
  requests then succeed while the old one answers NOT_COORDINATOR;
* :meth:`FakeCluster.cut_connections` closes client connections;
* :meth:`FakeCluster.evict_fetch_sessions` drops the brokers' incremental
  fetch sessions, so the next incremental Fetch is answered
  FETCH_SESSION_ID_NOT_FOUND;
* :meth:`FakeCluster.restart_broker` stops a broker (listener closed,
  connections dropped, leadership moved) and brings it back on the same port
  with every piece of state kept but its fetch sessions, which a real broker
  also loses, and the idempotent producer state of the partitions it leads
  again, rebuilt as from Kafka's snapshot;
* :meth:`FakeCluster.create_topic`, :meth:`FakeCluster.produce`,
  :meth:`FakeCluster.records`, :meth:`FakeCluster.committed_offsets` set up and
  inspect data directly.

Everything runs on the event loop's clock, so under trio's
``MockClock(autojump_threshold=0)`` sessions, rebalance delays, long polls and
injected delays all elapse in virtual time. Loopback sockets work with autojump
(the kernel delivers loopback data before the loop can block), and for tests
that want no sockets at all :meth:`FakeCluster.connect_memory` serves a broker
over an in-memory byte stream.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from kio.schema.errors import ErrorCode

from .._types import TopicPartition
from ..protocol.records import Compression, NewRecord, Record, decode_batches, encode_batch
from .coordinator import DescribedGroup, DescribeGroupsInput, OffsetFetchGroup, OffsetFetchInput
from .faults import Control, ControlHandler
from .log import LogError, Partition, Topic, topic_name_error
from .security import ServerSecurity
from .server import BrokerServer
from .state import BrokerSettings, ClusterState

__all__ = ["EmbeddedBroker", "FakeCluster", "MemoryByteStream", "memory_byte_stream_pair"]

RecordLike = bytes | None | tuple[bytes | None, bytes | None] | NewRecord


class MemoryByteStream(anyio.abc.ByteStream):
    """One end of an in-memory, bidirectional byte stream (see :func:`memory_byte_stream_pair`)."""

    def __init__(
        self, send: MemoryObjectSendStream[bytes], receive: MemoryObjectReceiveStream[bytes]
    ) -> None:
        self._send = send
        self._receive = receive
        self._pending = b""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """Receive up to ``max_bytes`` bytes; raises ``EndOfStream`` once the peer closed."""
        if not self._pending:
            self._pending = await self._receive.receive()
        data, self._pending = self._pending[:max_bytes], self._pending[max_bytes:]
        return data

    async def send(self, item: bytes) -> None:
        """Send bytes to the peer."""
        if item:
            await self._send.send(bytes(item))

    async def send_eof(self) -> None:
        """Close the sending direction."""
        await self._send.aclose()

    async def aclose(self) -> None:
        """Close both directions."""
        await self._send.aclose()
        await self._receive.aclose()


def memory_byte_stream_pair() -> tuple[MemoryByteStream, MemoryByteStream]:
    """Two connected in-memory byte streams (unbounded buffers).

    Returns:
        ``(a, b)``: what is sent on one is received on the other.
    """
    a_send, b_receive = anyio.create_memory_object_stream[bytes](math.inf)
    b_send, a_receive = anyio.create_memory_object_stream[bytes](math.inf)
    return MemoryByteStream(a_send, a_receive), MemoryByteStream(b_send, b_receive)


def _as_record(item: RecordLike, timestamp: int) -> NewRecord:
    if isinstance(item, NewRecord):
        return item
    if item is None or isinstance(item, bytes | bytearray | memoryview):
        return NewRecord(None, None if item is None else bytes(item), (), timestamp)
    key, value = item
    return NewRecord(key, value, (), timestamp)


class FakeCluster:
    """An in-process Kafka-compatible cluster on loopback (an async context manager).

    Args:
        brokers: the number of brokers (node ids ``0 .. brokers-1``).
        topics: seed topics, ``{name: partitions}`` or ``(name, partitions)`` pairs.
        ports: a port per broker (0 or omitted: any free port).
        settings: broker settings (Kafka's defaults if omitted).
        seed: makes topic ids, member ids and the cluster id reproducible.
        epoch_ms: wall-clock epoch milliseconds at start (for log-append time
            and record timestamps of :meth:`produce`); read once from the
            system clock if omitted.
        auto_create_topics: shortcut for ``settings.auto_create_topics``.
        initial_rebalance_delay_ms: shortcut for
            ``settings.group_initial_rebalance_delay_ms``.
        offsets_topic_num_partitions: shortcut for
            ``settings.offsets_topic_num_partitions``.
        security: how every broker's listener secures its connections (TLS,
            SASL users and mechanisms, session lifetime); PLAINTEXT if omitted.

    Raises:
        ConfigError: the TLS certificate, key or CA files of ``security``
            cannot be loaded.

    A cluster is entered once, and its methods are called from the event
    loop's thread (from worker threads, go through ``anyio.from_thread``).

    Example::

        async with FakeCluster(brokers=3, topics={"payments": 6}) as cluster:
            async with Cluster(cluster.bootstrap) as client:
                ...
    """

    def __init__(
        self,
        brokers: int = 1,
        *,
        topics: Mapping[str, int] | Iterable[tuple[str, int]] | None = None,
        ports: Sequence[int] | None = None,
        settings: BrokerSettings | None = None,
        seed: int | None = None,
        epoch_ms: int | None = None,
        auto_create_topics: bool | None = None,
        initial_rebalance_delay_ms: int | None = None,
        offsets_topic_num_partitions: int | None = None,
        security: ServerSecurity | None = None,
    ) -> None:
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        if ports is not None and len(ports) != brokers:
            raise ValueError(f"{len(ports)} ports given for {brokers} brokers")
        settings = settings if settings is not None else BrokerSettings()
        overrides: dict[str, Any] = {}
        if auto_create_topics is not None:
            overrides["auto_create_topics"] = auto_create_topics
        if initial_rebalance_delay_ms is not None:
            overrides["group_initial_rebalance_delay_ms"] = initial_rebalance_delay_ms
        if offsets_topic_num_partitions is not None:
            overrides["offsets_topic_num_partitions"] = offsets_topic_num_partitions
        if overrides:
            settings = dataclasses.replace(settings, **overrides)
        self.settings = settings
        self.security = security if security is not None else ServerSecurity()
        self.state = ClusterState(range(brokers), settings, seed=seed, epoch_ms=epoch_ms)
        self.servers: dict[int, BrokerServer] = {
            node: BrokerServer(
                self.state, node, ports[node] if ports else 0, security=self.security
            )
            for node in range(brokers)
        }
        items = topics.items() if isinstance(topics, Mapping) else (topics or ())
        self._seed_topics = [(name, int(count)) for name, count in items]
        _check_seed_topics(self._seed_topics)
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._entered = False
        self._started = False

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        if self._entered:
            raise RuntimeError("a FakeCluster can be entered only once; create a new one")
        self._entered = True
        try:
            async with contextlib.AsyncExitStack() as stack:
                tg = await stack.enter_async_context(anyio.create_task_group())
                # Runs before the task group exits: the servers serve until cancelled.
                stack.callback(tg.cancel_scope.cancel)
                self.state.start()
                for server in self.servers.values():
                    await tg.start(server.serve)
                tg.start_soon(self.state.run_group_timer)
                for name, count in self._seed_topics:
                    self.create_topic(name, count)
                self._tg = tg
                self._started = True
                self._stack = stack.pop_all()
        except BaseExceptionGroup as group:
            # What failed the start (a port in use), as itself: the task group
            # only wraps it.
            if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
                failure = group.exceptions[0]
                raise failure from failure.__cause__
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, self._stack = self._stack, None
        if stack is None:
            raise RuntimeError("the FakeCluster is not running (not entered, or left already)")
        self._tg = None
        # Closed without the block's exception, so that it propagates as
        # itself instead of being wrapped by the servers' task group (which
        # the stack cancels first either way).
        await stack.aclose()
        return None

    def _task_group(self) -> anyio.abc.TaskGroup:
        if self._tg is None:
            raise RuntimeError("the FakeCluster is not running: use `async with FakeCluster(...)`")
        return self._tg

    # ------------------------------------------------------------------ addresses

    @property
    def node_ids(self) -> list[int]:
        """The brokers' node ids."""
        return list(self.servers)

    def address(self, broker_id: int) -> tuple[str, int]:
        """``(host, port)`` of a broker."""
        server = self.servers[broker_id]
        return self.settings.host, server.port

    @property
    def bootstrap(self) -> str:
        """Every broker's address, ``"127.0.0.1:P1,127.0.0.1:P2,..."``.

        Raises:
            RuntimeError: the cluster has not started (not entered yet, or its start failed).
        """
        if not self._started:
            raise RuntimeError("the FakeCluster is not running: use `async with FakeCluster(...)`")
        return ",".join(f"{self.settings.host}:{s.port}" for s in self.servers.values())

    @property
    def failed_authentications(self) -> int:
        """Failed authentications (TLS handshakes and SASL exchanges) on every broker."""
        return sum(s.failed_authentications for s in self.servers.values())

    @property
    def reauthentications(self) -> int:
        """SASL re-authentications (KIP-368) completed on every broker."""
        return sum(s.reauthentications for s in self.servers.values())

    @property
    def errors(self) -> list[BaseException]:
        """Internal errors (bugs) met while serving; should stay empty."""
        return self.state.errors

    # ------------------------------------------------------------------ faults

    def control(
        self,
        api_key: int | None,
        handler: ControlHandler,
        *,
        once: bool = False,
        broker_id: int | None = None,
    ) -> Control:
        """Intercept requests of one API (or every API with ``None``).

        Args:
            api_key: the API key, e.g. ``ApiKey.HEARTBEAT``.
            handler: receives each request as an
                :class:`~gengroup.broker.faults.Intercepted` and returns
                ``None`` to let it through, or an action (``Delay``, ``Drop``,
                ``Fail``, ``Respond``, ``Disconnect``).
            once: remove the control after the first request it handles.
            broker_id: only intercept requests sent to this broker.

        Returns:
            The control (``control.remove()`` uninstalls it).
        """
        return self.state.faults.install(Control(api_key, handler, once, broker_id))

    def clear_controls(self) -> None:
        """Remove every installed control."""
        self.state.faults.clear()

    def coordinator_of(self, group_id: str) -> int:
        """The node id of the group's coordinator (-1 if unavailable)."""
        return self.state.coordinator_for(group_id)

    def move_coordinator(self, group_id: str, broker_id: int) -> None:
        """Move a group's coordinator to ``broker_id``, keeping the group's state.

        The previous coordinator answers NOT_COORDINATOR from now on, including
        to the group's requests parked there.
        """
        self.state.move_coordinator(group_id, broker_id)

    def cut_connections(self, broker_id: int | None = None) -> int:
        """Close the client connections of one broker (``None``: of every broker).

        Returns:
            The number of connections closed.
        """
        targets = self.servers.values() if broker_id is None else [self.servers[broker_id]]
        return sum(server.cut_connections() for server in targets)

    def evict_fetch_sessions(self, broker_id: int | None = None) -> int:
        """Drop the incremental fetch sessions of one broker (``None``: of every broker).

        The next incremental Fetch naming one of them is answered
        FETCH_SESSION_ID_NOT_FOUND, as after an eviction or a restart of a
        real broker.

        Returns:
            The number of sessions dropped.
        """
        targets = self.servers.values() if broker_id is None else [self.servers[broker_id]]
        return sum(server.fetch_sessions.evict_all() for server in targets)

    async def stop_broker(self, broker_id: int) -> None:
        """Stop a broker: close its listener and connections, move its leaderships."""
        await self.servers[broker_id].stop()

    async def start_broker(self, broker_id: int) -> None:
        """Start a stopped broker again on the same port."""
        server = self.servers[broker_id]
        if not server.running:
            await self._task_group().start(server.serve)

    async def restart_broker(self, broker_id: int, *, downtime: float = 0.0) -> None:
        """Stop a broker and bring it back on the same port; all state is kept.

        All but the idempotent producer state of the partitions the broker
        leads once back: that is rebuilt as Kafka rebuilds it from its
        snapshot, keeping only each producer's last batch and dropping the
        producers expired by ``producer_id_expiration_ms``
        (:meth:`~gengroup.broker.state.ClusterState.set_online`).

        Args:
            broker_id: the broker.
            downtime: seconds (event-loop time) to stay down.
        """
        await self.stop_broker(broker_id)
        if downtime > 0:
            await anyio.sleep(downtime)
        await self.start_broker(broker_id)

    # ------------------------------------------------------------------ topics and data

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        replication_factor: int = 1,
        configs: Mapping[str, str] | None = None,
    ) -> Topic:
        """Create a topic.

        Raises:
            LogError: the topic exists or the arguments are invalid (``.code``
                holds the Kafka error code).
        """
        return self.state.create_topic(name, partitions, replication_factor, configs=configs)

    def delete_topic(self, name: str) -> None:
        """Delete a topic (fetches of it then fail with UNKNOWN_TOPIC_OR_PARTITION)."""
        self.state.delete_topic(name)
        self.state.notify()

    def create_partitions(self, name: str, count: int) -> None:
        """Grow a topic to ``count`` partitions."""
        self.state.topics.add_partitions(
            name, count, brokers=self.state.node_ids, online=self.state.online
        )
        self.state.notify()

    def move_partition_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Make ``broker_id`` the leader of a partition (bumps its leader epoch)."""
        self.state.topics.move_leader(topic, partition, broker_id)
        self.state.notify()

    def _partition(self, topic: str, partition: int) -> Partition:
        part = self.state.topics.partition(topic, partition)
        if part is None:
            raise LogError(3, f"{topic}[{partition}] does not exist")
        return part

    def produce(
        self,
        topic: str,
        records: Iterable[RecordLike],
        *,
        partition: int = 0,
        compression: Compression = Compression.NONE,
        timestamp: int | None = None,
    ) -> int:
        """Append one batch directly to a partition's log (no leadership check).

        Args:
            topic: the topic.
            records: values (``bytes``/``None``), ``(key, value)`` pairs or
                :class:`~gengroup.protocol.records.NewRecord` instances.
            partition: the partition.
            compression: the batch's codec.
            timestamp: the timestamp of records given without one (default:
                the cluster's wall clock).

        Returns:
            The base offset of the batch.
        """
        part = self._partition(topic, partition)
        info = self.state.topics.get(topic)
        assert info is not None
        now = self.state.wall_ms()
        ts = now if timestamp is None else timestamp
        batch = encode_batch([_as_record(r, ts) for r in records], compression=compression)
        result = part.log.append(
            batch,
            now_ms=now,
            leader_epoch=part.leader_epoch,
            log_append_time=info.log_append_time,
            max_message_bytes=2**31 - 1,
        )
        self.state.notify()
        return result.base_offset

    def records(self, topic: str, partition: int = 0) -> list[Record]:
        """Every record of a partition, decoded."""
        part = self._partition(topic, partition)
        out: list[Record] = []
        for stored in part.log.batches:
            for batch in decode_batches(stored.data):
                out.extend(r for r in batch.records if r.offset >= part.log.log_start_offset)
        return out

    def high_watermark(self, topic: str, partition: int = 0) -> int:
        """A partition's high watermark."""
        return self._partition(topic, partition).log.high_watermark

    def committed_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """The group's committed offsets."""
        out: Any = self.state.group_call_now(
            OffsetFetchInput((OffsetFetchGroup(group_id, None),)),
        )
        return {
            TopicPartition(t.name, p.partition_index): p.committed_offset
            for t in out.groups[0].topics
            for p in t.partitions
        }

    def describe_group(self, group_id: str) -> DescribedGroup:
        """The group as DescribeGroups shows it (state ``"Dead"`` if unknown)."""
        out: Any = self.state.group_call_now(DescribeGroupsInput((group_id,)))
        group: DescribedGroup = out.groups[0]
        return group

    # ------------------------------------------------------------------ transports

    async def handle_stream(self, stream: anyio.abc.ByteStream, broker_id: int = 0) -> None:
        """Serve one client connection of ``broker_id`` over any byte stream."""
        await self.servers[broker_id].handle_stream(stream)

    def connect_memory(self, broker_id: int = 0) -> MemoryByteStream:
        """Open an in-memory connection to a broker (no socket involved).

        The broker serves it as it serves its listener's connections: with
        TLS, the client's end must speak TLS too (wrap it with
        ``anyio.streams.tls.TLSStream.wrap``); with SASL, it must authenticate.

        Returns:
            The client's end; the broker serves the other end in the
            cluster's task group until either side closes.
        """
        client, server_end = memory_byte_stream_pair()
        self._task_group().start_soon(self.servers[broker_id].handle_stream, server_end)
        return client


class EmbeddedBroker(FakeCluster):
    """A single-broker :class:`FakeCluster` (node id 0).

    Args:
        topics: seed topics, ``{name: partitions}``.
        port: the port to listen on (0: any free port).
        **kwargs: any other :class:`FakeCluster` keyword argument.
    """

    def __init__(
        self,
        *,
        topics: Mapping[str, int] | Iterable[tuple[str, int]] | None = None,
        port: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(1, topics=topics, ports=[port], **kwargs)

    @property
    def port(self) -> int:
        """The port the broker listens on."""
        return self.servers[0].port


def _check_seed_topics(topics: list[tuple[str, int]]) -> None:
    """Refuse a seed topic that cannot be created, before anything listens.

    Raises:
        LogError: a name Kafka does not allow, a name given twice, or fewer
            than one partition (``.code`` holds the Kafka error code).
    """
    seen: set[str] = set()
    for name, count in topics:
        why = topic_name_error(name) if isinstance(name, str) else f"{name!r} is not a name"
        if why is not None:
            raise LogError(ErrorCode.invalid_topic_exception, why)
        if name in seen:
            raise LogError(ErrorCode.topic_already_exists, f"topic {name!r} is given twice")
        if count < 1:
            raise LogError(
                ErrorCode.invalid_partitions, f"topic {name!r}: partitions must be at least 1"
            )
        seen.add(name)
