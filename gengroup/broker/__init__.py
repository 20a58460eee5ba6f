"""The embedded Kafka-compatible broker: what kfake is to franz-go, for Python.

An in-process broker on anyio speaking the real Kafka wire protocol on
loopback, for the demo, local development without a JVM, and deterministic
tests in virtual time (trio's ``MockClock``)::

    from gengroup.broker import FakeCluster

    async with FakeCluster(brokers=3, topics={"payments": 6}) as cluster:
        print(cluster.bootstrap)   # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
"""

from .cluster import (
    EmbeddedBroker as EmbeddedBroker,
    FakeCluster as FakeCluster,
    MemoryByteStream as MemoryByteStream,
    memory_byte_stream_pair as memory_byte_stream_pair,
)
from .faults import (
    PASS as PASS,
    Action as Action,
    Control as Control,
    ControlHandler as ControlHandler,
    Delay as Delay,
    Disconnect as Disconnect,
    Drop as Drop,
    Fail as Fail,
    Intercepted as Intercepted,
    Pass as Pass,
    Respond as Respond,
    error_response as error_response,
)
from .log import LogError as LogError, PartitionLog as PartitionLog
from .server import (
    OFFSETS_TOPIC as OFFSETS_TOPIC,
    SUPPORTED_VERSIONS as SUPPORTED_VERSIONS,
    BrokerServer as BrokerServer,
    BrokerSettings as BrokerSettings,
    ClusterState as ClusterState,
    coordinator_partition as coordinator_partition,
)

__all__ = [
    "OFFSETS_TOPIC",
    "PASS",
    "SUPPORTED_VERSIONS",
    "Action",
    "BrokerServer",
    "BrokerSettings",
    "ClusterState",
    "Control",
    "ControlHandler",
    "Delay",
    "Disconnect",
    "Drop",
    "EmbeddedBroker",
    "Fail",
    "FakeCluster",
    "Intercepted",
    "LogError",
    "MemoryByteStream",
    "Pass",
    "PartitionLog",
    "Respond",
    "coordinator_partition",
    "error_response",
    "memory_byte_stream_pair",
]
