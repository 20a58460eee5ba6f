"""3 members share 12 partitions, a 4th joins: the generation invariants hold.

Runs against the real Apache Kafka broker, under trio and under asyncio.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
import pytest

from gengroup.testing.kafka import KafkaBroker

from .helpers import (
    FAST,
    assert_processed_once,
    produce_ids,
    start_group_run,
    watch_commits,
)

pytestmark = pytest.mark.kafka
log = logging.getLogger("gengroup.tests")

PARTITIONS = 12


async def three_then_four(bootstrap: str) -> dict[str, object]:
    run = await start_group_run(bootstrap, "rebalance", PARTITIONS, 1200, FAST)
    ledger, members, topic, committed_history = run.ledger, run.members, run.topic, run.committed

    def stable(names: set[str]) -> bool:
        return ledger.stable(names, run.every)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_commits, bootstrap, run.group_id, committed_history)
        for name in ("m1", "m2", "m3"):
            await tg.start(members.run, name)
        await ledger.wait_for(
            lambda: stable({"m1", "m2", "m3"}), "3 members to share 12 partitions"
        )
        gen3 = ledger.current()["m1"].id
        await produce_ids(bootstrap, topic, range(1200, 1800))
        await tg.start(members.run, "m4")
        await ledger.wait_for(
            lambda: stable({"m1", "m2", "m3", "m4"}), "4 members to share 12 partitions"
        )
        gen4 = ledger.current()["m4"]
        assert gen4.id > gen3
        await produce_ids(bootstrap, topic, range(1800, 2400))
        expected = {f"id-{i}".encode() for i in range(2400)}
        await ledger.wait_for(lambda: set(ledger.processed) >= expected, "every record processed")
        tg.cancel_scope.cancel()

    assert_processed_once(ledger, expected, committed_history)
    timings = {
        name: [(r.label, r.timings) for r in g.history] for name, g in members.groups.items()
    }
    log.info("rebalance timings: %s", timings)
    return {"timings": timings, "gen4": gen4.id}


async def test_three_then_four_members_trio(kafka: KafkaBroker) -> None:
    result = await three_then_four(kafka.bootstrap)
    print("3->4 rebalance timings (trio):", result["timings"])


def test_three_then_four_members_asyncio(kafka: KafkaBroker) -> None:
    runner: Callable[[], Awaitable[dict[str, object]]] = lambda: three_then_four(kafka.bootstrap)  # noqa: E731
    result = anyio.run(runner, backend="asyncio")
    print("3->4 rebalance timings (asyncio):", result["timings"])
