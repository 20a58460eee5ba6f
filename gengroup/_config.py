"""Frozen, validated configuration of a consumer group.

Every value is checked at construction, before any I/O, and a bad one raises
:class:`~gengroup._errors.ConfigError` naming the setting. Durations are float
seconds throughout the public API.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ._errors import ConfigError

__all__ = ["GroupConfig", "IsolationLevel", "StartOffset"]

StartOffset = Literal["earliest", "latest", "error"]
IsolationLevel = Literal["read_committed", "read_uncommitted"]


def _positive(name: str, value: float) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ConfigError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a positive finite number of seconds, got {value!r}")


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Settings of a :class:`~gengroup.ConsumerGroup` (see its docstring for meanings).

    Defaults and their reasons:

    * ``session_timeout=45.0`` -- Kafka's own default since 3.0: long enough to
      ride out a GC pause or a slow rebalance, short enough to move a dead
      member's partitions within a minute.
    * ``heartbeat_interval=3.0`` -- Kafka's default; well under a third of the
      session timeout, so two heartbeats can be lost without eviction.
    * ``rebalance_timeout=60.0`` -- how long the coordinator waits for members
      to rejoin, and how long a generation's tasks get to finish after
      cancellation before gengroup reports the one holding it up.
    * ``partition_watch_interval=5.0`` -- kafka-go's default; metadata for the
      subscribed topics is a cheap request.
    * ``join_backoff=1.0`` -- pause between failed join attempts (jittered).
    * ``commit_interval=5.0`` -- marked offsets are committed this often, and
      always once more when the generation ends; 0 commits only at the end
      and on explicit ``commit()``.
    * ``start_offset="earliest"`` -- a new group reads what is already there
      (the safer choice for at-least-once pipelines; Java defaults to latest).
    * ``isolation_level="read_committed"`` -- never hand out aborted data.
    * ``partition_buffer_bytes=1 MiB`` -- fetched-but-unprocessed data held per
      partition; a slow worker stops its partition's fetching at this bound.
    """

    group_id: str
    topics: tuple[str, ...]
    brokers: tuple[str, ...]
    session_timeout: float = 45.0
    rebalance_timeout: float = 60.0
    heartbeat_interval: float = 3.0
    watch_partition_changes: bool = True
    partition_watch_interval: float = 5.0
    join_backoff: float = 1.0
    commit_interval: float = 5.0
    start_offset: StartOffset = "earliest"
    group_instance_id: str | None = None
    isolation_level: IsolationLevel = "read_committed"
    client_id: str = "gengroup"
    rack: str | None = None
    request_timeout: float = 30.0
    fetch_max_wait: float = 0.5
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 50 * 1024 * 1024
    partition_buffer_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        if not isinstance(self.group_id, str) or not self.group_id:
            raise ConfigError("group_id must be a non-empty string")
        if isinstance(self.topics, str) or not isinstance(self.topics, Sequence):
            raise ConfigError("topics must be a sequence of topic names, not a string")
        if not self.topics or not all(isinstance(t, str) and t for t in self.topics):
            raise ConfigError(f"topics must be a non-empty list of names, got {self.topics!r}")
        if not self.brokers:
            raise ConfigError("brokers must list at least one host:port")
        for name in (
            "session_timeout",
            "rebalance_timeout",
            "heartbeat_interval",
            "partition_watch_interval",
            "join_backoff",
            "request_timeout",
            "fetch_max_wait",
        ):
            _positive(name, getattr(self, name))
        if self.commit_interval < 0:
            raise ConfigError(f"commit_interval must be >= 0, got {self.commit_interval!r}")
        if self.heartbeat_interval >= self.session_timeout:
            raise ConfigError(
                f"heartbeat_interval ({self.heartbeat_interval} s) must be below "
                f"session_timeout ({self.session_timeout} s)"
            )
        if self.start_offset not in ("earliest", "latest", "error"):
            raise ConfigError(
                f"start_offset must be 'earliest', 'latest' or 'error', got {self.start_offset!r}"
            )
        if self.isolation_level not in ("read_committed", "read_uncommitted"):
            raise ConfigError(
                "isolation_level must be 'read_committed' or 'read_uncommitted', "
                f"got {self.isolation_level!r}"
            )
        if self.group_instance_id is not None and not self.group_instance_id:
            raise ConfigError("group_instance_id must be None or a non-empty string")
        if self.fetch_max_wait >= self.request_timeout:
            raise ConfigError("fetch_max_wait must be below request_timeout")
        for name in ("fetch_min_bytes", "fetch_max_bytes", "partition_buffer_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
