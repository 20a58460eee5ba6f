"""The embedded Kafka-compatible broker: what kfake is to franz-go, for Python.

An in-process broker on anyio speaking the real Kafka wire protocol on
loopback, for the demo, local development without a JVM, and deterministic
tests in virtual time (trio's ``MockClock``)::

    from gengroup.broker import FakeCluster

    async with FakeCluster(brokers=3, topics={"payments": 6}) as cluster:
        print(cluster.bootstrap)   # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"

The modules: :mod:`~gengroup.broker.fake_cluster` (``FakeCluster``),
:mod:`~gengroup.broker.server` (one broker: listening, connections, dispatch),
:mod:`~gengroup.broker.state` (what the brokers share),
:mod:`~gengroup.broker.apis` (one module per API key),
:mod:`~gengroup.broker.security` (TLS and SASL: ``ServerSecurity``),
:mod:`~gengroup.broker.faults` (the fault controls),
:mod:`~gengroup.broker.log` (topics and partition logs) and
:mod:`~gengroup.broker.coordinator` (the group coordinator).
"""

from ..protocol.versions import ApiKey as ApiKey
from .fake_cluster import (
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
)
from .log import LogError as LogError
from .security import ServerSecurity as ServerSecurity
from .server import BrokerServer as BrokerServer
from .state import BrokerSettings as BrokerSettings

__all__ = [
    "PASS",
    "Action",
    "ApiKey",
    "BrokerServer",
    "BrokerSettings",
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
    "Respond",
    "ServerSecurity",
    "memory_byte_stream_pair",
]
