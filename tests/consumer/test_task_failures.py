"""Several tasks failing in one generation: the first comes out of ``async for``
as itself, the others are named in its notes and logged -- on both backends."""

from __future__ import annotations

import logging

import anyio
import pytest

from gengroup import ConsumerGroup, Generation
from gengroup.broker import FakeCluster

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
