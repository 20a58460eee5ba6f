"""The 3 -> 4 -> 3 member scenario under an incremental protocol.

Shared by the embedded-broker and the real-Kafka tests, under the classic
protocol's cooperative-sticky balancer and under the consumer protocol
(KIP-848), whose members each have their own epoch
(``same_generation=False``). Each member starts one span-scoped worker per
*added* partition (``partition=tp``) and the :class:`SpanLedger` checks, at
every step, that no two workers own a partition at once; it counts each
partition's worker starts, so that retained partitions are seen never to
restart.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from gengroup import Balancer, ConsumerGroup, Generation, TopicPartition
from gengroup.broker import FakeCluster

from .helpers import EMBEDDED_SETTINGS, MemberGenerations, consume_and_mark, wait_until


@dataclass
class SpanLedger(MemberGenerations):
    """What every member's span-scoped workers did."""

    owners: dict[TopicPartition, str] = field(default_factory=dict)
    overlaps: list[str] = field(default_factory=list)
    starts: Counter[tuple[str, TopicPartition]] = field(default_factory=Counter)
    processed: Counter[bytes] = field(default_factory=Counter)
    marks: dict[TopicPartition, int] = field(default_factory=dict)

    async def worker(self, name: str, gen: Generation, tp: TopicPartition) -> None:
        if tp in self.owners:
            self.overlaps.append(f"{tp}: {name} starts while {self.owners[tp]} owns it")
        self.owners[tp] = name
        self.starts[(name, tp)] += 1
        try:
            async for batch in consume_and_mark(gen, tp, self.processed):
                self.marks[tp] = max(self.marks.get(tp, 0), batch.next_offset)
        finally:
            if self.owners.get(tp) == name:
                del self.owners[tp]

    async def member(self, name: str, group: ConsumerGroup) -> None:
        async for gen in group:
            self.generations.setdefault(name, []).append(gen)
            assert gen.added | gen.retained == set(gen.assignments)
            assert not gen.added & gen.retained
            for tp in sorted(gen.added):
                gen.start_soon(self.worker, name, gen, tp, name=f"{name} {tp}", partition=tp)

    async def join(self, cluster: FakeCluster, name: str, balancers: Sequence[Balancer]) -> None:
        """Run member ``name`` of :func:`group_on` ``cluster``, recorded here, until cancelled."""
        async with group_on(cluster, name, list(balancers)) as group:
            await self.member(name, group)

    def stable(
        self, names: set[str], every: set[TopicPartition], same_generation: bool = True
    ) -> bool:
        """``names`` (only) run generations covering ``every`` partition exactly once (in
        one generation id if ``same_generation``), evenly, and each partition's worker
        runs in its owner."""
        return super().stable(names, every, same_generation) and all(
            self.owners.get(tp) == n for n, g in self.current().items() for tp in g.assignments
        )

    def starts_of(self, name: str) -> dict[TopicPartition, int]:
        return {tp: n for (who, tp), n in self.starts.items() if who == name}


@dataclass
class FirstTaskReturns:
    """Partition 0's span-scoped task returns the first time it runs; every other
    task runs until cancelled.

    ``await run(group)`` (a group alone on a topic of 2 partitions) takes two
    generations; then, with the group closed, ``check(topic)`` asserts that the
    returning task ended the first one and that the second has partition 0 as
    added, with a fresh task, and partition 1 retained, its task never restarted.
    """

    generations: list[Generation] = field(default_factory=list)
    starts: list[TopicPartition] = field(default_factory=list)

    async def worker(self, gen: Generation, tp: TopicPartition) -> None:
        self.starts.append(tp)
        if tp.partition == 0 and self.starts.count(tp) == 1:
            return
        await anyio.sleep_forever()

    async def run(self, group: ConsumerGroup) -> None:
        async for gen in group:
            self.generations.append(gen)
            for tp in gen.added:
                gen.start_soon(self.worker, gen, tp, name="worker", partition=tp)
            if len(self.generations) == 2:
                return

    def check(self, topic: str) -> None:
        first, second = self.generations
        assert first.end_reason == "task 'worker' exited"
        assert second.added == {TopicPartition(topic, 0)}
        assert second.retained == {TopicPartition(topic, 1)}
        assert sorted(self.starts) == [TopicPartition(topic, 0)] * 2 + [TopicPartition(topic, 1)]


@dataclass
class StubbornTasks:
    """Span-scoped partition tasks that ignore their cancellation until ``let_go``.

    ``await run(group, join)`` starts one per added partition; once the member
    owns both partitions of its topic it calls ``join()``, which starts a
    second member: the revocation that follows finds a task that does not end.
    """

    let_go: anyio.Event = field(default_factory=anyio.Event)

    async def stubborn(self, gen: Generation, tp: TopicPartition) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await self.let_go.wait()

    async def run(self, group: ConsumerGroup, join: Callable[[], object]) -> None:
        async for gen in group:
            for tp in gen.added:
                gen.start_soon(self.stubborn, gen, tp, partition=tp)
            if len(gen.assignments) == 2:
                join()


def revoked_unseen(gens: Sequence[Generation]) -> bool:
    """A partition left the member in generations it never saw: between two it
    saw whose sequences are not consecutive (the ones between ended before its
    loop took them, as on a busy machine), the later lacks one of the earlier's."""
    return any(
        set(a.assignments) - set(b.assignments)
        for a, b in itertools.pairwise(gens)
        if b.sequence > a.sequence + 1
    )


async def three_four_three(
    open_group: Callable[[str], ConsumerGroup],
    every: set[TopicPartition],
    produce: Callable[[int], Awaitable[None]],
    committed: Callable[[], Awaitable[dict[TopicPartition, int]]],
    expected: Callable[[], set[bytes]],
    timeout: float,
    same_generation: bool = True,
) -> SpanLedger:
    """Run the scenario; returns the ledger (the caller asserts on it too).

    ``produce(step)`` adds records, ``committed()`` reads the group's
    committed offsets, ``expected()`` is every record value produced.
    ``same_generation``: the members of a stable group share one generation
    id (classic protocol); under KIP-848 each member has its own epoch.
    """

    def stable(names: set[str]) -> bool:
        return ledger.stable(names, every, same_generation)

    ledger = SpanLedger()
    # Each read of the committed offsets, keyed by when it was sent: the
    # watcher's reads and the final wait's overlap, and a read sent earlier can
    # be recorded after one sent later.
    reads: list[tuple[int, dict[TopicPartition, int]]] = []
    sent = itertools.count()
    stops: dict[str, anyio.CancelScope] = {}

    async def read_committed() -> dict[TopicPartition, int]:
        ticket = next(sent)
        now = await committed()
        reads.append((ticket, now))
        return now

    async def run_member(name: str) -> None:
        with anyio.CancelScope() as scope:
            stops[name] = scope
            async with open_group(name) as group:
                await ledger.member(name, group)

    async def watch_commits() -> None:
        while True:
            await read_committed()
            await anyio.sleep(0.1)

    three = {"m1", "m2", "m3"}
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_commits)
        await produce(0)
        for name in sorted(three):
            tg.start_soon(run_member, name)
        await wait_until(lambda: stable(three), "3 members to share", timeout)
        before = {n: ledger.assigned(n) for n in three}
        starts = {n: ledger.starts_of(n) for n in three}
        assert all(v == 1 for s in starts.values() for v in s.values()), starts

        await produce(1)
        tg.start_soon(run_member, "m4")
        await wait_until(lambda: stable(three | {"m4"}), "4 members", timeout)
        after = {n: ledger.assigned(n) for n in three}
        for name in three:
            # Sticky: the old members only gave partitions away, and the
            # partitions they kept never restarted their worker.
            assert after[name] <= before[name], (name, before[name], after[name])
            assert all(ledger.starts_of(name)[tp] == 1 for tp in after[name]), name
        assert len(ledger.assigned("m4")) == len(every) // 4

        await produce(2)
        kept = {n: ledger.assigned(n) for n in three}
        stops["m4"].cancel()
        await wait_until(lambda: stable(three), "3 members again", timeout)
        for name in three:
            now = ledger.assigned(name)
            assert kept[name] <= now, (name, kept[name], now)
            assert all(ledger.starts_of(name)[tp] == 1 for tp in kept[name]), name
        await produce(3)
        await wait_until(lambda: set(ledger.processed) >= expected(), "every record", timeout)
        # The retained workers' last marks reach the coordinator with the
        # current generation's periodic commits (it refuses any other id).
        final = dict(ledger.marks)
        with anyio.fail_after(timeout):
            while True:
                now = await read_committed()
                if all(now.get(tp, -1) >= off for tp, off in final.items()):
                    break
                await anyio.sleep(0.1)
        tg.cancel_scope.cancel()

    assert not ledger.overlaps, ledger.overlaps
    assert set(ledger.processed) == expected()
    history: dict[TopicPartition, list[int]] = {}
    for _, now in sorted(reads, key=lambda read: read[0]):
        for tp, off in now.items():
            history.setdefault(tp, []).append(off)
    for tp, offsets in history.items():
        assert offsets == sorted(offsets), (tp, offsets)
    return ledger


def group_on(
    cluster: FakeCluster, name: str, balancers: list[Balancer], **extra: Any
) -> ConsumerGroup:
    """Member ``name`` of group ``g`` on topic ``t`` of the embedded ``cluster``,
    offering ``balancers``, with the embedded tests' settings (``extra`` on top)."""
    settings: dict[str, Any] = {**EMBEDDED_SETTINGS, **extra}
    return ConsumerGroup(
        "g", ["t"], cluster.bootstrap, client_id=name, balancers=balancers, **settings
    )
