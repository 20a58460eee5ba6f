"""Several tasks failing in one generation: the first comes out of ``async for``
as itself, the others are named in its notes and logged -- on both backends."""

from __future__ import annotations

import logging
import traceback

import anyio
import anyio.abc
import pytest

from gengroup import ConsumerGroup, Generation, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.membership.member import Outcome

SETTINGS = {"session_timeout": 10.0, "heartbeat_interval": 1.0, "join_backoff": 0.1}


async def two_failing_tasks() -> BaseException | None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:

        async def raises_first(ready: anyio.Event) -> None:
            await ready.wait()
            raise ValueError("the first failure")

        async def raises_while_cancelled(ready: anyio.Event) -> None:
            try:
                ready.set()
                await anyio.sleep_forever()
            finally:
                raise KeyError("raised during cancellation")

        try:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
                async for gen in group:
                    ready = anyio.Event()
                    gen.start_soon(raises_while_cancelled, ready)
                    gen.start_soon(raises_first, ready)
                    await gen.wait_ended()
        except Exception as exc:
            return exc
    return None


async def one_failing_task() -> BaseException | None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:

        async def fails(gen: Generation) -> None:
            raise ValueError("alone")

        try:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
                async for gen in group:
                    gen.start_soon(fails, gen)
                    await gen.wait_ended()
        except Exception as exc:
            return exc
    return None


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_the_first_failure_comes_out_as_itself_with_the_others_in_notes(
    backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    exc = anyio.run(two_failing_tasks, backend=backend)
    assert type(exc) is ValueError and str(exc) == "the first failure", repr(exc)
    notes = getattr(exc, "__notes__", [])
    assert len(notes) == 1 and "KeyError" in notes[0], notes
    # Each is logged once, with its traceback, as its task raised it.
    logged = [r.exc_info[1] for r in caplog.records if r.levelno == logging.ERROR and r.exc_info]
    assert [type(e) for e in logged] == [ValueError, KeyError] and logged[0] is exc, logged


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_single_failure_comes_out_without_notes(backend: str) -> None:
    exc = anyio.run(one_failing_task, backend=backend)
    assert type(exc) is ValueError and str(exc) == "alone", repr(exc)
    assert not getattr(exc, "__notes__", [])


async def start_failures(caplog: pytest.LogCaptureFixture) -> None:
    """A task of ``gen.start()`` failing before it started, then one failing after."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        raised: list[BaseException] = []

        async def never_starts(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            raised.append(OSError("port in use"))
            raise raised[-1]

        async def raises_a_group(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            raised.append(ExceptionGroup("its own group", [OSError("port in use")]))
            raise raised[-1]

        go = anyio.Event()

        async def fails_once_started(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            task_status.started()
            await go.wait()
            raise ValueError("after it started")

        with pytest.raises(ValueError, match="after it started"):
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
                first = await group.next()
                # Before it started: the caller of start() gets it, and may go on.
                # It is the task's exception itself on both backends, so that
                # ``except OSError`` works, traceback and all.
                with pytest.raises(OSError) as oserror:
                    await first.start(never_starts)
                assert oserror.value is raised[-1]
                assert oserror.value.__context__ is None, repr(oserror.value.__context__)
                assert "never_starts" in "".join(traceback.format_tb(oserror.tb))
                # Called from the block: the generation ends as when a task
                # returns, so a loop that handled the failure gets the next one.
                middle = await group.next()
                assert first.end_outcome is Outcome.REJOIN
                assert "exited" in first.end_reason, first.end_reason
                # A group the task raised itself is passed on as it is.
                with pytest.raises(ExceptionGroup) as caught:
                    await middle.start(raises_a_group)
                assert caught.value is raised[-1]
                second = await group.next()
                assert middle.end_outcome is Outcome.REJOIN
                assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
                # After it started: the generation's failure, logged as it happens.
                await second.start(fails_once_started)
                go.set()
                await second.wait_ended()
                assert second.end_outcome is Outcome.FATAL
                await group.next()
        logged = [
            r.exc_info[1] for r in caplog.records if r.levelno >= logging.ERROR and r.exc_info
        ]
        assert [type(e) for e in logged] == [ValueError], logged


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_start_that_failed_before_it_started_is_its_callers_alone(
    backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The exception went to the caller of ``start()``, which may handle it: not
    logged; called from the block, the generation ends as when a task returns
    (REJOIN) and the group goes on; a task that fails after it started ends the
    generation as a failure."""
    anyio.run(start_failures, caplog, backend=backend)


async def start_failing_as_its_caller_is_cancelled() -> tuple[str, list[str]]:
    """``fn`` raises before it started at the moment its caller's scope is cancelled."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep(logging.ERROR)
    logging.getLogger("gengroup").addHandler(keep)
    try:
        async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
                gen = await group.next()
                deadline = anyio.CancelScope()
                failure = OSError("port in use")

                async def fn(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                    deadline.cancel()  # the caller's deadline passes just now
                    raise failure

                seen = "nothing"
                try:
                    with deadline:
                        await gen.start(fn)
                except OSError as exc:
                    seen = "OSError" if exc is failure else repr(exc)
    finally:
        logging.getLogger("gengroup").removeHandler(keep)
    logged = [r.getMessage() for r in records if r.exc_info and r.exc_info[1] is failure]
    return seen, logged


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_start_failing_as_its_caller_is_cancelled_is_not_lost(backend: str) -> None:
    """Under trio the exception wins over the caller's cancellation (its scope
    cancels it again at its next checkpoint); under asyncio, which delivers a
    cancellation once, the cancellation goes on and the exception is logged."""
    seen, logged = anyio.run(start_failing_as_its_caller_is_cancelled, backend=backend)
    if backend == "trio":
        assert seen == "OSError", seen
        assert not logged, logged
    else:
        assert seen == "nothing", seen  # the cancelled scope took the cancellation
        assert len(logged) == 1 and "as its caller was cancelled" in logged[0], logged


async def start_failing_in_a_worker(failure: BaseException) -> tuple[str, str, int | None]:
    """A generation's own task calls ``gen.start(fn)``; ``fn`` marks offset 4 and
    raises ``failure`` before it started. What the worker saw, what came out of
    the group, and the committed offset."""
    tp = TopicPartition("t", 0)
    seen = "nothing"
    came_out = "nothing"
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:

        async def child(gen: Generation, *, task_status: anyio.abc.TaskStatus[None]) -> None:
            gen.mark(tp, 4)
            await anyio.sleep(0.05)
            raise failure

        with anyio.fail_after(30):
            try:
                async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
                    gen = await group.next()

                    async def worker() -> None:
                        nonlocal seen
                        try:
                            await gen.start(child, gen)
                        except Exception as exc:
                            seen = "itself" if exc is failure else repr(exc)
                            return
                        except BaseException as exc:
                            seen = "itself" if exc is failure else repr(exc)
                            raise

                    gen.start_soon(worker)
                    await gen.wait_ended()
            except BaseException as exc:  # what came out is the result
                came_out = "itself" if exc is failure else repr(exc)
        committed = cluster.committed_offsets("g").get(tp)
    return seen, came_out, committed


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_worker_gets_its_starts_failure_before_it_started(backend: str) -> None:
    """The worker calling ``start()`` is one of the generation's tasks: it gets the
    exception itself, not a cancellation (the failed start does not end the
    generation), and may handle it; the worker returning then ends the generation."""
    seen, came_out, committed = anyio.run(
        start_failing_in_a_worker, OSError("port in use"), backend=backend
    )
    assert seen == "itself", seen
    assert came_out == "nothing", came_out
    assert committed == 4


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_an_interrupt_before_started_in_a_worker_comes_out_of_the_group(backend: str) -> None:
    """``SystemExit`` raised before ``started()`` in a start called by a worker comes
    out of ``async with`` as itself, after the final commit, on both backends."""
    seen, came_out, committed = anyio.run(start_failing_in_a_worker, SystemExit(3), backend=backend)
    assert seen == "itself", seen
    assert came_out == "itself", came_out
    assert committed == 4


async def interrupt_as_the_worker_is_cancelled() -> tuple[str, str, int | None]:
    """A worker's ``gen.start(fn)``: ``fn`` marks offset 4, cancels the worker's own
    scope, then raises SystemExit before it started."""
    tp = TopicPartition("t", 0)
    failure = SystemExit(3)
    seen = came_out = "nothing"
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        with anyio.fail_after(30):
            try:
                async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
                    gen = await group.next()
                    deadline = anyio.CancelScope()

                    async def fn(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                        gen.mark(tp, 4)
                        deadline.cancel()
                        raise failure

                    async def worker() -> None:
                        nonlocal seen
                        try:
                            with deadline:
                                await gen.start(fn)
                            seen = "the cancelled scope swallowed it"
                        except BaseException as exc:
                            seen = "itself" if exc is failure else repr(exc)
                            raise

                    gen.start_soon(worker)
                    await gen.wait_ended()
            except BaseException as exc:  # what came out is the result
                came_out = "itself" if exc is failure else repr(exc)
        committed = cluster.committed_offsets("g").get(tp)
    return seen, came_out, committed


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_an_interrupt_before_started_wins_over_its_callers_cancellation(backend: str) -> None:
    """Under asyncio too (which delivers a cancellation once), SystemExit raised
    before ``started()`` at the moment the caller's scope is cancelled reaches the
    caller as itself, and comes out of the group after the final commit."""
    assert anyio.run(interrupt_as_the_worker_is_cancelled, backend=backend) == (
        "itself",
        "itself",
        4,
    )


async def worker_timing_out_a_start() -> tuple[str, bool]:
    """A worker gives up on a slow ``gen.start(fn)`` after 0.2 s."""
    outcome = "nothing"
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        with anyio.fail_after(30):
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
                gen = await group.next()

                async def slow(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                    await anyio.sleep(10)
                    task_status.started()

                async def worker() -> None:
                    nonlocal outcome
                    with anyio.move_on_after(0.2):
                        await gen.start(slow)
                    outcome = "moved on"
                    await anyio.sleep_forever()

                gen.start_soon(worker)
                await anyio.sleep(1)
                return outcome, gen.ending
    raise AssertionError("unreachable")


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_worker_giving_up_on_a_start_keeps_its_generation(backend: str) -> None:
    """The start the worker's own timeout cut never started: the generation goes
    on, and the worker with it."""
    assert anyio.run(worker_timing_out_a_start, backend=backend) == ("moved on", False)
