"""The broker settings that shape the classic group protocol."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

JAVA_INT_MAX: Final = 2**31 - 1
"""``Integer.MAX_VALUE``, Kafka's default ``group.max.size``."""


def default_member_id(prefix: str) -> str:
    """Kafka's member id: ``prefix-<uuid4>``.

    Args:
        prefix: The group instance id for a static member, else the client id.

    Returns:
        A new member id.
    """
    return f"{prefix}-{uuid.uuid4()}"


@dataclass(frozen=True)
class CoordinatorConfig:
    """Broker settings that shape the classic group protocol.

    Attributes:
        initial_rebalance_delay_ms: ``group.initial.rebalance.delay.ms``.
        min_session_timeout_ms: ``group.min.session.timeout.ms``.
        max_session_timeout_ms: ``group.max.session.timeout.ms``.
        max_group_size: ``group.max.size``.
        new_member_join_timeout_ms: How long a new member may stay parked in
            its first JoinGroup (Kafka's internal
            ``classicGroupNewMemberJoinTimeoutMs``, 5 minutes).
        offset_metadata_max_bytes: ``offset.metadata.max.bytes``; longer commit
            metadata is refused with OFFSET_METADATA_TOO_LARGE. Measured, as in
            Java, in UTF-16 code units.
        consumer_session_timeout_ms: ``group.consumer.session.timeout.ms``: a
            consumer group member not heard from for this long is fenced.
        consumer_heartbeat_interval_ms: ``group.consumer.heartbeat.interval.ms``,
            the interval a consumer group member is told to heartbeat at.
        consumer_assignment_interval_ms: ``group.consumer.assignment.interval.ms``
            (KIP-1263): a consumer group's target assignment is recomputed at
            most once per interval, by the first heartbeat after it.
        consumer_assignors: ``group.consumer.assignors``: the server-side
            assignors a member may ask for; the first is the default.
        consumer_max_group_size: ``group.consumer.max.size``.
        member_id_generator: Makes a member id from a prefix (the group
            instance id of a static member, else the client id). Inject a
            deterministic one in tests.
    """

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 30 * 60 * 1000
    max_group_size: int = JAVA_INT_MAX
    new_member_join_timeout_ms: int = 5 * 60 * 1000
    offset_metadata_max_bytes: int = 4096
    consumer_session_timeout_ms: int = 45000
    consumer_heartbeat_interval_ms: int = 5000
    consumer_assignment_interval_ms: int = 1000
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    consumer_max_group_size: int = JAVA_INT_MAX
    member_id_generator: Callable[[str], str] = default_member_id
