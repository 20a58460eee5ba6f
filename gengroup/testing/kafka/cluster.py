"""A cluster of real Apache Kafka nodes (KRaft) on loopback, for failover tests.

:class:`KafkaCluster` runs ``brokers`` :class:`~.broker.KafkaBroker` nodes, each
a combined broker and controller, forming one static controller quorum
(``controller.quorum.voters``): the ports of every node are picked before any
starts, the storage of each is formatted with one shared cluster id, then all
JVMs are launched together (none is ready before a majority of the quorum
runs) and awaited. New topics and ``__consumer_offsets`` get one replica per
node (at most three), ``min.insync.replicas`` is 2, and unclean leader election
is off, so a record acknowledged with ``acks=all`` survives the loss of any
one node.

Each node keeps its ports and data directory for the cluster's life:
:meth:`KafkaCluster.stop` (graceful) and :meth:`KafkaCluster.kill` (SIGKILL)
take one node down, :meth:`KafkaCluster.restart` brings it back where it was.
:meth:`KafkaCluster.wait_healthy` waits until every node runs and every
partition has a leader and all its replicas in sync; :meth:`KafkaCluster.node_of_leader`
and :meth:`KafkaCluster.coordinator_of` say which node to kill. They ask the
nodes with blocking Metadata and FindCoordinator requests (:func:`.probe.exchange`),
not through the client under test.
"""

from __future__ import annotations

import contextlib
import datetime
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, TypeVar, Unpack

from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.alter_partition_reassignments.v0.response import (
    AlterPartitionReassignmentsResponse,
)
from kio.schema.elect_leaders.v2.request import (
    ElectLeadersRequest,
    TopicPartitions as ElectTopicPartitions,
)
from kio.schema.elect_leaders.v2.response import ElectLeadersResponse
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.find_coordinator.v4.response import FindCoordinatorResponse
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta

from . import process
from ._base import (
    DEFAULT_START_TIMEOUT,
    KafkaHarnessError,
    NodeOptions,
    StartedInBlock,
    run_in_thread,
)
from .broker import KafkaBroker
from .config import Quorum, new_cluster_id
from .probe import exchange

__all__ = ["ClusterOptions", "KafkaCluster", "PartitionState", "kafka_cluster"]

T = TypeVar("T")

_ASK_TIMEOUT: Final = 5.0
_POLL: Final = 0.2
_BIND_ATTEMPTS: Final = 3


class ClusterOptions(NodeOptions, total=False):
    """Keyword options of :class:`KafkaCluster` (and :func:`kafka_cluster`)."""

    brokers: int


def cluster_properties(brokers: int) -> dict[str, str | int | bool]:
    """The ``server.properties`` entries every node of a ``brokers``-node cluster shares.

    One replica per node (at most three) for new topics and the internal
    topics, two of them in sync for ``acks=all`` (one with a single node), no
    unclean leader election, and three ``__consumer_offsets`` partitions so that
    groups spread over coordinators.
    """
    replicas = min(brokers, 3)
    in_sync = min(replicas, 2)
    return {
        "default.replication.factor": replicas,
        "min.insync.replicas": in_sync,
        "offsets.topic.replication.factor": replicas,
        "offsets.topic.num.partitions": 3,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": in_sync,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": in_sync,
        "unclean.leader.election.enable": False,
    }


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition as a node's metadata shows it.

    Attributes:
        topic: The topic.
        partition: The partition index.
        leader: The leader's node id (-1: none).
        replicas: The node ids of its replicas.
        isr: The node ids of its in-sync replicas.
    """

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def healthy(self) -> bool:
        """Whether it has a leader and every replica is in sync."""
        return self.leader >= 0 and set(self.isr) == set(self.replicas)


class KafkaCluster(StartedInBlock):
    """Several Apache Kafka nodes (KRaft, combined broker and controller) on loopback.

    Blocking API (see :func:`kafka_cluster` for async code), usable as a
    context manager. Nodes are numbered from 0; a node's index is its
    ``node.id``, which is what Metadata and FindCoordinator name.

    Args:
        brokers: How many nodes; all of them are controller quorum voters.
        version: The Apache Kafka version.
        java: The ``java`` executable.
        mvn: The ``mvn`` executable (first fetch of the jars only).
        cache_root: The jar cache root.
        lib_dir: A directory of broker jars to use instead of the Maven cache.
        base_dir: Where the nodes' data directories are made.
        heap: Each node's JVM heap size.
        jvm_args: Extra JVM arguments of every node.
        properties: ``server.properties`` entries of every node, over
            :func:`cluster_properties` and the single-broker defaults.
        start_timeout: Seconds to wait for the cluster (or a restarted node).
        stop_timeout: Seconds a graceful stop waits before SIGKILL.
        keep: Keep the data directories (storage and ``broker.log``) at :meth:`close`.
        request_log: Every node logs the requests it completes (all, or
            those of the APIs named) to ``requests.log`` (see
            :attr:`KafkaBroker.request_log_path`).
    """

    def __init__(self, brokers: int = 3, **options: Unpack[NodeOptions]) -> None:
        if brokers < 1:
            raise KafkaHarnessError(f"a cluster needs at least one broker, not {brokers}")
        self.brokers: Final = brokers
        self.start_timeout = options.get("start_timeout", DEFAULT_START_TIMEOUT)
        self._node_options = options.copy()
        self._node_options["properties"] = {
            **cluster_properties(brokers),
            **(options.get("properties") or {}),
        }
        self._lock = threading.RLock()
        self._nodes: list[KafkaBroker] = []

    # -- the nodes

    @property
    def nodes(self) -> list[KafkaBroker]:
        """The nodes, by node id (empty before :meth:`start`)."""
        return list(self._nodes)

    def node(self, i: int) -> KafkaBroker:
        """Node ``i``.

        Raises:
            KafkaHarnessError: The cluster has no node ``i`` (or was not started).
        """
        if not 0 <= i < len(self._nodes):
            raise KafkaHarnessError(f"{self!r} has no node {i}")
        return self._nodes[i]

    @property
    def bootstrap(self) -> str:
        """Every node's address, comma-separated: ``"127.0.0.1:P0,127.0.0.1:P1,..."``."""
        if not self._nodes:
            raise KafkaHarnessError("the cluster has not been started")
        return ",".join(node.bootstrap for node in self._nodes)

    @property
    def running(self) -> list[int]:
        """The ids of the nodes whose JVM is alive."""
        return [i for i, node in enumerate(self._nodes) if node.running]

    def __repr__(self) -> str:
        up = f"{len(self.running)}/{self.brokers} running" if self._nodes else "not started"
        return f"<KafkaCluster {self.brokers} nodes, {up}>"

    # -- lifecycle

    def start(self) -> None:
        """Start every node, then wait until the cluster is healthy.

        ``__consumer_offsets`` is created (by a FindCoordinator) while every node
        runs, so that it has a replica on each.

        Raises:
            KafkaHarnessError: A node could not be started, or the cluster did
                not become healthy within ``start_timeout`` (the message ends
                with the failing node's log). Every node is stopped then.
        """
        with self._lock:
            if self._nodes:
                raise KafkaHarnessError(f"{self!r} was already started")
            for attempt in range(_BIND_ATTEMPTS):
                try:
                    self._start_once()
                    return
                except KafkaHarnessError as exc:
                    self.close()
                    if attempt + 1 == _BIND_ATTEMPTS or "BindException" not in str(exc):
                        raise
                except BaseException:
                    self.close()
                    raise

    def _start_once(self) -> None:
        n = self.brokers
        ports = process.free_ports(2 * n)
        quorum = Quorum(new_cluster_id(), {i: ports[2 * i + 1] for i in range(n)})
        self._nodes = [
            KafkaBroker(
                port=ports[2 * i],
                controller_port=ports[2 * i + 1],
                node_id=i,
                quorum=quorum,
                **self._node_options,
            )
            for i in range(n)
        ]
        deadline = time.monotonic() + self.start_timeout
        # Formatting runs a JVM per node: do it side by side.
        with ThreadPoolExecutor(n) as pool:
            for future in [pool.submit(node.start, wait=False) for node in self._nodes]:
                future.result()
        for node in self._nodes:
            node.wait_ready(max(1.0, deadline - time.monotonic()))
        self.coordinator_of("gengroup-harness", timeout=max(1.0, deadline - time.monotonic()))
        self.wait_healthy(max(1.0, deadline - time.monotonic()))

    def close(self) -> None:
        """SIGKILL every node and remove the data directories (unless ``keep``).

        The data is thrown away, so nothing is shut down gracefully. Idempotent.
        """
        with self._lock:
            nodes, self._nodes = self._nodes, []
            for node in nodes:
                node.kill()
            for node in nodes:
                node.stop()

    def stop(self, i: int) -> None:
        """Stop node ``i`` gracefully (controlled shutdown), keeping its ports and data."""
        self.node(i).halt()

    def kill(self, i: int) -> None:
        """SIGKILL node ``i`` now, as a crash would; its ports and data are kept."""
        self.node(i).kill()

    def restart(self, i: int) -> None:
        """Start node ``i`` again on its ports and data (stopping it first if it runs).

        Returns once the node answers ApiVersions, which needs a majority of
        the quorum running; :meth:`wait_healthy` waits for its replicas to
        catch up.

        Raises:
            KafkaHarnessError: It did not come back within ``start_timeout``.
        """
        self.node(i).restart()

    def heal(self, timeout: float | None = None) -> None:
        """Restart every node that is down, then wait until the cluster is healthy."""
        for i, node in enumerate(self.nodes):
            if not node.running:
                self.restart(i)
        self.wait_healthy(timeout)

    def _shut_down(self) -> None:
        self.close()

    # -- questions to the nodes

    def _ask(self, request: Any, response_cls: type[T], nodes: Sequence[int] | None = None) -> T:
        """The answer of the first running node (of ``nodes``) that answers."""
        errors: list[str] = []
        for i in self.running if nodes is None else nodes:
            node = self._nodes[i]
            try:
                return exchange(node.host, node.port, request, response_cls, timeout=_ASK_TIMEOUT)
            except (OSError, KafkaHarnessError) as exc:
                errors.append(f"node {i}: {exc}")
        raise KafkaHarnessError(f"no node answered: {'; '.join(errors) or 'none is running'}")

    def _until(self, what: str, timeout: float | None, attempt: Callable[[], T | None]) -> T:
        limit = self.start_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        last = "no answer"
        while True:
            try:
                found = attempt()
                if found is not None:
                    return found
            except KafkaHarnessError as exc:
                last = str(exc)
            else:
                last = "not yet"
            if time.monotonic() >= deadline:
                raise KafkaHarnessError(f"{what} within {limit:.0f} s ({last})")
            time.sleep(_POLL)

    def partitions(
        self, topics: Sequence[str] | None = None, *, node: int | None = None
    ) -> tuple[set[int], list[PartitionState]]:
        """The brokers and partitions a node's metadata shows.

        Args:
            topics: Only these topics (None: every topic, internal ones included).
            node: Ask this node (default: the first running one that answers).

        Returns:
            The ids of the registered, unfenced brokers, and every partition.

        Raises:
            KafkaHarnessError: No node answered, or a topic has an error.
        """
        request = MetadataRequest(
            topics=None
            if topics is None
            else tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        resp = self._ask(request, MetadataResponse, None if node is None else [node])
        states = []
        for t in resp.topics:
            if t.error_code != 0 or t.name is None:
                raise KafkaHarnessError(f"metadata of topic {t.name!r}: {t.error_code.name}")
            states += [
                PartitionState(
                    t.name,
                    int(p.partition_index),
                    int(p.leader_id),
                    tuple(int(r) for r in p.replica_nodes),
                    tuple(int(r) for r in p.isr_nodes),
                )
                for p in t.partitions
            ]
        return {int(b.node_id) for b in resp.brokers}, states

    def node_of_leader(self, topic: str, partition: int, *, timeout: float | None = None) -> int:
        """The node leading ``topic[partition]``, once one does.

        Raises:
            KafkaHarnessError: No leader within ``timeout`` (default: ``start_timeout``).
        """

        def leader() -> int | None:
            _, states = self.partitions([topic])
            found = [s.leader for s in states if s.partition == partition and s.leader >= 0]
            return found[0] if found else None

        return self._until(f"no leader of {topic}[{partition}]", timeout, leader)

    def coordinator_of(self, group: str, *, timeout: float | None = None) -> int:
        """The node coordinating consumer group ``group`` (FindCoordinator), once one does.

        Raises:
            KafkaHarnessError: No coordinator within ``timeout`` (default: ``start_timeout``).
        """

        def coordinator() -> int | None:
            request = FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,))
            entry = self._ask(request, FindCoordinatorResponse).coordinators[0]
            return int(entry.node_id) if entry.error_code == 0 else None

        return self._until(f"no coordinator of group {group!r}", timeout, coordinator)

    def move_leader(
        self, topic: str, partition: int, node: int, *, timeout: float | None = None
    ) -> None:
        """Make ``node`` lead ``topic[partition]`` while every node stays up, as
        an operator's preferred-leader election does: the partition's replicas
        reordered with ``node`` first (AlterPartitionReassignments, which only
        reorders them), then the preferred replica elected (ElectLeaders).

        Raises:
            KafkaHarnessError: ``node`` is not a replica of the partition, a
                request was refused, or ``node`` did not lead it within
                ``timeout`` (default: ``start_timeout``).
        """
        _, states = self.partitions([topic])
        now = [s.replicas for s in states if s.partition == partition]
        if not now or node not in now[0]:
            raise KafkaHarnessError(f"node {node} is not a replica of {topic}[{partition}]")
        replicas = (node, *(r for r in now[0] if r != node))
        wait = datetime.timedelta(seconds=_ASK_TIMEOUT)
        moved = self._ask(
            AlterPartitionReassignmentsRequest(
                timeout=i32Timedelta.parse(wait),
                topics=(
                    ReassignableTopic(
                        name=TopicName(topic),
                        partitions=(
                            ReassignablePartition(
                                partition_index=i32(partition),
                                replicas=tuple(BrokerId(r) for r in replicas),
                            ),
                        ),
                    ),
                ),
            ),
            AlterPartitionReassignmentsResponse,
        )
        if moved.error_code != 0:
            raise KafkaHarnessError(f"reordering the replicas of {topic}[{partition}]: {moved}")

        def elected() -> bool | None:
            self._ask(
                ElectLeadersRequest(
                    election_type=i8(0),  # the preferred replica
                    topic_partitions=(
                        ElectTopicPartitions(topic=TopicName(topic), partitions=(i32(partition),)),
                    ),
                    timeout=i32Timedelta.parse(wait),
                ),
                ElectLeadersResponse,
            )
            leader = [s.leader for s in self.partitions([topic])[1] if s.partition == partition]
            return True if leader == [node] else None

        self._until(f"node {node} does not lead {topic}[{partition}]", timeout, elected)

    def wait_healthy(self, timeout: float | None = None) -> None:
        """Wait until every node runs, and each one's metadata shows every node
        registered and every partition led with all its replicas in sync.

        Raises:
            KafkaHarnessError: Not healthy within ``timeout`` (default:
                ``start_timeout``); the message says what was still missing.
        """
        everyone = set(range(self.brokers))

        def healthy() -> bool | None:
            down = everyone - set(self.running)
            if down:
                raise KafkaHarnessError(f"node(s) {sorted(down)} not running")
            for i in sorted(everyone):
                brokers, states = self.partitions(node=i)
                if brokers != everyone:
                    raise KafkaHarnessError(f"node {i} sees brokers {sorted(brokers)}")
                sick = [s for s in states if not s.healthy]
                if sick:
                    raise KafkaHarnessError(f"node {i} sees {len(sick)} unhealthy, e.g. {sick[0]}")
            return True

        self._until("the cluster was not healthy", timeout, healthy)


@contextlib.asynccontextmanager
async def kafka_cluster(**options: Unpack[ClusterOptions]) -> AsyncIterator[KafkaCluster]:
    """Run a :class:`KafkaCluster` for the duration of an ``async with`` block.

    Starting and closing run in a worker thread; closing is shielded from
    cancellation.

    Args:
        **options: Keyword options of :class:`KafkaCluster`.

    Yields:
        The started, healthy cluster.
    """
    cluster = KafkaCluster(**options)
    async with run_in_thread(cluster.start, cluster.close):
        yield cluster
