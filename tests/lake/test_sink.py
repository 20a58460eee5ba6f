"""The lake sink on the embedded broker, in one process: landing, rolling, rebalancing,
recovering a file committed but not published, ignoring a zombie's staged file,
landing again after offsets were reset."""

from __future__ import annotations

import errno
import itertools
import json
import logging
import math
import os
import shlex
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from gengroup import (
    Admin,
    ConfigError,
    ConsumerGroup,
    Generation,
    Producer,
    TopicDeleted,
    TopicPartition,
)
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay, Disconnect, Fail, Intercepted
from gengroup.cli import build_parser
from gengroup.lake import LakeConfig, LakeError, LakeSink, LakeStore, Landed
from gengroup.lake.layout import commit_note, parse_note, published_name
from gengroup.lake.sink import _reset_under, _would_lose, _would_lose_staged
from gengroup.lake.spark import check_files
from gengroup.producer import ProducerRecord
from gengroup.protocol.versions import ApiKey

from ..embedded import append_commit_marker
from .helpers import (
    end_offsets,
    expire,
    produce,
    read_lake,
    staged_files,
    write_garbage,
)

TOPIC = "events"
FAST: dict[str, Any] = {
    "session_timeout": 6.0,
    "heartbeat_interval": 0.3,
    "rebalance_timeout": 10.0,
    "fetch_max_wait": 0.1,
    "join_backoff": 0.1,
    "start_offset": "earliest",
}


async def _caught_up(bootstrap: str, group: str, partitions: int, timeout: float = 60) -> None:
    """Wait until ``group`` committed every partition's end (a hang guard, not a timing check)."""
    ends = await end_offsets(bootstrap, TOPIC, partitions)
    async with Admin(bootstrap) as admin:
        with anyio.fail_after(timeout):
            while True:
                committed = await admin.fetch_offsets(group)
                if all(committed.get(tp, 0) >= end for tp, end in ends.items() if end):
                    return
                await anyio.sleep(0.05)


async def _run_sink(
    bootstrap: str, group: str, sink: LakeSink, done: anyio.Event, **settings: Any
) -> None:
    async with ConsumerGroup(group, [TOPIC], bootstrap, **{**FAST, **settings}) as g:
        await sink.run(g, done)


async def _land_all(bootstrap: str, group: str, sink: LakeSink, **settings: Any) -> None:
    """Run ``sink`` in ``group`` until the group committed every partition's end, then stop it."""
    done = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(_run_sink, bootstrap, group, sink, done, **settings))
        await _caught_up(bootstrap, group, 4)
        done.set()


async def _check_lake(bootstrap: str, lake: Path) -> None:
    """The lake holds every offset of the topic once, with the produced records."""
    contents = read_lake(lake, TOPIC)
    contents.check_exactly_once(await end_offsets(bootstrap, TOPIC, 4))
    contents.check_values()


@pytest.fixture
async def cluster() -> Any:
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            await admin.create_topics({TOPIC: 4})
        yield cluster


def test_layout_names_and_notes_round_trip() -> None:
    landed = Landed(120, 4567, "g7-abc123")
    assert parse_note(commit_note(landed)) == landed
    assert parse_note("") is None and parse_note("some other client's note") is None
    assert published_name(1, 2) == "00000000000000000001-00000000000000000002.parquet"


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("file_max_bytes", 0),
        ("file_max_bytes", 0.5),
        ("file_max_bytes", 1000.5),
        ("file_max_bytes", math.nan),
        ("file_max_bytes", math.inf),
        ("file_max_bytes", "1000"),
        ("file_max_bytes", True),
        ("file_max_age", -1),
        ("file_max_age", math.nan),
        ("file_max_age", -math.inf),
        ("file_max_age", "60"),
        ("flush_timeout", math.nan),
        ("flush_timeout", math.inf),
        ("flush_timeout", 0),
        ("progress_interval", math.nan),
        ("progress_interval", math.inf),
        ("progress_interval", -1),
        ("progress_interval", "30"),
        ("compression", "brotli2"),
        ("lake", ""),
        ("lake", None),
    ],
)
def test_bad_settings_are_config_errors_naming_the_setting(
    name: str, bad: Any, tmp_path: Path
) -> None:
    settings: dict[str, Any] = {"lake": str(tmp_path), name: bad}
    with pytest.raises(ConfigError, match=f"^{name} must be"):
        LakeConfig(**settings)


def test_good_settings_are_taken_as_numbers(tmp_path: Path) -> None:
    config = LakeConfig(str(tmp_path), file_max_bytes=64e6, file_max_age=math.inf)
    assert config.file_max_bytes == 64_000_000 and isinstance(config.file_max_bytes, int)
    assert LakeConfig(str(tmp_path), progress_interval=0).progress_interval == 0


async def test_every_offset_lands_once_in_files_rolled_by_size(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    await produce(cluster.bootstrap, TOPIC, range(3000))
    config = LakeConfig(str(tmp_path), file_max_bytes=8_000, file_max_age=0.3, progress_interval=0)
    sink = LakeSink(config)
    await _land_all(cluster.bootstrap, "lake", sink)
    await _check_lake(cluster.bootstrap, tmp_path)
    assert read_lake(tmp_path, TOPIC).files > 8  # rolled by size, not one file per partition
    assert sum(p.records for p in sink.progress()) == 3000
    assert all(p.lag == 0 and p.buffered == 0 for p in sink.progress())


async def test_a_quiet_partition_lands_by_age(cluster: FakeCluster, tmp_path: Path) -> None:
    """Without more records the buffer still lands once file_max_age passed."""
    await produce(cluster.bootstrap, TOPIC, range(40))
    sink = LakeSink(LakeConfig(str(tmp_path), file_max_age=0.2, progress_interval=0))
    done = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_run_sink, cluster.bootstrap, "quiet", sink, done)
        await _caught_up(cluster.bootstrap, "quiet", 4)  # lands while the group still runs
        assert read_lake(tmp_path, TOPIC).files > 0
        done.set()
    read_lake(tmp_path, TOPIC).check_exactly_once(await end_offsets(cluster.bootstrap, TOPIC, 4))


async def test_members_joining_and_leaving_land_everything_once(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    config = LakeConfig(str(tmp_path), file_max_bytes=4_000, file_max_age=0.2, progress_interval=0)
    sinks = [LakeSink(config) for _ in range(3)]
    stops = [anyio.Event() for _ in sinks]
    async with anyio.create_task_group() as tg:
        tg.start_soon(_run_sink, cluster.bootstrap, "rb", sinks[0], stops[0])
        for step, i in enumerate([1, 2]):
            await produce(cluster.bootstrap, TOPIC, range(step * 2000, step * 2000 + 2000))
            tg.start_soon(_run_sink, cluster.bootstrap, "rb", sinks[i], stops[i])
            await anyio.sleep(0.5)
        stops[0].set()  # a graceful leave in the middle of the stream
        await produce(cluster.bootstrap, TOPIC, range(4000, 6000))
        await _caught_up(cluster.bootstrap, "rb", 4)
        for stop in stops:
            stop.set()
    await _check_lake(cluster.bootstrap, tmp_path)
    assert sum(s.generations for s in sinks) >= 4


class _Crashing(LakeStore):
    """A store that fails once at one point of landing, as a machine dying there would.

    ``crash_at``: "write" (the file is staged, the commit not sent), "publish"
    (the commit is stored, the rename not done) or "published" (renamed, the
    worker never hears of it).
    """

    def __init__(self, lake: str, crash_at: str) -> None:
        super().__init__(lake)
        self.crash_at = crash_at
        self.failed: list[tuple[TopicPartition, Landed]] = []

    def _crash(self, point: str, tp: TopicPartition, landed: Landed) -> None:
        if point == self.crash_at and not self.failed:
            self.failed.append((tp, landed))
            raise OSError(f"disk went away ({point})")

    def write_staged(self, tp: TopicPartition, landed: Landed, columns: Any) -> int:
        size = super().write_staged(tp, landed, columns)
        self._crash("write", tp, landed)
        return size

    def publish(self, tp: TopicPartition, landed: Landed) -> bool:
        self._crash("publish", tp, landed)
        published = super().publish(tp, landed)
        self._crash("published", tp, landed)
        return published


@pytest.mark.parametrize("crash_at", ["write", "publish", "published"])
async def test_a_crash_at_any_point_of_landing_loses_and_duplicates_nothing(
    crash_at: str, cluster: FakeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await produce(cluster.bootstrap, TOPIC, range(1000))
    config = LakeConfig(str(tmp_path), file_max_bytes=4_000, file_max_age=0.3, progress_interval=0)
    store = _Crashing(str(tmp_path), crash_at)
    with pytest.raises(LakeError, match="disk went away"):
        await _run_sink(cluster.bootstrap, "crash", LakeSink(config, store=store), anyio.Event())
    ((tp, landed),) = store.failed
    staged = {(p.parent.parent.name, p.name.split(".")[0]) for p in staged_files(tmp_path)}
    # other partitions' files may be staged too (cancelled mid-commit: outcome unknown)
    mine = (f"partition={tp.partition}", f"{landed.base:020d}-{landed.end:020d}")
    assert (mine in staged) == (crash_at != "published")
    caplog.set_level(logging.INFO, "gengroup.lake")
    sink = LakeSink(config)
    await _land_all(cluster.bootstrap, "crash", sink)
    repaired = "committed by the previous owner before it stopped" in caplog.text
    assert repaired == (crash_at == "publish")
    assert staged_files(tmp_path) == []
    await _check_lake(cluster.bootstrap, tmp_path)


async def test_a_missing_committed_file_is_a_lake_error(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """The commit names a file that is neither staged nor published: loud, not a silent gap."""
    await produce(cluster.bootstrap, TOPIC, range(200))
    config = LakeConfig(str(tmp_path), file_max_age=0.3, progress_interval=0)
    broken = LakeSink(config, store=_Crashing(str(tmp_path), "publish"))
    with pytest.raises(LakeError, match="disk went away"):
        await _run_sink(cluster.bootstrap, "lost", broken, anyio.Event())
    for path in staged_files(tmp_path):
        path.unlink()
    with pytest.raises(LakeError, match="were committed, but neither"):
        await _run_sink(cluster.bootstrap, "lost", LakeSink(config), anyio.Event())


async def test_a_record_larger_than_a_file_lands_alone(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    big = bytes(range(256)) * 400  # 100 KiB against files of 4 KB
    async with Producer(cluster.bootstrap) as producer:
        await producer.send_many(
            TOPIC,
            [ProducerRecord(value=b"small", partition=0), ProducerRecord(value=big, partition=0)],
        )
    config = LakeConfig(str(tmp_path), file_max_bytes=4_000, file_max_age=0.3, progress_interval=0)
    await _land_all(cluster.bootstrap, "big", LakeSink(config))
    lake = read_lake(tmp_path, TOPIC)
    lake.check_exactly_once(await end_offsets(cluster.bootstrap, TOPIC, 4))
    assert lake.values[(0, 1)][1] == big


def test_a_lake_path_that_cannot_be_a_folder_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"not a folder")
    with pytest.raises(LakeError, match="cannot use"):
        LakeStore(str(tmp_path / "file" / "lake"))


async def test_a_zombie_staged_file_never_becomes_visible(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A staged file whose commit never happened is deleted when the partition is acquired."""
    await produce(cluster.bootstrap, TOPIC, range(400))
    store = LakeStore(str(tmp_path))
    tp = TopicPartition(TOPIC, 0)
    zombie = Landed(0, 50, "g1-zombie")
    rows = {"topic": [TOPIC], "partition": [0], "offset": [0], "timestamp": [0]}
    rows |= {"key": [None], "value": [b"not from the topic"], "headers": [[]], "landed_at": [0]}
    store.write_staged(tp, zombie, rows)
    sink = LakeSink(LakeConfig(str(tmp_path), file_max_age=0.3, progress_interval=0))
    await _land_all(cluster.bootstrap, "zombie", sink)
    assert store.staged(tp) == []
    await _check_lake(cluster.bootstrap, tmp_path)


async def test_offsets_reset_to_earliest_land_again_without_duplicates(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    await produce(cluster.bootstrap, TOPIC, range(1500))
    config = LakeConfig(str(tmp_path), file_max_bytes=5_000, file_max_age=0.3, progress_interval=0)
    for attempt in range(2):
        await _land_all(cluster.bootstrap, "reset", LakeSink(config))
        if attempt == 0:
            async with Admin(cluster.bootstrap) as admin:
                tps = [TopicPartition(TOPIC, p) for p in range(4)]
                mid = await admin.list_offsets(tps, "latest")
                await admin.reset_offsets("reset", tps[:2], to="earliest")
                # partition 2 goes back into the middle of a file: that file is landed again
                await admin.reset_offsets("reset", tps[2:3], offset=mid[tps[2]] // 2 + 1)
    await _check_lake(cluster.bootstrap, tmp_path)


async def test_a_topic_deleted_while_landing_leaves_the_others_landing(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics({"doomed": 2})
    await produce(cluster.bootstrap, TOPIC, range(500))
    await produce(cluster.bootstrap, "doomed", range(300))
    config = LakeConfig(str(tmp_path), file_max_bytes=3_000, file_max_age=0.3, progress_interval=0)
    sink, done = LakeSink(config), anyio.Event()

    async def run() -> None:
        async with ConsumerGroup(
            "del", [TOPIC, "doomed"], cluster.bootstrap, partition_watch_interval=0.3, **FAST
        ) as group:
            await sink.run(group, done)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await _caught_up(cluster.bootstrap, "del", 4)
        async with Admin(cluster.bootstrap) as admin:
            await admin.delete_topics(["doomed"])
        await produce(cluster.bootstrap, TOPIC, range(500, 1000))
        await _caught_up(cluster.bootstrap, "del", 4)
        done.set()
    await _check_lake(cluster.bootstrap, tmp_path)
    assert sum(read_lake(tmp_path, "doomed").copies.values()) == 300  # landed before deletion


async def test_verify_names_a_corrupt_file_before_running_spark(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    await produce(cluster.bootstrap, TOPIC, range(300))
    config = LakeConfig(str(tmp_path), file_max_age=0.3, progress_interval=0)
    await _land_all(cluster.bootstrap, "corrupt", LakeSink(config))
    assert check_files(str(tmp_path)) == read_lake(tmp_path, TOPIC).files
    bad = write_garbage(tmp_path / f"topic={TOPIC}" / "partition=0", published_name(900, 901))
    with pytest.raises(LakeError, match=f"1 corrupt file.*{bad.name}"):
        check_files(str(tmp_path))


async def test_a_commit_lost_with_its_connection_ends_the_generation_not_the_sink(
    cluster: FakeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The connection drops under every OffsetCommit for longer than ``request_timeout``
    (the client retries a broken connection within it): the outcome is unknown, the
    staged file stays, the member rejoins and the lake still holds every offset once."""
    await produce(cluster.bootstrap, TOPIC, range(800))
    dropped: list[float] = []

    def drop_for_a_while(request: Intercepted) -> Disconnect | None:
        now = anyio.current_time()
        if not dropped or now - dropped[0] < 1.5:
            dropped.append(now)
            return Disconnect()
        return None

    cluster.control(ApiKey.OFFSET_COMMIT, drop_for_a_while)
    caplog.set_level(logging.WARNING, "gengroup.lake")
    config = LakeConfig(str(tmp_path), file_max_bytes=4_000, file_max_age=0.3, progress_interval=0)
    sink = LakeSink(config)
    await _land_all(cluster.bootstrap, "lost-commit", sink, request_timeout=1.0)
    assert len(dropped) > 2
    assert "failed" in caplog.text and "settles the staged file" in caplog.text
    assert sink.generations >= 2  # the generation ended and the member rejoined
    await _check_lake(cluster.bootstrap, tmp_path)


async def test_a_file_whose_commit_was_dropped_for_a_deleted_topic_is_not_published(
    cluster: FakeCluster,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file's commit raising TopicDeleted was not stored: the file is not
    published (its staged copy is the next owner's to settle), the generation
    ends, not the sink, and the lake still holds every offset once."""
    await produce(cluster.bootstrap, TOPIC, range(800))
    refused: list[dict[TopicPartition, int]] = []
    commit = Generation.commit

    async def dropping(gen: Generation, offsets: Any = None, *, metadata: Any = None) -> None:
        if metadata and not refused:  # the first file's commit
            refused.append(dict(offsets))
            raise TopicDeleted("the topic is gone", offsets)
        await commit(gen, offsets, metadata=metadata)

    monkeypatch.setattr(Generation, "commit", dropping)
    caplog.set_level(logging.WARNING, "gengroup.lake")
    config = LakeConfig(str(tmp_path), file_max_bytes=4_000, file_max_age=0.3, progress_interval=0)
    sink = LakeSink(config)
    await _land_all(cluster.bootstrap, "dropped-commit", sink)
    assert refused
    assert "the topic is gone" in caplog.text and "settles the staged file" in caplog.text
    assert sink.generations >= 2  # the generation ended and the member rejoined
    await _check_lake(cluster.bootstrap, tmp_path)


@pytest.mark.parametrize("crash_at", [None, "write", "publish", "published"])
async def test_an_object_store_lands_exactly_once_through_copy_and_delete(
    crash_at: str | None, cluster: FakeCluster
) -> None:
    """A ``pyarrow.fs`` store that is not local (no rename, no fsync: publish copies the
    staged object and deletes it), with the same crash points as on a local folder."""
    await produce(cluster.bootstrap, TOPIC, range(1000))
    config = LakeConfig("mock:///lake", file_max_bytes=4_000, file_max_age=0.3, progress_interval=0)
    store = _Crashing("mock:///lake", crash_at or "never")
    assert not store.local
    if crash_at is not None:
        with pytest.raises(LakeError, match="disk went away"):
            await _run_sink(cluster.bootstrap, "s3", LakeSink(config, store=store), anyio.Event())
    await _land_all(cluster.bootstrap, "s3", LakeSink(config, store=store))
    lake = read_lake(store, TOPIC)
    lake.check_exactly_once(await end_offsets(cluster.bootstrap, TOPIC, 4))
    lake.check_values()
    assert all(store.staged(TopicPartition(TOPIC, p)) == [] for p in range(4))


def test_the_spark_jobs_refuse_a_missing_or_empty_lake(tmp_path: Path) -> None:
    with pytest.raises(LakeError, match=r"no lake at .*not a folder"):
        check_files(str(tmp_path / "nowhere"))
    with pytest.raises(LakeError, match=r"no lake at .*no landed file"):
        check_files(str(tmp_path))


async def test_a_commit_refused_on_its_resend_after_the_first_send_was_stored(
    cluster: FakeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The first OffsetCommit is stored after the client gave up on it; the client's
    re-send is refused (REBALANCE_IN_PROGRESS). The refusal says nothing about the first
    send: the staged file must stay for the next owner, who publishes it."""
    topic, tp = "single", TopicPartition("single", 0)  # one partition: one commit at a time
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics({topic: 1})
    async with Producer(cluster.bootstrap) as producer:
        await producer.send_many(topic, [ProducerRecord(value=b"r%d" % i) for i in range(300)])
    sent: list[int] = []

    def slow_then_refused(request: Intercepted) -> Delay | None:
        sent.append(1)
        if len(sent) == 1:
            return Delay(3.0)  # stored after the client's 2 s request timeout
        if len(sent) == 2:
            return Delay(1.5, then=Fail(27))  # the re-send: REBALANCE_IN_PROGRESS
        return None

    cluster.control(ApiKey.OFFSET_COMMIT, slow_then_refused)
    caplog.set_level(logging.WARNING, "gengroup.lake")
    config = LakeConfig(str(tmp_path), file_max_bytes=10**6, file_max_age=0.3, progress_interval=0)
    done = anyio.Event()

    async def run() -> None:
        settings = {**FAST, "request_timeout": 2.0}
        async with ConsumerGroup("resent", [topic], cluster.bootstrap, **settings) as group:
            await LakeSink(config).run(group, done)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(60):  # the next generation publishes the file (a hang guard)
            while sum(read_lake(tmp_path, topic).copies.values()) < 300:
                await anyio.sleep(0.1)
        done.set()
    assert len(sent) >= 2 and "settles the staged file" in caplog.text
    assert staged_files(tmp_path) == []
    read_lake(tmp_path, topic).check_exactly_once({tp: 300})


async def test_a_lake_belongs_to_one_group(
    cluster: FakeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A second group pointed at a lake is refused, naming both groups and the topic; the
    first group's files stay. The owner group with no committed offset (deleted, as when
    they expire) lands again without blaming a reset that never happened."""
    await produce(cluster.bootstrap, TOPIC, range(600))
    config = LakeConfig(str(tmp_path), file_max_bytes=4_000, file_max_age=0.3, progress_interval=0)
    await _land_all(cluster.bootstrap, "owner", LakeSink(config))
    files = read_lake(tmp_path, TOPIC).files
    assert json.loads((tmp_path / "_lake.json").read_text()) == {
        "group": "owner",
        "topics": [TOPIC],
    }
    with pytest.raises(
        LakeError, match=f"belongs to group 'owner' \\(topics {TOPIC}\\), not to group 'other'"
    ):
        await _run_sink(cluster.bootstrap, "other", LakeSink(config), anyio.Event())
    assert read_lake(tmp_path, TOPIC).files == files
    async with Admin(cluster.bootstrap) as admin:
        await admin.delete_groups(["owner"])
    caplog.set_level(logging.WARNING, "gengroup.lake")
    await _land_all(cluster.bootstrap, "owner", LakeSink(config))
    assert "has no committed offset" in caplog.text
    assert "reset" not in caplog.text
    await _check_lake(cluster.bootstrap, tmp_path)


@pytest.mark.parametrize("how", ["reset", "expired"])
async def test_files_holding_records_the_topic_no_longer_has_are_never_deleted(
    how: str, cluster: FakeCluster, tmp_path: Path
) -> None:
    """The lake outlives the topic's retention. Offsets reset to earliest (or expired
    offsets: none committed) would land again from the log start, deleting the files
    ahead of it first: refused, naming what would be lost, and the lake stays whole.
    Following the advice given (commit the lake's end) lands on from there."""
    tp = TopicPartition(TOPIC, 0)
    async with Producer(cluster.bootstrap) as producer:
        await producer.send_many(
            TOPIC, [ProducerRecord(value=b"r%d" % i, partition=0) for i in range(1000)]
        )
    config = LakeConfig(str(tmp_path), file_max_bytes=3_000, file_max_age=0.3, progress_interval=0)
    await _land_all(cluster.bootstrap, "archive", LakeSink(config))
    before = read_lake(tmp_path, TOPIC).copies
    expire(cluster, tp, 500)
    async with Admin(cluster.bootstrap) as admin:
        if how == "reset":
            await admin.reset_offsets("archive", [tp], to="earliest")
        else:
            await admin.delete_groups(["archive"])
    with pytest.raises(LakeError) as raised, anyio.fail_after(30):
        await _run_sink(cluster.bootstrap, "archive", LakeSink(config), anyio.Event())
    message = str(raised.value)
    assert "are no longer in the topic (its log starts at 500)" in message
    assert "nothing was deleted" in message
    assert f"reset-offsets archive --topic {TOPIC} --partition 0 --offset 1000 --execute" in (
        message
    )
    assert read_lake(tmp_path, TOPIC).copies == before
    async with Admin(cluster.bootstrap) as admin:
        await admin.reset_offsets("archive", [tp], offset=1000)
    async with Producer(cluster.bootstrap) as producer:
        await producer.send_many(
            TOPIC, [ProducerRecord(value=b"r%d" % i, partition=0) for i in range(1000, 1100)]
        )
    await _land_all(cluster.bootstrap, "archive", LakeSink(config))
    read_lake(tmp_path, TOPIC).check_exactly_once(await end_offsets(cluster.bootstrap, TOPIC, 4))


async def test_offsets_without_records_are_committed_past(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A partition whose records all expired (no commit, log start = end) and one whose
    last offset is a transaction marker: the fetch position moves past offsets that hold
    no record, and the sink commits it there, so the group's lag reaches 0."""
    ended, expired = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
    async with Producer(cluster.bootstrap) as producer:
        for tp in (ended, expired):
            records = [ProducerRecord(value=b"r%d" % i, partition=tp.partition) for i in range(50)]
            await producer.send_many(TOPIC, records)
    expire(cluster, expired, 50)
    config = LakeConfig(str(tmp_path), file_max_age=0.3, progress_interval=0)
    sink, done = LakeSink(config), anyio.Event()
    async with anyio.create_task_group() as tg, Admin(cluster.bootstrap) as admin:
        tg.start_soon(_run_sink, cluster.bootstrap, "gaps", sink, done)
        with anyio.fail_after(20):  # a hang guard
            while await admin.fetch_offsets("gaps", [ended, expired]) != {ended: 50, expired: 50}:
                await anyio.sleep(0.05)
            append_commit_marker(cluster, ended)
            while await admin.fetch_offsets("gaps", [ended, expired]) != {ended: 51, expired: 50}:
                await anyio.sleep(0.05)
            done.set()
    lake = read_lake(tmp_path, TOPIC)
    assert sorted(lake.copies) == [(0, o) for o in range(50)]
    assert set(lake.copies.values()) == {1}
    assert staged_files(tmp_path) == []


class _SlowFailingPublish(LakeStore):
    """A store whose publish takes a while, then fails (a disk going away)."""

    def publish(self, tp: TopicPartition, landed: Landed) -> bool:
        time.sleep(0.5)
        raise OSError("disk went away (publish)")


async def test_a_file_committed_before_a_transaction_marker_is_published_before_passing_it(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """The sink committed offset 50 naming a file it did not publish (it crashed), then a
    transaction's marker took offset 50. The consumer commits past such offsets at a
    committed start offset, carrying its metadata, but only once the worker asks for a
    batch: the sink publishes the named file first. A member whose publish fails before
    that commits nothing (carrying the note past the file's end would make the next owner
    take the note as not the committed offset's, and delete the file as stale); the next
    owner publishes the file and passes the marker, and the lake holds every record once."""
    tp = TopicPartition(TOPIC, 0)
    async with Producer(cluster.bootstrap) as producer:
        await producer.send_many(
            TOPIC, [ProducerRecord(value=b"r%d" % i, partition=0) for i in range(50)]
        )
    config = LakeConfig(str(tmp_path), file_max_age=0.3, progress_interval=0)
    with pytest.raises(LakeError, match="disk went away"):
        store = _Crashing(str(tmp_path), "publish")
        await _run_sink(cluster.bootstrap, "marker", LakeSink(config, store=store), anyio.Event())
    append_commit_marker(cluster, tp)
    with pytest.raises(LakeError, match="disk went away"):
        store = _SlowFailingPublish(str(tmp_path))
        sink = LakeSink(config, store=store)
        await _run_sink(cluster.bootstrap, "marker", sink, anyio.Event(), commit_interval=0.05)
    async with Admin(cluster.bootstrap) as admin:
        assert await admin.fetch_offsets("marker", [tp]) == {tp: 50}
    assert len(staged_files(tmp_path)) == 1
    await _land_all(cluster.bootstrap, "marker", LakeSink(config))
    async with Admin(cluster.bootstrap) as admin:
        assert await admin.fetch_offsets("marker", [tp]) == {tp: 51}
    lake = read_lake(tmp_path, TOPIC)
    assert sorted(lake.copies) == [(0, o) for o in range(50)]
    assert set(lake.copies.values()) == {1}
    assert staged_files(tmp_path) == []


class _Full(LakeStore):
    """A lake on a full disk: every staged write fails with ENOSPC."""

    def write_staged(self, tp: TopicPartition, landed: Landed, rows: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


async def test_a_storage_failure_is_one_lake_error_from_the_os_error(
    cluster: FakeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every partition's worker hits the full disk; ``run`` raises one LakeError (from
    the OSError), and the others' copies of the same failure are not logged again."""
    await produce(cluster.bootstrap, TOPIC, range(400))
    config = LakeConfig(str(tmp_path), file_max_age=0.3, progress_interval=0)
    with pytest.raises(LakeError, match="No space left on device") as raised:
        with anyio.fail_after(30):  # a hang guard
            await _run_sink(
                cluster.bootstrap, "full", LakeSink(config, _Full(str(tmp_path))), anyio.Event()
            )
    assert isinstance(raised.value.__cause__, OSError)
    assert raised.value.__cause__.errno == errno.ENOSPC
    assert "another task also raised" not in caplog.text


async def test_a_position_reset_out_of_range_is_refused_not_landed_twice(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A committed offset past the log's end makes the consumer reset the position
    (``start_offset``); the lake does not follow: it raises before writing or
    committing anything, and the committed offset stays where it was (following
    the reset landed the offsets below it again and committed backwards)."""
    await produce(cluster.bootstrap, TOPIC, range(400))
    config = LakeConfig(str(tmp_path), file_max_bytes=5_000, file_max_age=0.3, progress_interval=0)
    await _land_all(cluster.bootstrap, "reset", LakeSink(config))
    before = read_lake(tmp_path, TOPIC)
    tp = TopicPartition(TOPIC, 0)
    async with Admin(cluster.bootstrap) as admin:
        end = (await admin.list_offsets([tp], "latest"))[tp]
        # An offset past the end of the log, as a truncated log leaves it (the
        # admin's reset_offsets keeps offsets within the log).
        async with ConsumerGroup("reset", [TOPIC], cluster.bootstrap, **FAST) as group:
            await (await group.next()).commit({tp: end + 100})
        with anyio.fail_after(60), pytest.raises(LakeError, match=r"position was reset") as raised:
            await _run_sink(cluster.bootstrap, "reset", LakeSink(config), anyio.Event())
        assert f"reset-offsets reset --topic {TOPIC} --partition 0 --offset N --execute" in (
            str(raised.value)
        )
        assert (await admin.fetch_offsets("reset"))[tp] == end + 100
    after = read_lake(tmp_path, TOPIC)
    assert after.copies == before.copies and after.files == before.files


@pytest.mark.parametrize(
    ("group", "topic"), [("lake sink", TOPIC), ("it's", TOPIC), ("-g", TOPIC), ("g", "-events")]
)
def test_the_reset_offsets_commands_in_messages_paste_into_a_shell(group: str, topic: str) -> None:
    """The ``gengroup groups reset-offsets`` command a refusal spells out is quoted
    where the group id needs it: a group named ``lake sink`` gave a command that
    failed when pasted (two arguments where one is wanted); one starting with
    ``-`` goes after ``--``, a topic starting with ``-`` is joined to ``--topic=``.
    Each command is split as a POSIX shell does, then parsed by the ``gengroup``
    command itself."""
    tp = TopicPartition(topic, 2)
    gen: Any = SimpleNamespace(group_id=group, label="3", committed={})
    held = [(Landed(5, 9), "a.parquet")]
    messages = {
        7: _reset_under(gen, tp, 5, 9).replace("--offset N", "--offset 7"),
        9: _would_lose(gen, tp, 0, 7, held, held),
        11: _would_lose_staged(group, tp, 7, [((Landed(5, 11, "t"), "s.parquet"), [(5, 11)])], []),
    }
    for offset, message in messages.items():
        # The command, in parentheses: read as a shell does, up to the closing one.
        lexer = shlex.shlex(message.partition("(gengroup ")[2], posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        argv = list(itertools.takewhile(lambda token: token != ")", lexer))
        args = build_parser().parse_args(argv)
        assert (args.group, args.topic, args.partition) == (group, [topic], [2]), argv
        assert (args.offset, args.execute) == (offset, True), argv
