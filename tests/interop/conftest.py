"""Fixtures of the interop tests: a Java KafkaConsumer member, compiled once, and new
groups for it, on Apache Kafka and on the embedded broker."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from gengroup.broker import BrokerSettings
from tests.java import compile_java

from ..consumer.helpers import broker_under_test
from .members import MemberLedger, MixedGroup, new_mixed_group

SOURCE = Path(__file__).parent / "java" / "JavaMember.java"


@pytest.fixture(scope="session")
def java_member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The command line running JavaMember (arguments follow), compiled once."""
    command = compile_java(SOURCE, tmp_path_factory.mktemp("java-member"))
    yield command


JavaGroup = Callable[[str, str, MemberLedger], Coroutine[Any, Any, MixedGroup]]


@pytest.fixture(params=[pytest.param("kafka", marks=pytest.mark.kafka), "embedded"])
async def classic_bootstrap(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """The broker of a classic-protocol mixed group: Apache Kafka or the embedded one."""
    settings = BrokerSettings(group_initial_rebalance_delay_ms=0)
    async with broker_under_test(request, request.param, settings) as bootstrap:
        yield bootstrap


@pytest.fixture
def java_group(classic_bootstrap: str, java_member: list[str], tmp_path: Path) -> JavaGroup:
    """A function making a new topic of six partitions and a group on the broker
    under test, with a JavaMember for it (not started) running the assignor named
    by its first argument (a class name); its second prefixes the topic's name,
    its third records the gengroup members."""

    async def new(strategy: str, prefix: str, ledger: MemberLedger) -> MixedGroup:
        return await new_mixed_group(
            classic_bootstrap,
            java_member,
            tmp_path / "java.log",
            ledger,
            partitions=6,
            prefix=prefix,
            name="the Java member",
            args=[strategy],
        )

    return new
