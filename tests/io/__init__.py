"""Shared helpers of the client I/O tests (against the real broker)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from gengroup.admin import Admin
from gengroup.io.cluster import Cluster


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
