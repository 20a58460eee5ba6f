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
    BrokerError as BrokerError,
    ConfigError as ConfigError,
    ConnectionClosed as ConnectionClosed,
    CoordinatorError as CoordinatorError,
    CorruptRecordError as CorruptRecordError,
    FencedInstanceId as FencedInstanceId,
    GenerationEnded as GenerationEnded,
    GengroupError as GengroupError,
    IllegalGeneration as IllegalGeneration,
    KafkaConnectionError as KafkaConnectionError,
    OffsetOutOfRange as OffsetOutOfRange,
    ProtocolError as ProtocolError,
    RebalanceInProgress as RebalanceInProgress,
    RequestTimedOut as RequestTimedOut,
    TaskStuckError as TaskStuckError,
    UnknownMemberId as UnknownMemberId,
    UnknownTopicOrPartition as UnknownTopicOrPartition,
)
from ._types import TopicPartition as TopicPartition
from .admin import Admin as Admin
from .consumer.fetcher import FetchedBatch as FetchedBatch
from .consumer.generation import Generation as Generation, RebalanceTimings as RebalanceTimings
from .consumer.group import ConsumerGroup as ConsumerGroup
from .consumer.workers import run_workers as run_workers
from .group.balancers import (
    Balancer as Balancer,
    GroupMember as GroupMember,
    RangeBalancer as RangeBalancer,
    RoundRobinBalancer as RoundRobinBalancer,
)
from .io.cluster import Cluster as Cluster
from .producer import Producer as Producer, RecordMetadata as RecordMetadata
from .protocol.records import Compression as Compression, Record as Record

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
