"""The cluster a benchmark runs against: the one given, or a real broker of its own."""

from __future__ import annotations

from contextlib import ExitStack

from gengroup.testing.kafka import KafkaBroker


def real_broker(stack: ExitStack, bootstrap: str | None) -> str:
    """``bootstrap`` if given; else start Apache Kafka (the test harness), stopped by ``stack``."""
    if bootstrap is not None:
        return bootstrap
    broker = KafkaBroker()
    broker.start()
    stack.callback(broker.stop)
    return broker.bootstrap
