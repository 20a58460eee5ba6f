"""Failover on a real three-node Kafka cluster: brokers die under a running group.

Each test takes nodes of the session's :class:`KafkaCluster` down (SIGKILL,
or a graceful stop in a rolling restart) while a gengroup Producer writes
with ``acks=all`` and a consumer group processes, then checks the group's
invariants on everything that happened:

* every acknowledged record was processed (nothing lost);
* no partition had two owners at once (the Ledger's overlaps);
* a record processed twice lies at or above every offset committed for its
  partition before the generation that processed it again formed: only what
  was not committed is processed again;
* no commit of a generation was accepted after its partition's next owner
  read the committed offset (the ended generation's committed offsets never
  exceed the next owner's start);
* the committed offsets, polled with Admin during the test, never go backwards
  (read as group members read them: see :class:`CommitWatch`).

Each test prints how long the fault took to heal, from the kill to the first
record consumed again or to the group being stable again. They are measured,
not asserted (``anyio.fail_after`` only guards against hangs), except where a
stall of ``request_timeout`` is the bug a test guards against.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import pytest

from gengroup import Admin, ConsumerGroup, Generation, Producer, TopicPartition
from gengroup._errors import GengroupError
from gengroup.admin import NewTopic
from gengroup.testing.kafka import KafkaCluster
from gengroup.testing.pytest_plugin import make_unique_name

from .helpers import FAST, Ledger, all_partitions, consume_and_mark, covers_exactly_once

pytestmark = pytest.mark.kafka

HANG_GUARD = 300.0
SETTINGS: dict[str, Any] = {**FAST, "start_offset": "earliest"}


@dataclass
class Tracker(Ledger):
    """A Ledger that also records which offsets each generation processed, and when."""

    #: (time, partition, offset, generation) of every record processed.
    consumed: list[tuple[float, TopicPartition, int, Generation]] = field(default_factory=list)
    #: Each partition's owners, in the order their workers started.
    owners_of: dict[TopicPartition, list[Generation]] = field(
        default_factory=lambda: defaultdict(list)
    )

    async def worker(self, name: str, gen: Generation, tp: TopicPartition) -> None:
        if tp in self.owners:
            self.overlaps.append(f"{tp}: {name} gen {gen.label} while {self.owners[tp]} owns it")
        self.owners[tp] = (name, gen.label)
        self.owners_of[tp].append(gen)
        try:
            async for batch in consume_and_mark(gen, tp, self.processed):
                now = anyio.current_time()
                self.consumed.extend((now, tp, record.offset, gen) for record in batch.records)
                self.notify()
        finally:
            if self.owners.get(tp) == (name, gen.label):
                del self.owners[tp]

    def last_formed_after(self, t: float) -> float | None:
        """When the newest generation formed, if after ``t`` (None: none since)."""
        times = [at for at, _, _ in self.formed if at > t]
        return max(times) if times else None

    def first_consumed_after(
        self, t: float, tps: set[TopicPartition] | None = None
    ) -> float | None:
        """When the first record (of ``tps``) was processed after ``t`` (None: none was)."""
        times = [c[0] for c in self.consumed if c[0] > t and (tps is None or c[1] in tps)]
        return min(times) if times else None

    def check(self, acked: dict[bytes, tuple[TopicPartition, int]]) -> int:
        """Assert the invariants of the module docstring; return how many records were
        processed again."""
        assert self.overlaps == []
        lost = sorted(set(acked) - set(self.processed))
        assert not lost, f"{len(lost)} acknowledged record(s) never processed, e.g. {lost[:5]}"
        again = 0
        for tp, gens in self.owners_of.items():
            for before, after in itertools.pairwise(gens):
                # The ended owner's accepted commits never pass the next owner's start.
                assert before.committed.get(tp, -1) <= after.assignments[tp], (
                    f"{tp}: generation {before.id} committed {before.committed.get(tp)} "
                    f"after generation {after.id} started at {after.assignments[tp]}"
                )
            seen: set[int] = set()
            for _, ctp, offset, gen in self.consumed:
                if ctp != tp:
                    continue
                if offset in seen:
                    again += 1
                    earlier = gens[: gens.index(gen)]
                    floor = max((g.committed.get(tp, -1) for g in earlier), default=-1)
                    assert offset >= floor, (
                        f"{tp} offset {offset} processed again by generation {gen.id} "
                        f"although committed up to {floor} before"
                    )
                seen.add(offset)
        return again


@dataclass
class Traffic:
    """A producer writing numbered records with ``acks=all`` until stopped."""

    topic: str
    acked: dict[bytes, tuple[TopicPartition, int]] = field(default_factory=dict)
    failed: list[BaseException] = field(default_factory=list)
    stopped: anyio.Event = field(default_factory=anyio.Event)

    async def run(self, bootstrap: str) -> None:
        async with Producer(bootstrap, acks="all", linger=0.0, delivery_timeout=60.0) as producer:
            i = 0
            while not self.stopped.is_set():
                value = f"{self.topic}-{i}".encode()
                try:
                    md = await producer.send(self.topic, value, key=f"k{i}".encode())
                except GengroupError as exc:  # not acknowledged: not expected either
                    self.failed.append(exc)
                else:
                    self.acked[value] = (TopicPartition(md.topic, md.partition), md.offset)
                i += 1
                await anyio.sleep(0.005)


@dataclass
class CommitWatch:
    """Polls a group's committed offsets with Admin; every answer is kept.

    It reads with ``require_stable``, as group members do: a coordinator that
    has just taken the group over answers a plain read at its high watermark,
    which can lag behind offsets the old coordinator acknowledged, so a plain
    read can go back for a moment while nothing committed was lost.
    """

    group_id: str
    seen: list[tuple[float, dict[TopicPartition, int]]] = field(default_factory=list)

    async def run(self, bootstrap: str) -> None:
        async with Admin(bootstrap, timeout=5.0) as admin:
            while True:
                with anyio.move_on_after(5.0):
                    try:
                        offsets = await admin.fetch_offsets(self.group_id, require_stable=True)
                    except (GengroupError, TimeoutError):
                        pass  # the coordinator is moving: ask again
                    else:
                        self.seen.append((anyio.current_time(), offsets))
                await anyio.sleep(0.2)

    def check_monotonic(self) -> None:
        best: dict[TopicPartition, int] = {}
        for _, offsets in self.seen:
            for tp, offset in offsets.items():
                assert offset >= best.get(tp, -1), f"{tp} committed offset went back to {offset}"
                best[tp] = offset

    def first_advance_after(self, t: float) -> float | None:
        """When a poll first showed an offset above every offset seen before ``t``."""
        before: dict[TopicPartition, int] = {}
        for at, offsets in self.seen:
            if at <= t:
                for tp, off in offsets.items():
                    before[tp] = max(before.get(tp, -1), off)
            elif any(off > before.get(tp, -1) for tp, off in offsets.items()):
                return at
        return None


@dataclass
class Scenario:
    """A topic on the cluster, traffic into it, a group of members and the watchers."""

    cluster: KafkaCluster
    topic: str
    group_id: str
    tg: anyio.abc.TaskGroup
    tracker: Tracker = field(default_factory=Tracker)
    traffic: Traffic = field(init=False)
    commits: CommitWatch = field(init=False)

    def __post_init__(self) -> None:
        self.traffic = Traffic(self.topic)
        self.commits = CommitWatch(self.group_id)

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    async def add_member(self, name: str) -> ConsumerGroup:
        group = ConsumerGroup(
            self.group_id, [self.topic], self.bootstrap, client_id=name, **SETTINGS
        )
        self.tg.start_soon(self._run_member, name, group)
        return group

    async def _run_member(self, name: str, group: ConsumerGroup) -> None:
        async with group:
            await self.tracker.member(name, group)

    async def wait_for(self, predicate: Any, what: str, timeout: float = 120.0) -> None:
        await self.tracker.wait_for(predicate, what, timeout)

    async def caught_up(self, timeout: float = 120.0) -> None:
        """Stop the traffic and wait until every acknowledged record was processed."""
        self.traffic.stopped.set()
        await anyio.sleep(0.5)
        await self.wait_for(
            lambda: set(self.traffic.acked) <= set(self.tracker.processed),
            "every acknowledged record to be processed",
            timeout,
        )

    async def coordinator(self) -> int:
        """The node that coordinates the group now."""
        return await anyio.to_thread.run_sync(self.cluster.coordinator_of, self.group_id)

    async def start_one_member(self, partitions: int) -> int:
        """Member "a" alone, its generation over every partition, some records
        processed; the group's coordinator node."""
        await self.add_member("a")
        await self.wait_for(lambda: self.stable(1, partitions), "the first member's generation")
        await self.wait_for(lambda: len(self.tracker.processed) > 50, "records processed")
        return await self.coordinator()

    def stable(self, members: int, partitions: int) -> bool:
        gens = self.tracker.current()
        return len(gens) == members and covers_exactly_once(
            gens.values(), all_partitions(self.topic, partitions)
        )

    async def kill(self, node: int) -> float:
        """SIGKILL ``node``; the time of the kill."""
        await anyio.to_thread.run_sync(self.cluster.kill, node)
        return anyio.current_time()

    def check(self) -> int:
        self.commits.check_monotonic()
        return self.tracker.check(self.traffic.acked)


@asynccontextmanager
async def scenario(cluster: KafkaCluster, name: str, partitions: int) -> AsyncIterator[Scenario]:
    topic, group_id = make_unique_name(name), make_unique_name(f"g-{name}")
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, replication_factor=3)])
    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as tg:
            run = Scenario(cluster, topic, group_id, tg)
            tg.start_soon(run.traffic.run, cluster.bootstrap)
            tg.start_soon(run.commits.run, cluster.bootstrap)
            yield run
            tg.cancel_scope.cancel()


def since(t: float | None, start: float) -> float | None:
    """Seconds from ``start`` to ``t`` (None: ``t`` never came)."""
    return None if t is None else t - start


def report(what: str, **seconds: float | None) -> None:
    """Print recovery times; one that never came (no record after the fault) says so."""
    print(
        f"\nrecovery [{what}]: "
        + ", ".join(f"{k} " + ("none" if v is None else f"{v:.2f} s") for k, v in seconds.items())
    )


async def test_coordinator_killed_during_a_generation(healed_cluster: KafkaCluster) -> None:
    async with scenario(healed_cluster, "coord-gen", 4) as run:
        for name in ("a", "b"):
            await run.add_member(name)
        await run.wait_for(lambda: run.stable(2, 4), "a generation of both members")
        await run.wait_for(lambda: len(run.tracker.processed) > 100, "records processed")
        await run.wait_for(lambda: len(run.commits.seen) > 2, "commits seen")
        coordinator = await run.coordinator()
        killed = await run.kill(coordinator)
        await run.wait_for(
            lambda: run.commits.first_advance_after(killed) is not None, "a commit after the kill"
        )
        await run.wait_for(lambda: run.stable(2, 4), "a stable group after the kill")
        await anyio.sleep(3.0)  # commits go on, the group stays stable
        assert run.stable(2, 4)
        await run.caught_up()
    again = run.check()
    committed = run.commits.first_advance_after(killed)
    formed = run.tracker.last_formed_after(killed)
    assert committed is not None
    report(
        f"coordinator node {coordinator} SIGKILLed during a generation",
        first_record=since(run.tracker.first_consumed_after(killed), killed),
        commit_accepted=committed - killed,
        group_stable=0.0 if formed is None else formed - killed,
    )
    print(f"processed again: {again} of {len(run.traffic.acked)} acknowledged")


async def test_coordinator_killed_while_members_join(healed_cluster: KafkaCluster) -> None:
    async with scenario(healed_cluster, "coord-join", 4) as run:
        coordinator = await run.start_one_member(4)
        first = run.tracker.current()["a"]
        await run.add_member("b")  # its JoinGroup starts a rebalance ...
        await run.wait_for(lambda: first.ending, "the rebalance to reach the first member")
        killed = await run.kill(coordinator)  # ... which the coordinator's death interrupts
        await run.wait_for(lambda: run.stable(2, 4), "a generation of both members")
        formed = anyio.current_time()
        await run.caught_up()
    again = run.check()
    report(
        f"coordinator node {coordinator} SIGKILLed during a join",
        group_stable=formed - killed,
        first_record=since(run.tracker.first_consumed_after(killed), killed),
    )
    print(f"processed again: {again} of {len(run.traffic.acked)} acknowledged")


async def test_partition_leader_killed_while_fetching(healed_cluster: KafkaCluster) -> None:
    async with scenario(healed_cluster, "leader", 3) as run:
        coordinator = await run.start_one_member(3)
        leaders = {p: healed_cluster.node_of_leader(run.topic, p) for p in range(3)}
        # A leader that is not the coordinator: only fetching is disturbed.
        victim = next((n for n in leaders.values() if n != coordinator), leaders[0])
        led = {TopicPartition(run.topic, p) for p, n in leaders.items() if n == victim}
        killed = await run.kill(victim)
        await run.wait_for(
            lambda: any(t > killed and tp in led for t, tp, _, _ in run.tracker.consumed),
            "records of the moved partitions",
        )
        await run.caught_up()
    run.check()
    for tp in all_partitions(run.topic, 3):
        offsets = sorted({o for _, ctp, o, _ in run.tracker.consumed if ctp == tp})
        assert offsets == list(range(len(offsets))), f"{tp}: a gap in the offsets processed"
    report(
        f"leader node {victim} of {len(led)} partition(s) SIGKILLed while fetching",
        first_record_of_moved=since(run.tracker.first_consumed_after(killed, led), killed),
    )
    print(f"generations: {len(run.tracker.formed)} (the fetcher moved, the generation stayed)")


async def test_rolling_restart_of_all_three_brokers(healed_cluster: KafkaCluster) -> None:
    steps: dict[str, float | None] = {}
    async with scenario(healed_cluster, "rolling", 6) as run:
        for name in ("a", "b"):
            await run.add_member(name)
        await run.wait_for(lambda: run.stable(2, 6), "a generation of both members")
        for node in range(3):
            await run.wait_for(lambda: len(run.tracker.processed) > 0, "records processed")
            stopped = anyio.current_time()
            await anyio.to_thread.run_sync(healed_cluster.stop, node)
            down = anyio.current_time()
            await anyio.to_thread.run_sync(healed_cluster.restart, node)
            await anyio.to_thread.run_sync(healed_cluster.wait_healthy)
            steps[f"node{node}_healthy"] = anyio.current_time() - stopped
            await run.wait_for(lambda: run.stable(2, 6), "a stable group after the restart")
            steps[f"node{node}_first_record"] = since(
                run.tracker.first_consumed_after(down), stopped
            )
        await run.caught_up()
    again = run.check()
    assert len(run.commits.seen) > 10
    report("rolling restart, each node stopped and restarted", **steps)
    print(
        f"processed again: {again} of {len(run.traffic.acked)} acknowledged; "
        f"sends failed: {len(run.traffic.failed)}; generations: {len(run.tracker.formed)}"
    )


async def test_a_new_group_and_an_admin_follow_a_crashed_partition_leader(
    healed_cluster: KafkaCluster,
) -> None:
    """A partition leader's node is SIGKILLed. A group started at once (nothing
    committed: its start offsets come from ListOffsets, while its metadata may
    still name the dead leader) and an Admin that looked the leaders up before
    the kill each ask the new leader once it is elected (seconds), not the dead
    node until ``request_timeout`` (30 s)."""
    topic = make_unique_name("leader-crash")
    tps = sorted(all_partitions(topic, 3))
    async with Admin(healed_cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 3, replication_factor=3)])
        await admin.list_offsets(tps, "latest")  # the admin's metadata names the leaders
        victim = await anyio.to_thread.run_sync(healed_cluster.node_of_leader, topic, 0)
        group_id = make_unique_name("g-leader-crash")
        while await anyio.to_thread.run_sync(healed_cluster.coordinator_of, group_id) == victim:
            group_id = make_unique_name("g-leader-crash")  # only the leader dies
        await anyio.to_thread.run_sync(healed_cluster.kill, victim)
        killed = anyio.current_time()
        with anyio.fail_after(HANG_GUARD):
            async with ConsumerGroup(group_id, [topic], healed_cluster.bootstrap, **SETTINGS) as g:
                async for gen in g:
                    formed = anyio.current_time() - killed
                    assert set(gen.assignments) == set(tps)
                    break
            asked = anyio.current_time()
            assert set(await admin.list_offsets(tps, "latest")) == set(tps)
            listed = anyio.current_time() - asked
    report(f"leader node {victim} SIGKILLed", first_generation=formed, admin_list_offsets=listed)
    # Generous for a loaded machine, far below the 30 s request timeout.
    assert formed < 15.0
    assert listed < 10.0
