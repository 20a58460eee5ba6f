"""Ctrl-C still ends a program whose generation runs user tasks.

User tasks run hosted (gengroup.consumer.detached): as trio system tasks or
plain asyncio tasks. SIGINT must still end the program promptly, with
KeyboardInterrupt, whichever backend, and nothing may surface as
TrioInternalError.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent(
    """
    import logging
    import signal
    import sys
    import anyio

    # As a program started from a shell: the child of the test run inherits
    # the run's signal disposition and mask (an ignored or blocked SIGINT
    # survives exec), which earlier tests or libraries may have changed.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    from gengroup import ConsumerGroup
    from gengroup.broker import FakeCluster

    async def worker(gen, tp):
        async for batch in gen.fetch(tp):
            gen.mark(tp, batch.next_offset)

    async def main():
        async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap) as group:
                async for gen in group:
                    for tp in gen.assignments:
                        gen.start_soon(worker, gen, tp)
                    print("ready", flush=True)

    logging.basicConfig(level=logging.INFO, format="%(relativeCreated)d %(name)s %(message)s")
    anyio.run(main, backend=sys.argv[1])
    """
)


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_sigint_ends_the_program_with_keyboard_interrupt(backend: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, backend],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)  # a hang guard, not a timing assertion
        except subprocess.TimeoutExpired:
            # The program logs gengroup's INFO lines to stderr: they tell what
            # it was doing when it stopped answering.
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"still running 60 s after SIGINT; its stderr:\n{err}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()  # reaps it and closes the pipes
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in err
    assert "TrioInternalError" not in err


@pytest.mark.parametrize("loader", ["request_schema", "response_schema"])
def test_schema_imports_are_not_interrupted_by_ctrl_c(
    loader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first request of an API version imports a kio module. trio raises
    # KeyboardInterrupt wherever unprotected code runs; raised inside importlib
    # it can be lost (a weakref callback swallows it: the program does not
    # stop) or leave the module half imported. The loaders are KI-protected,
    # so trio delivers a Ctrl-C at the next checkpoint instead.
    import trio

    import gengroup.io.connection  # noqa: F401  (marks the loaders)
    from gengroup.protocol import framing

    seen: list[bool] = []

    def fake_kio_loader(api_key: int, version: int) -> type:
        seen.append(trio.lowlevel.currently_ki_protected())
        return object

    monkeypatch.setattr(framing, f"load_{loader.split('_')[0]}_schema", fake_kio_loader)
    cached = getattr(framing, loader)

    async def in_a_task() -> None:
        seen.append(trio.lowlevel.currently_ki_protected())  # a plain task: not protected
        cached(1, 12)

    cached.cache_clear()  # the loader runs (the classes are cached once loaded)
    try:
        trio.run(in_a_task)
    finally:
        cached.cache_clear()  # the fake class is not kept
    assert seen == [False, True]


async def test_the_host_of_a_user_task_waits_ki_protected() -> None:
    # trio.Event.wait registers the waiting task, then parks it, and is not
    # KI-protected itself: a KeyboardInterrupt raised in between ended the host
    # while still registered, and the hosted task's set() then woke a task that
    # no longer existed (TrioInternalError, about one Ctrl-C in a hundred).
    import trio

    from gengroup.consumer.detached import Hosted, host

    hosted = Hosted("worker")
    released = hosted._released
    seen: list[bool] = []

    class Watched:
        def set(self) -> None:
            released.set()

        async def wait(self) -> None:
            seen.append(trio.lowlevel.currently_ki_protected())
            await released.wait()

    hosted._released = Watched()  # type: ignore[assignment]

    async def user_task() -> None:
        await trio.lowlevel.checkpoint()

    seen.append(trio.lowlevel.currently_ki_protected())  # a plain task: not protected
    await host(hosted, user_task())
    assert seen == [False, True]
