"""The examples run end to end on the embedded broker."""

from __future__ import annotations

import pathlib
import runpy

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


async def test_quickstart_consumes_everything() -> None:
    ns = runpy.run_path(str(EXAMPLES / "quickstart.py"))
    assert await ns["main"](None, 300) == 300


async def test_worker_pool_commits_every_processed_record_and_nothing_more() -> None:
    ns = runpy.run_path(str(EXAMPLES / "worker_pool.py"))
    assert await ns["main"](None, 4, 1500) == 1500


def test_contiguous_tracker_never_skips_a_gap() -> None:
    ns = runpy.run_path(str(EXAMPLES / "worker_pool.py"))
    tracker = ns["ContiguousTracker"](10)
    assert tracker.finish(12) == 10
    assert tracker.finish(11) == 10
    assert tracker.finish(10) == 13
    assert tracker.finish(14) == 13
