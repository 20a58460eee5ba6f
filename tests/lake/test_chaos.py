"""Exactly-once landing under a seeded schedule of faults, with members in their own processes.

Three sink processes (trio and asyncio) land a topic while a producer keeps
writing; a schedule drawn from a seed SIGKILLs members at random instants,
freezes them (SIGSTOP) past the session timeout and wakes them up as zombies
(SIGCONT), and stops them gracefully (SIGTERM), starting replacements. Once
the group has caught up, the lake must hold every offset of the topic exactly
once with the topic's bytes. Runs on the embedded broker and on real Kafka,
where Spark's own Kafka reader checks the lake too. ``scripts/lake-chaos`` runs
the long variant with ``--seed`` and ``--minutes``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from gengroup import Admin
from gengroup.broker import FakeCluster
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from .helpers import end_offsets, produce, read_lake

SESSION = 6.0
PARTITIONS = 6
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Members:
    """Sink processes of one group, started and hurt on command."""

    bootstrap: str
    group: str
    topic: str
    lake: Path
    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    frozen: set[int] = field(default_factory=set)
    events: list[str] = field(default_factory=list)

    def start(self) -> subprocess.Popen[bytes]:
        n = len(self.procs)
        env = {**os.environ, "GENGROUP_BACKEND": "asyncio" if n % 2 else "trio"}
        log = open(self.logs / f"member-{n}.log", "wb")  # noqa: SIM115 -- closed in stop_all
        cmd = [sys.executable, "-m", "gengroup.lake", "sink", "--bootstrap", self.bootstrap]
        cmd += ["--group", self.group, "--topic", self.topic, "--lake", str(self.lake)]
        cmd += ["--file-max-bytes", "3000", "--file-max-age", "0.3"]
        cmd += ["--session-timeout", str(SESSION), "--client-id", f"member-{n}"]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log)
        log.close()
        self.procs.append(proc)
        self.events.append(f"start member-{n}")
        return proc

    def live(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None and p.pid not in self.frozen]

    def name(self, proc: subprocess.Popen[bytes]) -> str:
        return f"member-{self.procs.index(proc)}"

    def tails(self) -> str:
        out = []
        for i in range(len(self.procs)):
            text = (self.logs / f"member-{i}.log").read_text(errors="replace")
            out.append(f"--- member-{i} (exit {self.procs[i].poll()}):\n{text[-3000:]}")
        return "\n".join(out)


async def run_chaos(bootstrap: str, lake: Path, logs: Path, seed: int, steps: int) -> Members:
    """The seeded schedule; returns once the group caught up and every member stopped."""
    topic, group = make_unique_name("chaos"), make_unique_name("lake")
    async with Admin(bootstrap) as admin:
        await admin.create_topics({topic: PARTITIONS})
    rng = random.Random(seed)
    members = Members(bootstrap, group, topic, lake, logs)
    for _ in range(3):
        members.start()

    async def producer() -> None:
        for n in range(0, 6000, 200):
            await produce(bootstrap, topic, range(n, n + 200))
            await anyio.sleep(0.2)

    async def thaw(proc: subprocess.Popen[bytes]) -> None:
        await anyio.sleep(SESSION + rng.uniform(0.5, 2.0))
        proc.send_signal(signal.SIGCONT)
        members.frozen.discard(proc.pid)
        members.events.append(f"SIGCONT {members.name(proc)} (a zombie wakes)")

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(producer)
            for _ in range(steps):
                await anyio.sleep(rng.uniform(0.3, 1.5))
                live = members.live()
                victim = rng.choice(live)
                action = rng.choice(["kill", "freeze", "leave"] if len(live) > 1 else ["kill"])
                members.events.append(f"{action} {members.name(victim)}")
                if action == "kill":
                    victim.send_signal(signal.SIGKILL)
                    members.start()
                elif action == "freeze":
                    victim.send_signal(signal.SIGSTOP)
                    members.frozen.add(victim.pid)
                    tg.start_soon(thaw, victim)
                else:
                    victim.send_signal(signal.SIGTERM)
                    members.start()
        await _caught_up(bootstrap, group, topic)
    finally:
        for proc in members.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        with anyio.move_on_after(60):
            while any(p.poll() is None for p in members.procs):
                await anyio.sleep(0.1)
        for proc in members.procs:
            if proc.poll() is None:
                proc.kill()
    return members


async def _caught_up(bootstrap: str, group: str, topic: str) -> None:
    ends = await end_offsets(bootstrap, topic, PARTITIONS)
    async with Admin(bootstrap) as admin:
        with anyio.fail_after(120):  # a hang guard, not a timing assertion
            while True:
                committed = await admin.fetch_offsets(group)
                if all(committed.get(tp, 0) >= end for tp, end in ends.items() if end):
                    return
                await anyio.sleep(0.2)


async def _check(members: Members, seed: int) -> dict[Any, int]:
    context = f"seed {seed}; schedule: {'; '.join(members.events)}"
    ends = await end_offsets(members.bootstrap, members.topic, PARTITIONS)
    lake = read_lake(members.lake, members.topic)
    try:
        lake.check_exactly_once(ends)
        lake.check_values()
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{context}\n{members.tails()}") from None
    graceful = [p.returncode for p in members.procs if p.returncode not in (-signal.SIGKILL,)]
    assert all(code == 0 for code in graceful), f"{graceful}\n{context}\n{members.tails()}"
    assert sum(ends.values()) == 6000
    return ends


@pytest.mark.parametrize("seed", [7])
async def test_chaos_on_the_embedded_broker_lands_every_offset_once(
    seed: int, tmp_path: Path
) -> None:
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        members = await run_chaos(cluster.bootstrap, tmp_path / "lake", tmp_path, seed, steps=10)
        await _check(members, seed)


@pytest.mark.kafka
@pytest.mark.parametrize("seed", [11])
async def test_chaos_on_kafka_lands_every_offset_once_as_spark_reads_it(
    seed: int, tmp_path: Path, kafka: KafkaBroker, spark: Any
) -> None:
    from gengroup.lake.spark import verify

    members = await run_chaos(kafka.bootstrap, tmp_path / "lake", tmp_path, seed, steps=10)
    ends = await _check(members, seed)
    report = await anyio.to_thread.run_sync(
        verify, spark, str(members.lake), kafka.bootstrap, [members.topic], ends
    )
    assert report.ok, report.text()
    assert sum(p.topic_records for p in report.partitions) == 6000
