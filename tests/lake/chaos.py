"""Exactly-once landing under a seeded schedule of faults, with members in their own processes.

Three sink processes (trio and asyncio) land a topic while a producer keeps
writing; a schedule drawn from a seed SIGKILLs members at random instants,
freezes them (SIGSTOP) past the session timeout and wakes them up as zombies
(SIGCONT), and stops them gracefully (SIGTERM), starting replacements. Once
the group has caught up, the lake must hold every offset of the topic exactly
once with the topic's bytes. Runs on the embedded broker and on real Kafka,
where Spark's own Kafka reader checks the lake too.

The short variant runs in the test suite (``test_chaos.py``); the long one is
``scripts/lake-chaos --seed S --minutes M [--bootstrap HOST:PORT]``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from gengroup import Admin, TopicPartition
from gengroup.broker import FakeCluster
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
    produced: int = 0
    started: dict[int, float] = field(default_factory=dict)

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
        self.started[proc.pid] = time.monotonic()
        self.events.append(f"start member-{n}")
        return proc

    def live(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None and p.pid not in self.frozen]

    def settled(self) -> list[subprocess.Popen[bytes]]:
        """Live members started at least 3 s ago (past start-up, likely in the group)."""
        now = time.monotonic()
        return [p for p in self.live() if now - self.started[p.pid] >= 3.0]

    def name(self, proc: subprocess.Popen[bytes]) -> str:
        return f"member-{self.procs.index(proc)}"

    def log(self, i: int) -> str:
        """What member ``i`` wrote so far."""
        return (self.logs / f"member-{i}.log").read_text(errors="replace")

    def tails(self) -> str:
        out = []
        for i in range(len(self.procs)):
            text = self.log(i)
            out.append(f"--- member-{i} (exit {self.procs[i].poll()}):\n{text[-3000:]}")
        return "\n".join(out)


async def run_chaos(bootstrap: str, lake: Path, logs: Path, seed: int, seconds: float) -> Members:
    """The seeded schedule for ``seconds``; returns once the group caught up and every member
    stopped."""
    topic, group = make_unique_name("chaos"), make_unique_name("lake")
    async with Admin(bootstrap) as admin:
        await admin.create_topics({topic: PARTITIONS})
    rng = random.Random(seed)
    members = Members(bootstrap, group, topic, lake, logs)
    chaos_over = anyio.Event()
    deadline = anyio.current_time() + seconds
    for _ in range(3):
        members.start()

    async def producer() -> None:
        while not chaos_over.is_set():
            await produce(bootstrap, topic, range(members.produced, members.produced + 200))
            members.produced += 200
            await anyio.sleep(0.2)

    async def thaw(proc: subprocess.Popen[bytes]) -> None:
        await anyio.sleep(SESSION + rng.uniform(0.5, 2.0))
        proc.send_signal(signal.SIGCONT)
        members.frozen.discard(proc.pid)
        members.events.append(f"SIGCONT {members.name(proc)} (a zombie wakes)")

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(producer)
            while anyio.current_time() < deadline:
                await anyio.sleep(rng.uniform(0.5, 2.0))
                live, settled = members.live(), members.settled()
                if not settled:
                    continue
                victim = rng.choice(settled)
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
            chaos_over.set()
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


async def check(members: Members, seed: int) -> dict[TopicPartition, int]:
    """The lake holds every offset once with the topic's bytes; graceful members exited 0.

    Prints N, files written, staged files discarded and generations seen.
    """
    context = f"seed {seed}; schedule: {'; '.join(members.events)}"
    ends = await end_offsets(members.bootstrap, members.topic, PARTITIONS)
    lake = read_lake(members.lake, members.topic)
    try:
        lake.check_exactly_once(ends)
        lake.check_values()
        assert sum(ends.values()) == members.produced, (sum(ends.values()), members.produced)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{context}\n{members.tails()}") from None
    # A member SIGTERMed before it installed its handler (still importing) dies of the signal,
    # as it would of SIGKILL: only members that got going must have exited cleanly.
    graceful = [
        p.returncode
        for i, p in enumerate(members.procs)
        if p.returncode != -signal.SIGKILL
        and not (p.returncode == -signal.SIGTERM and not members.log(i).strip())
    ]
    assert all(code == 0 for code in graceful), f"{graceful}\n{context}\n{members.tails()}"
    logs = members.tails()
    discarded = sum(int(n) for n in re.findall(r"deleted (\d+) staged file", logs))
    discarded += logs.count("not landed: the commit was refused")
    generations = len(set(re.findall(r"generation (\d+) formed", logs)))
    print(
        f"chaos seed {seed}: N={members.produced} records, {lake.files} files published, "
        f"{discarded} staged files discarded, {generations} generations, "
        f"{len(members.procs)} member processes; {'; '.join(members.events)}"
    )
    return ends


async def main(bootstrap: str | None, seed: int, minutes: float, workdir: Path) -> None:
    async with AsyncExitStack() as stack:
        if bootstrap is None:
            cluster = await stack.enter_async_context(FakeCluster(initial_rebalance_delay_ms=0))
            bootstrap = cluster.bootstrap
        members = await run_chaos(bootstrap, workdir / "lake", workdir, seed, minutes * 60)
        await check(members, seed)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Lake sink chaos: " + __doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="a Kafka cluster (default: an embedded broker)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--workdir", help="lake and member logs (default: a new temporary folder)")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gengroup-chaos-"))
    print(f"lake and member logs in {workdir}")
    anyio.run(main, args.bootstrap, args.seed, args.minutes, workdir)
