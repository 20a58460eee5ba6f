"""Consumer-group chaos: member processes and brokers hurt on a seeded schedule.

Theory of operation. A producer writes records ``id-0``, ``id-1``, ... with
``acks=all`` and keeps, for each acknowledged id, the partition and offset the
broker gave it. Member processes (``tests/chaos/member.py``, trio and asyncio
in turn) consume the topic in one group and print every record they process
(before marking it), every commit the coordinator accepted and how each
generation ended. The engine's schedule (``engine.member_schedule``) SIGKILLs
members, freezes them past the session timeout and wakes them (fenced
zombies), and SIGTERMs them (graceful leave). On a :class:`KafkaCluster`, a
second schedule SIGKILLs or stops one broker at a time and restarts it on its
ports and data, then waits until every replica is back in sync.

Once the faults stop, the group must catch up (committed offsets equal to the
end offsets, read with Admin). Then the members' output is checked:

* nothing lost: every offset below each partition's end (so every acknowledged
  id, at the offset it was acknowledged at) was processed;
* a record processed more than once is attributed to the fault that left it
  uncommitted: its earlier owner was SIGKILLed (no end of generation printed),
  frozen and fenced, or its generation ended with a final commit that did not
  cover it (a commit refused or failed, e.g. while a broker was down). The
  uncommitted range ``[committed, processed)`` of that owner contains it. A
  duplicate at or above an offset its earlier owner had committed, or one no
  fault explains, fails the run;
* the committed offsets end equal to the end offsets.

It prints one summary line: seed, N, acked, processed, lost, duplicates by
cause, member and broker events, generations. The short variant runs in the
suite (``test_consumer_chaos.py``), the long one is
``scripts/chaos --seed S --minutes M [--embedded]``.
"""

from __future__ import annotations

import argparse
import itertools
import random
import re
import sys
import tempfile
from collections import Counter, defaultdict
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from gengroup import Admin, Producer, TopicPartition
from gengroup._errors import GengroupError
from gengroup.admin import NewTopic
from gengroup.broker import FakeCluster
from gengroup.testing.kafka import KafkaCluster
from gengroup.testing.pytest_plugin import make_unique_name

from .engine import Fault, Members, member_schedule, stop_all

SESSION = 6.0  # tests/chaos/member.py's session timeout
PARTITIONS = 6
HANG_GUARD = 300.0
#: Seconds between member faults: time for the group to form a generation between them.
MEMBER_GAP = (3.0, 8.0)


@dataclass(kw_only=True)
class ConsumerMembers(Members):
    """``tests.chaos.member`` processes of one group, trio and asyncio in turn."""

    bootstrap: str
    group: str
    topic: str

    def command(self, n: int) -> list[str]:
        backend = "asyncio" if n % 2 else "trio"
        args = [self.bootstrap, self.group, self.topic, f"member-{n}", backend]
        return [sys.executable, "-m", "tests.chaos.member", *args]

    def ready(self, n: int) -> bool:
        """Member ``n`` was handed a generation (faults hit members of the group)."""
        return any(line.startswith("g ") for line in self.log(n).splitlines())


@dataclass
class Traffic:
    """Writes ``id-N`` records with ``acks=all`` until stopped; keeps what was acknowledged."""

    topic: str
    written: int = 0
    acked: dict[int, tuple[int, int]] = field(default_factory=dict)
    failed: int = 0
    stopped: anyio.Event = field(default_factory=anyio.Event)

    async def run(self, bootstrap: str) -> None:
        async with Producer(bootstrap, acks="all", linger=0.0, delivery_timeout=60.0) as producer:
            while not self.stopped.is_set():
                i = self.written
                self.written += 1
                try:
                    md = await producer.send(self.topic, f"id-{i}".encode(), key=f"k{i}".encode())
                except GengroupError:
                    self.failed += 1  # not acknowledged: may or may not be in the topic
                else:
                    self.acked[i] = (md.partition, md.offset)
                await anyio.sleep(0.01)


async def broker_schedule(
    cluster: KafkaCluster, rng: random.Random, seconds: float, faults: list[Fault]
) -> None:
    """Take one broker down at a time, SIGKILL and graceful stop in turn (the first drawn),
    restart it on its ports and data, wait for every replica to be in sync; until
    ``seconds`` have passed."""
    deadline = anyio.current_time() + seconds
    actions = ["kill", "stop"]
    rng.shuffle(actions)
    for action in itertools.cycle(actions):
        await anyio.sleep(rng.uniform(4.0, 10.0))
        if anyio.current_time() >= deadline:
            return
        node = rng.choice(cluster.running)
        faults.append(Fault.now(f"{action} broker", f"node-{node}"))
        down = cluster.kill if action == "kill" else cluster.stop
        await anyio.to_thread.run_sync(down, node)
        await anyio.sleep(rng.uniform(2.0, 6.0))
        faults.append(Fault.now("restart broker", f"node-{node}"))
        await anyio.to_thread.run_sync(cluster.restart, node)
        await anyio.to_thread.run_sync(cluster.wait_healthy)


@dataclass
class Gen:
    """One generation of one member, as its output tells."""

    member: str
    id: int
    started: float
    starts: dict[int, int]
    commits: dict[int, int] = field(default_factory=dict)
    #: (time, partition, offset) of every accepted commit printed.
    commit_log: list[tuple[float, int, int]] = field(default_factory=list)
    processed_to: dict[int, int] = field(default_factory=dict)
    ended: float | None = None
    final: dict[int, int] | None = None
    reason: str = ""


@dataclass(frozen=True)
class Processing:
    at: float
    gen: Gen
    partition: int
    offset: int
    id: int


_LINE = re.compile(r"[gbce] \d+\.\d+ \d+ ")


def _offsets(text: str) -> dict[int, int]:
    return (
        {} if text == "-" else {int(p): int(o) for p, o in (x.split(":") for x in text.split(","))}
    )


def parse(members: Members) -> tuple[list[Gen], list[Processing]]:
    """Every generation and every record processed, from the members' output."""
    gens: list[Gen] = []
    done: list[Processing] = []
    for i in range(len(members.procs)):
        name, current = f"member-{i}", None
        # The last piece is "" or a line cut short by a SIGKILL (its records were never
        # marked, so the next owner processes them): left out.
        for line in members.log(i).split("\n")[:-1]:
            if not _LINE.match(line):
                continue  # the member's log output (stderr shares the file)
            kind, _, rest = line.partition(" ")
            t, gid, *fields = rest.split(" ", 3)
            at = float(t)
            if kind == "g":
                current = Gen(name, int(gid), at, _offsets(fields[0]))
                gens.append(current)
                continue
            assert current is not None and current.id == int(gid), f"{name}: {line}"
            if kind == "b":
                p = int(fields[0])
                for pair in fields[1].split(","):
                    offset, rid = pair.split(":")
                    done.append(Processing(at, current, p, int(offset), int(rid)))
                    current.processed_to[p] = int(offset) + 1
            elif kind == "c":
                current.commits[int(fields[0])] = int(fields[1])
                current.commit_log.append((at, int(fields[0]), int(fields[1])))
            else:
                current.ended, current.final = at, _offsets(fields[0])
                current.reason = rest.partition("| ")[2]
    return gens, done


@dataclass
class Outcome:
    """What a run's check found."""

    lost: list[tuple[int, int]]
    #: Records processed again, by the fault that explains them, then by the uncommitted
    #: range (partition, committed, processed) of the owner the fault hit.
    duplicates: dict[str, Counter[str]]
    violations: list[str]
    generations: int
    processed: int

    @property
    def duplicated(self) -> int:
        """How many records were processed again."""
        return sum(n for spans in self.duplicates.values() for n in spans.values())


def _cause(
    dup: Processing, earlier: list[Processing], members: Members, broker: list[Fault]
) -> tuple[str, str] | None:
    """The fault that left ``dup``'s record uncommitted by an earlier owner (None: none)."""
    faults = members.timeline
    for prev in reversed(earlier):
        gen, p, o = prev.gen, prev.partition, prev.offset
        committed = gen.commits.get(p, gen.starts.get(p, 0))
        span = f"p{p} [{committed}, {gen.processed_to.get(p, o + 1)})"
        if o < committed:
            continue  # committed: this owner did not leave it to the next
        if gen.final is None:
            killed = [
                f
                for f in faults
                if f.target == gen.member and f.action == "kill" and f.at > prev.at
            ]
            if killed:
                return f"SIGKILL {gen.member}", span
            continue
        assert gen.ended is not None
        if gen.final.get(p, 0) > o:
            continue  # committed: this owner did not leave it to the next
        frozen = [
            f
            for f in faults
            if f.target == gen.member and f.action == "freeze" and gen.started <= f.at <= gen.ended
        ]
        if frozen:
            return f"SIGSTOP {gen.member} (fenced)", span
        recent = [
            f
            for f in [*faults, *broker]
            if gen.started <= f.at <= gen.ended and f.action != "start"
        ]
        if recent:
            return f"{recent[-1]} (ended {gen.member} gen {gen.id})", span
    # A zombie: a member woken from a freeze processing what it was handed before.
    if any(f.target == dup.gen.member and f.action == "freeze" and f.at < dup.at for f in faults):
        return f"SIGSTOP {dup.gen.member} (zombie)", f"p{dup.partition} {dup.offset}"
    return None


def check(
    members: Members,
    ends: dict[TopicPartition, int],
    acked: dict[int, tuple[int, int]],
    broker: list[Fault],
) -> Outcome:
    """Check the members' output against the topic's end offsets and what was acknowledged:
    the records never processed, every duplicate's cause, and the violations."""
    gens, done = parse(members)
    by_offset: dict[tuple[int, int], list[Processing]] = defaultdict(list)
    for d in sorted(done, key=lambda d: d.at):
        by_offset[d.partition, d.offset].append(d)
    violations: list[str] = []
    wanted = {(tp.partition, o) for tp, end in ends.items() for o in range(end)}
    lost = sorted(wanted - set(by_offset))
    for rid, where in acked.items():
        for d in by_offset.get(where, []):
            if d.id != rid:
                violations.append(f"{where} acknowledged as id {rid}, processed as {d.id}")
    duplicates: dict[str, Counter[str]] = defaultdict(Counter)
    for (p, o), seen in by_offset.items():
        for j in range(1, len(seen)):
            dup = seen[j]
            # What was committed (as printed) before the generation that processed it
            # again formed.
            floor = max(
                [
                    *(
                        c
                        for g in gens
                        for t, cp, c in g.commit_log
                        if cp == p and t < dup.gen.started
                    ),
                    *(
                        g.final.get(p, 0)
                        for g in gens
                        if g.final is not None and g.ended is not None and g.ended < dup.gen.started
                    ),
                ],
                default=0,
            )
            if o < floor:
                violations.append(
                    f"p{p} offset {o} processed again by {dup.gen.member} gen "
                    f"{dup.gen.id} although committed up to {floor} before"
                )
            cause = _cause(dup, seen[:j], members, broker)
            if cause is None:
                violations.append(
                    f"p{p} offset {o} processed again by {dup.gen.member} gen "
                    f"{dup.gen.id}: no fault explains it"
                )
            else:
                duplicates[cause[0]][cause[1]] += 1
    return Outcome(lost, duplicates, violations, len({g.id for g in gens}), len(by_offset))


@dataclass
class Run:
    """One chaos run: its members, traffic, broker faults and the topic's end offsets."""

    seed: int
    members: ConsumerMembers
    traffic: Traffic
    broker: list[Fault]
    ends: dict[TopicPartition, int] = field(default_factory=dict)
    committed: dict[TopicPartition, int] = field(default_factory=dict)


async def run_chaos(
    bootstrap: str, logs: Path, seed: int, seconds: float, cluster: KafkaCluster | None = None
) -> Run:
    """Faults for ``seconds`` (brokers too on ``cluster``); returns once the group caught up
    and every member stopped."""
    topic, group = make_unique_name("chaos"), make_unique_name("g-chaos")
    async with Admin(bootstrap) as admin:
        replicas = min(3, cluster.brokers) if cluster else 1
        await admin.create_topics([NewTopic(topic, PARTITIONS, replication_factor=replicas)])
    members = ConsumerMembers(logs, bootstrap=bootstrap, group=group, topic=topic)
    run = Run(seed, members, Traffic(topic), [])
    for _ in range(3):
        members.start()
    try:
        with anyio.fail_after(seconds + HANG_GUARD):  # a hang guard, not a timing assertion
            async with anyio.create_task_group() as tg:
                tg.start_soon(run.traffic.run, bootstrap)
                if cluster is not None:
                    rng = random.Random(f"{seed}-brokers")
                    tg.start_soon(broker_schedule, cluster, rng, seconds, run.broker)
                rng = random.Random(seed)
                await member_schedule(members, rng, seconds, SESSION, gap=MEMBER_GAP)
                run.traffic.stopped.set()
            run.ends, run.committed = await _caught_up(bootstrap, group, topic)
    finally:
        await stop_all(members)
    return run


async def _caught_up(
    bootstrap: str, group: str, topic: str
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    async with Admin(bootstrap) as admin:
        ends = await admin.list_offsets(tps, "latest")
        while True:
            committed = await admin.fetch_offsets(group)
            if all(committed.get(tp, 0) >= end for tp, end in ends.items()):
                return ends, {tp: committed.get(tp, 0) for tp in tps}
            await anyio.sleep(0.2)


def verify(run: Run) -> Outcome:
    """Check the run (module docstring); print and return the summary."""
    members = run.members
    outcome = check(members, run.ends, run.traffic.acked, run.broker)
    hurt = [f for f in members.timeline if f.action != "start"]
    causes = "; ".join(
        f"{fault}: {sum(spans.values())} in {', '.join(sorted(spans))}"
        for fault, spans in sorted(outcome.duplicates.items())
    )
    print(
        f"consumer chaos seed {run.seed}: N={run.traffic.written} written, "
        f"acked={len(run.traffic.acked)}, processed={outcome.processed} distinct offsets "
        f"(end offsets sum {sum(run.ends.values())}), lost={len(outcome.lost)}, "
        f"duplicates={outcome.duplicated} ({causes or 'none'}), "
        f"member events={len(hurt)} ({'; '.join(map(str, hurt))}), "
        f"broker events={len(run.broker)} ({'; '.join(map(str, run.broker)) or 'none'}), "
        f"generations={outcome.generations}, member processes={len(members.procs)}"
    )
    context = (
        f"seed {run.seed}; members: {'; '.join(members.events)}; "
        f"brokers: {'; '.join(map(str, run.broker))}\n{members.tails()}"
    )
    assert not outcome.lost, f"{len(outcome.lost)} offsets never processed: {outcome.lost[:10]}"
    assert not outcome.violations, "\n".join(outcome.violations[:20]) + "\n" + context
    assert run.committed == run.ends, f"committed {run.committed} != ends {run.ends}\n{context}"
    graceful = members.graceful_exit_codes()
    assert all(code == 0 for code in graceful), f"exit codes {graceful}\n{context}"
    return outcome


async def main(seed: int, minutes: float, workdir: Path, embedded: bool) -> None:
    async with AsyncExitStack() as stack:
        cluster: KafkaCluster | None = None
        if embedded:
            fake = await stack.enter_async_context(FakeCluster(initial_rebalance_delay_ms=0))
            bootstrap = fake.bootstrap
        else:
            cluster = stack.enter_context(KafkaCluster(3))
            bootstrap = cluster.bootstrap
        run = await run_chaos(bootstrap, workdir, seed, minutes * 60, cluster)
        verify(run)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Consumer-group chaos: " + __doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument(
        "--embedded", action="store_true", help="member faults only, on an embedded broker"
    )
    parser.add_argument("--workdir", help="member logs (default: a new temporary folder)")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gengroup-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"member logs in {workdir}", flush=True)
    anyio.run(main, args.seed, args.minutes, workdir, args.embedded)
