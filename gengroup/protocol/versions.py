"""API keys, the versions gengroup implements, and ApiVersions negotiation (sans-IO).

Theory of operation:

Each connection asks the broker for its ``ApiVersions`` once, then every
request uses the highest version both sides support. :data:`CLIENT_VERSIONS`
is the table of what gengroup's client code knows how to build and read; the
ranges are chosen so the same code path covers each range (fields a version
lacks are dropped by :func:`gengroup.protocol.framing.build`). Fetch v13-v16
name topics by id (a recreated topic is never read at the old one's
positions) and v16 carries leader hints (KIP-951); a Fetch whose topics'
ids are not known yet goes as v12 (:mod:`gengroup.io.fetch`). OffsetFetch
v10 (topic ids only) is left out: it buys nothing for a consumer whose
committed offsets are kept by topic name.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from .._errors import UnsupportedVersion

__all__ = [
    "ApiKey",
    "CLIENT_VERSIONS",
    "CONSUMER_PROTOCOL_VERSIONS",
    "NEGOTIATED_VERSIONS",
    "OLDEST_KAFKA",
    "OLDEST_KAFKA_CONSUMER_PROTOCOL",
    "PRODUCER_ID_VERSIONS",
    "negotiate",
]


class ApiKey(enum.IntEnum):
    """The Kafka API keys gengroup uses or serves."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    OFFSET_DELETE = 47
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


#: (min, max) versions the gengroup client implements, per API.
CLIENT_VERSIONS: Final[Mapping[ApiKey, tuple[int, int]]] = {
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.METADATA: (9, 12),
    ApiKey.PRODUCE: (8, 11),
    ApiKey.FETCH: (11, 16),
    ApiKey.LIST_OFFSETS: (4, 7),
    ApiKey.FIND_COORDINATOR: (3, 4),
    ApiKey.JOIN_GROUP: (5, 9),
    ApiKey.SYNC_GROUP: (3, 5),
    ApiKey.HEARTBEAT: (3, 4),
    ApiKey.LEAVE_GROUP: (3, 5),
    ApiKey.OFFSET_COMMIT: (7, 10),
    ApiKey.OFFSET_FETCH: (6, 7),
    ApiKey.DESCRIBE_GROUPS: (4, 5),
    ApiKey.LIST_GROUPS: (3, 4),
    ApiKey.CREATE_TOPICS: (5, 7),
    ApiKey.DELETE_TOPICS: (4, 5),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.CREATE_PARTITIONS: (2, 3),
    ApiKey.DELETE_GROUPS: (1, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
}

#: (min, max) versions of the consumer group protocol's APIs (KIP-848), which
#: ``group_protocol="consumer"`` (the heartbeat) and the admin's
#: ``describe_groups`` (ConsumerGroupDescribe, falling back to DescribeGroups
#: without it) use, kept apart from :data:`CLIENT_VERSIONS` so a broker
#: without them still serves every other API. The embedded broker serves them
#: unless its ``group_coordinator_rebalance_protocols`` leaves out ``"consumer"``.
CONSUMER_PROTOCOL_VERSIONS: Final[Mapping[ApiKey, tuple[int, int]]] = {
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
}

#: (min, max) versions of InitProducerId, which only an idempotent producer
#: (the default with ``acks="all"``) sends, kept apart from :data:`CLIENT_VERSIONS`
#: so a broker without it still serves every other API.
PRODUCER_ID_VERSIONS: Final[Mapping[ApiKey, tuple[int, int]]] = {
    ApiKey.INIT_PRODUCER_ID: (2, 5),
}

#: Every API the client negotiates: the three tables.
NEGOTIATED_VERSIONS: Final[Mapping[ApiKey, tuple[int, int]]] = {
    **CLIENT_VERSIONS,
    **CONSUMER_PROTOCOL_VERSIONS,
    **PRODUCER_ID_VERSIONS,
}


def negotiate(
    broker: Mapping[int, tuple[int, int]],
    client: Mapping[ApiKey, tuple[int, int]] = NEGOTIATED_VERSIONS,
) -> dict[ApiKey, int]:
    """Pick, per API, the highest version both sides support.

    Args:
        broker: api key -> (min, max) from the broker's ApiVersions response.
        client: the client's table (defaults to :data:`NEGOTIATED_VERSIONS`).

    Returns:
        api key -> version, only for APIs both sides share a version of.
    """
    chosen: dict[ApiKey, int] = {}
    for key, (cmin, cmax) in client.items():
        rng = broker.get(int(key))
        if rng is None:
            continue
        lo, hi = max(cmin, rng[0]), min(cmax, rng[1])
        if lo <= hi:
            chosen[key] = hi
    return chosen


#: The oldest Apache Kafka release serving each table's oldest versions: every
#: API of :data:`CLIENT_VERSIONS` and InitProducerId v2 came with 2.4 at the
#: latest; the consumer group protocol's APIs with 4.0 (3.7 to 3.9 as early access).
OLDEST_KAFKA: Final = "2.4"
OLDEST_KAFKA_CONSUMER_PROTOCOL: Final = "4.0"


def require(versions: Mapping[ApiKey, int], key: ApiKey) -> int:
    """The negotiated version of ``key``, or :class:`UnsupportedVersion`."""
    try:
        return versions[key]
    except KeyError:
        lo, hi = NEGOTIATED_VERSIONS[key]
        oldest = (
            OLDEST_KAFKA_CONSUMER_PROTOCOL if key in CONSUMER_PROTOCOL_VERSIONS else OLDEST_KAFKA
        )
        raise UnsupportedVersion(
            f"the broker supports no version of {key.name} in gengroup's range v{lo}-v{hi} "
            f"(Apache Kafka {oldest} or later serves it)"
        ) from None
