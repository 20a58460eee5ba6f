"""Cooperative rebalancing on the embedded broker, in virtual time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import trio
import trio.testing

from gengroup import (
    Balancer,
    ConsumerGroup,
    CooperativeStickyBalancer,
    FetchedBatch,
    Generation,
    GenerationEnded,
    RangeBalancer,
    TaskStuckError,
    TopicPartition,
    run_workers,
)
from gengroup._config import GroupConfig
from gengroup._types import GenerationIdentity
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay, Intercepted
from gengroup.consumer.generation import RebalanceTimings
from gengroup.consumer.ownership import Ownership, kept_partitions
from gengroup.membership.member import Outcome
from gengroup.protocol.records import NewRecord
from gengroup.protocol.versions import ApiKey

from .cooperative import (
    FirstTaskReturns,
    SpanLedger,
    StubbornTasks,
    group_on,
    three_four_three,
    wait_until,
)
from .helpers import (
    EMBEDDED_SETTINGS,
    all_partitions,
    embedded_broker_settings,
    unstarted_prefetcher,
)

PARTITIONS = 12
PER_STEP = 10


async def test_three_four_three_members_keep_retained_workers_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    every = all_partitions("t", PARTITIONS)
    produced: set[bytes] = set()
    async with FakeCluster(topics={"t": PARTITIONS}, initial_rebalance_delay_ms=0) as cluster:

        def open_group(name: str) -> ConsumerGroup:
            return group_on(cluster, name, [CooperativeStickyBalancer()])

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


@asynccontextmanager
async def lone_cooperative_member(partitions: int) -> AsyncIterator[ConsumerGroup]:
    """Member ``m``, offering only cooperative-sticky, alone in its group on a fresh
    embedded cluster whose topic ``t`` has ``partitions``."""
    async with FakeCluster(topics={"t": partitions}, initial_rebalance_delay_ms=0) as cluster:
        async with group_on(cluster, "m", [CooperativeStickyBalancer()]) as group:
            yield group


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
    probe = FirstTaskReturns()
    async with lone_cooperative_member(2) as group:
        await probe.run(group)
    probe.check("t")


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
    tasks = StubbornTasks()

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
                await tasks.run(group, lambda: tg.start_soon(newcomer))
        assert "revoked" in str(caught.value)
        tasks.let_go.set()
        tg.cancel_scope.cancel()


def unhosted_generation(
    tp: TopicPartition,
    identity: GenerationIdentity,
    is_leader: bool,
    protocol: str,
    **fields: Any,
) -> Generation:
    """A generation assigning ``tp`` from offset 0, made by hand: no committer, no
    prefetcher; ``fields`` sets the rest (``added``, ``retained``...)."""
    return Generation(
        identity=identity,
        is_leader=is_leader,
        protocol=protocol,
        assignments={tp: 0},
        timings=RebalanceTimings(),
        _committer=None,  # type: ignore[arg-type]
        _prefetcher=unstarted_prefetcher({tp: 0}),
        **fields,
    )


async def test_a_generation_formed_without_ownership_runs_partition_tasks_as_its_own() -> None:
    """A generation formed elsewhere (no ownership registry): every partition is
    added, and a partition task is simply one of the generation's tasks."""
    tp = TopicPartition("t", 0)
    gen = unhosted_generation(tp, GenerationIdentity("g", 3, "m", None), True, "range")
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
        gen = unhosted_generation(
            tp,
            GenerationIdentity("g", 3, "m", None, sequence),
            False,
            "consumer/uniform",
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
    async with lone_cooperative_member(2) as group:
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


class Receipts:
    """Each member's generations as handed out, and every batch its workers received.

    A receipt notes how many generations the member had been handed when the
    batch came, so that tests order receipts against hand-outs by events.
    """

    def __init__(self) -> None:
        self.handed: dict[str, list[Generation]] = {}
        self.got: list[tuple[str, TopicPartition, int, int, bytes]] = []
        self.stopped: dict[tuple[str, TopicPartition], bool] = {}

    async def worker(self, name: str, gen: Generation, tp: TopicPartition) -> None:
        try:
            async for batch in gen.fetch(tp):
                for record in batch.records:
                    assert record.value is not None
                    self.got.append((name, tp, record.offset, len(self.handed[name]), record.value))
                gen.mark(tp, batch.next_offset)
        finally:
            # The newest generation handed out holds the span: when the span is
            # revoked, its prefetcher has stopped already.
            self.stopped[(name, tp)] = self.handed[name][-1]._prefetcher._closed

    async def member(self, name: str, group: ConsumerGroup) -> None:
        async for gen in group:
            self.handed.setdefault(name, []).append(gen)
            for tp in sorted(gen.added):
                gen.start_soon(self.worker, name, gen, tp, name=f"{name} {tp}", partition=tp)

    def current(self, name: str) -> Generation | None:
        gens = self.handed.get(name)
        return gens[-1] if gens and not gens[-1].ending else None

    def values(self, name: str) -> set[bytes]:
        return {value for who, *_, value in self.got if who == name}

    def offsets(self, name: str, tp: TopicPartition) -> list[int]:
        return [off for who, p, off, _, _ in self.got if who == name and p == tp]


def one(cluster: FakeCluster, tp: TopicPartition, value: bytes) -> None:
    cluster.produce(tp.topic, [NewRecord(None, value, (), 0)], partition=tp.partition)


async def test_retained_partitions_are_served_between_generations_and_never_twice(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A cooperative rebalance does not stop a retained partition's batches.

    Members m and s own two partitions each; s holds its generation's end up
    (a task that ignores cancellation until let go), so the rebalance that a
    newcomer n starts cannot finish. Meanwhile m's generation has ended
    (phase one), and records produced then reach m's workers -- of the
    partition m keeps and of the one it is about to give up -- before m is
    handed its next generation. No batch is handed out twice: each
    partition's offsets only increase, across the generations. The partition
    m gives up is not fetched by m once it was revoked.
    """
    every = all_partitions("t", 4)
    log = Receipts()
    let_go = anyio.Event()
    fetched: list[tuple[str | None, set[TopicPartition]]] = []

    def note_fetch(req: Intercepted) -> None:
        parts = {
            TopicPartition("t", int(p.partition))  # the one topic
            for t in req.request.topics
            for p in t.partitions
        }
        fetched.append((req.client_id, parts))

    async def holding(gen: Generation) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(15):
                await let_go.wait()

    async def slow() -> None:
        async with group_on(cluster, "s", [CooperativeStickyBalancer()]) as group:
            async for gen in group:
                log.handed.setdefault("s", []).append(gen)
                for tp in sorted(gen.added):
                    gen.start_soon(log.worker, "s", gen, tp, name=f"s {tp}", partition=tp)

    async def member(name: str) -> None:
        async with group_on(cluster, name, [CooperativeStickyBalancer()]) as group:
            await log.member(name, group)

    def held_assignments() -> set[TopicPartition]:
        gen = log.current("s")
        return set(gen.assignments) if gen is not None else set()

    def assigned(*names: str) -> bool:
        gens = [log.current(n) for n in names]
        seen = [tp for g in gens if g is not None for tp in g.assignments]
        return None not in gens and sorted(seen) == sorted(every)

    async with (
        FakeCluster(topics={"t": 4}, initial_rebalance_delay_ms=0) as cluster,
        anyio.create_task_group() as tg,
    ):
        cluster.control(ApiKey.FETCH, note_fetch)
        tg.start_soon(member, "m")
        await wait_until(lambda: assigned("m"), "m alone", 60)
        tg.start_soon(slow)
        await wait_until(lambda: assigned("m", "s"), "m and s", 60)
        first = log.handed["m"][-1]
        before = {"m": set(first.assignments), "s": set(held_assignments())}
        mine = sorted(first.assignments)
        assert len(mine) == 2
        for tp in every:
            one(cluster, tp, f"before-{tp.partition}".encode())
        await wait_until(lambda: len(log.got) == 4, "the first records", 60)
        held = log.current("s")
        assert held is not None
        held.start_soon(holding, held, name="holding")
        tg.start_soon(member, "n")
        await first.wait_ending()  # phase one: the rebalance n started
        assert first.end_outcome is Outcome.REJOIN
        handed = len(log.handed["m"])
        for tp in every:
            one(cluster, tp, f"after-{tp.partition}".encode())
        later = {f"after-{tp.partition}".encode() for tp in mine}
        await wait_until(lambda: later <= log.values("m"), "m's records after the end", 8)
        assert [n for who, _, _, n, v in log.got if who == "m" and v in later] == [handed] * 2
        assert len(log.handed["m"]) == handed  # the rebalance still waits for s
        let_go.set()
        await wait_until(lambda: assigned("m", "s", "n"), "m, s and n", 120)
        after = {name: log.current(name) for name in ("m", "s")}
        since = len(fetched)
        for tp in every:
            one(cluster, tp, f"last-{tp.partition}".encode())
        last = {f"last-{tp.partition}".encode() for tp in every}
        everyone = lambda: log.values("m") | log.values("s") | log.values("n")  # noqa: E731
        await wait_until(lambda: last <= everyone(), "the last records", 60)
        tg.cancel_scope.cancel()
    # One of m and s gave a partition up to n; every other partition stayed.
    now = {name: set(gen.assignments) for name, gen in after.items() if gen is not None}
    ((giver, gone),) = [(name, tp) for name in now for tp in before[name] - now[name]]
    for name in ("m", "s"):
        for tp in before[name] & now[name]:
            assert log.offsets(name, tp) == [0, 1, 2]  # no batch twice, none skipped
    # The giver processed the partition until it was revoked; n goes on after
    # the giver's marks, committed at the revocation.
    assert log.offsets(giver, gone) == [0, 1]
    assert log.offsets("n", gone) == [2]
    # The old prefetcher had stopped before the revoked worker was cancelled,
    # and the giver never fetched the partition again.
    assert log.stopped[(giver, gone)] is True
    assert not [parts for who, parts in fetched[since:] if who == giver and gone in parts]


async def test_span_batches_stop_once_the_lease_ran_out_between_generations(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Between generations the spans' batches flow only within the local lease.

    The generation ends for a cooperative rejoin and the JoinGroup then hangs
    at the broker past the session timeout. A record produced at once still
    reaches the retained partition's worker; one produced after the lease ran
    out (the coordinator may have evicted the member) reaches no worker
    before the next generation is handed out. (Whether the first record's
    mark made it into the ending generation's final commit is a race of real
    sockets; if not, the evicted member's next generation hands it again.)
    """
    tp = TopicPartition("t", 0)
    log = Receipts()

    async with (
        FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster,
        anyio.create_task_group() as tg,
    ):

        async def member() -> None:
            async with group_on(cluster, "m", [CooperativeStickyBalancer()]) as group:
                await log.member("m", group)

        tg.start_soon(member)
        one(cluster, tp, b"first")
        await wait_until(lambda: b"first" in log.values("m"), "the first record", 60)
        cluster.control(
            ApiKey.JOIN_GROUP,
            lambda req: Delay(1.5 * EMBEDDED_SETTINGS["session_timeout"]),
            once=True,
        )
        first = log.handed["m"][0]
        first.cancel("a cooperative rejoin")
        one(cluster, tp, b"within")
        await wait_until(lambda: b"within" in log.values("m"), "the record within the lease", 5)
        await anyio.sleep(1.2 * EMBEDDED_SETTINGS["session_timeout"])
        assert len(log.handed["m"]) == 1  # the JoinGroup is still held
        one(cluster, tp, b"late")
        await wait_until(lambda: b"late" in log.values("m"), "the late record", 120)
        tg.cancel_scope.cancel()
    within = [n for _, _, _, n, v in log.got if v == b"within"]
    (late,) = [n for _, _, _, n, v in log.got if v == b"late"]
    assert within[0] == 1 and late >= 2
    if within[1:]:
        # Handed again: its mark came after the first generation's final
        # commit, and the member was evicted (a new member id) before another
        # could carry it; its next generation starts from the committed offset.
        first_gen, *later = log.handed["m"]
        assert within[1:] == [2] and later[0].member_id != first_gen.member_id


async def test_a_shielded_generation_fetch_stops_when_the_generation_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Under a cooperative protocol the prefetcher outlives the generation; a
    generation task's iteration, shielded from the cancellation and waiting
    for a batch, still stops as soon as the generation ends."""
    tp = TopicPartition("t", 0)
    stopped = anyio.Event()
    handed: list[Generation] = []

    async def reader(gen: Generation) -> None:
        try:
            with anyio.CancelScope(shield=True):
                async for _batch in gen.fetch(tp):
                    pass
            # Stopped by the generation's end, not by the prefetcher stopping
            # (as it does once the lease runs out while the teardown waits).
            assert not gen._prefetcher._closed
        finally:
            stopped.set()

    async with lone_cooperative_member(1) as group:
        async for gen in group:
            handed.append(gen)
            if len(handed) == 2:
                break
            gen.start_soon(reader, gen, name="reader")
            await anyio.wait_all_tasks_blocked()
            gen.cancel("a cooperative rejoin")
            await stopped.wait()
    first, _ = handed
    assert first.rebalance_protocol == "cooperative" and first.end_reason == "a cooperative rejoin"


async def test_a_generation_task_started_as_the_generation_ends_is_not_started() -> None:
    """A cooperative generation that revoked partitions ends the instant it is
    handed out: its internal tasks may all have returned, and its task group
    closed to new tasks, before the application's loop starts one. Such a task
    is not started (it would be cancelled at once), rather than failing with
    the task group's error; nor while the final commit runs. Once the
    generation has ended, starting one raises."""
    tp = TopicPartition("t", 0)
    gen = unhosted_generation(tp, GenerationIdentity("g", 3, "m", None), True, "range")
    started: list[str] = []

    async def task(name: str) -> None:
        started.append(name)

    async with gen.task_group() as tg:
        gen.start_soon(task, "live")
        await anyio.lowlevel.checkpoint()
    assert started == ["live"] and gen.ending  # the task's return ended it
    gen._tg = tg  # the instant its task group closed, before the runner noticed
    gen.start_soon(task, "task group closed")
    gen._tg = None
    gen.start_soon(task, "final commit under way")
    gen.set_ended()
    with pytest.raises(GenerationEnded, match="has ended"):
        gen.start_soon(task, "ended")
    assert started == ["live"]


async def test_a_task_started_in_an_ending_generation_starts_cancelled() -> None:
    """While the generation's task group still runs, a task started in an ending
    generation starts, cancelled (it runs to its first checkpoint) as before;
    ``start()``, which must wait for the task to report, raises instead."""
    tp = TopicPartition("t", 0)
    gen = unhosted_generation(tp, GenerationIdentity("g", 3, "m", None), True, "range")
    ran: list[str] = []

    async def task(name: str) -> None:
        ran.append(name)
        await anyio.sleep(1)
        ran.append(f"{name} not cancelled")

    async def reporting(*, task_status: Any) -> None:
        task_status.started()

    async with gen.task_group():
        gen.end(Outcome.REJOIN, "test: ending")
        gen.start_soon(task, "ending")
        with pytest.raises(GenerationEnded, match="is ending"):
            await gen.start(reporting)
    assert ran == ["ending"]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_partitions_a_generation_added_before_it_ended_unseen_are_added_in_the_next(
    autojump_clock: trio.testing.MockClock, protocol: str
) -> None:
    """A generation that ends before the application takes it (its loop was busy)
    was never seen: the partitions it added are added in the next one, not
    retained, so a loop starting workers for ``gen.added`` (as ``run_workers``
    does) processes them. Under the cooperative-sticky balancer and KIP-848."""
    extra: dict[str, Any] = {"group_protocol": "consumer"} if protocol == "consumer" else {}
    balancers = [CooperativeStickyBalancer()] if protocol == "classic" else []
    async with FakeCluster(topics={"t": 2}, settings=embedded_broker_settings()) as cluster:
        m1 = group_on(cluster, "m1", balancers, **extra)
        m2 = group_on(cluster, "m2", balancers, **extra)
        async with m1:
            async with m2:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(m2.next)
                    taken = [await m1.next()]
                    while len(taken[-1].assignments) != 1:  # until the two share
                        taken.append(await m1.next())
                    tg.cancel_scope.cancel()
            # m2 left: m1's next generation adds its partition, and waits to be
            # taken; a third partition makes a new assignment before it is.
            await anyio.sleep(10)
            cluster.create_partitions("t", 3)
            await anyio.sleep(30)
            seen = [await m1.next()]
            while len(seen[-1].assignments) != 3:
                seen.append(await m1.next())
            assert seen[0].sequence > taken[-1].sequence + 1  # one was never taken
            added = set().union(*(g.added for g in [*taken, *seen]))
            assert added == all_partitions("t", 3), [
                (g.label, sorted(g.added), sorted(g.retained)) for g in [*taken, *seen]
            ]


async def test_a_partition_whose_task_the_application_started_is_kept_though_unseen() -> None:
    """The send handing a generation out can be cancelled after the application
    received it (the generation ended in the same step): its partitions stay
    counted as never seen, but one whose span task the application started is
    retained by the next generation, not added again (a second worker); one
    without a task is added again."""
    tp, other = TopicPartition("t", 0), TopicPartition("t", 1)
    own = Ownership(GroupConfig.create("g", ["t"], "127.0.0.1:9092"))
    gen = unhosted_generation(
        tp,
        GenerationIdentity("g", 3, "m", None, 1),
        False,
        "consumer/uniform",
        added=frozenset({tp, other}),
        rebalance_protocol="cooperative",
    )
    gen.assignments[other] = 0
    gen._spans, gen._span_host = own.spans, own
    async with own.hosting():
        own.adopt(gen)
        assert own.unseen == {tp, other}
        gen.start_soon(anyio.sleep_forever, partition=tp)
        assert kept_partitions(own.owned, own, {}) == {tp}
        gen.end(Outcome.REJOIN, "rebalance")
        await own.drop_all("test over")
