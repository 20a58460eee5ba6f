"""Fixtures of the interop tests: a Java KafkaConsumer member, compiled once."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gengroup.testing.kafka import ensure_jars

SOURCE = Path(__file__).parent / "java" / "JavaMember.java"


@pytest.fixture(scope="session")
def java_member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The command line running JavaMember (arguments follow), compiled once."""
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        pytest.fail("the Java interop tests need a JDK: javac and java on PATH")
    classpath = f"{ensure_jars()}/*"
    out = tmp_path_factory.mktemp("java-member")
    built = subprocess.run(
        [javac, "-nowarn", "-d", str(out), "-cp", classpath, str(SOURCE)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if built.returncode != 0:
        pytest.fail(f"javac failed:\n{built.stderr}")
    yield [java, "-Xmx256m", "-cp", f"{out}:{classpath}", "JavaMember"]
