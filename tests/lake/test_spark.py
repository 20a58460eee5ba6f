"""The Spark jobs on a lake landed from real Kafka: ``verify`` passes on what the sink
landed and catches each kind of damage; ``analytics`` computes the right numbers."""

from __future__ import annotations

import json
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pyarrow.parquet as pq
import pytest

from gengroup import Admin, ConsumerGroup, TopicPartition
from gengroup.lake import LakeConfig, LakeSink
from gengroup.lake.spark import analytics, verify
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from .helpers import end_offsets, produce, record

pytestmark = pytest.mark.kafka

COUNT = 2000
ROOT = Path(__file__).resolve().parents[2]


async def _land(bootstrap: str, lake: Path) -> tuple[str, dict[Any, int]]:
    topic, group = make_unique_name("spark"), make_unique_name("lake")
    async with Admin(bootstrap) as admin:
        await admin.create_topics({topic: 3})
    await produce(bootstrap, topic, range(COUNT))
    ends = await end_offsets(bootstrap, topic, 3)
    sink = LakeSink(LakeConfig(str(lake), file_max_bytes=10_000, file_max_age=0.3))
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            async with ConsumerGroup(
                group, [topic], bootstrap, start_offset="earliest", fetch_max_wait=0.1
            ) as g:
                await sink.run(g, stop)

        tg.start_soon(run)
        async with Admin(bootstrap) as admin:
            with anyio.fail_after(120):  # a hang guard
                while (await admin.fetch_offsets(group)) != {tp: o for tp, o in ends.items() if o}:
                    await anyio.sleep(0.1)
        stop.set()
    return topic, ends


def _files(lake: Path) -> list[Path]:
    return sorted(lake.glob("topic=*/partition=*/*.parquet"))


async def test_verify_passes_on_the_landed_lake_and_catches_every_kind_of_damage(
    kafka: KafkaBroker, spark: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    topic, ends = await _land(kafka.bootstrap, lake)

    def check() -> dict[str, int]:
        report = verify(spark, str(lake), kafka.bootstrap, [topic], ends)
        totals: dict[str, int] = report.as_dict()["totals"]
        assert totals["topic_records"] == COUNT
        return totals

    good = await anyio.to_thread.run_sync(check)
    assert good == {
        "topic_records": COUNT,
        "lake_records": COUNT,
        "missing": 0,
        "extra": 0,
        "archived": 0,
        "duplicates": 0,
        "mismatched": 0,
    }
    files = _files(lake)
    victim = files[len(files) // 2]
    rows = pq.read_table(victim).num_rows
    saved = tmp_path / "saved.parquet"

    # a lost file: its offsets are missing
    shutil.move(victim, saved)
    assert (await anyio.to_thread.run_sync(check))["missing"] == rows
    shutil.move(saved, victim)

    # the same range landed twice under another name: duplicates
    copy = victim.with_name("0" + victim.name[1:].replace("-", "-9", 1))
    shutil.copy(victim, copy)
    assert (await anyio.to_thread.run_sync(check))["duplicates"] == rows
    copy.unlink()

    # one value changed: a mismatch
    table = pq.read_table(victim)
    values = table.column("value").to_pylist()
    values[0] = b"tampered"
    pq.write_table(table.set_column(5, "value", [values]), victim)
    assert (await anyio.to_thread.run_sync(check))["mismatched"] == 1

    # the exit status says it too (a separate Spark, as a user runs it)
    cmd = [sys.executable, "-m", "gengroup.lake", "verify", "--bootstrap", kafka.bootstrap]
    cmd += ["--topic", topic, "--lake", str(lake), "--json"]
    done = await anyio.run_process(cmd, cwd=ROOT, check=False)
    assert done.returncode == 1, done.stderr.decode()[-2000:]
    report = json.loads(done.stdout)
    assert report["ok"] is False and report["totals"]["mismatched"] == 1


async def test_records_deleted_from_the_topic_are_archived_not_extra(
    kafka: KafkaBroker, spark: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    topic, ends = await _land(kafka.bootstrap, lake)
    tp0, tp1, tp2 = (TopicPartition(topic, p) for p in range(3))
    # As retention would: all of partition 0, the first 100 records of partition 1.
    async with Admin(kafka.bootstrap) as admin:
        starts = await admin.delete_records({tp0: -1, tp1: 100})
        assert starts == {tp0: ends[tp0], tp1: 100}
        starts = await admin.list_offsets([tp0, tp1, tp2], "earliest")
    archived = ends[tp0] + 100

    def check() -> dict[str, Any]:
        report = verify(spark, str(lake), kafka.bootstrap, [topic], ends, starts=starts)
        return report.as_dict()

    report = await anyio.to_thread.run_sync(check)
    assert report["ok"] is True
    assert report["totals"] == {
        "topic_records": COUNT - archived,
        "lake_records": COUNT,
        "missing": 0,
        "extra": 0,
        "archived": archived,
        "duplicates": 0,
        "mismatched": 0,
    }
    by_partition = {p["partition"]: p["archived"] for p in report["partitions"]}
    assert by_partition == {0: ends[tp0], 1: 100, 2: 0}

    # A group's committed offset below the log start (as --group passes them; 0: it never
    # committed there): the range is empty, what the lake holds there is archived.
    def behind() -> dict[str, Any]:
        committed = {tp0: 0, tp1: ends[tp1], tp2: ends[tp2]}
        return verify(
            spark, str(lake), kafka.bootstrap, [topic], committed, starts=starts
        ).as_dict()

    late = await anyio.to_thread.run_sync(behind)
    assert late["ok"] is True
    assert (late["totals"]["archived"], late["totals"]["extra"]) == (archived, 0)
    assert late["totals"]["topic_records"] == COUNT - archived

    # An archived range landed twice is still a duplicate.
    first = sorted(lake.glob("topic=*/partition=1/*.parquet"))[0]
    copy = first.with_name("0" + first.name[1:].replace("-", "-9", 1))
    shutil.copy(first, copy)
    twice = await anyio.to_thread.run_sync(check)
    assert twice["ok"] is False
    assert twice["totals"]["duplicates"] == pq.read_table(first).num_rows
    assert twice["totals"]["archived"] == archived
    copy.unlink()

    # The command looks the log starts up itself and exits 0 (a separate Spark, as a
    # user runs it); the table has the archived column.
    cmd = [sys.executable, "-m", "gengroup.lake", "verify", "--bootstrap", kafka.bootstrap]
    cmd += ["--topic", topic, "--lake", str(lake)]
    done = await anyio.run_process([*cmd, "--json"], cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    totals = json.loads(done.stdout)["totals"]
    assert (totals["archived"], totals["extra"]) == (archived, 0)


async def test_analytics_counts_records_and_bytes_per_key_and_partition(
    kafka: KafkaBroker, spark: Any, tmp_path: Path
) -> None:
    lake, out = tmp_path / "lake", tmp_path / "out"
    _, ends = await _land(kafka.bootstrap, lake)
    summary = await anyio.to_thread.run_sync(analytics, spark, str(lake), str(out))
    records = [record(i) for i in range(COUNT)]
    assert summary["records"] == COUNT
    assert summary["bytes"] == sum(len(r.key or b"") + len(r.value or b"") for r in records)
    per_key = Counter(r.key for r in records)
    top = summary["top_keys"][0]
    assert top["records"] == max(per_key.values())
    assert {p["partition"]: p["records"] for p in summary["partitions"]} == {
        tp.partition: n for tp, n in ends.items() if n
    }
    delays = summary["landing_delay_s"]
    assert 0 <= delays["p50"] <= delays["p90"] <= delays["p99"] <= delays["max"]
    assert json.loads((out / "summary.json").read_text())["records"] == COUNT
    assert (out / "analytics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    landed_keys = pq.read_table(out / "per_key").to_pydict()
    assert dict(zip(landed_keys["key"], landed_keys["records"], strict=True)) == per_key
