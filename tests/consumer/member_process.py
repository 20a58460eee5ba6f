"""A consumer-group member in its own process, for tests that kill or freeze one.

Usage: python -m tests.consumer.member_process BOOTSTRAP GROUP TOPIC SESSION_TIMEOUT [batches]
Prints one line per generation: ``generation ID p1,p2,...`` (flushed). With
``batches``, workers consume every assigned partition and it also prints
``batch P NEXT`` for every batch a worker is handed and ``ended REASON`` when
a generation ends.
"""

from __future__ import annotations

import sys

import anyio

from gengroup import ConsumerGroup, Generation, TopicPartition


async def worker(gen: Generation, tp: TopicPartition) -> None:
    async for batch in gen.fetch(tp):
        print(f"batch {tp.partition} {batch.next_offset}", flush=True)
        gen.mark(tp, batch.next_offset)


async def main(
    bootstrap: str, group_id: str, topic: str, session_timeout: float, batches: bool
) -> None:
    async with ConsumerGroup(
        group_id,
        [topic],
        bootstrap,
        session_timeout=session_timeout,
        heartbeat_interval=0.3,
        rebalance_timeout=10.0,
        fetch_max_wait=0.1,
        fetch_buffer_bytes=None,  # a bound per partition:
        partition_buffer_bytes=256,  # small batches, many hand-outs
        client_id="doomed",
    ) as group:
        async for gen in group:
            parts = ",".join(str(tp.partition) for tp in sorted(gen.assignments))
            print(f"generation {gen.id} {parts}", flush=True)
            if batches:
                for tp in gen.assignments:
                    gen.start_soon(worker, gen, tp)
                await gen.wait_ending()
                print(f"ended {gen.end_reason}", flush=True)


if __name__ == "__main__":
    bootstrap, group_id, topic, session = sys.argv[1:5]
    anyio.run(main, bootstrap, group_id, topic, float(session), sys.argv[5:] == ["batches"])
