"""The scaffold the examples share, so that each one shows only its lesson.

* :func:`bootstrap_or_embedded`: the cluster given with ``--bootstrap``, else an
  embedded broker started in this process (no JVM, nothing to install).
* :func:`consuming`: the group loop of every service, run in the background:
  in each generation, one worker task per assigned partition::

      async for gen in group:
          for tp in gen.assignments:
              gen.start_soon(worker, gen, tp, *args)

* :func:`until`: wait (at most a minute) until the example did its work.
* :func:`command`: an example's command line, with ``--bootstrap`` (and ``--count``).

Each example is still a command of its own: ``python examples/NAME.py --help``.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio

import gengroup
from gengroup.broker import FakeCluster

__all__ = ["bootstrap_or_embedded", "command", "consuming", "until"]

Worker = Callable[..., Awaitable[None]]


async def bootstrap_or_embedded(stack: AsyncExitStack, bootstrap: str | None) -> str:
    """``bootstrap``, or (when None) that of an embedded broker that ``stack`` stops."""
    if bootstrap is None:
        cluster = await stack.enter_async_context(FakeCluster(initial_rebalance_delay_ms=0))
        bootstrap = cluster.bootstrap
    return bootstrap


@asynccontextmanager
async def consuming(
    group: gengroup.ConsumerGroup, worker: Worker, *args: Any
) -> AsyncIterator[None]:
    """Run ``worker(gen, tp, *args)`` for each assigned partition while the block runs."""
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            async for gen in group:
                for tp in gen.assignments:
                    gen.start_soon(worker, gen, tp, *args)

        tg.start_soon(run)
        yield
        tg.cancel_scope.cancel()


async def until(done: Callable[[], bool], timeout: float = 60) -> None:
    """Return once ``done()`` holds; TimeoutError after ``timeout`` seconds."""
    with anyio.fail_after(timeout):
        while not done():  # noqa: ASYNC110 (a short progress poll)
            await anyio.sleep(0.05)


def command(
    doc: str | None, *, count: int | None = None, records: str = "records"
) -> argparse.ArgumentParser:
    """The command line of an example: its docstring's first line and ``--bootstrap``.

    Args:
        doc: the example's module docstring.
        count: when given, add ``--count N`` (this default): how many ``records``
            the example produces first.
        records: what the example produces, in the help of ``--count``.
    """
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--bootstrap", help="a Kafka cluster (default: an embedded broker)")
    if count is not None:
        parser.add_argument("--count", type=int, default=count, help=f"{records} to produce")
    return parser
