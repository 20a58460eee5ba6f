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
    import sys
    import anyio
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
        _, err = proc.communicate(timeout=30)  # a hang guard, not a timing assertion
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in err
    assert "TrioInternalError" not in err
