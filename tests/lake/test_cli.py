"""``gengroup lake sink`` as users run it: to the end of the topic with a progress table,
and as a service stopped by SIGTERM (what it buffered lands, exit 0); ``--until-caught-up``
after a writer stopped between a file's commit and its publish, with one member or two."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import anyio
import pytest

from gengroup import Admin, ConsumerGroup, Producer, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.lake import LakeConfig, LakeError, LakeSink, Landed
from gengroup.producer import ProducerRecord

from .helpers import end_offsets, produce, read_lake, staged_files
from .test_sink import FAST, _Crashing

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


class _CrashingFrom(_Crashing):
    """Fails once, at the publish of the first file from offset ``base`` on."""

    def __init__(self, lake: str, base: int) -> None:
        super().__init__(lake, "publish")
        self.base = base

    def _crash(self, point: str, tp: TopicPartition, landed: Landed) -> None:
        if landed.base >= self.base:
            super()._crash(point, tp, landed)


async def _crash_before_publish(bootstrap: str, lake: Path, base: int = 0) -> None:
    """Land ``events`` as group ``cli`` until a file from offset ``base`` on is committed
    and its writer stops before publishing it (the rename refused, a crash there)."""
    config = LakeConfig(str(lake), file_max_age=0.3, progress_interval=0)
    store = _CrashingFrom(str(lake), base)
    with pytest.raises(LakeError, match="disk went away"), anyio.fail_after(60):
        async with ConsumerGroup("cli", ["events"], bootstrap, **FAST) as group:
            await LakeSink(config, store=store).run(group, anyio.Event())
    assert len(staged_files(lake)) == 1


async def _produce_to(bootstrap: str, partition: int, ids: range) -> None:
    async with Producer(bootstrap) as producer:
        records = [ProducerRecord(value=b"r%d" % i, partition=partition) for i in ids]
        await producer.send_many("events", records)


@pytest.mark.parametrize("reset", [False, True])
async def test_until_caught_up_publishes_a_file_committed_before_its_writer_stopped(
    reset: bool, tmp_path: Path
) -> None:
    """The group's committed offset is at the end, and the file it committed is still
    staged: ``--until-caught-up`` stops only once the partition's new owner published it,
    also after an offsets reset (here to where it was) dropped the note naming it."""
    tp = TopicPartition("events", 0)
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            await admin.create_topics({"events": 1})
        await _produce_to(cluster.bootstrap, 0, range(500))
        await _crash_before_publish(cluster.bootstrap, tmp_path)
        async with Admin(cluster.bootstrap) as admin:
            assert await admin.fetch_offsets("cli", [tp]) == {tp: 500}
            if reset:
                await admin.reset_offsets("cli", [tp], offset=500)
        cmd = _sink(cluster.bootstrap, tmp_path, "--until-caught-up", "--file-max-age", "0.3")
        with anyio.fail_after(120):  # a hang guard
            done = await anyio.run_process(cmd, cwd=ROOT, check=False)
        assert done.returncode == 0, done.stderr.decode()[-3000:]
    read_lake(tmp_path, "events").check_exactly_once({tp: 500})
    assert staged_files(tmp_path) == []


async def test_several_members_until_caught_up_all_stop_once_the_lake_is_whole(
    tmp_path: Path,
) -> None:
    """Every partition committed to its end, one file committed and still staged; two
    members started together with ``--until-caught-up`` both stop, with the file published
    (by whichever owns its partition)."""
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            await admin.create_topics({"events": 2})
        for partition in (0, 1):
            await _produce_to(cluster.bootstrap, partition, range(300))
        cmd = _sink(cluster.bootstrap, tmp_path, "--until-caught-up", "--file-max-age", "0.3")
        with anyio.fail_after(120):  # a hang guard
            assert (await anyio.run_process(cmd, cwd=ROOT, check=False)).returncode == 0
        await _produce_to(cluster.bootstrap, 0, range(300, 500))
        await _crash_before_publish(cluster.bootstrap, tmp_path, 300)
        ends = await end_offsets(cluster.bootstrap, "events", 2)
        async with Admin(cluster.bootstrap) as admin:
            assert await admin.fetch_offsets("cli") == ends
        codes: list[tuple[int, str]] = []

        async def member() -> None:
            done = await anyio.run_process(cmd, cwd=ROOT, check=False)
            codes.append((done.returncode, done.stderr.decode()[-3000:]))

        with anyio.fail_after(120):  # a hang guard
            async with anyio.create_task_group() as tg:
                tg.start_soon(member)
                tg.start_soon(member)
        assert [code for code, _ in codes] == [0, 0], codes
    read_lake(tmp_path, "events").check_exactly_once(ends)
    assert staged_files(tmp_path) == []


async def test_until_caught_up_refuses_files_that_never_land_by_age(tmp_path: Path) -> None:
    """With ``--file-max-age inf`` a partition's last records land only once a file is
    full, so the group might never catch up: a usage error, not a sink that never ends."""
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            await admin.create_topics({"events": 1})
        await _produce_to(cluster.bootstrap, 0, range(100))
        cmd = _sink(cluster.bootstrap, tmp_path, "--until-caught-up", "--file-max-age", "inf")
        with anyio.fail_after(60):  # a hang guard
            done = await anyio.run_process(cmd, cwd=ROOT, check=False)
    err = done.stderr.decode()
    assert done.returncode == 2, err[-3000:]
    assert "--until-caught-up needs a finite --file-max-age" in err
