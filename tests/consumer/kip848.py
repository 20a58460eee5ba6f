"""Where the consumer-protocol (KIP-848) group tests run, and their settings.

The real-Kafka broker of these tests has short consumer-group timings
(``group.consumer.heartbeat.interval.ms`` 500, ``session.timeout.ms`` 6000):
the shared one keeps Kafka's 5 s / 45 s defaults, whose minimums only the
broker's configuration can lower. The fixtures (``kip848_kafka``,
``kip848_bootstrap``) are in ``tests/consumer/conftest.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from gengroup.broker.state import BrokerSettings

from .helpers import FAST

#: The broker's consumer-group timings for these tests.
BROKER_PROPERTIES = {
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.min.heartbeat.interval.ms": 500,
    "group.consumer.session.timeout.ms": 6000,
    "group.consumer.min.session.timeout.ms": 6000,
}

#: The embedded broker with the same consumer-group timings.
EMBEDDED_SETTINGS = BrokerSettings(
    group_initial_rebalance_delay_ms=0,
    group_consumer_heartbeat_interval_ms=500,
    group_consumer_session_timeout_ms=6000,
)

#: The members' settings: the consumer protocol, timings to match the broker's.
KIP848: dict[str, Any] = {**FAST, "group_protocol": "consumer", "session_timeout": 6.0}


@dataclass
class Kip848Broker:
    """A broker speaking the consumer group protocol, for a parametrized test.

    Attributes:
        kind: the fixture's param ("kafka"; more brokers add theirs).
        open: an async context manager yielding the bootstrap address while
            the broker serves (a running broker's address, or a broker
            started for the test).
        settings: the members' settings to use with it.
        timeout: how long a test waits for a step of the group (a hang guard).
    """

    kind: str
    open: Callable[[], AbstractAsyncContextManager[str]]
    settings: dict[str, Any] = field(default_factory=lambda: dict(KIP848))
    timeout: float = 120.0


def running(bootstrap: str) -> Callable[[], AbstractAsyncContextManager[str]]:
    """``open`` for a broker that is already running at ``bootstrap``."""

    @asynccontextmanager
    async def open_running() -> AsyncIterator[str]:
        yield bootstrap

    return open_running
