"""Fixtures of the consumer-group tests: the brokers of the consumer protocol (KIP-848)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gengroup.testing.kafka import KafkaBroker

from .kip848 import BROKER_PROPERTIES, Kip848Broker, running


@pytest.fixture(scope="session")
def kip848_kafka() -> Iterator[KafkaBroker]:
    """Apache Kafka with short consumer-group timings (see ``kip848.BROKER_PROPERTIES``)."""
    with KafkaBroker(properties=BROKER_PROPERTIES) as broker:
        yield broker


#: The brokers the parametrized consumer-protocol tests run on. Another broker
#: adds its param here and a branch below returning its ``Kip848Broker``.
KIP848_BROKERS = [pytest.param("kafka", marks=pytest.mark.kafka)]


@pytest.fixture(params=KIP848_BROKERS)
def kip848_bootstrap(request: pytest.FixtureRequest) -> Kip848Broker:
    """A broker speaking the consumer group protocol, one per param."""
    if request.param == "kafka":
        broker: KafkaBroker = request.getfixturevalue("kip848_kafka")
        return Kip848Broker("kafka", running(broker.bootstrap))
    raise AssertionError(f"no consumer-protocol broker named {request.param!r}")
