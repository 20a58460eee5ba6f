"""Fixtures of the interop tests: a Java KafkaConsumer member, compiled once, and new
groups for it."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from gengroup.testing.kafka import KafkaBroker
from tests.java import compile_java

from .members import MemberLedger, MixedGroup, new_mixed_group

SOURCE = Path(__file__).parent / "java" / "JavaMember.java"


@pytest.fixture(scope="session")
def java_member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The command line running JavaMember (arguments follow), compiled once."""
    command = compile_java(SOURCE, tmp_path_factory.mktemp("java-member"))
    yield command


JavaGroup = Callable[[str, str, MemberLedger], Coroutine[Any, Any, MixedGroup]]


@pytest.fixture
def java_group(kafka: KafkaBroker, java_member: list[str], tmp_path: Path) -> JavaGroup:
    """A function making a new topic of six partitions and a group on the session's
    broker, with a JavaMember for it (not started) running the assignor named by
    its first argument (a class name); its second prefixes the topic's name, its
    third records the gengroup members."""

    async def new(strategy: str, prefix: str, ledger: MemberLedger) -> MixedGroup:
        return await new_mixed_group(
            kafka.bootstrap,
            java_member,
            tmp_path / "java.log",
            ledger,
            partitions=6,
            prefix=prefix,
            name="the Java member",
            args=[strategy],
        )

    return new
