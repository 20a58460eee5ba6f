"""The demo (the README's main job) runs on the embedded broker and loses nothing."""

from __future__ import annotations

import subprocess
import sys

from gengroup.cli.demo import DemoConfig, run_demo, summarise


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
