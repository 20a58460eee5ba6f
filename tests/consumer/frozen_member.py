"""A member that reports every batch it is handed, for the frozen-member test.

Usage: python -m tests.consumer.frozen_member BOOTSTRAP GROUP TOPIC SESSION_TIMEOUT
Prints (flushed): ``generation ID`` when one starts, ``batch P NEXT`` for every
batch a worker is handed, and ``ended REASON`` when a generation ends.
"""

from __future__ import annotations

import sys

import anyio

from gengroup import ConsumerGroup, Generation, TopicPartition


async def worker(gen: Generation, tp: TopicPartition) -> None:
    async for batch in gen.fetch(tp):
        print(f"batch {tp.partition} {batch.next_offset}", flush=True)
        gen.mark(tp, batch.next_offset)


async def main(bootstrap: str, group_id: str, topic: str, session_timeout: float) -> None:
    async with ConsumerGroup(
        group_id,
        [topic],
        bootstrap,
        session_timeout=session_timeout,
        heartbeat_interval=0.5,
        rebalance_timeout=10.0,
        fetch_max_wait=0.1,
        partition_buffer_bytes=256,  # small batches: many hand-outs
        client_id="frozen",
    ) as group:
        async for gen in group:
            print(f"generation {gen.id}", flush=True)
            for tp in gen.assignments:
                gen.start_soon(worker, gen, tp)
            await gen.wait_ending()
            print(f"ended {gen.end_reason}", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
