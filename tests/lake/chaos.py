"""Exactly-once landing under a seeded schedule of faults, with members in their own processes.

Three sink processes (trio and asyncio) land a topic while a producer keeps
writing; a schedule drawn from a seed SIGKILLs members at random instants,
freezes them (SIGSTOP) past the session timeout and wakes them up as zombies
(SIGCONT), and stops them gracefully (SIGTERM), starting replacements. Once
the group has caught up, the lake must hold every offset of the topic exactly
once with the topic's bytes. Runs on the embedded broker and on real Kafka,
where Spark's own Kafka reader checks the lake too.

The fault schedule is the shared engine's (``tests/chaos/engine.py``).
The short variant runs in the test suite (``test_chaos.py``); the long one is
``scripts/lake-chaos --seed S --minutes M [--bootstrap HOST:PORT]``.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import anyio

from gengroup import Admin, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.testing.pytest_plugin import make_unique_name

from ..chaos.engine import Members, member_schedule, stop_all
from .helpers import end_offsets, produce, read_lake

SESSION = 6.0
PARTITIONS = 6
_FORMED = re.compile(r"generation (\d+) \(#\d+\) formed")


@dataclass(kw_only=True)
class LakeMembers(Members):
    """Sink processes of one group (trio and asyncio in turn) landing ``topic`` in ``lake``."""

    bootstrap: str
    group: str
    topic: str
    lake: Path
    produced: int = 0

    def env(self, n: int) -> dict[str, str]:
        return {"GENGROUP_BACKEND": "asyncio" if n % 2 else "trio"}

    def command(self, n: int) -> list[str]:
        cmd = [sys.executable, "-m", "gengroup.lake", "sink", "--bootstrap", self.bootstrap]
        cmd += ["--group", self.group, "--topic", self.topic, "--lake", str(self.lake)]
        cmd += ["--file-max-bytes", "3000", "--file-max-age", "0.3"]
        return [*cmd, "--session-timeout", str(SESSION), "--client-id", f"member-{n}"]


async def run_chaos(
    bootstrap: str, lake: Path, logs: Path, seed: int, seconds: float
) -> LakeMembers:
    """The seeded schedule for ``seconds``; returns once the group caught up and every member
    stopped."""
    topic, group = make_unique_name("chaos"), make_unique_name("lake")
    async with Admin(bootstrap) as admin:
        await admin.create_topics({topic: PARTITIONS})
    rng = random.Random(seed)
    members = LakeMembers(logs, bootstrap=bootstrap, group=group, topic=topic, lake=lake)
    chaos_over = anyio.Event()
    for _ in range(3):
        members.start()

    async def producer() -> None:
        while not chaos_over.is_set():
            await produce(bootstrap, topic, range(members.produced, members.produced + 200))
            members.produced += 200
            await anyio.sleep(0.2)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(producer)
            await member_schedule(members, rng, seconds, SESSION)
            chaos_over.set()
        await _caught_up(bootstrap, group, topic)
    finally:
        await stop_all(members)
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


async def check(members: LakeMembers, seed: int) -> dict[TopicPartition, int]:
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
    graceful = members.graceful_exit_codes()
    assert all(code == 0 for code in graceful), f"{graceful}\n{context}\n{members.tails()}"
    logs = members.tails()
    discarded = sum(int(n) for n in re.findall(r"deleted (\d+) staged file", logs))
    discarded += logs.count("not landed: the commit was refused")
    generations = len(set(_FORMED.findall(logs)))
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
