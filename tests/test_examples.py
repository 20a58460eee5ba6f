"""The examples run end to end on the embedded broker."""

from __future__ import annotations

import json
import pathlib
import runpy
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
import trio
import trio.testing
from anyio.streams.buffered import BufferedByteReceiveStream

from gengroup import Admin, Cluster, ConsumerGroup, Producer, TopicPartition
from gengroup.admin import NewTopic
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay
from gengroup.io.fetch import read_partition
from gengroup.producer import ProducerRecord
from gengroup.protocol.versions import ApiKey
from gengroup.testing.kafka import KafkaBroker

from .embedded import append_commit_marker

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def example(name: str) -> dict[str, Any]:
    """The namespace of ``examples/NAME``, loaded as ``python examples/NAME`` would.

    As a script, an example finds its scaffold ``_common.py`` beside it.
    """
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return runpy.run_path(str(EXAMPLES / name))


async def test_quickstart_consumes_everything() -> None:
    ns = example("quickstart.py")
    assert await ns["main"](None, 300) == 300


async def test_worker_pool_commits_every_processed_record_and_nothing_more() -> None:
    ns = example("worker_pool.py")
    assert await ns["main"](None, 4, 1500) == 1500


def test_contiguous_tracker_never_skips_a_record_not_finished() -> None:
    ns = example("worker_pool.py")
    tracker = ns["ContiguousTracker"]()
    batch = SimpleNamespace(
        records=[SimpleNamespace(offset=o) for o in (10, 11, 12)], next_offset=14
    )
    jobs = [(start, end) for _, start, end in tracker.hand_out(batch)]
    assert jobs == [(10, 11), (11, 12), (12, 14)]  # 13 holds no record
    assert tracker.finish(12, 14) == 10
    assert tracker.finish(11, 12) == 10
    assert tracker.finish(10, 11) == 14
    # The next batch starts past an offset without a record (one whole Fetch answer of them).
    batch = SimpleNamespace(records=[SimpleNamespace(offset=16)], next_offset=17)
    assert [(s, e) for _, s, e in tracker.hand_out(batch)] == [(14, 17)]
    assert tracker.finish(14, 17) == 17


async def test_worker_pool_commits_past_offsets_that_hold_no_record() -> None:
    """Transaction markers (a transactional producer writes one at each commit): the
    commit passes them, at the start of the partition and between records."""
    ns = example("worker_pool.py")
    from _common import consuming, until

    tp = TopicPartition("events", 0)
    async with FakeCluster(topics={"events": 1}, initial_rebalance_delay_ms=0) as cluster:
        append_commit_marker(cluster, tp)  # offset 0
        cluster.produce("events", [(b"k%d" % i, b"%d" % i) for i in range(5)])  # 1-5
        append_commit_marker(cluster, tp)  # 6
        append_commit_marker(cluster, tp)  # 7
        cluster.produce("events", [(b"k%d" % i, b"%d" % i) for i in range(5)])  # 8-12
        processed: list[int] = []
        async with ConsumerGroup("pool-gaps", ["events"], cluster.bootstrap) as group:
            async with consuming(group, ns["partition_worker"], 3, processed):
                await until(lambda: len(processed) == 10)
        assert sorted(processed) == [1, 2, 3, 4, 5, 8, 9, 10, 11, 12]
        assert cluster.committed_offsets("pool-gaps")[tp] == 13


# ---------------------------------------------------------------------------- the CLI examples

CLI_EXAMPLES = [
    "quickstart.py",
    "worker_pool.py",
    "manual_commits.py",
    "transform.py",
    "graceful_shutdown.py",
    "running_totals.py",
    "sqlite_batches.py",
    "testing_your_service.py",
]


@pytest.mark.parametrize("name", CLI_EXAMPLES)
def test_each_example_is_a_command_with_help(name: str) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ") and "--bootstrap" in done.stdout


async def test_manual_commits_commit_every_batch_as_it_is_done() -> None:
    ns = example("manual_commits.py")
    processed, committed, commits = await ns["main"](None, 600)
    assert processed == 600
    # Read before the member stopped, with periodic commits off: gen.commit() did this.
    assert committed == 600
    assert commits >= 2  # at least one batch per partition


async def test_transform_sends_one_label_per_order() -> None:
    ns = example("transform.py")
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        assert await ns["main"](cluster.bootstrap, 300) == 300
        labels: list[dict[str, object]] = []
        keys: dict[object, bytes | None] = {}
        async with Cluster(cluster.bootstrap) as client:
            for p in range(3):
                for r in await read_partition(
                    client, TopicPartition("shipping-labels", p), 0, None
                ):
                    label = json.loads(r.value or b"")
                    labels.append(label)
                    keys[label["order"]] = r.key
    assert sorted(int(str(label["order"])) for label in labels) == list(range(300))
    cities = ["LYON", "OSLO", "KYOTO", "LIMA"]
    assert all(label["to"] == cities[int(str(label["order"])) % 4] for label in labels)
    assert all(keys[i] == f"customer-{i % 9}".encode() for i in range(300))


async def test_the_examples_run_one_after_another_on_one_cluster() -> None:
    """As a user tries them on one cluster: no example reads another's topic or group."""
    quickstart, transform = example("quickstart.py"), example("transform.py")
    manual, pool = example("manual_commits.py"), example("worker_pool.py")
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        for run in (1, 2):  # a second run finds the first one's topics and commits
            assert await quickstart["main"](cluster.bootstrap, 200) == 200
            assert await transform["main"](cluster.bootstrap, 200) == 200
            processed, committed, _ = await manual["main"](cluster.bootstrap, 200)
            assert (processed, committed) == (200, 200 * run)
            assert await pool["main"](cluster.bootstrap, 2, 300) == 300 * run


@pytest.mark.parametrize(
    ("backend", "sig"),
    [("trio", signal.SIGTERM), ("asyncio", signal.SIGTERM), ("trio", signal.SIGINT)],
)
async def test_graceful_shutdown_commits_everything_on_a_signal(
    backend: str, sig: signal.Signals
) -> None:
    group_id = f"graceful-{backend}-{sig.name}"
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin, Producer(admin.cluster) as producer:
            await admin.create_topics({"jobs": 2})
            await producer.send_many("jobs", [b"job %d" % i for i in range(50)])
            cmd = [
                sys.executable, str(EXAMPLES / "graceful_shutdown.py"),
                "--bootstrap", cluster.bootstrap, "--backend", backend, "--group", group_id,
            ]  # fmt: skip
            async with await anyio.open_process(cmd) as process:
                assert process.stdout is not None and process.stderr is not None
                lines = BufferedByteReceiveStream(process.stdout)
                with anyio.fail_after(60):
                    while await lines.receive_until(b"\n", 1000) != b"processed 50":
                        pass
                # Nothing is committed yet: periodic commits are off.
                assert await admin.fetch_offsets(group_id) == {}
                process.send_signal(sig)
                with anyio.fail_after(60):
                    assert await process.wait() == 0
                err = b"".join([chunk async for chunk in process.stderr]).decode()
            assert f"{sig.name}: closing the group" in err and "Traceback" not in err, err
            committed = await admin.fetch_offsets(group_id)
            assert sum(committed.values()) == 50
            # The member left the group on its way out.
            assert (await admin.describe_groups([group_id]))[group_id].state == "Empty"


async def test_running_totals_are_rebuilt_from_the_state_topic() -> None:
    ns = example("running_totals.py")
    expected: dict[str, int] = {}
    for i in range(100):
        expected[f"account-{i % 5}"] = expected.get(f"account-{i % 5}", 0) + i % 7 + 1
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        assert await ns["main"](cluster.bootstrap, 100) == expected
        # A second run is a new member: it knows the totals only from the state topic.
        assert await ns["main"](cluster.bootstrap, 100) == {k: 2 * v for k, v in expected.items()}


async def test_running_totals_survive_a_handover_during_a_slow_state_write(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The first owner is closing while the broker is slow to acknowledge its state
    write: the next owner rebuilds only after that write landed, and counts every
    deposit once; the stored total never goes back."""
    ns = example("running_totals.py")
    keep_totals, consuming, until = ns["keep_totals"], ns["consuming"], ns["until"]
    state = TopicPartition("deposit-totals", 0)
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            await admin.create_topics(
                [
                    NewTopic("deposits", 1),
                    NewTopic("deposit-totals", 1, configs={"cleanup.policy": "compact"}),
                ]
            )
            slow = False
            cluster.control(
                ApiKey.PRODUCE,
                lambda req: Delay(4.0) if slow and req.client_id == "first" else None,
            )
            async with (
                Producer(admin.cluster, client_id="feeder") as feeder,
                Producer(cluster.bootstrap, client_id="first") as first,
                Producer(cluster.bootstrap, client_id="second") as second,
            ):

                async def deposit(n: int) -> None:
                    await feeder.send_many("deposits", [ProducerRecord(b"1", key=b"acct")] * n)

                await deposit(5)
                done_first: list[int] = []
                async with ConsumerGroup("rt", ["deposits"], cluster.bootstrap) as group:
                    async with consuming(group, keep_totals, first, done_first):
                        await until(lambda: sum(done_first) >= 5)
                        slow = True  # the broker is slow to acknowledge the next total
                        await deposit(5)
                        await anyio.sleep(0.5)  # the total 10 is being written
                    # Closing: the generation ends while the write is under way.
                done_second: list[int] = []
                async with ConsumerGroup("rt", ["deposits"], cluster.bootstrap) as group:
                    async with consuming(group, keep_totals, second, done_second):
                        await deposit(5)
                        await until(lambda: sum(done_second) >= 5)
                        await anyio.sleep(10)  # past any write still on its way
                assert sum(done_first) + sum(done_second) == 15  # each deposit once
                totals = [int(r.value) for r in cluster.records(state.topic, state.partition)]
                assert totals == sorted(totals) and totals[-1] == 15
                assert await ns["rebuild"](admin.cluster, 0) == {"acct": 15}


async def test_sqlite_batches_store_every_row_exactly_once_across_a_restart(
    tmp_path: pathlib.Path,
) -> None:
    ns = example("sqlite_batches.py")
    db_path = str(tmp_path / "rows.sqlite")
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        assert await ns["main"](cluster.bootstrap, db_path, 500, 200) == 200
        assert await ns["main"](cluster.bootstrap, db_path, 0, 500) == 500
        async with Admin(cluster.bootstrap) as admin:
            committed = await admin.fetch_offsets("sqlite-sink")
    with sqlite3.connect(db_path) as db:
        rows = db.execute("SELECT partition, kafka_offset, value FROM readings").fetchall()
    assert len(rows) == 500
    assert sorted(int(value) for _, _, value in rows) == list(range(500))
    assert len({(p, o) for p, o, _ in rows}) == 500
    # The committed offsets are exactly past the rows of each partition.
    for tp, offset in committed.items():
        assert offset == 1 + max(o for p, o, _ in rows if p == tp.partition)


async def test_testing_your_service_runs_on_the_embedded_broker() -> None:
    ns = example("testing_your_service.py")
    alerts = await ns["main"](None, [120, 5000, 80, 1001, 1000])
    assert alerts == [{"account": "acct-1", "amount": 5000}, {"account": "acct-3", "amount": 1001}]


async def test_the_example_test_file_passes_on_the_embedded_broker() -> None:
    ns = example("test_testing_your_service.py")
    await ns["test_flags_only_payments_above_the_limit_on_the_embedded_broker"]()


@pytest.mark.kafka
async def test_the_example_test_file_passes_on_real_kafka(
    kafka: KafkaBroker, unique_name: Callable[[str], str]
) -> None:
    ns = example("test_testing_your_service.py")
    await ns["test_flags_on_real_kafka"](kafka, unique_name)
