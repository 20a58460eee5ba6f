"""Java programs of the tests, compiled against the Kafka jars the harness caches."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gengroup.testing.kafka import ensure_jars


def compile_java(source: Path, out: Path) -> list[str]:
    """Compile ``source`` into ``out``; the command line running its class (arguments follow).

    A missing JDK or a failed compile fails the test loudly (never a skip).
    """
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        pytest.fail(f"{source.name} needs a JDK: javac and java on PATH")
    classpath = f"{ensure_jars()}/*"
    built = subprocess.run(
        [javac, "-nowarn", "-d", str(out), "-cp", classpath, str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if built.returncode != 0:
        pytest.fail(f"javac {source.name} failed:\n{built.stderr}")
    return [java, "-Xmx256m", "-cp", f"{out}:{classpath}", source.stem]
