"""Java programs of the tests, compiled against the Kafka jars the harness caches."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gengroup.testing.kafka import ensure_jars
from tests.programs import run_program


def compile_java(source: Path, out: Path) -> list[str]:
    """Compile ``source`` into ``out``; the command line running its class (arguments follow).

    A missing JDK or a failed compile fails the test loudly (never a skip).
    """
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        pytest.fail(f"{source.name} needs a JDK: javac and java on PATH")
    classpath = f"{ensure_jars()}/*"
    # The source's own folder is the source path: the classes it uses from
    # there (such as a shared helper class) are compiled along with it.
    sourcepath = str(source.parent)
    javac_args = ["-nowarn", "-d", str(out), "-cp", classpath, "-sourcepath", sourcepath]
    run_program([javac, *javac_args, str(source)], f"javac {source.name}")
    return [java, "-Xmx256m", "-cp", f"{out}:{classpath}", source.stem]
