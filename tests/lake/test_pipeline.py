"""``./scripts/pipeline`` (``examples/pipeline.py``) end to end, as on a fresh machine: the
embedded broker, three sink members through rebalances, Spark's verify and analytics."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[2]


async def test_the_pipeline_lands_verifies_and_analyses(tmp_path: Path) -> None:
    lake, out = tmp_path / "lake", tmp_path / "analytics"
    cmd = [sys.executable, "examples/pipeline.py", "--records", "6000"]
    cmd += ["--lake", str(lake), "--out", str(out)]
    with anyio.fail_after(600):  # a hang guard
        done = await anyio.run_process(cmd, cwd=ROOT, check=False)
    text = done.stdout.decode()
    assert done.returncode == 0, (text + done.stderr.decode())[-4000:]
    assert "member 3 joins" in text and "member 1 leaves" in text
    assert "OK: the lake holds the topic's range exactly once" in text
    assert f"chart: {out}/analytics.png" in text
    assert (out / "analytics.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "summary.json").is_file()
