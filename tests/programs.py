"""Programs the tests run to their end as subprocesses: compilers, builds, vector generators."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest


def run_program(
    argv: Sequence[str],
    what: str,
    *,
    cwd: Path | None = None,
    stdin: str | None = None,
    timeout: float = 300,
) -> str:
    """Run ``argv`` to its end and return its stdout.

    Args:
        argv: The command line.
        what: Names the program in the failure message.
        cwd: Its working directory (default: the test's).
        stdin: Text given on its stdin (default: none).
        timeout: Seconds before it is killed and the test fails.

    A program that exits non-zero fails the test loudly (never a skip), with the
    end of what it wrote.
    """
    done = subprocess.run(
        list(argv),
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        said = done.stdout[-3000:] + done.stderr[-3000:]
        pytest.fail(f"{what} failed (exit code {done.returncode}):\n{said}")
    return done.stdout
