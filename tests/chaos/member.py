"""A consumer-group member in its own process that says what it processed and committed.

Usage: ``python -m tests.chaos.member BOOTSTRAP GROUP TOPIC NAME [trio|asyncio]``

Every line is flushed before the member goes on, so that a line survives a
SIGKILL that comes right after it; each starts with a kind and the wall-clock
time:

* ``g TIME GEN P:START,...``: a generation was handed out, with the offset
  each partition starts at (the committed offset the coordinator gave);
* ``b TIME GEN P OFFSET:ID,...``: a batch was processed (printed before it is
  marked, so nothing is ever committed that was not printed first);
* ``c TIME GEN P OFFSET``: the coordinator accepted a commit of ``OFFSET``;
* ``e TIME GEN P:COMMITTED,... | REASON``: the generation ended, with what it
  had committed in the end (its final commit included);
* ``x TIME``: SIGTERM or SIGINT, the group was closed (final commit, LeaveGroup).

Record values are ``id-N``; ``ID`` is ``N``.
"""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

import anyio

from gengroup import ConsumerGroup, Generation, TopicPartition

#: Group timings of the chaos runs: a short session so that a frozen member is
#: fenced soon, frequent commits.
SETTINGS: dict[str, Any] = {
    "session_timeout": 6.0,
    "heartbeat_interval": 0.5,
    "rebalance_timeout": 8.0,
    "partition_watch_interval": 1.0,
    "commit_interval": 0.5,
    "join_backoff": 0.2,
    "fetch_max_wait": 0.2,
    "start_offset": "earliest",
}


def say(*fields: object) -> None:
    print(*fields, flush=True)


async def worker(gen: Generation, tp: TopicPartition) -> None:
    async for batch in gen.fetch(tp):
        ids = ",".join(
            f"{r.offset}:{(r.value or b'id-?').decode().removeprefix('id-')}" for r in batch.records
        )
        if ids:
            say("b", time.time(), gen.id, tp.partition, ids)
        gen.mark(tp, batch.next_offset)


async def watch_commits(gen: Generation) -> None:
    """Print each newly accepted committed offset of ``gen`` (polled)."""
    seen: dict[TopicPartition, int] = dict(gen.committed)
    while not gen.ended:
        for tp, offset in gen.committed.items():
            if seen.get(tp) != offset:
                seen[tp] = offset
                say("c", time.time(), gen.id, tp.partition, offset)
        await anyio.sleep(0.1)


async def close_on_signal(group: ConsumerGroup) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            await group.aclose()
            return


async def main(bootstrap: str, group_id: str, topic: str, name: str) -> None:
    async with ConsumerGroup(group_id, [topic], bootstrap, client_id=name, **SETTINGS) as group:
        async with anyio.create_task_group() as tg:
            tg.start_soon(close_on_signal, group)
            async for gen in group:
                starts = ",".join(
                    f"{tp.partition}:{o}" for tp, o in sorted(gen.assignments.items())
                )
                say("g", time.time(), gen.id, starts or "-")
                for tp in gen.assignments:
                    gen.start_soon(worker, gen, tp)
                tg.start_soon(watch_commits, gen)
                await gen.wait_ended()
                final = ",".join(f"{tp.partition}:{o}" for tp, o in sorted(gen.committed.items()))
                say("e", time.time(), gen.id, final or "-", "|", gen.end_reason)
            tg.cancel_scope.cancel()
    say("x", time.time())


if __name__ == "__main__":
    bootstrap, group_id, topic, name = sys.argv[1:5]
    backend = sys.argv[5] if len(sys.argv) > 5 else "trio"
    anyio.run(main, bootstrap, group_id, topic, name, backend=backend)
