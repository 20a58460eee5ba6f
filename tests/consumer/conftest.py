"""Fixtures of the consumer-group tests: the brokers of the consumer protocol (KIP-848)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest

from gengroup.broker import FakeCluster
from gengroup.testing.kafka import KafkaBroker

from .kip848 import BROKER_PROPERTIES, EMBEDDED_SETTINGS, Kip848Broker, running


@pytest.fixture(scope="session")
def kip848_kafka() -> Iterator[KafkaBroker]:
    """Apache Kafka with short consumer-group timings (see ``kip848.BROKER_PROPERTIES``)."""
    with KafkaBroker(properties=BROKER_PROPERTIES) as broker:
        yield broker


#: The brokers the parametrized consumer-protocol tests run on.
KIP848_BROKERS = [pytest.param("kafka", marks=pytest.mark.kafka), "embedded"]


@asynccontextmanager
async def embedded_kip848() -> AsyncIterator[str]:
    """A 3-broker embedded cluster for one test, on the test's clock; no internal error."""
    async with FakeCluster(brokers=3, settings=EMBEDDED_SETTINGS) as cluster:
        yield cluster.bootstrap
        assert not cluster.state.errors, cluster.state.errors


@pytest.fixture(params=KIP848_BROKERS)
def kip848_bootstrap(request: pytest.FixtureRequest) -> Kip848Broker:
    """A broker speaking the consumer group protocol, one per param."""
    if request.param == "kafka":
        broker: KafkaBroker = request.getfixturevalue("kip848_kafka")
        return Kip848Broker("kafka", running(broker.bootstrap))
    if request.param == "embedded":
        return Kip848Broker("embedded", embedded_kip848)
    raise AssertionError(f"no consumer-protocol broker named {request.param!r}")
