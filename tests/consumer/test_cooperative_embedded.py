"""Cooperative rebalancing on the embedded broker, in virtual time."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
import trio
import trio.testing

from gengroup import (
    Balancer,
    ConsumerGroup,
    CooperativeStickyBalancer,
    FetchedBatch,
    Generation,
    RangeBalancer,
    TaskStuckError,
    TopicPartition,
    run_workers,
)
from gengroup._config import GroupConfig
from gengroup._types import GenerationIdentity
from gengroup.broker import FakeCluster
from gengroup.consumer.generation import RebalanceTimings
from gengroup.consumer.running import Ownership
from gengroup.membership.member import Outcome
from gengroup.protocol.records import NewRecord

from .cooperative import SpanLedger, three_four_three, wait_until
from .helpers import all_partitions

SETTINGS = {
    "session_timeout": 10.0,
    "heartbeat_interval": 1.0,
    "rebalance_timeout": 20.0,
    "commit_interval": 1.0,
    "join_backoff": 0.5,
    "fetch_max_wait": 0.5,
    "request_timeout": 30.0,
}
PARTITIONS = 12
PER_STEP = 10


async def test_three_four_three_members_keep_retained_workers_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    every = all_partitions("t", PARTITIONS)
    produced: set[bytes] = set()
    async with FakeCluster(topics={"t": PARTITIONS}, initial_rebalance_delay_ms=0) as cluster:

        def open_group(name: str) -> ConsumerGroup:
            return ConsumerGroup(
                "g",
                ["t"],
                cluster.bootstrap,
                client_id=name,
                balancers=[CooperativeStickyBalancer()],
                **SETTINGS,
            )

        async def produce(step: int) -> None:
            for p in range(PARTITIONS):
                values = [f"{step}-{p}-{i}".encode() for i in range(PER_STEP)]
                produced.update(values)
                cluster.produce("t", [NewRecord(None, v, (), 0) for v in values], partition=p)

        async def committed() -> dict[TopicPartition, int]:
            return cluster.committed_offsets("g")

        ledger = await three_four_three(
            open_group, every, produce, committed, lambda: produced, timeout=600
        )
    for name in ("m1", "m2", "m3"):
        gens = ledger.generations[name]
        assert all(g.rebalance_protocol == "cooperative" for g in gens)
        # Phase one: a generation revoked one partition, and ended at once so
        # that the member rejoined; the first three partitions never moved.
        revoking = [g for g in gens if g.revoked]
        assert len(revoking) == 1 and len(revoking[0].revoked) == 1
        assert revoking[0].end_reason is not None and "revoked" in revoking[0].end_reason
        moved = next(iter(revoking[0].revoked))
        assert ledger.starts_of(name) == {
            tp: 2 if tp == moved else 1 for tp in ledger.starts_of(name)
        }
        # Phase two: the newcomer got the partition only in a later generation.
        received = [g.id for g in ledger.generations["m4"] if moved in g.added]
        assert received and received[0] > revoking[0].id


def group_on(
    cluster: FakeCluster, name: str, balancers: list[Balancer], **extra: Any
) -> ConsumerGroup:
    settings: dict[str, Any] = {**SETTINGS, **extra}
    return ConsumerGroup(
        "g", ["t"], cluster.bootstrap, client_id=name, balancers=balancers, **settings
    )


async def test_members_offering_both_follow_the_group_into_eager_and_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Members offering cooperative-sticky and range follow what the group chose.

    Two such members run cooperatively; a member offering only range joins, so
    the group switches to range: the cooperative members revoke every
    partition before SyncGroup, and nobody ever owns a partition twice. When
    it leaves, the group is cooperative again.
    """
    every = all_partitions("t", PARTITIONS)
    ledger = SpanLedger()
    both: list[Balancer] = [CooperativeStickyBalancer(), RangeBalancer()]
    stops: dict[str, anyio.CancelScope] = {}

    async def member(name: str, balancers: list[Balancer]) -> None:
        with anyio.CancelScope() as scope:
            stops[name] = scope
            async with group_on(cluster, name, balancers) as group:
                await ledger.member(name, group)

    def protocols(*names: str) -> set[str]:
        return {ledger.current()[n].rebalance_protocol for n in names}

    async with (
        FakeCluster(topics={"t": PARTITIONS}, initial_rebalance_delay_ms=0) as cluster,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(member, "a", both)
        tg.start_soon(member, "b", both)
        await wait_until(lambda: ledger.stable({"a", "b"}, every), "a and b", 600)
        assert protocols("a", "b") == {"cooperative"}
        tg.start_soon(member, "c", [RangeBalancer()])
        await wait_until(lambda: ledger.stable({"a", "b", "c"}, every), "a, b and c", 600)
        assert protocols("a", "b", "c") == {"eager"}
        assert ledger.current()["a"].protocol == "range"
        stops["c"].cancel()
        await wait_until(lambda: ledger.stable({"a", "b"}, every), "a and b again", 600)
        assert protocols("a", "b") == {"cooperative"}
        tg.cancel_scope.cancel()
    assert not ledger.overlaps, ledger.overlaps


async def test_a_partition_task_that_returns_gives_the_partition_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The partition's task returns: the member rejoins without it and gets it back as added."""
    generations: list[Generation] = []
    starts: list[TopicPartition] = []

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        starts.append(tp)
        if tp.partition == 0 and starts.count(tp) == 1:
            return
        await anyio.sleep_forever()

    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        async with group_on(cluster, "m", [CooperativeStickyBalancer()]) as group:
            async for gen in group:
                generations.append(gen)
                for tp in gen.added:
                    gen.start_soon(worker, gen, tp, name="worker", partition=tp)
                if len(generations) == 2:
                    break
    first, second = generations
    assert first.end_reason == "task 'worker' exited"
    assert second.added == {TopicPartition("t", 0)}
    assert second.retained == {TopicPartition("t", 1)}
    assert sorted(starts) == [TopicPartition("t", 0)] * 2 + [TopicPartition("t", 1)]


async def test_a_partition_tasks_exception_comes_out_of_run_workers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def handler(gen: Generation, tp: TopicPartition, batch: FetchedBatch) -> None:
        if tp.partition == 1:
            raise ValueError(f"cannot handle {tp}")

    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        cluster.produce("t", [NewRecord(None, b"x", (), 0)], partition=1)
        with pytest.raises(ValueError, match="cannot handle"):
            async with group_on(cluster, "m", [CooperativeStickyBalancer()]) as group:
                await run_workers(group, handler)


async def test_a_revoked_partitions_stuck_task_is_reported(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A task ignoring the cancellation of its revoked partition: TaskStuckError names it."""
    let_go = anyio.Event()

    async def stubborn(gen: Generation, tp: TopicPartition) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await let_go.wait()

    async def newcomer() -> None:
        async with group_on(cluster, "n", [CooperativeStickyBalancer()]) as group:
            async for _gen in group:
                pass

    async with (
        FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster,
        anyio.create_task_group() as tg,
    ):
        with pytest.raises(TaskStuckError, match="stubborn") as caught:
            async with group_on(cluster, "m", [CooperativeStickyBalancer()]) as group:
                async for gen in group:
                    for tp in gen.added:
                        gen.start_soon(stubborn, gen, tp, partition=tp)
                    if len(gen.assignments) == 2:
                        tg.start_soon(newcomer)
        assert "revoked" in str(caught.value)
        let_go.set()
        tg.cancel_scope.cancel()


async def test_a_generation_formed_without_ownership_runs_partition_tasks_as_its_own() -> None:
    """A generation formed elsewhere (no ownership registry): every partition is
    added, and a partition task is simply one of the generation's tasks."""
    tp = TopicPartition("t", 0)
    gen = Generation(
        identity=GenerationIdentity("g", 3, "m", None),
        is_leader=True,
        protocol="range",
        assignments={tp: 0},
        timings=RebalanceTimings(),
        _committer=None,  # type: ignore[arg-type]
        _prefetcher=None,  # type: ignore[arg-type]
    )
    assert gen.added == {tp} and not gen.retained and not gen.revoked
    ran: list[TopicPartition] = []

    async def task(tp: TopicPartition) -> None:
        ran.append(tp)

    async with gen.task_group():
        gen.start_soon(task, tp, partition=tp)
    assert ran == [tp]
    assert gen.end_reason is not None and "exited" in gen.end_reason


async def test_a_partition_whose_task_returned_between_generations_opens_a_new_span() -> None:
    """A span task that returns after its generation ended (no generation live) gives
    the partition up; the next generation assigning it again opens a fresh span
    instead of refusing the partition as still being revoked."""
    tp = TopicPartition("t", 0)
    own = Ownership(GroupConfig.create("g", ["t"], "127.0.0.1:9092"))

    def generation(sequence: int, added: frozenset[TopicPartition]) -> Generation:
        gen = Generation(
            identity=GenerationIdentity("g", 3, "m", None, sequence),
            is_leader=False,
            protocol="consumer/uniform",
            assignments={tp: 0},
            timings=RebalanceTimings(),
            _committer=None,  # type: ignore[arg-type]
            _prefetcher=None,  # type: ignore[arg-type]
            added=added,
            retained=frozenset({tp}) - added,
            rebalance_protocol="cooperative",
        )
        gen._spans, gen._span_host = own.spans, own
        return gen

    proceed = anyio.Event()
    returned = anyio.Event()
    ran: list[int] = []

    async def task(gen: Generation) -> None:
        ran.append(gen.sequence)
        if gen.sequence == 1:
            await proceed.wait()
            gen.mark(tp, 5)
            returned.set()
        else:
            await anyio.sleep_forever()

    async with own.hosting():
        first = generation(1, frozenset({tp}))
        own.adopt(first)
        first.start_soon(task, first, partition=tp)
        first.end(Outcome.REJOIN, "assignment changed")
        first.set_ended()  # between generations: the span runs on, held by nobody live
        proceed.set()
        await returned.wait()
        await anyio.wait_all_tasks_blocked()
        assert tp not in own.owned and own.spans[tp].closed
        second = generation(2, frozenset({tp}))
        own.adopt(second)
        assert tp not in own.spans
        assert second.marks == {tp: 5}  # the mark made between generations is kept
        second.start_soon(task, second, partition=tp)
        await anyio.wait_all_tasks_blocked()
        assert not own.spans[tp].closed
        second.end(Outcome.REJOIN, "the group is closing", release=True)
    assert ran == [1, 2]
    assert first.label == "3 (#1)" and second.label == "3 (#2)"
    assert first.identity != second.identity


async def test_generations_carry_a_sequence_in_history_metrics_and_labels(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Each generation the member forms gets the next sequence number; its label,
    ``group.history`` and ``metrics().last_generation`` name it by id and sequence."""
    seen: list[Generation] = []
    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        async with group_on(cluster, "m", [CooperativeStickyBalancer()]) as group:
            async for gen in group:
                seen.append(gen)
                if len(seen) == 3:
                    break
                gen.cancel()
            history = list(group.history)
            metrics = group.metrics()
    assert [g.sequence for g in seen] == [1, 2, 3]
    assert [g.label for g in seen] == [f"{g.id} (#{g.sequence})" for g in seen]
    assert [(r.identity, r.id, r.label) for r in history] == [
        (g.identity, g.id, g.label) for g in seen
    ]
    assert all(timings is g.timings for (_, timings), g in zip(history, seen, strict=True))
    assert metrics.generations == 3 and metrics.last_generation == seen[-1].label
