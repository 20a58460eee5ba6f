"""Fixtures of the interop tests: a Java KafkaConsumer member, compiled once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.java import compile_java

SOURCE = Path(__file__).parent / "java" / "JavaMember.java"


@pytest.fixture(scope="session")
def java_member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The command line running JavaMember (arguments follow), compiled once."""
    command = compile_java(SOURCE, tmp_path_factory.mktemp("java-member"))
    yield command
