"""Step 1 of the landing protocol after the group's offsets moved: a reset into a
published file, and a file committed but not published (its writer stopped between
its commit and its publish) when the offsets are reset, expire or the log start moves.
Whatever stops the sink, the lake ends up holding each offset once, and nothing only
the lake still has is deleted without a LakeError."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest

from gengroup import Admin, GenerationEnded, Producer, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.lake import LakeConfig, LakeError, LakeSink, LakeStore, Landed
from gengroup.lake.acquire import plan, uncovered, unsettled
from gengroup.lake.layout import published_name
from gengroup.producer import ProducerRecord

from ..embedded import append_commit_marker
from .helpers import expire, read_lake, staged_files, write_garbage
from .test_sink import TOPIC, _Crashing, _land_all, _run_sink

TP = TopicPartition(TOPIC, 0)


def _config(lake: Path, **settings: Any) -> LakeConfig:
    base = {"file_max_bytes": 10**8, "file_max_age": 0.3, "progress_interval": 0}
    return LakeConfig(str(lake), **{**base, **settings})


async def _produce(bootstrap: str, ids: range) -> None:
    """Records ``ids`` to partition 0 only (the other partitions stay empty)."""
    async with Producer(bootstrap) as producer:
        await producer.send_many(
            TOPIC, [ProducerRecord(value=b"r%06d" % i, partition=0) for i in ids]
        )


def _offsets(lake: Path) -> list[int]:
    """Partition 0's landed offsets, each copy."""
    copies = read_lake(lake, TOPIC).copies
    return sorted(o for (p, o), n in copies.items() if p == 0 for _ in range(n))


async def _committed(bootstrap: str, group: str) -> int:
    async with Admin(bootstrap) as admin:
        return (await admin.fetch_offsets(group, [TP]))[TP]


async def _reset(bootstrap: str, group: str, offset: int) -> None:
    async with Admin(bootstrap) as admin:
        await admin.reset_offsets(group, [TP], offset=offset)


async def _crash_before_publish(bootstrap: str, group: str, lake: Path) -> Landed:
    """Land partition 0 until its first file is committed and the sink stops before
    publishing it; that file (staged, named by the committed offset's note)."""
    store = _Crashing(str(lake), "publish")
    with pytest.raises(LakeError, match="disk went away"), anyio.fail_after(60):
        await _run_sink(bootstrap, group, LakeSink(_config(lake), store=store), anyio.Event())
    ((tp, landed),) = store.failed
    assert tp == TP and await _committed(bootstrap, group) == landed.end
    assert len(staged_files(lake)) == 1
    return landed


@pytest.fixture
async def cluster() -> Any:
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            await admin.create_topics({TOPIC: 4})
        yield cluster


# ---------------------------------------------------------------------- the plan alone


def test_uncovered_parts_of_a_range() -> None:
    assert uncovered(0, 10, []) == [(0, 10)]
    assert uncovered(0, 10, [(2, 4), (6, 8)]) == [(0, 2), (4, 6), (8, 10)]
    assert uncovered(3, 7, [(0, 5), (5, 9)]) == []
    assert uncovered(3, 7, [(5, 6), (0, 4)]) == [(4, 5), (6, 7)]


def test_a_staged_file_below_the_start_fills_the_lake_once() -> None:
    """Sorted in offset order: the larger file of a base fills, one overlapping it or a
    published file is stale, an unreadable one is stale, one the start falls into is
    landed again from its base, one at or past the start is stale."""
    published = [(Landed(0, 100), "p0")]
    staged = [
        (Landed(100, 200, "a"), "s-a"),  # fills [100, 200)
        (Landed(100, 150, "b"), "s-b"),  # covered by a
        (Landed(50, 120, "c"), "s-c"),  # overlaps the published file
        (Landed(200, 260, "partial"), "s-partial"),  # unreadable
        (Landed(200, 250, "d"), "s-d"),  # fills [200, 250)
        (Landed(250, 400, "e"), "s-e"),  # the start 300 falls into it
        (Landed(300, 350, "f"), "s-f"),  # at the start: written after it
    ]
    out = plan(300, published, staged, lambda landed, path: landed.token != "partial")
    assert [path for _, path in out.fillers] == ["s-a", "s-d"]
    assert [path for _, path in out.ahead] == ["s-e"]
    assert sorted(path for _, path in out.stale) == ["s-b", "s-c", "s-f", "s-partial"]
    assert out.lake(published) == [(0, 100), (100, 200), (200, 250)]
    # as --until-caught-up reads it: what lies below the committed offset, not published
    assert [p for _, p in unsettled(published, staged, 300)] == [
        "s-a",
        "s-b",
        "s-c",
        "s-partial",
        "s-d",
        "s-e",
    ]
    assert unsettled(published, [(Landed(0, 100, "z"), "s-z")], 300) == []


# ---------------------------------------------------------------------- reset into a file


@pytest.mark.parametrize("crash", [False, True])
async def test_a_reset_into_a_file_lands_it_again_from_its_base_whatever_stops_the_sink(
    crash: bool, cluster: FakeCluster, tmp_path: Path
) -> None:
    """Offsets reset backwards into the middle of a file: the file is deleted and landed
    again from its base, in smaller files now. The committed offset moves back to the base
    before anything is deleted, so a sink stopping while it lands again (here: at its
    first write) resumes from the base too, and no offset between the base and the reset
    offset is lost."""
    await _produce(cluster.bootstrap, range(1000))
    await _land_all(cluster.bootstrap, "back", LakeSink(_config(tmp_path)))
    files = sorted(LakeStore(str(tmp_path)).published(TP), key=lambda e: e[0].base)
    last = files[-1][0]
    assert last.end - last.base >= 100  # files of 200 bytes hold about 30 records
    mid = last.base + (last.end - last.base) // 2
    await _reset(cluster.bootstrap, "back", mid)
    small = _config(tmp_path, file_max_bytes=200)
    if crash:
        with pytest.raises(LakeError, match="disk went away"), anyio.fail_after(60):
            store = _Crashing(str(tmp_path), "write")
            await _run_sink(cluster.bootstrap, "back", LakeSink(small, store=store), anyio.Event())
        assert await _committed(cluster.bootstrap, "back") == last.base
        assert not (
            tmp_path / f"topic={TOPIC}/partition=0" / published_name(last.base, last.end)
        ).exists()
    await _land_all(cluster.bootstrap, "back", LakeSink(small))
    assert _offsets(tmp_path) == list(range(1000))
    assert read_lake(tmp_path, TOPIC).files > len(files)  # landed again in smaller files


# ---------------------------------------------------------------------- committed, not published


@pytest.mark.parametrize("where", ["into", "end", "past"])
async def test_a_file_committed_not_published_survives_an_offsets_reset(
    where: str, cluster: FakeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The writer stopped between its commit and its publish; then the group's offsets
    are reset, and with them goes the note naming the staged file. Reset into it: it is
    landed again from its base. Reset to its end (the lake's end): it is published.
    Reset past it (records skipped on purpose): it is published, and landing goes on
    from the reset offset."""
    await _produce(cluster.bootstrap, range(800))
    landed = await _crash_before_publish(cluster.bootstrap, "reset", tmp_path)
    await _produce(cluster.bootstrap, range(800, 1000))
    skipped: list[int] = []
    if where == "into":
        await _reset(cluster.bootstrap, "reset", landed.base + (landed.end - landed.base) // 2)
    elif where == "end":
        await _reset(cluster.bootstrap, "reset", landed.end)
    else:
        await _reset(cluster.bootstrap, "reset", landed.end + 50)
        skipped = list(range(landed.end, landed.end + 50))
    caplog.set_level(logging.WARNING, logger="gengroup")
    await _land_all(cluster.bootstrap, "reset", LakeSink(_config(tmp_path)))
    assert _offsets(tmp_path) == [o for o in range(1000) if o not in skipped]
    assert staged_files(tmp_path) == []
    assert ("staged below the start offset" in caplog.text) == (where != "into")
    assert ("staged and overlapping no published file" in caplog.text) == (where == "into")


async def test_a_committed_staged_file_the_topic_no_longer_has_is_kept_until_published(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """As above, reset into the file, but retention removed the records at its base: the
    file cannot be landed again, so nothing is deleted (LakeError naming the offsets).
    Following the advice -- the committed offset set to the lake's end -- publishes it."""
    await _produce(cluster.bootstrap, range(800))
    landed = await _crash_before_publish(cluster.bootstrap, "kept", tmp_path)
    expire(cluster, TP, landed.base + 10)
    await _reset(cluster.bootstrap, "kept", landed.base + 20)
    with pytest.raises(LakeError) as raised, anyio.fail_after(60):
        await _run_sink(cluster.bootstrap, "kept", LakeSink(_config(tmp_path)), anyio.Event())
    message = str(raised.value)
    assert f"offsets {landed.base}..{landed.base + 9}" in message
    assert "nothing was deleted" in message and f"--offset {landed.end}" in message
    assert len(staged_files(tmp_path)) == 1
    await _reset(cluster.bootstrap, "kept", landed.end)
    await _land_all(cluster.bootstrap, "kept", LakeSink(_config(tmp_path)))
    assert _offsets(tmp_path) == list(range(800))
    assert staged_files(tmp_path) == []


async def test_a_staged_file_only_the_lake_has_is_never_deleted_silently(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A writer stopped after writing its file, before committing it; the sink stays
    down until retention removed those records from the topic. No commit names the file,
    but it holds the only copy: LakeError, nothing deleted, and setting the committed
    offset to its end (as the error says) publishes it. A partial file (a writer killed
    while writing) in the same place holds nothing readable, and is deleted."""
    await _produce(cluster.bootstrap, range(500))
    await _land_all(cluster.bootstrap, "only", LakeSink(_config(tmp_path)))
    await _produce(cluster.bootstrap, range(500, 1000))
    store = _Crashing(str(tmp_path), "write")
    with pytest.raises(LakeError, match="disk went away"), anyio.fail_after(60):
        await _run_sink(
            cluster.bootstrap, "only", LakeSink(_config(tmp_path), store=store), anyio.Event()
        )
    ((_, landed),) = store.failed
    assert landed.base == 500 and landed.end >= 520
    folder = tmp_path / f"topic={TOPIC}" / "partition=0" / "_staging"
    write_garbage(folder, f"{500:020d}-{landed.end + 5:020d}.g9s9-partial.parquet")
    expire(cluster, TP, 510)
    with pytest.raises(LakeError) as raised, anyio.fail_after(60):
        await _run_sink(cluster.bootstrap, "only", LakeSink(_config(tmp_path)), anyio.Event())
    message = str(raised.value)
    assert "no stored commit names it" in message and "offsets 500..509" in message
    assert f"--offset {landed.end} --execute" in message
    assert len(staged_files(tmp_path)) == 2  # nothing deleted
    await _reset(cluster.bootstrap, "only", landed.end)
    await _land_all(cluster.bootstrap, "only", LakeSink(_config(tmp_path)))
    assert _offsets(tmp_path) == list(range(1000))
    assert staged_files(tmp_path) == []


async def test_expired_offsets_after_a_crash_before_publishing_lose_nothing(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """The group's offsets are gone (expired or deleted) while a committed file waits
    staged, and retention moved the log start past the file: the group starts at the log
    start, and the file, below it, is published rather than deleted."""
    await _produce(cluster.bootstrap, range(600))
    landed = await _crash_before_publish(cluster.bootstrap, "gone", tmp_path)
    await _produce(cluster.bootstrap, range(600, 700))
    expire(cluster, TP, landed.end)
    async with Admin(cluster.bootstrap) as admin:
        await admin.delete_groups(["gone"])
    await _land_all(cluster.bootstrap, "gone", LakeSink(_config(tmp_path)))
    assert _offsets(tmp_path) == list(range(700))
    assert staged_files(tmp_path) == []


# ---------------------------------------------------------------------- staged files in conflict


def _stage(lake: Path, base: int, end: int, token: str) -> str:
    """Write a staged file of partition 0's offsets ``[base, end)``, as a writer would; its path."""
    landed, n = Landed(base, end, token), end - base
    store = LakeStore(str(lake))
    columns = {
        "topic": [TOPIC] * n,
        "partition": [0] * n,
        "offset": list(range(base, end)),
        "timestamp": [0] * n,
        "key": [None] * n,
        "value": [b"r%06d" % i for i in range(base, end)],
        "headers": [[]] * n,
        "landed_at": [0] * n,
    }
    store.write_staged(TP, landed, columns)
    return store.staged_path(TP, landed)


async def test_a_stale_staged_file_holding_committed_offsets_nothing_else_holds_is_kept(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A frozen writer's late file [0, 2000), never committed, and a committed file
    [1000, 3000) whose note a reset dropped, both staged: the first fills the lake below
    the start offset 3000, the second overlaps it and is stale, but it alone holds offsets
    2000..2999, which the group committed past. Whatever the log start, nothing is deleted
    (LakeError naming the file and the offsets); following the advice lands them again."""
    await _produce(cluster.bootstrap, range(3000))
    _stage(tmp_path, 0, 2000, "g1s1-aaaaaaaaaaaa")
    committed = _stage(tmp_path, 1000, 3000, "g2s1-bbbbbbbbbbbb")
    await _reset(cluster.bootstrap, "conflict", 3000)
    with pytest.raises(LakeError) as raised, anyio.fail_after(60):
        await _run_sink(cluster.bootstrap, "conflict", LakeSink(_config(tmp_path)), anyio.Event())
    message = str(raised.value)
    assert committed in message and "offsets 2000..2999, below the start offset 3000" in message
    assert "nothing was deleted" in message and "--offset 2000 --execute" in message
    assert len(staged_files(tmp_path)) == 2 and _offsets(tmp_path) == []
    await _reset(cluster.bootstrap, "conflict", 2000)
    await _land_all(cluster.bootstrap, "conflict", LakeSink(_config(tmp_path)))
    assert _offsets(tmp_path) == list(range(3000))
    assert staged_files(tmp_path) == []


class _Freezing(LakeStore):
    """A store whose member freezes while it surveys the folder, past its session timeout."""

    def __init__(self, lake: str, gen: Any) -> None:
        super().__init__(lake)
        self.gen = gen

    def staged(self, tp: TopicPartition) -> list[tuple[Landed, str]]:
        self.gen.expired = True
        return super().staged(tp)


@pytest.mark.parametrize("frozen", [False, True])
async def test_a_member_whose_lease_ran_out_in_step_1_leaves_the_folder_alone(
    frozen: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A member that surveyed the folder, then froze past its session timeout, neither
    publishes nor deletes what it planned to: the partition may have a new owner."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    store = LakeStore(str(tmp_path))
    _stage(tmp_path, 0, 100, "g1s1-aaaaaaaaaaaa")
    store.publish(TP, Landed(0, 100, "g1s1-aaaaaaaaaaaa"))
    covered = _stage(tmp_path, 0, 100, "g2s1-bbbbbbbbbbbb")  # stale, the lake holds it
    _stage(tmp_path, 100, 200, "g3s1-cccccccccccc")  # fills the lake below 300
    gen = SimpleNamespace(
        assignments={TP: 300},
        committed={TP: 300},
        committed_metadata={},
        ending=False,
        expired=False,
        end_reason=None,
        label="7",
        group_id="frozen",
    )
    gen.lease_expired = lambda: gen.expired
    sink = LakeSink(_config(tmp_path), store=_Freezing(str(tmp_path), gen) if frozen else store)
    begin = await sink._acquire(cast(Any, gen), TP)
    published = [path for _, path in store.published(TP)]
    if frozen:
        assert begin is None and len(published) == 1 and len(staged_files(tmp_path)) == 2
        assert "not publishing staged files: the folder is the next owner's" in caplog.text
    else:
        assert begin == 300 and len(published) == 2 and staged_files(tmp_path) == []
    assert (Path(covered) in staged_files(tmp_path)) == frozen


def test_a_file_written_again_under_its_name_since_the_survey_is_not_deleted(
    tmp_path: Path,
) -> None:
    """Deleting what the survey saw: a file of the same name written since is kept,
    and so is one written under a name the survey found gone."""
    store = LakeStore(str(tmp_path))
    path = _stage(tmp_path, 0, 100, "g1s1-aaaaaaaaaaaa")
    seen = store.identity(path)
    Path(path).unlink()
    gone = store.identity(path)
    assert gone is None
    Path(path).write_bytes(b"another writer's file")
    assert not store.delete(path, seen, known=True) and Path(path).exists()
    assert not store.delete(path, gone, known=True) and Path(path).exists()
    assert store.delete(path, store.identity(path), known=True) and not Path(path).exists()


def _damage(path: str, how: str) -> None:
    """Zero a third of the file's middle (a data page), or its footer (keeping the magic)."""
    file = Path(path)
    data = file.read_bytes()
    n = len(data)
    if how == "page":
        data = data[: n // 3] + b"\0" * (n // 3) + data[2 * (n // 3) :]
    else:
        data = data[:-300] + b"\0" * 296 + data[-4:]
    file.write_bytes(data)


@pytest.mark.parametrize("how", ["page", "footer"])
def test_a_damaged_staged_file_is_unreadable(how: str, tmp_path: Path) -> None:
    store = LakeStore(str(tmp_path))
    path = _stage(tmp_path, 0, 1000, "g1s1-aaaaaaaaaaaa")
    assert store.readable(TP, Landed(0, 1000, "g1s1-aaaaaaaaaaaa"), path)
    _damage(path, how)
    assert not store.readable(TP, Landed(0, 1000, "g1s1-aaaaaaaaaaaa"), path)


async def test_a_damaged_staged_file_is_deleted_not_fatal(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A staged file below the start offset whose page was zeroed holds nothing readable:
    it is stale and deleted, and the sink lands on (the acquisition does not fail)."""
    await _produce(cluster.bootstrap, range(2000))
    _stage(tmp_path, 0, 1000, "g1s1-aaaaaaaaaaaa")
    _damage(_stage(tmp_path, 1000, 2000, "g1s1-bbbbbbbbbbbb"), "page")
    await _reset(cluster.bootstrap, "damaged", 2000)
    with anyio.fail_after(60):
        await _land_all(cluster.bootstrap, "damaged", LakeSink(_config(tmp_path)))
    assert _offsets(tmp_path) == list(range(1000))
    assert staged_files(tmp_path) == []


def test_a_storage_failure_reading_a_staged_file_names_it(tmp_path: Path) -> None:
    class Failing(LakeStore):
        def __init__(self, lake: str) -> None:
            super().__init__(lake)
            self.fs = SimpleNamespace(open_input_stream=self.fail)

        def fail(self, path: str) -> Any:
            raise OSError(5, "Input/output error")

    with pytest.raises(OSError, match=r"^\[Errno 5\] /lake/x\.parquet: Input/output error$"):
        Failing(str(tmp_path)).readable(TP, Landed(0, 10, "t"), "/lake/x.parquet")


async def test_a_forward_reset_into_a_staged_file_keeps_its_records_and_says_so(
    cluster: FakeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A writer stopped before its commit of [0, 1000) was stored; the offsets are then
    reset forwards to 500, into the file. With no note, the sink cannot tell this from a
    reset backwards into a committed file: it keeps the records, landing again from 0,
    and its warning says the start offset fell into a staged file, not behind the lake."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    await _produce(cluster.bootstrap, range(1500))
    path = _stage(tmp_path, 0, 1000, "g1s1-aaaaaaaaaaaa")
    await _reset(cluster.bootstrap, "forward", 500)
    await _land_all(cluster.bootstrap, "forward", LakeSink(_config(tmp_path)))
    assert _offsets(tmp_path) == list(range(1500))
    assert f"the start offset 500 falls into {path}, staged" in caplog.text
    assert "landing again from offset 0" in caplog.text
    assert "is behind the lake" not in caplog.text


async def test_a_stale_file_across_offsets_committed_past_without_a_file_is_no_loss(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """The group lands 0..49, commits past a transaction marker at 50 without a file,
    and lands 51..100. A fenced writer of an older generation left its staged file
    [0, 101), records 0..49 and 51..100, all of them in the lake. The offset 50 it
    spans holds no record, so the file is no one's only copy: it is deleted, and
    the sink goes on (it refused to start, naming offset 50 as lost)."""
    await _produce(cluster.bootstrap, range(50))
    await _land_all(cluster.bootstrap, "gap", LakeSink(_config(tmp_path)))
    append_commit_marker(cluster, TP)
    await _land_all(cluster.bootstrap, "gap", LakeSink(_config(tmp_path)))
    await _produce(cluster.bootstrap, range(51, 101))
    await _land_all(cluster.bootstrap, "gap", LakeSink(_config(tmp_path)))
    assert await _committed(cluster.bootstrap, "gap") == 101
    offsets = [*range(50), *range(51, 101)]
    n = len(offsets)
    LakeStore(str(tmp_path)).write_staged(
        TP,
        Landed(0, 101, "g1s1-zzzzzzzzzzzz"),
        {
            "topic": [TOPIC] * n,
            "partition": [0] * n,
            "offset": offsets,
            "timestamp": [0] * n,
            "key": [None] * n,
            "value": [b"r%06d" % i for i in offsets],
            "headers": [[]] * n,
            "landed_at": [0] * n,
        },
    )
    await _produce(cluster.bootstrap, range(101, 150))
    with anyio.fail_after(60):
        await _land_all(cluster.bootstrap, "gap", LakeSink(_config(tmp_path)))
    assert staged_files(tmp_path) == []
    assert await _committed(cluster.bootstrap, "gap") == 150


@pytest.mark.parametrize("ending", [True, False])
async def test_a_worker_told_its_generation_ended_ends_quietly(
    ending: bool, tmp_path: Path
) -> None:
    """The generation ends (its lease ran out: a member woken after a freeze)
    between the worker's survey of the folder and its first fetch, which
    raises GenerationEnded: the worker ends, as the generation's cancellation
    would have ended it, instead of failing the sink; a GenerationEnded from
    a generation not ending is a failure still."""
    gen = SimpleNamespace(
        assignments={TP: 0},
        committed={TP: 0},
        committed_metadata={},
        ending=False,
        end_reason=None,
        label="7",
        group_id="g",
        lease_expired=lambda: False,
    )

    def fetch(tp: TopicPartition) -> Any:
        gen.ending = ending  # the lease found run out here ends the generation
        raise GenerationEnded(f"fetch: generation 7 of g has ended ({tp})")

    gen.fetch = fetch
    sink = LakeSink(_config(tmp_path), store=LakeStore(str(tmp_path)))
    if ending:
        await sink.land(cast(Any, gen), TP)
    else:
        with pytest.raises(GenerationEnded):
            await sink.land(cast(Any, gen), TP)
