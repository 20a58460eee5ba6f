"""Consumer-group behaviour on the embedded broker, in virtual time.

trio's MockClock(autojump_threshold=0) drives every sleep and timeout, the
broker's too, so timings are asserted exactly and the tests are deterministic.
Fault injection reproduces what a real cluster does only by accident: lost
heartbeats, rebalance answers, a moving coordinator, a moving partition
leader, a restarting broker.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode

from gengroup import ConsumerGroup, FencedInstanceId, Generation, TaskStuckError, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay, Disconnect, Drop, Fail, Intercepted
from gengroup.consumer.cadence import beat_period
from gengroup.protocol.records import NewRecord
from gengroup.protocol.versions import ApiKey

from .helpers import EMBEDDED_SETTINGS, Ledger, all_partitions, covers_exactly_once, wait_until
from .teardown import long_teardown_keeps_the_session


def produce(
    cluster: FakeCluster, topic: str, partitions: int, per_partition: int, start: int = 0
) -> None:
    for p in range(partitions):
        cluster.produce(
            topic,
            [
                NewRecord(None, f"{p}-{i}".encode(), (), 0)
                for i in range(start, start + per_partition)
            ],
            partition=p,
        )


@asynccontextmanager
async def one_member(cluster: FakeCluster) -> AsyncIterator[Ledger]:
    """Member "m" of group "g" (on "t") runs into the ledger yielded, until the block ends."""
    ledger = Ledger()
    async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ledger.member, "m", group)
            yield ledger
            tg.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("code", "keeps_member_id"),
    [(ErrorCode.rebalance_in_progress, True), (ErrorCode.illegal_generation, False)],
)
async def test_heartbeat_answer_ends_the_generation_and_rejoins(
    autojump_clock: trio.testing.MockClock, code: ErrorCode, keeps_member_id: bool
) -> None:
    """REBALANCE_IN_PROGRESS rejoins with the same member id; ILLEGAL_GENERATION resets it."""
    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            first = await group.next()
            failed_at: list[float] = []

            def fail(call: Intercepted) -> Fail:
                failed_at.append(trio.current_time())
                return Fail(code)

            cluster.control(ApiKey.HEARTBEAT, fail, once=True)
            t0 = trio.current_time()
            second = await group.next()
            assert first.ended
            assert first.end_reason == f"heartbeat answered {code.name.upper()}"
            assert (second.member_id == first.member_id) is keeps_member_id
            if keeps_member_id:
                assert second.id == first.id + 1
                # The next heartbeat is within one and a half periods (on the
                # grid, cadence.py); the rejoin is immediate.
                period = beat_period(
                    EMBEDDED_SETTINGS["heartbeat_interval"], EMBEDDED_SETTINGS["session_timeout"]
                )
                assert failed_at[0] - t0 <= 1.5 * period
                assert trio.current_time() - failed_at[0] == pytest.approx(0, abs=0.01)


async def test_lost_heartbeats_end_the_generation_after_one_session_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        settings = dict(EMBEDDED_SETTINGS, request_timeout=3.0, fetch_max_wait=0.5)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            first = await group.next()
            beats: list[float] = []

            def good(call: Intercepted) -> None:
                beats.append(trio.current_time())

            watching = cluster.control(ApiKey.HEARTBEAT, good)
            await wait_until(lambda: len(beats) >= 2, "two good heartbeats", 10)
            watching.remove()
            dropping = cluster.control(ApiKey.HEARTBEAT, lambda req: Drop())
            second = await group.next()
            dropping.remove()
            # The next heartbeats (timeout 3 s) fail; the member's lease,
            # renewed last by the last good beat, runs out a whole session
            # timeout later and ends the generation then.
            assert trio.current_time() >= beats[-1] + EMBEDDED_SETTINGS["session_timeout"]
            assert first.end_reason is not None
            assert "local lease expired" in first.end_reason
            assert second.id > first.id


async def test_coordinator_move_is_followed_and_the_generation_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The coordinator moves (its broker shutting down, as in a rolling
    restart): the old one answers NOT_COORDINATOR; the member looks the new one
    up and beats and commits there, in the same generation (the new
    coordinator loaded the group), as the Java consumer does. Moving used to
    end the generation: a rebalance of the whole group at every step of a
    rolling restart."""
    tp = TopicPartition("t", 0)
    async with FakeCluster(brokers=3, topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            gen = await group.next()
            old = cluster.coordinator_of("g")
            new = (old + 1) % 3
            beats: list[int] = []
            cluster.control(ApiKey.HEARTBEAT, lambda call: beats.append(call.broker_id))
            cluster.move_coordinator("g", new)
            gen.mark(tp, 5)
            await trio.sleep(4 * EMBEDDED_SETTINGS["session_timeout"])
            assert not gen.ending, gen.end_reason
            assert group._client.coordinator.node == new
            assert old in beats and beats[-1] == new
            assert cluster.committed_offsets("g")[tp] == 5


async def test_partition_leader_change_is_followed_without_losing_records(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=3, topics={"t": 3}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, "t", 3, 100)
        async with one_member(cluster) as ledger:
            await ledger.wait_for(lambda: len(ledger.processed) == 300, "the first 300")
            for p in range(3):
                cluster.move_partition_leader("t", p, (p + 1) % 3)
            produce(cluster, "t", 3, 100, start=100)
            await ledger.wait_for(lambda: len(ledger.processed) == 600, "all 600")
            # The generation did not need to end: only the fetcher moved.
            assert len(ledger.generations["m"]) == 1
        assert all(n == 1 for n in ledger.processed.values())


async def test_broker_restart_is_survived(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(brokers=1, topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, "t", 2, 50)
        async with one_member(cluster) as ledger:
            await ledger.wait_for(lambda: len(ledger.processed) == 100, "the first 100")
            await cluster.restart_broker(0, downtime=3.0)
            produce(cluster, "t", 2, 50, start=50)
            await ledger.wait_for(lambda: len(ledger.processed) == 200, "all 200", timeout=120)
        assert set(ledger.processed) == {f"{p}-{i}".encode() for p in range(2) for i in range(100)}


async def test_teardown_deadline_is_exactly_the_rebalance_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def stubborn() -> None:
        with anyio.CancelScope(shield=True):
            await anyio.sleep(1000.0)

    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            gen = await group.next()
            gen.start_soon(stubborn, name="stubborn")
            await anyio.sleep(0.5)
            t0 = trio.current_time()
            gen.cancel("test")
            with pytest.raises(TaskStuckError, match="stubborn"):
                await group.next()
            assert trio.current_time() - t0 == EMBEDDED_SETTINGS["rebalance_timeout"]


async def test_a_partition_task_revoked_after_the_teardown_began_gets_the_whole_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A partition's task is cancelled only once the generation's own tasks returned
    (here after 3 s): it still gets rebalance_timeout from its cancellation before
    TaskStuckError names it (the generation-scoped task is not named: it returned)."""

    async def slow_to_return() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(3.0)

    async def stubborn() -> None:
        with anyio.CancelScope(shield=True):
            await anyio.sleep(1000.0)

    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            gen = await group.next()
            gen.start_soon(slow_to_return, name="slow")
            gen.start_soon(stubborn, name="stubborn", partition=TopicPartition("t", 0))
            await anyio.sleep(0.5)
            t0 = trio.current_time()
            gen.cancel("test")
            with pytest.raises(TaskStuckError, match="1 task") as caught:
                await group.next()
            assert "stubborn" in str(caught.value) and "slow" not in str(caught.value)
            assert trio.current_time() - t0 == 3.0 + EMBEDDED_SETTINGS["rebalance_timeout"]


async def test_partition_tasks_returning_meanwhile_do_not_postpone_the_report(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A generation-scoped task ignores its cancellation; three partition tasks
    return on their own meanwhile, one after another, each just before the stuck
    task's deadline. Each task is timed from its own cancellation: TaskStuckError
    comes exactly rebalance_timeout after the generation's end, names the stuck
    task only, and says what cancelled it when."""
    timeout = EMBEDDED_SETTINGS["rebalance_timeout"]

    async def stubborn() -> None:
        with anyio.CancelScope(shield=True):
            await anyio.sleep(1000.0)

    async def returns_on_its_own(k: int) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0.5 + (k + 1) * (timeout - 1.0))

    async with FakeCluster(topics={"t": 3}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            gen = await group.next()
            gen.start_soon(stubborn, name="stubborn")
            for k in range(3):
                tp = TopicPartition("t", k)
                gen.start_soon(returns_on_its_own, k, name=f"returns {k}", partition=tp)
            await anyio.sleep(0.5)
            t0 = trio.current_time()
            gen.cancel("test")
            with pytest.raises(TaskStuckError, match="1 task") as caught:
                await group.next()
            assert trio.current_time() - t0 == timeout
            message = str(caught.value)
            assert "'stubborn', cancelled 20.0 s ago (generation 1 (#1) ended" in message
            assert "returns" not in message


async def test_three_members_share_partitions_in_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=3, topics={"t": 12}, initial_rebalance_delay_ms=3000) as cluster:
        produce(cluster, "t", 12, 20)
        ledger = Ledger()
        every = all_partitions("t", 12)

        async def member(name: str) -> None:
            async with ConsumerGroup(
                "g", ["t"], cluster.bootstrap, client_id=name, **EMBEDDED_SETTINGS
            ) as g:
                await ledger.member(name, g)

        async with anyio.create_task_group() as tg:
            for name in ("a", "b", "c"):
                tg.start_soon(member, name)
            await ledger.wait_for(
                lambda: (
                    len(ledger.current()) == 3
                    and covers_exactly_once(ledger.current().values(), every)
                ),
                "3 members",
            )
            first: Generation = ledger.current()["a"]
            # Everyone arrived during the initial delay: one generation, formed
            # when the 3 s delay expired.
            assert first.id == 1
            await ledger.wait_for(lambda: len(ledger.processed) == 240, "every record")
            tg.cancel_scope.cancel()
        assert not ledger.overlaps
        assert TopicPartition("t", 0) in every


class AppError(Exception):
    pass


async def test_an_exception_in_the_body_leaves_the_group_unwrapped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        with pytest.raises(AppError):
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
                gen = await group.next()
                gen.mark(TopicPartition("t", 0), 0)
                raise AppError("the application failed")
        described = cluster.describe_group("g")
        assert described.group_state == "Empty", "the member sent LeaveGroup"


@pytest.mark.parametrize("chained", [True, False], ids=["raise-from", "raised-in-except"])
async def test_a_tasks_exception_comes_out_with_its_cause_and_context(
    autojump_clock: trio.testing.MockClock, chained: bool
) -> None:
    """What a task raised comes out of ``async for`` as itself, its chain
    intact: the traceback still shows what it was handling."""
    raised: list[BaseException] = []

    async def task(gen: Generation, tp: TopicPartition) -> None:
        try:
            {}["order-42"]
        except KeyError as missing:
            err = AppError("lookup failed")
            raised.append(err)
            if chained:
                raise err from missing
            raise err  # noqa: B904 -- the implicit context is what is tested

    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        with pytest.raises(AppError) as caught:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
                async for gen in group:
                    for tp in gen.assignments:
                        gen.start_soon(task, gen, tp)
    assert caught.value is raised[0]
    assert isinstance(caught.value.__context__, KeyError)
    assert caught.value.__suppress_context__ is chained
    if chained:
        assert caught.value.__cause__ is caught.value.__context__
    else:
        assert caught.value.__cause__ is None


async def test_a_mark_that_is_not_an_offset_fails_at_the_call_and_holds_back_no_other_mark(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An offset read back as a float (from JSON, say) is a TypeError of
    ``mark`` naming the partition; the other partition's processed records are
    committed at the end all the same (they used to fail with it, in the
    commit's encoding: a bare ``struct.error``, nothing committed)."""
    good_marked = anyio.Event()

    async def handle(gen: Generation, tp: TopicPartition) -> None:
        async for batch in gen.fetch(tp):
            if tp.partition == 1:
                gen.mark(tp, batch.next_offset)
                if batch.next_offset == 10:
                    good_marked.set()
            else:
                await good_marked.wait()
                gen.mark(tp, float(batch.next_offset))  # type: ignore[arg-type]

    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, "t", 2, 10)
        with pytest.raises(TypeError, match=r"offset of t\[0\] must be an integer, not float"):
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
                async for gen in group:
                    for tp in gen.assignments:
                        gen.start_soon(handle, gen, tp)
        assert cluster.committed_offsets("g") == {TopicPartition("t", 1): 10}


async def test_leaders_watcher_covers_topics_only_other_members_subscribe_to(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Semantic 7: the leader subscribes to "a" only; a follower also to "b".
    Partitions added to "b" must still lead to a new generation that has them."""
    async with FakeCluster(topics={"a": 1, "b": 1}, initial_rebalance_delay_ms=0) as cluster:
        ledger = Ledger()
        settings = dict(EMBEDDED_SETTINGS, partition_watch_interval=2.0)

        async def member(name: str, topics: list[str]) -> None:
            async with ConsumerGroup(
                "g", topics, cluster.bootstrap, client_id=name, **settings
            ) as g:
                await ledger.member(name, g)

        async with anyio.create_task_group() as tg:
            tg.start_soon(member, "leader", ["a"])
            await ledger.wait_for(lambda: "leader" in ledger.current(), "the leader's generation")
            tg.start_soon(member, "follower", ["a", "b"])
            await ledger.wait_for(
                lambda: (
                    len(ledger.current()) == 2
                    and TopicPartition("b", 0) in ledger.current()["follower"].assignments
                ),
                "both members",
            )
            assert ledger.current()["leader"].is_leader
            before = ledger.current()["follower"].id
            cluster.create_partitions("b", 3)
            await ledger.wait_for(
                lambda: (
                    len(ledger.current()) == 2
                    and ledger.current()["follower"].id > before
                    and {tp for tp in ledger.current()["follower"].assignments if tp.topic == "b"}
                    == all_partitions("b", 3)
                ),
                "a generation with b's new partitions",
            )
            tg.cancel_scope.cancel()


async def test_static_member_restart_keeps_its_partitions_without_leave_group(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 4}, initial_rebalance_delay_ms=0) as cluster:
        settings = dict(EMBEDDED_SETTINGS, group_instance_id="pod-1")
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            first = await group.next()
        # Closing a static member sends no LeaveGroup: the coordinator keeps it.
        described = cluster.describe_group("g")
        assert described.group_state == "Stable"
        assert [m.group_instance_id for m in described.members] == ["pod-1"]
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            second = await group.next()
        assert set(second.assignments) == set(first.assignments) == all_partitions("t", 4)
        # The restart within the session timeout did not rebalance the group.
        assert second.id == first.id


async def test_start_waits_for_task_status_and_returns_its_value(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def ready_after_a_while(delay: float, *, task_status: Any) -> None:
        await anyio.sleep(delay)
        task_status.started(f"ready after {delay}")
        await anyio.sleep_forever()

    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            gen = await group.next()
            t0 = trio.current_time()
            value = await gen.start(ready_after_a_while, 2.5, name="slow starter")
            assert value == "ready after 2.5"
            assert trio.current_time() - t0 == 2.5
            gen.cancel("done")


async def test_commit_follows_a_moved_coordinator(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(brokers=3, topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        settings = dict(EMBEDDED_SETTINGS, commit_interval=0)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            gen = await group.next()
            tp = TopicPartition("t", 0)
            cluster.move_coordinator("g", (cluster.coordinator_of("g") + 1) % 3)
            gen.mark(tp, 0)
            await gen.commit({tp: 0})
            assert cluster.committed_offsets("g")[tp] == 0


async def test_leader_losing_its_connection_before_sync_rejoins(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from gengroup.broker.faults import Disconnect

    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        # The first Metadata request is the leader's, between JoinGroup and SyncGroup.
        cluster.control(ApiKey.METADATA, lambda req: Disconnect(), once=True)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            gen = await group.next()
            assert set(gen.assignments) == all_partitions("t", 2)


async def test_closing_during_a_join_returns_promptly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.control(ApiKey.JOIN_GROUP, lambda req: Drop())
        t0 = trio.current_time()
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            await anyio.sleep(1.0)
            await group.aclose()
        # aclose() cancelled the join in flight instead of waiting it out.
        assert trio.current_time() - t0 < EMBEDDED_SETTINGS["rebalance_timeout"]
        with pytest.raises(Exception, match="closed"):
            await group.next()


async def test_a_leader_that_moved_since_it_was_cached_is_followed_at_a_generations_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A new generation's prefetcher starts from the leaders the metadata cache
    names. Here they move after the refresh made beside JoinGroup, while
    SyncGroup is under way: the first Fetch goes to the old leaders, which
    answer NOT_LEADER_OR_FOLLOWER, the partitions are looked up again and
    fetched from their new leaders, nothing lost or repeated."""
    async with FakeCluster(brokers=3, topics={"t": 3}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, "t", 3, 100)
        old: dict[int, int] = {}  # partition -> its leader before the move
        stale_fetches: list[int] = []  # brokers a Fetch reached after it lost its partitions

        def move_leaders(call: Intercepted) -> None:
            for p in range(3):
                part = cluster.state.topics.partition("t", p)
                assert part is not None
                old[p] = part.leader
                cluster.move_partition_leader("t", p, (part.leader + 1) % 3)

        def fetch(call: Intercepted) -> None:
            asked = {p.partition for t in call.request.topics for p in t.partitions}
            if any(old.get(p) == call.broker_id for p in asked):
                stale_fetches.append(call.broker_id)

        async with one_member(cluster) as ledger:
            await ledger.wait_for(lambda: len(ledger.processed) == 300, "the first 300")
            cluster.control(ApiKey.SYNC_GROUP, move_leaders, once=True)
            watch = cluster.control(ApiKey.FETCH, fetch)
            ledger.generations["m"][-1].cancel("a new generation")
            await ledger.wait_for(lambda: len(ledger.generations["m"]) == 2, "the next generation")
            produce(cluster, "t", 3, 100, start=100)
            await ledger.wait_for(lambda: len(ledger.processed) == 600, "all 600")
            watch.remove()
        assert stale_fetches, "no Fetch went to a leader that had moved"
        assert all(n == 1 for n in ledger.processed.values())


async def test_periodic_commits_refused_not_coordinator_keep_the_generation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """OffsetCommit answered NOT_COORDINATOR for 5 s (a coordinator moving
    while its broker shuts down: the commit follows it once, then is refused
    again): the periodic commit is retried at its next interval, the
    generation goes on, and the marks are committed once it is served. A
    refused periodic commit used to end the generation."""
    tp = TopicPartition("t", 0)
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            gen = await group.next()
            moving_until = trio.current_time() + 5.0

            def moving(call: Intercepted) -> Fail | None:
                return Fail(16) if trio.current_time() < moving_until else None

            refused = cluster.control(ApiKey.OFFSET_COMMIT, moving)
            gen.mark(tp, 7)
            await trio.sleep(10.0)
            assert refused.handled >= 2
            assert not gen.ending, gen.end_reason
            assert cluster.committed_offsets("g")[tp] == 7


async def test_a_heartbeat_without_answer_is_logged_naming_the_coordinator(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A coordinator that stops answering heartbeats: the one line saying so
    names the node and how long the beat waited (it used to read ``heartbeat
    failed ()``)."""
    caplog.set_level(logging.INFO, logger="gengroup")
    settings = {**EMBEDDED_SETTINGS, "request_timeout": 3.0}
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            await group.next()
            cluster.control(ApiKey.HEARTBEAT, lambda call: Drop())
            await trio.sleep(8.0)
    [said] = [r.getMessage() for r in caplog.records if "heartbeat failed" in r.getMessage()]
    assert "coordinator node 0 did not answer the heartbeat within 3 s" in said, said


async def test_a_leader_assigns_topics_only_other_members_subscribe_to(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Member a (the leader) subscribes to [a]; member b to [a, b]: the
    generation with both assigns every partition of a and of b at once (the
    leader refreshes the metadata of the topics it learnt from JoinGroup's
    answer), with the partition watcher off and no WARNING that b is missing.
    The leader used to assign only the topics it knew of before JoinGroup."""
    caplog.set_level(logging.INFO, logger="gengroup")
    settings = {**EMBEDDED_SETTINGS, "watch_partition_changes": False}
    async with FakeCluster(topics={"a": 2, "b": 3}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["a"], cluster.bootstrap, **settings) as leader:
            first = await leader.next()
            assert first.is_leader
            async with ConsumerGroup("g", ["a", "b"], cluster.bootstrap, **settings) as other:
                async with trio.open_nursery() as nursery:
                    seen: dict[str, Generation] = {}

                    async def take(name: str, group: ConsumerGroup) -> None:
                        seen[name] = await group.next()

                    nursery.start_soon(take, "leader", leader)
                    nursery.start_soon(take, "other", other)
                assigned = set(seen["leader"].assignments) | set(seen["other"].assignments)
    everything = {TopicPartition("a", p) for p in range(2)} | {
        TopicPartition("b", p) for p in range(3)
    }
    assert assigned == everything
    assert not [r for r in caplog.records if "not available" in r.getMessage()]


async def test_a_static_member_replaced_by_another_says_why_it_ended(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two processes share group_instance_id "pod-1": the second replaces the
    first, whose next heartbeat is answered FENCED_INSTANCE_ID. The error out
    of its ``async for`` and its generation's end reason both say so (the end
    reason used to blame its task: "task ... exited")."""
    settings = dict(EMBEDDED_SETTINGS, group_instance_id="pod-1")
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        with pytest.raises(FencedInstanceId) as fenced:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as first:
                gen = await first.next()
                async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as second:
                    await second.next()
                    await first.next()
    assert "another member with group_instance_id='pod-1' joined" in str(fenced.value)
    assert gen.end_reason is not None
    assert gen.end_reason.startswith("heartbeat answered FENCED_INSTANCE_ID"), gen.end_reason


@pytest.mark.parametrize("cancelled", [False, True], ids=["rebalance", "cancelled"])
async def test_a_member_beats_while_its_tasks_return_so_a_long_teardown_keeps_its_session(
    autojump_clock: trio.testing.MockClock, cancelled: bool
) -> None:
    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, "t", 2, 10)

        async def committed(tp: TopicPartition) -> int | None:
            return cluster.committed_offsets("g").get(tp)

        await long_teardown_keeps_the_session(
            cluster.bootstrap, "g", "t", EMBEDDED_SETTINGS, committed, cancelled=cancelled
        )


async def test_the_beats_of_a_long_teardown_look_a_forgotten_coordinator_up_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A commit during the teardown that meets a broken connection makes the
    member forget its coordinator and look it up again (slowly, here): the
    beats look it up too and go on, so the member is still not evicted."""
    settings = {**EMBEDDED_SETTINGS, "commit_interval": 0.0}
    tp = TopicPartition("t", 0)
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, "t", 1, 10)
        beats: list[float] = []
        cluster.control(ApiKey.HEARTBEAT, lambda req: beats.append(trio.current_time()))
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            gen = await group.next()

            async def flushes_on_the_way_out() -> None:
                try:
                    await anyio.sleep_forever()
                finally:
                    with anyio.CancelScope(shield=True):
                        await anyio.sleep(0.3)
                        cluster.control(ApiKey.OFFSET_COMMIT, lambda r: Disconnect(), once=True)
                        cluster.control(ApiKey.FIND_COORDINATOR, lambda r: Delay(2.5), once=True)
                        gen.mark(tp, 4)
                        await gen.commit()  # the connection breaks once: looked up again
                        await anyio.sleep(settings["session_timeout"] + 3.0)
                        gen.mark(tp, 6)

            gen.start_soon(flushes_on_the_way_out, name="flush")
            await anyio.sleep(2.5)
            ended_at = trio.current_time()
            gen.cancel("the application asks for a new generation")
            following = await group.next()
        assert following.member_id == gen.member_id, "still a member after the teardown"
        assert cluster.committed_offsets("g")[tp] == 6
        after = [t - ended_at for t in beats if t > ended_at]
        assert len(after) >= settings["session_timeout"], after
        assert all(b - a > 0.5 for a, b in itertools.pairwise(after)), after


async def test_a_tasks_exception_commits_the_marks_at_once_beside_the_teardown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The final commit's first pass runs for an end by a task's exception too:
    what was marked is committed at once, not after a slow task returned."""
    settings = {**EMBEDDED_SETTINGS, "commit_interval": 0.0}
    tp = TopicPartition("t", 0)
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, "t", 1, 10)
        seen: dict[str, float] = {}

        async def watch() -> None:
            while cluster.committed_offsets("g").get(tp) != 5:
                await anyio.sleep(0.01)
            seen["committed"] = trio.current_time()

        async with anyio.create_task_group() as outer:
            outer.start_soon(watch)
            with pytest.raises(AppError):
                async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
                    gen = await group.next()

                    async def fails() -> None:
                        await anyio.sleep(0.5)
                        gen.mark(tp, 5)
                        seen["raised"] = trio.current_time()
                        raise AppError("the task failed")

                    async def slow_to_return() -> None:
                        try:
                            await anyio.sleep_forever()
                        finally:
                            with anyio.CancelScope(shield=True):
                                await anyio.sleep(8.0)

                    gen.start_soon(fails, name="fails")
                    gen.start_soon(slow_to_return, name="slow")
                    await group.next()
        assert seen["committed"] - seen["raised"] < 1.0
