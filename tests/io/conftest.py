"""Fixtures of the client I/O tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gengroup.protocol.records import Compression
from gengroup.testing.kafka import KafkaBroker


@pytest.fixture
def bootstrap(kafka: KafkaBroker) -> str:
    """The address of the session's real broker."""
    return kafka.bootstrap


@pytest.fixture
def topic(request: pytest.FixtureRequest, unique_name: Callable[[str], str]) -> str:
    """A fresh topic name made from the test's own name (the topic is not created)."""
    return unique_name(request.node.name)


@pytest.fixture(params=list(Compression), ids=lambda c: c.name.lower())
def codec(request: pytest.FixtureRequest) -> Compression:
    """Each compression codec in turn."""
    codec: Compression = request.param
    return codec
