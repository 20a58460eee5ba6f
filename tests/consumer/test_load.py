"""Load: 50 members of one group over 400 partitions converge to one generation in which
every partition is owned exactly once; the time to converge and the memory per member
are printed (numbers to watch, not asserted). On the embedded broker and real Kafka.

The process variant runs a few members in processes of their own, so that each one's
resident memory is its own (and is printed next to a bare interpreter's with gengroup
imported)."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gengroup import ConsumerGroup, Producer
from gengroup.broker import FakeCluster
from gengroup.producer import ProducerRecord
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from .helpers import Ledger, Lines, all_partitions, covers_exactly_once, create_topic

MEMBERS = 50
PARTITIONS = 400
SETTINGS: dict[str, Any] = {
    "session_timeout": 30.0,
    "rebalance_timeout": 60.0,
    "heartbeat_interval": 1.0,
    "partition_watch_interval": 5.0,
    "fetch_max_wait": 0.5,
}


def _rss_mb() -> float:
    """This process's current resident memory, in MB (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1e6


async def _topic(bootstrap: str) -> str:
    """A new topic of :data:`PARTITIONS` partitions holding one record each (every worker
    fetches)."""
    topic = make_unique_name("load")
    await create_topic(bootstrap, topic, PARTITIONS)
    async with Producer(bootstrap) as producer:
        await producer.send_many(
            topic, [ProducerRecord(value=b"x", partition=p) for p in range(PARTITIONS)]
        )
    return topic


async def _converge(bootstrap: str, label: str) -> None:
    topic, group_id = await _topic(bootstrap), make_unique_name("g")
    rss_before = _rss_mb()
    ledger = Ledger()
    wanted = all_partitions(topic, PARTITIONS)
    started = time.monotonic()

    def converged() -> bool:
        current = ledger.current()
        return (
            len(current) == MEMBERS
            and len({gen.id for gen in current.values()}) == 1
            and covers_exactly_once(current.values(), wanted)
        )

    async with anyio.create_task_group() as tg:
        for i in range(MEMBERS):

            async def member(name: str = f"m{i}") -> None:
                async with ConsumerGroup(
                    group_id, [topic], bootstrap, client_id=name, **SETTINGS
                ) as group:
                    await ledger.member(name, group)

            tg.start_soon(member)
        await ledger.wait_for(converged, "50 members in one generation", timeout=240)
        took = time.monotonic() - started
        gen_id = next(iter(ledger.current().values())).id
        assert not ledger.overlaps, ledger.overlaps[:5]
        print(
            f"\n{label}: {MEMBERS} members x {PARTITIONS} partitions converged to generation "
            f"{gen_id} in {took:.1f} s; the test process (all {MEMBERS} members, their "
            f"buffers and the embedded broker if any) holds {_rss_mb():.0f} MB, "
            f"{_rss_mb() - rss_before:+.0f} MB since the members started"
        )
        tg.cancel_scope.cancel()


@pytest.fixture(params=["embedded broker", pytest.param("Apache Kafka", marks=pytest.mark.kafka)])
async def broker(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, str]]:
    """The broker under test and its name: a fresh embedded cluster (a 3 s initial
    rebalance delay), or the session's Apache Kafka."""
    if request.param == "Apache Kafka":
        kafka: KafkaBroker = request.getfixturevalue("kafka")
        yield kafka.bootstrap, request.param
        return
    async with FakeCluster(initial_rebalance_delay_ms=3000) as cluster:
        yield cluster.bootstrap, request.param


async def test_fifty_members_converge(broker: tuple[str, str]) -> None:
    await _converge(*broker)


PROCESSES = 4
ROOT = Path(__file__).resolve().parents[2]


def _process_rss_mb(pid: int) -> float:
    """Process ``pid``'s resident memory (VmRSS), in MB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / 1e6
    raise AssertionError(f"no VmRSS for process {pid}")


async def _converge_in_processes(bootstrap: str, label: str) -> None:
    topic, group_id = await _topic(bootstrap), make_unique_name("g")
    member = [sys.executable, "-m", "tests.consumer.member_process", bootstrap, group_id, topic]
    bare = [sys.executable, "-c", "import gengroup, trio; print('ready', flush=True); input()"]
    procs = [
        subprocess.Popen([*member, "30", "batches"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for _ in range(PROCESSES)
    ]
    baseline = subprocess.Popen(
        bare, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    lines = [Lines(p) for p in procs]
    started = time.monotonic()
    try:
        await Lines(baseline).wait_for("ready")

        def latest(out: Lines) -> tuple[int, list[int]] | None:
            gens = [line.split() for _, line in out.seen if line.startswith("generation ")]
            if not gens:
                return None
            parts = gens[-1][2].split(",") if len(gens[-1]) > 2 else []
            return int(gens[-1][1]), [int(p) for p in parts]

        def converged() -> bool:
            now = [latest(out) for out in lines]
            if any(n is None for n in now):
                return False
            owned = [p for n in now if n is not None for p in n[1]]
            ids = {n[0] for n in now if n is not None}
            return len(ids) == 1 and sorted(owned) == list(range(PARTITIONS))

        def fetched() -> bool:  # every partition's record was handed to its worker
            seen = {
                line.split()[1]
                for out in lines
                for _, line in out.seen
                if line.startswith("batch ")
            }
            return len(seen) == PARTITIONS

        await Ledger().wait_for(converged, f"{PROCESSES} member processes in one generation", 240)
        took = time.monotonic() - started
        await Ledger().wait_for(fetched, "every partition fetched", 120)
        assert all(p.poll() is None for p in procs), [p.poll() for p in procs]
        rss = [_process_rss_mb(p.pid) for p in procs]
        base = _process_rss_mb(baseline.pid)
        print(
            f"\n{label}: {PROCESSES} member processes x {PARTITIONS // PROCESSES} partitions "
            f"each converged in {took:.1f} s; RSS per member "
            f"{', '.join(f'{r:.0f}' for r in rss)} MB (a bare interpreter with gengroup "
            f"imported: {base:.0f} MB, so {sum(rss) / len(rss) - base:+.0f} MB per member)"
        )
    finally:
        for proc in [*procs, baseline]:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if baseline.stdin is not None:
            baseline.stdin.close()


async def test_member_processes_report_their_own_rss(broker: tuple[str, str]) -> None:
    await _converge_in_processes(*broker)
