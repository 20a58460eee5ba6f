"""A consumer-group member in its own process, for tests that kill one.

Usage: python -m tests.consumer.member_process BOOTSTRAP GROUP TOPIC SESSION_TIMEOUT
Prints one line per generation: ``generation ID p1,p2,...`` (flushed).
"""

from __future__ import annotations

import sys

import anyio

from gengroup import ConsumerGroup


async def main(bootstrap: str, group_id: str, topic: str, session_timeout: float) -> None:
    async with ConsumerGroup(
        group_id,
        [topic],
        bootstrap,
        session_timeout=session_timeout,
        heartbeat_interval=0.3,
        rebalance_timeout=10.0,
        client_id="doomed",
    ) as group:
        async for gen in group:
            parts = ",".join(str(tp.partition) for tp in sorted(gen.assignments))
            print(f"generation {gen.id} {parts}", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
