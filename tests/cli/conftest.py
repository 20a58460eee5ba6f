"""The ``gengroup`` command run as a user would: a subprocess, against ``gengroup serve``."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from tests.embedded.test_cli import command

_EMPTY_HOME = tempfile.TemporaryDirectory(prefix="gengroup-home-")


def gengroup(
    *args: str,
    bootstrap: str | None = None,
    input: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``gengroup ARGS [--bootstrap B]`` to its end; stdin is ``input`` (or empty).

    The command sees an empty home directory and no ``GENGROUP_CONFIG`` (so no
    config file of the machine's user), plus ``env``.
    """
    full = list(args) if bootstrap is None else [*args, "--bootstrap", bootstrap]
    environ = {k: v for k, v in os.environ.items() if k != "GENGROUP_CONFIG"}
    environ.update({"HOME": _EMPTY_HOME.name, **(env or {})})
    return subprocess.run(
        command(*full),
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input or "",
        env=environ,
    )


@pytest.fixture
def served() -> Iterator[str]:
    """A ``gengroup serve`` process; its bootstrap address."""
    proc = subprocess.Popen(
        command("serve", "--initial-rebalance-delay-ms", "0"), stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("bootstrap "), line
        yield line.split(" ", 1)[1]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()


@dataclass(frozen=True)
class Target:
    """A broker a scenario runs on: its address, and the names its topics and groups take."""

    bootstrap: str
    #: A topic or group name from a base name (unique on the shared real broker).
    name: Callable[[str], str]


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def target(request: pytest.FixtureRequest) -> Target:
    """Each scenario twice: on ``gengroup serve``, and (marked ``kafka``) on real Apache Kafka."""
    if request.param == "kafka":
        kafka = request.getfixturevalue("kafka")
        return Target(kafka.bootstrap, request.getfixturevalue("unique_name"))
    return Target(request.getfixturevalue("served"), lambda base: base)


def ctrl_c_until_it_ends(cmd: list[str], *, within: float = 60.0) -> tuple[int, str, str]:
    """Run ``cmd`` (stdin an open, empty pipe) and press Ctrl-C every half second
    until it exits: its exit code, stdout and stderr. Fails if it runs ``within``
    seconds. SIGINT is ignored until the command's own handler takes it (a
    signal sent while the interpreter starts would be a KeyboardInterrupt)."""
    with subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    ) as proc:
        try:
            deadline = time.monotonic() + within
            while proc.poll() is None:
                assert time.monotonic() < deadline, "Ctrl-C did not end the command"
                proc.send_signal(signal.SIGINT)
                time.sleep(0.5)
            out, err = proc.communicate()
            return proc.returncode, out, err
        finally:
            if proc.poll() is None:
                proc.kill()
