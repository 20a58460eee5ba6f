"""Shared helpers of the client I/O tests (against the real broker)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from gengroup import ConsumerGroup, Producer
from gengroup._types import TopicPartition
from gengroup.admin import Admin, NewTopic
from gengroup.io.cluster import Cluster
from gengroup.io.fetch import build_fetch_request


async def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """Create ``topic`` with its own short-lived admin client."""
    async with Admin(bootstrap) as admin:
        await admin.create_topics({topic: partitions})


@asynccontextmanager
async def cluster_with_topic(
    bootstrap: str, topic: str, partitions: int = 1, **settings: Any
) -> AsyncIterator[Cluster]:
    """An open :class:`Cluster` (``settings`` passed on) in which ``topic`` was created."""
    async with Cluster(bootstrap, **settings) as cluster:
        await Admin(cluster).create_topics({topic: partitions})
        yield cluster


@asynccontextmanager
async def admin_with_topics(
    bootstrap: str, topics: Mapping[str, int] | Iterable[NewTopic], **settings: Any
) -> AsyncIterator[Admin]:
    """An open :class:`Admin` (``settings`` passed on) that has created ``topics``."""
    async with Admin(bootstrap, **settings) as admin:
        await admin.create_topics(topics)
        yield admin


def long_poll_fetch(version: int, tp: TopicPartition, max_wait: float) -> Any:
    """A Fetch of ``tp`` from offset 0 that an empty partition holds for ``max_wait`` s
    (by name: v12 at most, which every broker that speaks v13 speaks too)."""
    return build_fetch_request(
        min(version, 12),
        {tp: 0},
        max_wait=max_wait,
        min_bytes=1,
        max_bytes=1 << 20,
        partition_max_bytes=1 << 20,
        isolation_level="read_uncommitted",
    )


async def first_request(
    kind: str,
    bootstrap: str,
    topic: str,
    settings: Mapping[str, Any],
    group: Mapping[str, Any],
    group_id: str = "g",
) -> None:
    """Open a client of ``kind`` with ``settings`` and make its first request: an
    ``"admin"`` lists the groups, a ``"producer"`` sends to ``topic``, a ``"group"``
    member (``group`` adds to its settings) joins ``group_id`` subscribed to ``topic``."""
    if kind == "admin":
        async with Admin(bootstrap, **settings) as admin:
            await admin.list_groups()
    elif kind == "producer":
        async with Producer(bootstrap, **settings) as producer:
            await producer.send(topic, b"never")
    else:
        async with ConsumerGroup(group_id, [topic], bootstrap, **settings, **group) as member:
            await member.next()
