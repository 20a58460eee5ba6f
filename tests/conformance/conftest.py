"""The brokers every conformance test runs on: real Apache Kafka and the embedded broker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

import pytest

from gengroup.broker import BrokerSettings, FakeCluster
from gengroup.testing.kafka import KafkaBroker

from .scenarios import MIN_SESSION_MS

EMBEDDED_SETTINGS: Final = BrokerSettings(
    group_initial_rebalance_delay_ms=0,
    group_min_session_timeout_ms=MIN_SESSION_MS,
    offsets_topic_num_partitions=1,
)
"""The embedded broker configured like the harness's Kafka (gengroup.testing.kafka)."""


@dataclass(frozen=True)
class Target:
    """A broker under test: its name and, for Kafka, its bootstrap address."""

    name: str
    bootstrap: str | None = None


@pytest.fixture(params=[pytest.param("kafka", marks=pytest.mark.kafka), "embedded"])
def target(request: pytest.FixtureRequest) -> Target:
    """The broker under test (the session's Kafka is started only when needed)."""
    if request.param == "kafka":
        broker: KafkaBroker = request.getfixturevalue("kafka")
        return Target("kafka", broker.bootstrap)
    return Target("embedded")


@pytest.fixture
async def bootstrap(target: Target) -> AsyncIterator[str]:
    """The target's bootstrap address; a fresh embedded broker for the embedded target."""
    if target.bootstrap is not None:
        yield target.bootstrap
        return
    async with FakeCluster(settings=EMBEDDED_SETTINGS) as cluster:
        yield cluster.bootstrap
        assert cluster.errors == [], "the embedded broker met internal errors"
