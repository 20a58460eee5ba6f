"""Groups of gengroup members on the sticky balancer, on the embedded broker in virtual time."""

from __future__ import annotations

import anyio
import trio
import trio.testing

from gengroup import ConsumerGroup, StickyBalancer
from gengroup.broker import FakeCluster

from ..consumer.helpers import Ledger, all_partitions, covers_exactly_once

#: Group timings for the embedded broker in virtual time (shared by this folder's group tests).
SETTINGS = {
    "session_timeout": 10.0,
    "heartbeat_interval": 1.0,
    "rebalance_timeout": 20.0,
    "join_backoff": 0.5,
    "fetch_max_wait": 0.5,
}


async def test_members_keep_their_partitions_when_one_joins(
    autojump_clock: trio.testing.MockClock,
) -> None:
    every = all_partitions("t", 6)
    ledger = Ledger()

    async def member(name: str) -> None:
        async with ConsumerGroup(
            "g", ["t"], cluster.bootstrap, balancers=[StickyBalancer()], **SETTINGS
        ) as group:
            await ledger.member(name, group)

    def formed(*names: str) -> bool:
        cur = ledger.current()
        gens = [cur.get(n) for n in names]
        return (
            all(g is not None for g in gens)
            and len({g.id for g in gens if g is not None}) == 1
            and covers_exactly_once([g for g in gens if g is not None], every)
            and all(g.assignments for g in gens if g is not None)
        )

    async with (
        FakeCluster(topics={"t": 6}, initial_rebalance_delay_ms=0) as cluster,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(member, "a")
        await ledger.wait_for(lambda: ledger.assigned("a") == every, "a to own everything")
        tg.start_soon(member, "b")
        await ledger.wait_for(lambda: formed("a", "b"), "a and b to share")
        before = {n: ledger.assigned(n) for n in ("a", "b")}
        assert ledger.current()["a"].protocol == "sticky"
        tg.start_soon(member, "c")
        await ledger.wait_for(lambda: formed("a", "b", "c"), "a, b and c to share")
        after = {n: ledger.assigned(n) for n in ("a", "b", "c")}
        # Sticky: the old members only gave partitions away, two each.
        for name in ("a", "b"):
            assert after[name] <= before[name]
            assert len(after[name]) == 2
        assert len(after["c"]) == 2
        tg.cancel_scope.cancel()
