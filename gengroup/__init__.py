"""gengroup: a Kafka consumer-group SDK for structured-concurrency Python.

A rebalance is a generation, and a generation is a nursery::

    async with gengroup.ConsumerGroup("billing", topics=["payments"],
                                      brokers=["127.0.0.1:9092"]) as group:
        async for gen in group:
            for tp in gen.assignments:
                gen.start_soon(handle, gen, tp)
"""

from ._errors import (
    BrokenConnection as BrokenConnection,
)
from ._errors import (
    BrokerError as BrokerError,
)
from ._errors import (
    ConfigError as ConfigError,
)
from ._errors import (
    ConnectionClosed as ConnectionClosed,
)
from ._errors import (
    CoordinatorError as CoordinatorError,
)
from ._errors import (
    CorruptRecordError as CorruptRecordError,
)
from ._errors import (
    FencedInstanceId as FencedInstanceId,
)
from ._errors import (
    GenerationEnded as GenerationEnded,
)
from ._errors import (
    GengroupError as GengroupError,
)
from ._errors import (
    IllegalGeneration as IllegalGeneration,
)
from ._errors import (
    KafkaConnectionError as KafkaConnectionError,
)
from ._errors import (
    OffsetOutOfRange as OffsetOutOfRange,
)
from ._errors import (
    ProtocolError as ProtocolError,
)
from ._errors import (
    RebalanceInProgress as RebalanceInProgress,
)
from ._errors import (
    RequestTimedOut as RequestTimedOut,
)
from ._errors import (
    TaskStuckError as TaskStuckError,
)
from ._errors import (
    UnknownMemberId as UnknownMemberId,
)
from ._errors import (
    UnknownTopicOrPartition as UnknownTopicOrPartition,
)
from ._types import TopicPartition as TopicPartition
from .admin import Admin as Admin
from .consumer.generation import Generation as Generation
from .consumer.generation import RebalanceTimings as RebalanceTimings
from .consumer.group import ConsumerGroup as ConsumerGroup
from .consumer.prefetch import FetchedBatch as FetchedBatch
from .consumer.workers import run_workers as run_workers
from .io.cluster import Cluster as Cluster
from .membership.balancers import (
    Balancer as Balancer,
)
from .membership.balancers import (
    GroupMember as GroupMember,
)
from .membership.balancers import (
    RangeBalancer as RangeBalancer,
)
from .membership.balancers import (
    RoundRobinBalancer as RoundRobinBalancer,
)
from .producer import Producer as Producer
from .producer import RecordMetadata as RecordMetadata
from .protocol.records import Compression as Compression
from .protocol.records import Record as Record

__all__ = [
    "Admin",
    "Balancer",
    "BrokenConnection",
    "BrokerError",
    "Cluster",
    "Compression",
    "ConfigError",
    "ConnectionClosed",
    "ConsumerGroup",
    "CoordinatorError",
    "CorruptRecordError",
    "FencedInstanceId",
    "FetchedBatch",
    "Generation",
    "GenerationEnded",
    "GengroupError",
    "GroupMember",
    "IllegalGeneration",
    "KafkaConnectionError",
    "OffsetOutOfRange",
    "Producer",
    "ProtocolError",
    "RangeBalancer",
    "RebalanceInProgress",
    "RebalanceTimings",
    "Record",
    "RecordMetadata",
    "RequestTimedOut",
    "RoundRobinBalancer",
    "TaskStuckError",
    "TopicPartition",
    "UnknownMemberId",
    "UnknownTopicOrPartition",
    "run_workers",
]

__version__ = "0.1.0"
