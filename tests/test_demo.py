"""The demo (the README's main job) runs on the embedded broker and loses nothing."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from gengroup import Generation
from gengroup.cli import demo
from gengroup.cli.demo import DemoConfig, Scoreboard, run_demo, summarise
from gengroup.consumer.running import _Run


async def test_demo_forms_generations_and_loses_nothing() -> None:
    base = DemoConfig()
    scale = 8.0 / base.duration
    cfg = DemoConfig(
        duration=8.0,
        rate=1000,
        live=False,
        timeline=tuple((t * scale, a, n) for t, a, n in base.timeline),
    )
    board = await run_demo(cfg)
    assert board.produced > 0
    assert set(board.processed) == set(range(board.produced))
    assert all(n == 1 for n in board.processed.values()), "graceful rebalances commit first"
    assert len(board.generations) >= 4
    text = summarise(board)
    assert "records lost       0" in text


def test_gengroup_demo_command_prints_a_summary() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gengroup.cli", "demo", "--plain", "--duration", "6"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "generation 1 formed" in out
    assert "records lost       0" in out


def test_a_second_ctrl_c_does_not_cut_the_members_final_commits(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C once two members work, and again just as the first member's final
    commit is sent: the demo receives both, so the second no longer raises
    KeyboardInterrupt out of asyncio's event loop (which then cancelled every task
    at once, shielded or not: the final commits were cut, or found their Cluster
    closed). Every final commit after the first Ctrl-C is made; the demo says the
    second and ends as for one."""
    interrupts: list[float] = []
    outcomes: list[BaseException | None] = []

    def interrupt() -> None:
        # From a callback of the event loop, as a signal landing while it waits:
        # raised there (asyncio's own handler), a KeyboardInterrupt stops the loop.
        interrupts.append(time.monotonic())
        asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGINT)

    recorded = Scoreboard.generation

    def generation(self: Scoreboard, name: str, gen: Generation) -> None:
        recorded(self, name, gen)
        if not interrupts and len(self.members) == 2:
            interrupt()

    final_commit = _Run._final_commit

    async def commit(self: _Run, *args: Any, **kwargs: Any) -> BaseException | None:
        if interrupts and len(interrupts) == 1:
            interrupt()
        try:
            failure = await final_commit(self, *args, **kwargs)
        except BaseException as exc:
            if interrupts:
                outcomes.append(exc)
            raise
        if interrupts:
            outcomes.append(failure)
        return failure

    monkeypatch.setattr(Scoreboard, "generation", generation)
    monkeypatch.setattr(_Run, "_final_commit", commit)
    args = argparse.Namespace(duration=8.0, rate=1000, partitions=8, plain=True)
    previous = signal.getsignal(signal.SIGINT)
    try:
        assert demo.run(args) == 130
    finally:  # an interrupted demo leaves SIGINT ignored (its process is ending)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        signal.signal(signal.SIGINT, previous)
    assert len(interrupts) == 2
    assert outcomes
    assert outcomes == [None] * len(outcomes)
    assert capsys.readouterr().err.splitlines() == [
        "gengroup demo: stopping: the members commit and leave the group "
        "(Ctrl-C again to quit at once)",
        "gengroup demo: interrupted",
    ]


def test_a_third_ctrl_c_quits_the_demo_at_once_in_one_line() -> None:
    """Three Ctrl-Cs 50 ms apart while the members work: exit code 130 and the
    demo's lines only (a KeyboardInterrupt raised at the third went out through
    asyncio's shutdown, which printed tracebacks of the cancelled tasks)."""
    with subprocess.Popen(
        [sys.executable, "-m", "gengroup.cli", "demo", "--plain", "--duration", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if "generation 2 formed" in line:
                    break
            for _ in range(3):
                proc.send_signal(signal.SIGINT)
                time.sleep(0.05)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130
    assert "Traceback" not in err and "Error" not in err, err
    assert err.splitlines()[-1] == "gengroup demo: interrupted", err
