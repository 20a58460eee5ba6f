"""Graceful shutdown: SIGINT or SIGTERM ends the group cleanly, with a final commit.

A signal handler task waits for SIGINT/SIGTERM and calls ``group.aclose()``:
the workers go on until just before the group's next heartbeat (the
handover), then the current generation is cancelled, its workers return, the
offsets they marked are committed once more, and the member leaves the group.
The other members learn of the leave at that heartbeat and take its
partitions over at once, not after a session timeout nor a heartbeat
interval later. ``group.aclose(handover=False)`` closes at once.
Periodic commits are off here (``commit_interval=0``) to show that the final
commit alone carries everything processed. It runs on trio or asyncio.

Run: python examples/graceful_shutdown.py --bootstrap HOST:PORT [--backend asyncio]
(e.g. against ``gengroup serve``), then press Ctrl-C or ``kill -TERM`` it.
Each processed batch prints ``processed N`` (the running total) on stdout.
"""

from __future__ import annotations

import argparse
import signal
import sys

import anyio
import anyio.abc

import gengroup

TOPIC = "jobs"
GROUP = "graceful"


async def close_on_signal(
    group: gengroup.ConsumerGroup, *, task_status: anyio.abc.TaskStatus[None]
) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()  # the handler is installed: signals from now on are ours
        async for signum in signals:
            print(f"{signal.Signals(signum).name}: closing the group", file=sys.stderr)
            await group.aclose()  # final commit, LeaveGroup; `async for` then ends
            return


async def main(bootstrap: str, topic: str = TOPIC, group_id: str = GROUP) -> int:
    """Consume until a signal; returns the records processed."""
    processed = 0

    async def work(gen: gengroup.Generation, tp: gengroup.TopicPartition) -> None:
        nonlocal processed
        async for batch in gen.fetch(tp):
            processed += len(batch)  # the real work goes here
            gen.mark(tp, batch.next_offset)
            print(f"processed {processed}", flush=True)

    async with gengroup.ConsumerGroup(group_id, [topic], bootstrap, commit_interval=0) as group:
        async with anyio.create_task_group() as tg:
            await tg.start(close_on_signal, group)
            async for gen in group:
                for tp in gen.assignments:
                    gen.start_soon(work, gen, tp)
            tg.cancel_scope.cancel()
    print(f"stopped after {processed} records", file=sys.stderr)
    return processed


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="HOST:PORT of a Kafka cluster")
    parser.add_argument("--topic", default=TOPIC)
    parser.add_argument("--group", default=GROUP)
    parser.add_argument("--backend", choices=("trio", "asyncio"), default="trio")
    args = parser.parse_args()
    anyio.run(main, args.bootstrap, args.topic, args.group, backend=args.backend)
