"""A command run with stdin or stdout closed (``<&-``, ``>&-``, as some daemon
or cron wrappers and supervisors start it): one line on stderr and exit code
2 when it needs the stream, never a traceback; the command runs as usual
when it does not."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.cli.conftest import gengroup
from tests.cli.test_produce import create, read_back
from tests.embedded.test_cli import command


def closed(fd: int, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``gengroup ARGS`` with descriptor ``fd`` (0 or 1) closed, as ``<&-`` or ``>&-`` leave it
    (no config file, for a command connecting to a cluster)."""
    config = () if args[0] == "demo" else ("--config", os.devnull)
    return subprocess.run(
        command(*args, *config),
        input=input,
        stdin=subprocess.DEVNULL if input is None and fd != 0 else None,
        stdout=subprocess.PIPE if fd != 1 else None,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(fd),
    )


def test_produce_with_stdin_closed_says_so(served: str, tmp_path: Path) -> None:
    """It used to crash with a traceback: 'NoneType' object has no attribute 'buffer'."""
    create(served, "cs", 1)
    done = closed(0, "produce", "cs", "--bootstrap", served)
    assert (done.returncode, done.stderr) == (2, "gengroup produce: stdin is closed\n")
    # --file does not read stdin.
    path = tmp_path / "lines"
    path.write_text("a\nb\n")
    from_file = closed(0, "produce", "cs", "--file", str(path), "--bootstrap", served)
    assert from_file.returncode == 0, from_file.stderr
    assert [r.value for r in read_back(served, "cs", 1)[0]] == [b"a", b"b"]


def test_produce_with_stdout_closed_needs_it_only_for_json(served: str) -> None:
    create(served, "cs-out", 1)
    plain = closed(1, "produce", "cs-out", "--bootstrap", served, input="x\n")
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr == "produced 1 record to cs-out (1 partition; 0: 1)\n"
    as_json = closed(1, "produce", "cs-out", "--json", "--bootstrap", served, input="y\n")
    assert (as_json.returncode, as_json.stderr) == (2, "gengroup produce: stdout is closed\n")
    assert [r.value for r in read_back(served, "cs-out", 1)[0]] == [b"x"]  # nothing sent


@pytest.mark.parametrize(
    "args",
    [
        ["consume", "t", "-n", "1"],
        ["consume", "t", "--group", "g", "-n", "1"],
        ["topics", "list"],
        ["groups", "list"],
        ["lag", "g"],
    ],
    ids=" ".join,
)
def test_a_command_printing_to_a_closed_stdout_says_so(served: str, args: list[str]) -> None:
    """consume used to crash with a traceback; topics list printed nothing, exit code 0."""
    done = closed(1, *args, "--bootstrap", served)
    assert (done.returncode, done.stderr) == (2, f"gengroup {args[0]}: stdout is closed\n")


def test_demo_with_stdout_closed_says_so() -> None:
    done = closed(1, "demo", "--duration", "1")
    assert (done.returncode, done.stderr) == (2, "gengroup demo: stdout is closed\n")


def test_consume_with_stdin_closed_reads_as_usual(served: str) -> None:
    create(served, "cs-in", 1)
    assert gengroup("produce", "cs-in", bootstrap=served, input="r\n").returncode == 0
    done = closed(0, "consume", "cs-in", "--from-beginning", "-n", "1", "--bootstrap", served)
    assert (done.returncode, done.stdout, done.stderr) == (0, "r\n", "")
