"""Leaving ``async with ConsumerGroup`` by a cancellation, on trio and asyncio.

A cancellation of the code around the block (a cancel scope, ``asyncio.timeout``,
``task.cancel()``, asyncio.run's Ctrl-C) closes the group as
``aclose(handover=False)`` does: the tasks get ``rebalance_timeout`` (then the
stuck ones are abandoned), the member goes on beating while they return, the
marks are committed, the member leaves, and only then the cancellation goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import partial
from typing import Any

import anyio
import pytest
import trio
import trio.testing

from gengroup import ConsumerGroup, Generation, TaskStuckError, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.consumer.forming import GroupClient
from gengroup.protocol.records import NewRecord

from .helpers import EMBEDDED_SETTINGS

TP = TopicPartition("t", 0)

#: A teardown longer than the session: only beats while ending keep the member in.
LONG_TEARDOWN = {
    **EMBEDDED_SETTINGS,
    "commit_interval": 0.0,
    "session_timeout": 6.0,
    "rebalance_timeout": 10.0,
}


def produce(cluster: FakeCluster, count: int) -> None:
    cluster.produce("t", [NewRecord(None, str(i).encode(), (), 0) for i in range(count)])


def shielded_for(seconds: float) -> Any:
    """A task that marks offset 4, then stays in a shielded section for ``seconds``."""

    async def task(gen: Generation) -> None:
        gen.mark(TP, 4)
        with anyio.CancelScope(shield=True):
            await anyio.sleep(seconds)

    return task


async def test_an_outer_cancellation_closes_as_aclose_does_with_a_stuck_task(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 10)
        t0 = 0.0
        with trio.CancelScope() as outer:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **LONG_TEARDOWN) as group:
                gen = await group.next()
                gen.start_soon(shielded_for(60.0), gen, name="shielded")
                await trio.sleep(0.5)
                t0 = trio.current_time()
                outer.cancel()
                await trio.sleep_forever()
        # The cancellation came out of the block, to its own scope.
        assert outer.cancelled_caught
        # The stuck task got rebalance_timeout, then was abandoned; the member
        # beat meanwhile (the teardown outlasts the session), so the final
        # commit was accepted.
        assert trio.current_time() - t0 == pytest.approx(LONG_TEARDOWN["rebalance_timeout"])
        assert gen.commit_error is None
        assert cluster.committed_offsets("g")[TP] == 4
        assert not cluster.describe_group("g").members
        stuck = [
            r for r in caplog.records if "did not return within rebalance_timeout" in r.message
        ]
        assert len(stuck) == 1 and "shielded" in stuck[0].message


async def test_an_outer_cancellation_without_a_stuck_task_leaves_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 10)

        async def worker(gen: Generation) -> None:
            async for batch in gen.fetch(TP):
                gen.mark(TP, batch.next_offset)

        with trio.move_on_after(5.0) as outer:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **LONG_TEARDOWN) as group:
                async for gen in group:
                    gen.start_soon(worker, gen)
        assert outer.cancelled_caught
        assert trio.current_time() - outer.deadline < 0.1
        assert cluster.committed_offsets("g")[TP] == 10
        assert not cluster.describe_group("g").members


#: Real time under asyncio: a short teardown deadline, a section that outlasts the session.
ASYNCIO_SETTINGS = {
    **EMBEDDED_SETTINGS,
    "commit_interval": 0.0,
    "session_timeout": 6.0,
    "heartbeat_interval": 0.5,
    "rebalance_timeout": 1.0,
    "join_backoff": 0.1,
    "fetch_max_wait": 0.1,
    "request_timeout": 5.0,
}


@pytest.mark.parametrize("how", ["task.cancel", "asyncio.timeout", "anyio.CancelScope"])
def test_an_outer_cancellation_closes_as_aclose_does_under_asyncio(how: str) -> None:
    async def consume(cluster: FakeCluster, cancelled_at: list[float]) -> None:
        async with contextlib.AsyncExitStack() as stack:
            if how == "asyncio.timeout":
                timeout = await stack.enter_async_context(asyncio.timeout(None))
            scope = stack.enter_context(anyio.CancelScope())
            group = await stack.enter_async_context(
                ConsumerGroup("g", ["t"], cluster.bootstrap, **ASYNCIO_SETTINGS)
            )
            gen = await group.next()
            gen.start_soon(shielded_for(8.0), gen, name="shielded")
            await anyio.sleep(0.3)
            cancelled_at.append(anyio.current_time())
            if how == "task.cancel":
                asyncio.current_task().cancel()  # type: ignore[union-attr]
            elif how == "asyncio.timeout":
                timeout.reschedule(asyncio.get_running_loop().time())
            else:
                scope.cancel()
            await anyio.sleep_forever()

    async def main() -> tuple[str, float, int | None, int]:
        async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
            produce(cluster, 10)
            cancelled_at: list[float] = []
            task = asyncio.ensure_future(consume(cluster, cancelled_at))
            try:
                await task
                outcome = "returned"
            except BaseException as exc:
                outcome = type(exc).__name__
            took = anyio.current_time() - cancelled_at[0]
            committed = cluster.committed_offsets("g").get(TP)
            return outcome, took, committed, len(cluster.describe_group("g").members)

    outcome, took, committed, members = anyio.run(main, backend="asyncio")
    # The cancellation goes on: task.cancel() ends the task cancelled,
    # asyncio.timeout turns it into TimeoutError, a cancel scope catches its own.
    expected = {"task.cancel": "CancelledError", "asyncio.timeout": "TimeoutError"}
    assert outcome == expected.get(how, "returned")
    # rebalance_timeout (1 s), then the commit and the leave: not the 8 s section.
    assert 0.9 < took < 4.0
    assert committed == 4
    assert members == 0


def cut_then_mark(cluster: FakeCluster, took: list[float], then: float = 2.0) -> Any:
    """A task that fetches until cancelled, then (shielded) has the broker drop
    every connection and marks offset 4 ``then`` seconds later."""

    async def task(gen: Generation) -> None:
        try:
            async for _ in gen.fetch(TP):
                pass
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.2)
                assert cluster.cut_connections()
                await anyio.sleep(then)
                gen.mark(TP, 4)
                took.append(anyio.current_time())

    return task


async def test_a_connection_broken_while_leaving_by_a_cancellation_is_opened_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The broker drops the connections while the group closes after a
    cancellation: the final commit and the LeaveGroup open new ones. (The
    Cluster's task group was entered in the cancelled scope: every new
    connection closed itself at once, the commit failed after
    request_timeout and the member stayed in the group.)"""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 10)
        returned: list[float] = []
        with trio.CancelScope() as outer:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **LONG_TEARDOWN) as group:
                gen = await group.next()
                gen.start_soon(cut_then_mark(cluster, returned), gen)
                await trio.sleep(0.5)
                outer.cancel()
                await trio.sleep_forever()
        assert outer.cancelled_caught
        assert trio.current_time() - returned[0] < 1.0
        assert gen.commit_error is None
        assert cluster.committed_offsets("g")[TP] == 4
        assert not cluster.describe_group("g").members


def test_a_connection_broken_while_leaving_by_a_cancellation_is_opened_again_on_asyncio() -> None:
    async def main() -> tuple[float, int | None, int]:
        async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
            produce(cluster, 10)
            returned: list[float] = []
            with anyio.CancelScope() as outer:
                async with ConsumerGroup("g", ["t"], cluster.bootstrap, **ASYNCIO_SETTINGS) as g:
                    gen = await g.next()
                    gen.start_soon(cut_then_mark(cluster, returned, then=0.3), gen)
                    await anyio.sleep(0.3)
                    outer.cancel()
                    await anyio.sleep_forever()
            took = anyio.current_time() - returned[0]
            return (
                took,
                cluster.committed_offsets("g").get(TP),
                len(cluster.describe_group("g").members),
            )

    took, committed, members = anyio.run(main, backend="asyncio")
    assert took < 1.0
    assert committed == 4
    assert members == 0


# ------------------------------------------------------ a task's KeyboardInterrupt or SystemExit

QUICK = {**EMBEDDED_SETTINGS, "commit_interval": 0.0, "join_backoff": 0.1, "fetch_max_wait": 0.1}


async def interrupted_by_a_task(
    raised: BaseException, *, also_failing: bool = False, iterating: bool = True, **start: Any
) -> tuple[BaseException | None, int | None, int]:
    """A worker marks offset 4 and raises ``raised``; what leaves ``async with group``
    (caught by ``except type(raised)``), the committed offset and the members left."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 10)

        async def worker(gen: Generation) -> None:
            async for _ in gen.fetch(TP):
                gen.mark(TP, 4)
                await anyio.sleep(0.05)
                raise raised

        async def fails_while_cancelled(gen: Generation) -> None:
            try:
                await anyio.sleep_forever()
            finally:
                raise ValueError("beside it")

        caught: BaseException | None = None
        try:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **QUICK) as group:
                gen = await group.next()
                if also_failing:
                    gen.start_soon(fails_while_cancelled, gen)
                gen.start_soon(worker, gen, **start)
                if iterating:
                    await group.next()
                else:
                    await anyio.sleep_forever()  # told by a cancellation of the block
        except type(raised) as exc:
            caught = exc
        return (
            caught,
            cluster.committed_offsets("g").get(TP),
            len(cluster.describe_group("g").members),
        )


def run(fn: Any, backend: str) -> Any:
    """``anyio.run(fn)``; what escapes the event loop fails the test, not the whole run
    (a KeyboardInterrupt out of a test would stop pytest)."""
    try:
        return anyio.run(fn, backend=backend)
    except BaseException as exc:
        pytest.fail(f"escaped the event loop: {exc!r}")


async def _enter_in_a_cancelled_scope() -> bool:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        with anyio.CancelScope() as scope:
            scope.cancel()
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **QUICK):
                await anyio.sleep(1)
        return scope.cancelled_caught


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_group_entered_in_a_cancelled_scope_does_not_hang(backend: str) -> None:
    """The task that holds the group's Cluster open is shielded until the group
    closed: started from a cancelled scope without a shield, trio's start
    would wait for it to end (it is not moved to the group's task group
    then): forever."""
    assert run(_enter_in_a_cancelled_scope, backend) is True


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
@pytest.mark.parametrize("raised", [KeyboardInterrupt(), SystemExit(3)], ids=repr)
def test_a_tasks_interrupt_comes_out_of_the_group_as_itself(
    backend: str, raised: BaseException
) -> None:
    caught, committed, members = run(partial(interrupted_by_a_task, raised), backend)
    assert caught is raised
    # After the generation's teardown: the processed mark committed, the member gone.
    assert committed == 4
    assert members == 0


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_tasks_interrupt_wins_over_an_exception_beside_it(backend: str) -> None:
    raised = KeyboardInterrupt()
    caught, committed, _ = run(partial(interrupted_by_a_task, raised, also_failing=True), backend)
    assert caught is raised
    assert any("ValueError: beside it" in note for note in raised.__notes__)
    assert committed == 4


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_partition_tasks_interrupt_comes_out_as_itself(backend: str) -> None:
    raised = SystemExit(3)
    caught, committed, _ = run(partial(interrupted_by_a_task, raised, partition=TP), backend)
    assert caught is raised
    assert committed == 4


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_tasks_interrupt_reaches_a_block_that_is_not_iterating(backend: str) -> None:
    raised = KeyboardInterrupt()
    caught, committed, members = run(
        partial(interrupted_by_a_task, raised, iterating=False), backend
    )
    assert caught is raised
    assert committed == 4
    assert members == 0


async def test_a_tasks_interrupt_wins_over_a_later_task_stuck_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 10)
        raised = SystemExit(3)

        async def exits(gen: Generation) -> None:
            await trio.sleep(0.5)
            raise raised

        caught: BaseException | None = None
        try:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **LONG_TEARDOWN) as group:
                gen = await group.next()
                gen.start_soon(shielded_for(60.0), gen, name="shielded")
                gen.start_soon(exits, gen)
                with pytest.raises(TaskStuckError) as stuck:
                    await group.next()
                assert stuck.value.__cause__ is raised
        except SystemExit as exc:
            caught = exc
        assert caught is raised
        assert any("TaskStuckError" in note for note in raised.__notes__)
        assert cluster.committed_offsets("g")[TP] == 4


async def test_a_partition_tasks_exit_from_its_own_task_group_keeps_the_teardown_bounded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``sys.exit()`` inside a partition task's own task group reaches its
    host as a BaseExceptionGroup: it is that task's failure, as for a task of
    the generation (it crashed the hosting task group, which cancelled the
    generation's watchdog, beats and final commit: the teardown waited for a
    stuck task for good and the mark was lost)."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 10)

        async def exits(gen: Generation) -> None:
            await trio.sleep(0.5)
            async with anyio.create_task_group():
                raise SystemExit(3)

        caught: BaseException | None = None
        started = trio.current_time()
        try:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **LONG_TEARDOWN) as group:
                gen = await group.next()
                gen.start_soon(shielded_for(60.0), gen, name="shielded")
                gen.start_soon(exits, gen, partition=TP)
                await group.next()
        except SystemExit as exc:
            caught = exc
        took = trio.current_time() - started
        assert isinstance(caught, SystemExit) and caught.code == 3, caught
        assert took < LONG_TEARDOWN["rebalance_timeout"] + 5.0, took  # not the 60 s section
        assert cluster.committed_offsets("g")[TP] == 4


# ------------------------------------------------------ an interrupt in the group's warm-up


async def interrupted_in_the_warm_up(
    raised: BaseException, after: float, monkeypatch: pytest.MonkeyPatch
) -> tuple[BaseException | None, int, int]:
    """The group's warm-up (beside its first JoinGroup) raises ``raised``
    ``after`` seconds, as trio raises Ctrl-C in whichever task runs: what
    leaves ``async with group`` (caught by ``except type(raised)``), the
    generations formed and the members left."""

    async def warm_up(client: GroupClient, topics: set[str]) -> None:
        await anyio.sleep(after)
        raise raised

    monkeypatch.setattr(GroupClient, "warm_up", warm_up)
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        caught: BaseException | None = None
        group = ConsumerGroup("g", ["t"], cluster.bootstrap, **QUICK)
        try:
            async with group:
                async for _ in group:
                    pass
        except type(raised) as exc:
            caught = exc
        return caught, len(group.history), len(cluster.describe_group("g").members)


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
@pytest.mark.parametrize("raised", [KeyboardInterrupt(), SystemExit(3)], ids=repr)
@pytest.mark.parametrize("after", [0.0, 1.0], ids=["while joining", "in a generation"])
def test_an_interrupt_in_the_warm_up_comes_out_as_itself(
    backend: str, raised: BaseException, after: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It came out in an exception group (the group's task group's), without
    the group closing first; it comes out as a task's does, after the leave."""
    caught, generations, members = run(
        partial(interrupted_in_the_warm_up, raised, after, monkeypatch), backend
    )
    assert caught is raised, repr(caught)
    assert generations == (1 if after else 0)
    assert members == 0


# ----------------------------------- a KeyboardInterrupt or SystemExit before task_status.started()


async def interrupted_before_started(
    raised: BaseException, how: str
) -> tuple[BaseException | None, BaseException | None, int | None, int]:
    """A task of ``gen.start()`` marks offset 4 and raises ``raised`` before it
    started: from its coroutine, from the call of a plain function that returns
    none, or from inside a task group of its own. What the caller of
    ``start()`` gets, what leaves ``async with group``, the committed offset
    and the members left."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, 10)

        async def in_its_coroutine(gen: Generation, *, task_status: Any) -> None:
            gen.mark(TP, 4)
            await anyio.sleep(0.05)
            raise raised

        def when_called(gen: Generation, *, task_status: Any) -> Any:
            gen.mark(TP, 4)
            raise raised

        async def in_its_task_group(gen: Generation, *, task_status: Any) -> None:
            gen.mark(TP, 4)
            await anyio.sleep(0.05)
            async with anyio.create_task_group():
                raise raised

        fn = {
            "in its coroutine": in_its_coroutine,
            "when called": when_called,
            "in its task group": in_its_task_group,
        }[how]
        at_start: BaseException | None = None
        caught: BaseException | None = None
        try:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **QUICK) as group:
                gen = await group.next()
                try:
                    await gen.start(fn, gen)
                except BaseException as exc:
                    at_start = exc
                    raise
        except type(raised) as exc:
            caught = exc
        return (
            at_start,
            caught,
            cluster.committed_offsets("g").get(TP),
            len(cluster.describe_group("g").members),
        )


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
@pytest.mark.parametrize("how", ["in its coroutine", "when called", "in its task group"])
@pytest.mark.parametrize("raised", [KeyboardInterrupt(), SystemExit(3)], ids=repr)
def test_an_interrupt_before_started_comes_out_as_itself(
    backend: str, how: str, raised: BaseException
) -> None:
    """The caller of ``start()`` gets the interrupt itself, and so does the code
    around the block, after the final commit and the leave, as for an interrupt
    raised after it started. (Raised by the call of a plain function, under
    asyncio it stopped the event loop: no final commit, no leave; from inside
    the task's own task group it came out in two exception groups.)"""
    at_start, caught, committed, members = run(
        partial(interrupted_before_started, raised, how), backend
    )
    assert at_start is raised, repr(at_start)
    assert caught is raised, repr(caught)
    assert committed == 4
    assert members == 0
