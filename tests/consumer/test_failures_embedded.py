"""How failures reach the user, on the embedded broker in virtual time.

trio's MockClock(autojump_threshold=0) drives every sleep and timeout, so
bounded waits are asserted exactly. Each test here reproduces one way a
failure used to be lost or to hang: a final commit dropped on a retriable
refusal, a batch handed out after the generation ended, and the smaller API
misuses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode

from gengroup import (
    ConsumerGroup,
    Generation,
    GenerationEnded,
    GenerationIdentity,
    GengroupError,
    GroupClosed,
    KafkaConnectionError,
    TaskStuckError,
    TopicPartition,
)
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay, Disconnect, Drop, Fail, Intercepted
from gengroup.consumer.cadence import beat_period
from gengroup.consumer.running import CLOSED_UNDER_THE_GROUP
from gengroup.consumer.workers import run_workers
from gengroup.protocol.records import NewRecord
from gengroup.protocol.versions import ApiKey

from .helpers import EMBEDDED_SETTINGS
from .test_cooperative_embedded import unhosted_generation

#: No periodic commit: the generation's final commit is the only one.
SETTINGS = {**EMBEDDED_SETTINGS, "commit_interval": 0.0}

TP = TopicPartition("t", 0)


def produce(cluster: FakeCluster, count: int) -> None:
    cluster.produce("t", [NewRecord(None, str(i).encode(), (), 0) for i in range(count)])


def slow_to_return(
    seconds: float, then_mark: int | None = None, returned: list[float] | None = None
) -> Callable[[Generation], Awaitable[None]]:
    """A task that, once cancelled, takes ``seconds`` to return and then marks
    ``then_mark`` of TP (if given) and notes when it returned (in ``returned``)."""

    async def task(gen: Generation) -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(seconds)
            if then_mark is not None:
                gen.mark(TP, then_mark)
            if returned is not None:
                returned.append(trio.current_time())

    return task


@dataclasses.dataclass
class Refusing:
    cluster: FakeCluster
    group: ConsumerGroup
    first: Generation
    commits: list[float]


@contextlib.asynccontextmanager
async def refusing_final_commits(code: ErrorCode) -> AsyncIterator[Refusing]:
    """A first generation that marked offset 7, with every OffsetCommit refused with
    ``code`` from now on; yields the times the refused commits arrived."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 10)
        commits: list[float] = []

        def refuse(req: Intercepted) -> Fail:
            commits.append(trio.current_time())
            return Fail(code)

        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            first = await group.next()
            first.mark(TP, 7)
            control = cluster.control(ApiKey.OFFSET_COMMIT, refuse)
            try:
                yield Refusing(cluster, group, first, commits)
            finally:
                control.remove()


# ------------------------------------------------------------- item 8: the final commit


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
        ErrorCode.request_timed_out,
    ],
)
async def test_final_commit_retries_a_retriable_refusal(
    autojump_clock: trio.testing.MockClock, code: ErrorCode
) -> None:
    """One retriable refusal of the final OffsetCommit: the commit is sent again, and
    the next generation starts at the marked offset, not at 0."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 10)
        commits: list[int] = []

        def refuse_once(req: Intercepted) -> Fail | None:
            commits.append(req.broker_id)
            return Fail(code) if len(commits) == 1 else None

        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            first = await group.next()
            assert first.assignments[TP] == 0
            first.mark(TP, 7)
            cluster.control(ApiKey.OFFSET_COMMIT, refuse_once)
            first.cancel("test")
            second = await group.next()
            assert len(commits) >= 2
            assert cluster.committed_offsets("g")[TP] == 7
            assert first.committed[TP] == 7
            assert second.assignments[TP] == 7


async def test_final_commit_fenced_is_not_retried(autojump_clock: trio.testing.MockClock) -> None:
    """A fencing answer (ILLEGAL_GENERATION) ends the final commit at once: one request."""
    async with refusing_final_commits(ErrorCode.illegal_generation) as r:
        r.first.cancel("test")
        second = await r.group.next()
        assert len(r.commits) == 1
        assert TP not in r.cluster.committed_offsets("g")
        assert second.assignments[TP] == 0


async def test_final_commit_gives_up_after_the_request_timeout(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A coordinator that keeps refusing: the final commit retries with backoff for
    request_timeout, then gives up (logged once) and the group moves on."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with refusing_final_commits(ErrorCode.coordinator_load_in_progress) as r:
        t0 = trio.current_time()
        r.first.cancel("test")
        await r.first.wait_ended()
        assert trio.current_time() - t0 == pytest.approx(SETTINGS["request_timeout"], abs=0.1)
        assert len(r.commits) > 5
        gaps = [b - a for a, b in itertools.pairwise(r.commits)]
        assert max(gaps) <= 1.3  # backoff capped at 1 s, +20 % jitter
        second = await r.group.next()
        assert second.assignments[TP] == 0
    messages = [r.getMessage() for r in caplog.records]
    assert sum("final commit refused" in m for m in messages) == 1
    assert sum("final commit failed" in m for m in messages) == 1


async def test_the_marks_are_committed_as_the_generation_ends_beside_the_teardown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The marks made before the end are committed at the end's instant, while a task
    takes 2 s to return; what that task marks on its way out is committed once it
    returned, and only then does the member rejoin."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 10)
        commits: list[tuple[float, int]] = []
        joins: list[float] = []

        def commit_seen(req: Intercepted) -> None:
            offsets = [p.committed_offset for t in req.request.topics for p in t.partitions]
            commits.append((trio.current_time(), *offsets))

        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            first = await group.next()
            first.start_soon(slow_to_return(2.0, then_mark=9), first, name="slow")
            first.mark(TP, 7)
            cluster.control(ApiKey.OFFSET_COMMIT, commit_seen)
            cluster.control(ApiKey.JOIN_GROUP, lambda req: joins.append(trio.current_time()))
            t0 = trio.current_time()
            first.cancel("test")
            second = await group.next()
            assert [(round(t - t0, 3), o) for t, o in commits] == [(0.0, 7), (2.0, 9)]
            assert joins and min(joins) - t0 >= 2.0
            assert first.committed[TP] == 9 and second.assignments[TP] == 9

            # A task that marks nothing on its way out: one commit, at the end.
            second.start_soon(slow_to_return(2.0), second, name="quiet")
            second.mark(TP, 10)
            commits.clear()
            t0 = trio.current_time()
            second.cancel("test")
            third = await group.next()
            assert [(round(t - t0, 3), o) for t, o in commits] == [(0.0, 10)]
            assert third.assignments[TP] == 10


async def test_a_first_pass_that_gave_up_is_followed_by_the_second(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The coordinator refuses commits (retriable) for longer than ``request_timeout``
    from the end on, and a task takes longer still to return: the first pass gives up,
    and the second, once the task returned, commits what it marked on its way out
    (no failure is logged: none is left)."""
    caplog.set_level(logging.INFO, logger="gengroup")
    settings = {**SETTINGS, "request_timeout": 5.0}
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 10)
        t0 = 0.0

        def loading_for_6_s(req: Intercepted) -> Fail | None:
            loading = trio.current_time() - t0 < 6.0
            return Fail(ErrorCode.coordinator_load_in_progress) if loading else None

        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            first = await group.next()
            first.start_soon(slow_to_return(8.0, then_mark=9), first, name="slow")
            first.mark(TP, 7)
            cluster.control(ApiKey.OFFSET_COMMIT, loading_for_6_s)
            t0 = trio.current_time()
            first.cancel("test")
            second = await group.next()
            assert cluster.committed_offsets("g")[TP] == 9
            assert second.assignments[TP] == 9
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_the_final_commit_ends_a_request_timeout_after_an_interrupted_teardown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A coordinator that keeps refusing, and the group's own task cancelled while its
    generation tears down: the generation still ends ``request_timeout`` after its task
    returned at the latest, as with a lone final commit."""
    settings = {**SETTINGS, "request_timeout": 5.0}
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 10)
        returned: list[float] = []

        with trio.move_on_after(1000) as scope:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
                first = await group.next()
                first.start_soon(slow_to_return(2.0, returned=returned), first, name="slow")
                first.mark(TP, 7)
                cluster.control(
                    ApiKey.OFFSET_COMMIT, lambda req: Fail(ErrorCode.coordinator_load_in_progress)
                )
                t0 = trio.current_time()
                first.cancel("test")
                await trio.sleep(1.0)
                scope.cancel()
        assert first.teardown is not None and returned
        assert t0 + first.teardown - returned[0] <= settings["request_timeout"] + 0.01


# ---------------------------------------------------------- item 9: no batch after the end


async def _buffer_batches(cluster: FakeCluster, count: int) -> None:
    """Produce ``count`` records one second apart: one fetch, so one batch, each."""
    for i in range(count):
        cluster.produce("t", [NewRecord(None, str(i).encode(), (), 0)])
        await trio.sleep(1.0)


async def test_no_batch_is_handed_out_after_the_worker_ends_the_generation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A worker that never awaits in its body and cancels the generation on its
    first batch gets no second batch, though 20 are buffered."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        handed: list[int] = []

        async def greedy(gen: Generation) -> None:
            await trio.sleep(25.0)  # let the prefetcher buffer 20 batches
            async for batch in gen.fetch(TP):
                handed.append(batch.next_offset)
                gen.cancel("the worker decided to stop")

        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            gen.start_soon(greedy, gen)
            await _buffer_batches(cluster, 20)
            await gen.wait_ended()
        assert handed == [1]


async def test_no_batch_is_handed_out_once_the_generation_is_ending(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Even a worker shielded from the cancellation gets no batch once the
    generation is ending: its iteration stops."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        handed: list[int] = []
        stopped = trio.Event()

        async def shielded(gen: Generation) -> None:
            with anyio.CancelScope(shield=True):
                await gen.wait_ending()
                async for batch in gen.fetch(TP):
                    handed.append(batch.next_offset)
                stopped.set()

        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            gen.start_soon(shielded, gen)
            await _buffer_batches(cluster, 20)
            gen.cancel("test")
            await stopped.wait()
        assert handed == []


# ------------------------------------------------------------------- item 6: misuse, said clearly


async def test_a_group_used_outside_async_with_says_so() -> None:
    group = ConsumerGroup("g", ["t"], "127.0.0.1:9")
    with pytest.raises(GengroupError, match="async with"):
        await group.next()
    with pytest.raises(GengroupError, match="async with"):
        async for _ in group:
            pass


async def test_entering_a_group_closed_before_entering_raises() -> None:
    group = ConsumerGroup("g", ["t"], "127.0.0.1:9")
    await group.aclose()
    with pytest.raises(GengroupError, match="closed"):
        async with group:
            pass


async def test_next_after_close_raises_group_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            await group.next()
        with pytest.raises(GroupClosed, match="closed"):
            await group.next()
        assert [gen async for gen in group] == []


async def test_start_soon_with_a_plain_function_raises_type_error_at_the_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            with pytest.raises(TypeError, match="async function"):
                gen.start_soon(print, "hello")

            def not_async(*, task_status: Any) -> None:
                task_status.started()

            with pytest.raises(TypeError, match="async function"):
                await gen.start(not_async)
            # Nothing was started: the generation goes on.
            await trio.sleep(5.0)
            assert not gen.ending


async def test_a_missing_subscribed_topic_is_warned_once_and_assigned_once_it_exists(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gengroup")
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        settings = {**SETTINGS, "partition_watch_interval": 1.0}
        async with ConsumerGroup("g", ["t", "later"], cluster.bootstrap, **settings) as group:
            first = await group.next()
            assert set(first.assignments) == {TP}
            await trio.sleep(30.0)  # thirty watcher checks
            missing = [r for r in caplog.records if "not available" in r.getMessage()]
            assert len(missing) == 1 and missing[0].levelno == logging.WARNING
            assert "later (UNKNOWN_TOPIC_OR_PARTITION)" in missing[0].getMessage()
            cluster.create_topic("later", 2)
            await first.wait_ended()
            second = await group.next()
            assert set(second.assignments) == {
                TP,
                TopicPartition("later", 0),
                TopicPartition("later", 1),
            }
    assert any("now exist" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------- item 7: the local lease


async def test_a_member_that_hears_nothing_for_a_session_hands_out_no_more_batches(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The coordinator goes silent (every Heartbeat dropped: a frozen member
    looks the same from its side) while records keep arriving: the member stops
    handing out batches once a session timeout has passed since the newest
    request the coordinator accepted was sent, and ends the generation itself."""
    session = SETTINGS["session_timeout"]
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        handed: list[float] = []

        async def worker(gen: Generation) -> None:
            async for batch in gen.fetch(TP):
                handed.append(trio.current_time())
                gen.mark(TP, batch.next_offset)

        heartbeats: list[float] = []

        def silence(req: Intercepted) -> Drop:
            heartbeats.append(trio.current_time())
            return Drop()

        settings = {**SETTINGS, "request_timeout": 60.0, "fetch_max_wait": 0.2}
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            gen = await group.next()
            gen.start_soon(worker, gen)
            await trio.sleep(3.5)  # three heartbeats accepted
            control = cluster.control(ApiKey.HEARTBEAT, silence)
            ending: list[float] = []

            async def note_ending() -> None:
                await gen.wait_ending()
                ending.append(trio.current_time())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(note_ending)
                for _ in range(40):  # a record every half second, for twenty seconds
                    produce(cluster, 1)
                    await trio.sleep(0.5)
            control.remove()
            [ended_at] = ending
        # Beats are a period apart: the first dropped one came a period after the last accepted.
        last_accepted = heartbeats[0] - beat_period(
            SETTINGS["heartbeat_interval"], SETTINGS["session_timeout"]
        )
        assert gen.end_reason is not None and "local lease expired" in gen.end_reason
        assert handed and max(handed) < last_accepted + session + 0.01
        # It ended itself, on the instant its lease ran out, while the dropped
        # heartbeat (60 s request timeout) was still waiting for an answer.
        assert ended_at == pytest.approx(last_accepted + session, abs=0.01)


async def test_a_generation_formed_after_its_session_ran_out_is_never_handed_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The offset fetch that completes a generation crawls (a coordinator moving)
    for longer than a session timeout after the SyncGroup was sent: by then the
    coordinator may have given the partitions to another member, so that
    generation is discarded unseen and the member joins again."""
    session = SETTINGS["session_timeout"]
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 3)
        syncs: list[float] = []
        cluster.control(ApiKey.SYNC_GROUP, lambda req: syncs.append(trio.current_time()))
        cluster.control(ApiKey.OFFSET_FETCH, lambda req: Delay(session + 2.0), once=True)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            handed_at = trio.current_time()
            async for batch in gen.fetch(TP):
                gen.mark(TP, batch.next_offset)
                break
        assert len(syncs) >= 2
        # The first generation's sync was a whole session (and more) before any hand-out.
        assert handed_at >= syncs[0] + session
        assert gen.id >= 2
        assert handed_at - syncs[-1] < session


async def test_a_failed_periodic_commit_is_visible_on_the_generation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        settings = {**SETTINGS, "commit_interval": 1.0}
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            gen = await group.next()
            assert gen.commit_error is None
            # Twice: the commit follows a lost coordinator connection once by itself.
            cuts = iter([Disconnect(), Disconnect()])
            cluster.control(ApiKey.OFFSET_COMMIT, lambda req: next(cuts, None))
            gen.mark(TP, 5)
            await trio.sleep(1.5)  # the periodic commit met the disconnect
            assert isinstance(gen.commit_error, KafkaConnectionError)
            assert (gen.commits_ok, gen.commits_failed) == (0, 1)
            await trio.sleep(1.0)  # the next one went through
            assert gen.commit_error is None
            assert (gen.commits_ok, gen.commits_failed) == (1, 1)
            gen.cancel()
        assert cluster.committed_offsets("g")[TP] == 5


# ------------------------------------------------------------- item 10: long waits are said


async def test_a_slow_teardown_is_logged_once_and_counted_in_the_next_timings(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gengroup")
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            first = await group.next()
            first.start_soon(slow_to_return(5.0), first, name="slow")
            first.mark(TP, 1)
            # The commit of the marks goes out as the generation ends, beside
            # the task's 5 s: the teardown lasts as long as the longer of them.
            cluster.control(ApiKey.OFFSET_COMMIT, lambda req: Delay(7.0), once=True)
            first.cancel("test")
            second = await group.next()
            assert first.teardown is not None and 7.0 <= first.teardown < 8.0
            assert second.timings.previous_teardown == first.teardown
            assert second.timings.total >= first.teardown
            second.cancel()
    messages = [r.getMessage() for r in caplog.records]
    waiting = [m for m in messages if "waiting for 1 task(s) to return" in m]
    assert len(waiting) == 1 and "'slow'" in waiting[0]
    assert sum("coordinator to accept the final commit" in m for m in messages) == 1
    assert any("previous teardown 7." in m for m in messages), messages


# ------------------------------------------------------------- item 3: a stuck task is abandoned

STUCK_SETTINGS = dict(SETTINGS, rebalance_timeout=5.0)


async def test_leaving_async_with_after_task_stuck_error_abandons_the_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``except TaskStuckError`` around ``async with group`` is reached at once; the
    stuck task's marks up to then are committed; the task runs on, cancelled."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 10)
        release = anyio.Event()
        finished: list[bool] = []

        async def stubborn(gen: Generation) -> None:
            gen.mark(TP, 4)
            try:
                with anyio.CancelScope(shield=True):
                    await release.wait()
            finally:
                finished.append(anyio.current_effective_deadline() == -float("inf"))

        try:
            await _leave_after_a_stuck_task(cluster, stubborn)
            # The task runs on in the background, its cancel scope cancelled.
            assert finished == []
        finally:
            release.set()
        await trio.sleep(0.1)
        assert finished == [True]


async def _leave_after_a_stuck_task(cluster: FakeCluster, stubborn: Any) -> None:
    t0 = 0.0
    with pytest.raises(TaskStuckError, match="stubborn"):
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **STUCK_SETTINGS) as group:
            gen = await group.next()
            gen.start_soon(stubborn, gen, name="stubborn")
            await trio.sleep(0.5)
            t0 = trio.current_time()
            gen.cancel("test")
            await group.next()
    # Left at once: no waiting for the stuck task beyond the teardown deadline.
    assert trio.current_time() - t0 == STUCK_SETTINGS["rebalance_timeout"]
    assert gen.ended
    assert cluster.committed_offsets("g")[TP] == 4
    assert not cluster.describe_group("g").members
    with pytest.raises(TaskStuckError):
        await group.next()


async def test_aclose_while_a_task_is_stuck_returns_after_the_teardown_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """aclose() with a task blocked in a thread: returns after rebalance_timeout, and
    the group's next() raises TaskStuckError."""
    import threading

    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        release = threading.Event()

        async def blocking() -> None:
            await anyio.to_thread.run_sync(release.wait)

        group = ConsumerGroup("g", ["t"], cluster.bootstrap, **STUCK_SETTINGS)
        try:
            async with group:
                gen = await group.next()
                gen.start_soon(blocking, name="blocking")
                await trio.sleep(0.5)
                t0 = trio.current_time()
                with trio.fail_after(STUCK_SETTINGS["rebalance_timeout"] + 5):
                    await group.aclose(handover=False)  # timed from the end at once
                assert trio.current_time() - t0 == pytest.approx(
                    STUCK_SETTINGS["rebalance_timeout"], abs=0.1
                )
                with pytest.raises(TaskStuckError, match="blocking"):
                    await group.next()
        finally:
            release.set()


def test_task_errors_and_abandoning_under_asyncio() -> None:
    """The hosted tasks behave the same under asyncio (real time, short timeouts)."""
    quick = dict(
        SETTINGS,
        session_timeout=6.0,
        heartbeat_interval=0.5,
        rebalance_timeout=0.5,
        join_backoff=0.1,
        fetch_max_wait=0.1,
        request_timeout=2.0,
    )

    async def fails() -> None:
        raise ValueError("boom")

    async def main() -> tuple[BaseException | None, float]:
        async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
            raised: BaseException | None = None
            try:
                async with ConsumerGroup("g", ["t"], cluster.bootstrap, **quick) as group:
                    gen = await group.next()
                    gen.start_soon(fails)
                    await group.next()
            except ValueError as exc:
                raised = exc
            release = anyio.Event()

            async def stubborn() -> None:
                with anyio.CancelScope(shield=True):
                    await release.wait()

            t0 = None
            try:
                with pytest.raises(TaskStuckError):
                    async with ConsumerGroup("g", ["t"], cluster.bootstrap, **quick) as group:
                        gen = await group.next()
                        gen.start_soon(stubborn)
                        # Timed from the cancel: the join before it is not
                        # what is measured, and takes long on a loaded machine.
                        t0 = anyio.current_time()
                        gen.cancel()
                        await group.next()
            finally:
                release.set()
            assert t0 is not None
            return raised, anyio.current_time() - t0

    raised, took = anyio.run(main, backend="asyncio")
    assert isinstance(raised, ValueError) and str(raised) == "boom"
    assert took < 5.0


async def test_a_long_join_is_said_once(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The coordinator holds the JoinGroup (group.initial.rebalance.delay.ms = 5 s,
    heartbeat interval 1 s): one line says what the member waits for."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=5000) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            gen = await group.next()
            gen.cancel()
    said = [r.getMessage() for r in caplog.records if "still waiting" in r.getMessage()]
    assert said == ["group g: still waiting for the coordinator to answer JoinGroup"]


async def test_the_local_lease_runs_out_at_its_deadline_exactly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # 0.7 + 0.1 rounds down to 0.7999999999999999, and at that deadline
    # now - 0.7 < 0.1. Judged that way the lease had not run out when the
    # lease watch woke at its deadline, so the watch slept until the same
    # deadline again, without end in virtual time (and a consumer-protocol
    # member whose lease ran out while it formed a generation re-formed it
    # without a pause). Every check of a session compares with the deadline.
    tp = TopicPartition("t", 0)
    gen = unhosted_generation(
        tp, GenerationIdentity("g", 1, "m", None), True, "range", _session_timeout=0.1
    )
    gen.renew_lease(0.7)
    await trio.sleep_until(gen.lease_deadline())
    assert gen.lease_expired()
    assert gen.end_reason is not None and "local lease expired" in gen.end_reason


# ------------------------------------------------- a task's exception behind a stuck task


async def _raise_beside_a_stuck_task(
    cluster: FakeCluster, start: Callable[[ConsumerGroup], Awaitable[None]]
) -> TaskStuckError:
    """Run ``start`` (which makes one task raise ValueError and another ignore its
    cancellation for longer than rebalance_timeout); the TaskStuckError that comes out."""
    with pytest.raises(TaskStuckError) as caught:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **STUCK_SETTINGS) as group:
            await start(group)
    return caught.value


def _logged_with_traceback(caplog: pytest.LogCaptureFixture, error: BaseException) -> int:
    return sum(
        1
        for r in caplog.records
        if r.levelno == logging.ERROR and r.exc_info is not None and r.exc_info[1] is error
    )


async def test_a_task_error_behind_a_stuck_task_is_logged_and_carried(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """One task raises; another shields a cleanup longer than rebalance_timeout:
    TaskStuckError comes out, with the ValueError as its cause, logged once at ERROR
    with its traceback when it was raised."""
    caplog.set_level(logging.INFO, logger="gengroup")
    raised: list[BaseException] = []
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:

        async def bad() -> None:
            await trio.sleep(0.5)
            error = ValueError("worker failed")
            raised.append(error)
            raise error

        async def flushing() -> None:
            try:
                await trio.sleep_forever()
            finally:
                with anyio.CancelScope(shield=True):
                    await trio.sleep(STUCK_SETTINGS["rebalance_timeout"] + 3.0)

        async def start(group: ConsumerGroup) -> None:
            gen = await group.next()
            gen.start_soon(bad, name="bad")
            gen.start_soon(flushing, name="flushing")
            await trio.sleep(1.0)
            assert _logged_with_traceback(caplog, raised[0]) == 1  # as it happened
            await group.next()

        stuck = await _raise_beside_a_stuck_task(cluster, start)
        await trio.sleep(STUCK_SETTINGS["rebalance_timeout"] + 5.0)  # the task returned
    assert stuck.__cause__ is raised[0]
    assert "task 'bad' raised ValueError('worker failed')" in str(stuck)
    assert _logged_with_traceback(caplog, raised[0]) == 1


async def test_a_run_workers_handler_error_behind_a_stuck_handler_is_logged_and_carried(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gengroup")
    raised: list[BaseException] = []
    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        for p in range(2):
            cluster.produce("t", [NewRecord(None, b"x", (), 0)], partition=p)

        async def handler(gen: Generation, tp: TopicPartition, batch: Any) -> None:
            if tp.partition == 0:
                await trio.sleep(0.5)
                error = ValueError(f"handler failed on {tp}")
                raised.append(error)
                raise error
            with anyio.CancelScope(shield=True):
                await trio.sleep(STUCK_SETTINGS["rebalance_timeout"] + 3.0)

        async def start(group: ConsumerGroup) -> None:
            await run_workers(group, handler)

        stuck = await _raise_beside_a_stuck_task(cluster, start)
        await trio.sleep(STUCK_SETTINGS["rebalance_timeout"] + 5.0)
    assert stuck.__cause__ is raised[0]
    assert _logged_with_traceback(caplog, raised[0]) == 1


async def test_a_final_commit_on_a_cluster_closed_under_the_group_says_so(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The group's Cluster closed under it (here by ``group.cluster.aclose()``; under
    asyncio, by the event loop cancelling every task after a second Ctrl-C): the final
    commit cannot be sent, and its WARNING says so instead of telling the user that
    an ``async with`` they did not leave exited."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 10)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            first = await group.next()
            first.mark(TP, 7)
            await group.cluster.aclose()
        assert TP not in cluster.committed_offsets("g")
        assert first.commit_error is not None
    failed = [m for r in caplog.records if "final commit failed" in (m := r.getMessage())]
    assert len(failed) == 1
    assert CLOSED_UNDER_THE_GROUP in failed[0]
    assert "its `async with` exited" not in failed[0]


def test_a_failure_after_the_first_is_logged_not_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The group raises its first failure; a later one is logged once at ERROR with
    its traceback, unless the first carries it (a TaskStuckError's cause)."""
    caplog.set_level(logging.INFO, logger="gengroup")
    group = ConsumerGroup("g", ["t"], "127.0.0.1:9")
    cause = ValueError("worker failed")
    first = TaskStuckError("stuck")
    first.__cause__ = cause
    later = RuntimeError("later")
    group._report(first)
    group._report(cause)  # carried by the first: not said again
    group._report(later)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.exc_info[1] if r.exc_info else None for r in errors] == [later]
    assert group._failure is first


async def test_no_second_pass_is_made_without_time_to_try_and_the_first_is_reported(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The coordinator keeps refusing; a task returns 0.05 s after the end, so the
    first pass (retrying for request_timeout from the end) leaves the second 0.05 s:
    too little to try. No second pass is made, and the one WARNING is the first
    pass's, which tried for the whole request_timeout."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with refusing_final_commits(ErrorCode.coordinator_load_in_progress) as r:
        r.first.start_soon(slow_to_return(0.05, then_mark=8), r.first, name="slow")
        await trio.sleep(0.01)
        r.first.cancel("test")
        await r.first.wait_ended()
        sent_at_the_end = len(r.commits)
    failed = [m.getMessage() for m in caplog.records if "final commit failed" in m.getMessage()]
    assert len(failed) == 1, failed
    assert f"did not complete within {SETTINGS['request_timeout']:g} s" in failed[0]
    assert "last error: COORDINATOR_LOAD_IN_PROGRESS" in failed[0]
    assert _is_commit_timeout(r.first.commit_error)
    assert sent_at_the_end == len(r.commits)


def _is_commit_timeout(error: BaseException | None) -> bool:
    return error is not None and "did not complete within" in str(error)


@pytest.mark.parametrize("during", ["ending", "nested", "span start", "live", "stale"])
async def test_a_task_letting_its_ending_generations_generation_ended_out_is_no_failure(
    during: str, autojump_clock: trio.testing.MockClock
) -> None:
    """A worker whose generation ends under it (its fetch finds the lease run
    out: the process was frozen past the session timeout) is told so by
    GenerationEnded; one that lets it out ends as a cancelled one does, and
    the member goes on with its next generation: also out of a task group of
    the worker's own, or from starting a partition's task once a span task
    gave the partition up (the generation ending). The same exception of an
    older generation (a task using an older generation's object, a bug) is
    a failure, whether or not its own generation is ending then."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 1)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            first = await group.next()
            ended = first

            async def fetch_all(gen: Generation) -> None:
                async for _batch in gen.fetch(TP):
                    pass

            async def gives_up() -> None:
                return  # a span task returning gives its partition up, ending the generation

            async def worker(gen: Generation) -> None:
                if during in ("ending", "nested"):
                    autojump_clock.jump(2 * SETTINGS["session_timeout"])  # frozen
                if during == "stale":
                    gen.cancel("a rebalance")  # ending, its cancellation not delivered yet
                if during == "span start":
                    gen.start_soon(gives_up, partition=TP)
                    with trio.CancelScope(shield=True):  # some shielded work meanwhile
                        await trio.sleep(1)
                    gen.start_soon(gives_up, partition=TP)  # refused: the partition is gone
                if during == "nested":
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(fetch_all, ended)
                await fetch_all(ended)

            if during in ("live", "stale"):
                first.cancel("the next one")
                second = await group.next()
                second.start_soon(worker, second)
                with anyio.fail_after(60), pytest.raises(GenerationEnded):
                    async for _gen in group:  # (a failure let off: generation after generation)
                        pass
                return
            first.start_soon(worker, first)
            second = await group.next()
            assert second.id > first.id
            assert first.end_reason is not None
            if during != "span start":
                assert "local lease expired" in first.end_reason
            second.cancel()


async def test_a_classic_members_rebalance_connection_is_kept_open_by_its_heartbeats(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A generation lasting longer than ``connections_max_idle`` does not get
    its JoinGroup connection closed as idle, to be opened again on the next
    rebalance's path (TCP, and TLS and SASL where the cluster asks for them):
    the heartbeats go on it."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        settings = {**SETTINGS, "connections_max_idle": 5.0}
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            gen = await group.next()
            (joined,) = [c for (_, ch), c in group.cluster._conns.items() if ch == "group"]
            await trio.sleep(60)
            gen.cancel("a rejoin")
            second = await group.next()
            assert [c for (_, ch), c in group.cluster._conns.items() if ch == "group"] == [joined]
            second.cancel()


async def test_a_partition_task_letting_its_ending_generations_generation_ended_out_gives_it_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """As the "span start" case above, the task refused being a partition's
    task (as run_workers' workers are): its own generation's GenerationEnded
    as the generation ends is no failure; as when it returns, its partition
    is given up."""
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)

    async def gives_up() -> None:
        return

    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            first = await group.next()

            async def worker(gen: Generation) -> None:
                gen.start_soon(gives_up, partition=tp1)  # gives t[1] up: the generation ends
                with trio.CancelScope(shield=True):
                    await trio.sleep(1)
                assert gen.ending
                gen.start_soon(gives_up, partition=tp1)  # refused: its own GenerationEnded

            first.start_soon(worker, first, partition=tp0)
            with anyio.fail_after(60):
                second = await group.next()
            assert second.id > first.id
            second.cancel()
