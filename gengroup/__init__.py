"""gengroup: a Kafka consumer-group SDK for structured-concurrency Python.

A rebalance is a generation, and a generation is a nursery::

    async with gengroup.ConsumerGroup("billing", topics=["payments"],
                                      brokers=["127.0.0.1:9092"]) as group:
        async for gen in group:
            for tp in gen.assignments:
                gen.start_soon(handle, gen, tp)

This namespace is the public API; the modules behind it are private and may
move. ``docs/architecture.md`` maps where each part lives.
"""

# Consuming: the group, its generations, what they hand out.
from ._config import GroupConfig as GroupConfig, GroupSettings as GroupSettings
from ._types import GenerationIdentity as GenerationIdentity, TopicPartition as TopicPartition
from .consumer.generation import Generation as Generation, RebalanceTimings as RebalanceTimings
from .consumer.group import ConsumerGroup as ConsumerGroup
from .consumer.prefetch import FetchedBatch as FetchedBatch
from .consumer.workers import run_workers as run_workers
from .protocol.records import Compression as Compression, Record as Record

# Assignment: the built-in balancers and the interface of your own.
from .membership.balancers import (
    Balancer as Balancer,
    GroupMember as GroupMember,
    RangeBalancer as RangeBalancer,
    RoundRobinBalancer as RoundRobinBalancer,
)
from .membership.sticky import StickyBalancer as StickyBalancer
from .membership.cooperative import CooperativeStickyBalancer as CooperativeStickyBalancer

# Producing and administering.
from .admin import (
    Admin as Admin,
    AdminConfig as AdminConfig,
    AdminSettings as AdminSettings,
    PartitionLag as PartitionLag,
)
from .io.cluster import Cluster as Cluster
from .producer import (
    Producer as Producer,
    ProducerConfig as ProducerConfig,
    ProducerSettings as ProducerSettings,
    RecordMetadata as RecordMetadata,
)

# Errors: GengroupError is the root; BrokerError carries a Kafka error code.
from ._errors import (
    BrokenConnection as BrokenConnection,
    ClusterUnreachable as ClusterUnreachable,
    BrokerError as BrokerError,
    ConfigError as ConfigError,
    ConnectionClosed as ConnectionClosed,
    CoordinatorError as CoordinatorError,
    CorruptRecordError as CorruptRecordError,
    DeserializationError as DeserializationError,
    FencedInstanceId as FencedInstanceId,
    GenerationEnded as GenerationEnded,
    GengroupError as GengroupError,
    GroupClosed as GroupClosed,
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

__all__ = [
    # consuming
    "ConsumerGroup",
    "FetchedBatch",
    "Generation",
    "GenerationIdentity",
    "GroupConfig",
    "GroupSettings",
    "RebalanceTimings",
    "Record",
    "Compression",
    "TopicPartition",
    "run_workers",
    # assignment
    "Balancer",
    "GroupMember",
    "RangeBalancer",
    "RoundRobinBalancer",
    "StickyBalancer",
    "CooperativeStickyBalancer",
    # producing and administering
    "Admin",
    "AdminConfig",
    "AdminSettings",
    "PartitionLag",
    "Cluster",
    "Producer",
    "ProducerConfig",
    "ProducerSettings",
    "RecordMetadata",
    # errors
    "BrokenConnection",
    "ClusterUnreachable",
    "BrokerError",
    "ConfigError",
    "ConnectionClosed",
    "CoordinatorError",
    "CorruptRecordError",
    "DeserializationError",
    "FencedInstanceId",
    "GenerationEnded",
    "GengroupError",
    "GroupClosed",
    "IllegalGeneration",
    "KafkaConnectionError",
    "OffsetOutOfRange",
    "ProtocolError",
    "RebalanceInProgress",
    "RequestTimedOut",
    "TaskStuckError",
    "UnknownMemberId",
    "UnknownTopicOrPartition",
]

__version__ = "0.1.0"
