"""The embedded Kafka-compatible broker: what kfake is to franz-go, for Python.

An in-process broker on anyio speaking the real Kafka wire protocol on
loopback, for the demo, local development without a JVM, and deterministic
tests in virtual time (trio's ``MockClock``)::

    from gengroup.broker import FakeCluster

    async with FakeCluster(brokers=3, topics={"payments": 6}) as cluster:
        print(cluster.bootstrap)   # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"

The modules: :mod:`~gengroup.broker.cluster` (``FakeCluster``),
:mod:`~gengroup.broker.server` (one broker: listening, connections, dispatch),
:mod:`~gengroup.broker.state` (what the brokers share),
:mod:`~gengroup.broker.apis` (one module per API key),
:mod:`~gengroup.broker.faults` (the fault controls),
:mod:`~gengroup.broker.log` (topics and partition logs) and
:mod:`~gengroup.broker.coordinator` (the group coordinator).
"""

from .cluster import EmbeddedBroker as EmbeddedBroker
from .cluster import FakeCluster as FakeCluster
from .cluster import MemoryByteStream as MemoryByteStream
from .cluster import memory_byte_stream_pair as memory_byte_stream_pair
from .faults import PASS as PASS
from .faults import Action as Action
from .faults import Control as Control
from .faults import ControlHandler as ControlHandler
from .faults import Delay as Delay
from .faults import Disconnect as Disconnect
from .faults import Drop as Drop
from .faults import Fail as Fail
from .faults import Intercepted as Intercepted
from .faults import Pass as Pass
from .faults import Respond as Respond
from .log import LogError as LogError
from .server import BrokerServer as BrokerServer
from .state import BrokerSettings as BrokerSettings

__all__ = [
    "PASS",
    "Action",
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
    "memory_byte_stream_pair",
]
