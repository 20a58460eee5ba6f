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
from .consumer.fetched import FetchedBatch as FetchedBatch
from .consumer.columnar import fetched_to_arrow as fetched_to_arrow
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

# Producing and administering (and securing the connections of every client).
from .admin import (
    Admin as Admin,
    AdminConfig as AdminConfig,
    AdminSettings as AdminSettings,
    GroupDescription as GroupDescription,
    GroupLag as GroupLag,
    GroupListing as GroupListing,
    MemberDescription as MemberDescription,
    NewTopic as NewTopic,
    OffsetSpec as OffsetSpec,
    PartitionLag as PartitionLag,
)
from .io.cluster import Cluster as Cluster
from .io.cluster import PartitionInfo as PartitionInfo
from .io.cluster import TopicInfo as TopicInfo
from .io.security import Security as Security, SecuritySettings as SecuritySettings
from .producer import (
    Producer as Producer,
    ProducerConfig as ProducerConfig,
    ProducerRecord as ProducerRecord,
    ProducerSettings as ProducerSettings,
    RecordMetadata as RecordMetadata,
)

# Errors: GengroupError is the root; BrokerError carries a Kafka error code.
from ._errors import (
    AuthenticationError as AuthenticationError,
    BrokenConnection as BrokenConnection,
    ClusterUnreachable as ClusterUnreachable,
    BrokerError as BrokerError,
    BufferExhausted as BufferExhausted,
    ClusterAuthorizationFailed as ClusterAuthorizationFailed,
    ConfigError as ConfigError,
    ClosedInFlight as ClosedInFlight,
    ConnectionClosed as ConnectionClosed,
    CoordinatorError as CoordinatorError,
    CoordinatorUnavailable as CoordinatorUnavailable,
    CorruptRecordError as CorruptRecordError,
    DecompressionLimitExceeded as DecompressionLimitExceeded,
    DeserializationError as DeserializationError,
    FencedInstanceId as FencedInstanceId,
    FencedMemberEpoch as FencedMemberEpoch,
    GroupProtocolUnsupported as GroupProtocolUnsupported,
    StaleMemberEpoch as StaleMemberEpoch,
    UnreleasedInstanceId as UnreleasedInstanceId,
    UnsupportedAssignor as UnsupportedAssignor,
    GenerationEnded as GenerationEnded,
    GengroupError as GengroupError,
    GroupAuthorizationFailed as GroupAuthorizationFailed,
    GroupClosed as GroupClosed,
    GroupIdNotFound as GroupIdNotFound,
    GroupsNotDeleted as GroupsNotDeleted,
    IllegalGeneration as IllegalGeneration,
    InconsistentGroupProtocol as InconsistentGroupProtocol,
    InvalidSessionTimeout as InvalidSessionTimeout,
    KafkaConnectionError as KafkaConnectionError,
    MissingDependency as MissingDependency,
    OffsetOutOfRange as OffsetOutOfRange,
    ProtocolError as ProtocolError,
    RebalanceInProgress as RebalanceInProgress,
    RequestTimedOut as RequestTimedOut,
    TaskStuckError as TaskStuckError,
    TLSError as TLSError,
    TopicAlreadyExists as TopicAlreadyExists,
    TopicAuthorizationFailed as TopicAuthorizationFailed,
    TopicDeleted as TopicDeleted,
    UnknownMemberId as UnknownMemberId,
    UnknownTopicOrPartition as UnknownTopicOrPartition,
)

__all__ = [
    # consuming
    "ConsumerGroup",
    "FetchedBatch",
    "fetched_to_arrow",
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
    "GroupDescription",
    "GroupLag",
    "GroupListing",
    "MemberDescription",
    "NewTopic",
    "OffsetSpec",
    "PartitionLag",
    "Cluster",
    "PartitionInfo",
    "TopicInfo",
    "Producer",
    "ProducerConfig",
    "ProducerRecord",
    "ProducerSettings",
    "RecordMetadata",
    # securing connections
    "Security",
    "SecuritySettings",
    # errors
    "AuthenticationError",
    "BrokenConnection",
    "ClusterUnreachable",
    "BrokerError",
    "BufferExhausted",
    "ClusterAuthorizationFailed",
    "ConfigError",
    "ClosedInFlight",
    "ConnectionClosed",
    "CoordinatorError",
    "CoordinatorUnavailable",
    "CorruptRecordError",
    "DecompressionLimitExceeded",
    "DeserializationError",
    "FencedInstanceId",
    "FencedMemberEpoch",
    "GroupProtocolUnsupported",
    "StaleMemberEpoch",
    "UnreleasedInstanceId",
    "UnsupportedAssignor",
    "GenerationEnded",
    "GengroupError",
    "GroupAuthorizationFailed",
    "GroupClosed",
    "GroupIdNotFound",
    "GroupsNotDeleted",
    "IllegalGeneration",
    "InconsistentGroupProtocol",
    "InvalidSessionTimeout",
    "KafkaConnectionError",
    "MissingDependency",
    "OffsetOutOfRange",
    "ProtocolError",
    "RebalanceInProgress",
    "RequestTimedOut",
    "TaskStuckError",
    "TLSError",
    "TopicAlreadyExists",
    "TopicAuthorizationFailed",
    "TopicDeleted",
    "UnknownMemberId",
    "UnknownTopicOrPartition",
]

__version__ = "0.1.0"
