"""``gengroup lake sink`` as users run it: to the end of the topic with a progress table,
and as a service stopped by SIGTERM (what it buffered lands, exit 0)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import anyio

from gengroup import Admin
from gengroup.broker import FakeCluster

from .helpers import end_offsets, produce, read_lake

ROOT = Path(__file__).resolve().parents[2]


def _sink(bootstrap: str, lake: Path, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "gengroup.cli", "lake", "sink", "--bootstrap", bootstrap]
    return [*cmd, "--group", "cli", "--topic", "events", "--lake", str(lake), *extra]


async def test_sink_until_caught_up_with_progress(tmp_path: Path) -> None:
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            await admin.create_topics({"events": 3})
        await produce(cluster.bootstrap, "events", range(2000))
        cmd = _sink(cluster.bootstrap, tmp_path, "--until-caught-up", "--progress", "0.2")
        cmd += ["--file-max-age", "0.3"]
        with anyio.fail_after(120):  # a hang guard
            done = await anyio.run_process(cmd, cwd=ROOT, check=False)
        err = done.stderr.decode()
        assert done.returncode == 0, err[-3000:]
        assert "lake sink: 3 partition(s)" in err  # the progress table's title
        assert "lake sink cli: 3 partition(s), 2000 record(s)" in err  # the closing summary
        lake = read_lake(tmp_path, "events")
        lake.check_exactly_once(await end_offsets(cluster.bootstrap, "events", 3))
        lake.check_values()


async def test_sink_stopped_by_sigterm_lands_what_it_buffered(tmp_path: Path) -> None:
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            await admin.create_topics({"events": 3})
        await produce(cluster.bootstrap, "events", range(500))
        # files roll only after an hour: only the stop can land these records
        cmd = _sink(cluster.bootstrap, tmp_path, "--file-max-age", "3600")
        async with await anyio.open_process(cmd, cwd=ROOT) as proc:
            assert proc.stderr is not None
            seen = b""
            with anyio.fail_after(60):  # a hang guard
                async for chunk in proc.stderr:
                    seen += chunk
                    if b"first records" in seen:
                        break
            await anyio.sleep(0.5)
            assert read_lake(tmp_path, "events").files == 0
            proc.send_signal(signal.SIGTERM)
            with anyio.fail_after(60):
                async for chunk in proc.stderr:
                    seen += chunk
                code = await proc.wait()
        assert code == 0, seen.decode()[-3000:]
        lake = read_lake(tmp_path, "events")
        lake.check_exactly_once(await end_offsets(cluster.bootstrap, "events", 3))


async def test_a_bad_setting_is_a_usage_error(tmp_path: Path) -> None:
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        bad = [["--file-max-age", "nan"], ["--file-max-bytes", "0"]]
        # --progress nan or -1 ran the sink, then failed with a traceback (exit 1).
        bad += [["--progress", v] for v in ("nan", "-1", "inf")]
        for option in bad:
            cmd = _sink(cluster.bootstrap, tmp_path, *option)
            with anyio.fail_after(60):  # a hang guard
                done = await anyio.run_process(cmd, cwd=ROOT, check=False)
            err = done.stderr.decode()
            assert done.returncode == 2, err[-3000:]
            assert "must be" in err and option[0][2:].replace("-", "_") in err
