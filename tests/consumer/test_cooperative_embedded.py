"""Cooperative rebalancing on the embedded broker, in virtual time."""

from __future__ import annotations

import trio
import trio.testing

from gengroup import ConsumerGroup, CooperativeStickyBalancer, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.protocol.records import NewRecord

from .cooperative import three_four_three
from .helpers import all_partitions

SETTINGS = {
    "session_timeout": 10.0,
    "heartbeat_interval": 1.0,
    "rebalance_timeout": 20.0,
    "commit_interval": 1.0,
    "join_backoff": 0.5,
    "fetch_max_wait": 0.5,
    "request_timeout": 30.0,
}
PARTITIONS = 12
PER_STEP = 10


async def test_three_four_three_members_keep_retained_workers_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    every = all_partitions("t", PARTITIONS)
    produced: set[bytes] = set()
    async with FakeCluster(topics={"t": PARTITIONS}, initial_rebalance_delay_ms=0) as cluster:

        def open_group(name: str) -> ConsumerGroup:
            return ConsumerGroup(
                "g",
                ["t"],
                cluster.bootstrap,
                client_id=name,
                balancers=[CooperativeStickyBalancer()],
                **SETTINGS,
            )

        async def produce(step: int) -> None:
            for p in range(PARTITIONS):
                values = [f"{step}-{p}-{i}".encode() for i in range(PER_STEP)]
                produced.update(values)
                cluster.produce("t", [NewRecord(None, v, (), 0) for v in values], partition=p)

        async def committed() -> dict[TopicPartition, int]:
            return cluster.committed_offsets("g")

        ledger = await three_four_three(
            open_group, every, produce, committed, lambda: produced, timeout=600
        )
    for name in ("m1", "m2", "m3"):
        gens = ledger.generations[name]
        assert all(g.rebalance_protocol == "cooperative" for g in gens)
        # Phase one: a generation revoked one partition, and ended at once so
        # that the member rejoined; the first three partitions never moved.
        revoking = [g for g in gens if g.revoked]
        assert len(revoking) == 1 and len(revoking[0].revoked) == 1
        assert revoking[0].end_reason is not None and "revoked" in revoking[0].end_reason
        moved = next(iter(revoking[0].revoked))
        assert ledger.starts_of(name) == {
            tp: 2 if tp == moved else 1 for tp in ledger.starts_of(name)
        }
        # Phase two: the newcomer got the partition only in a later generation.
        received = [g.id for g in ledger.generations["m4"] if moved in g.added]
        assert received and received[0] > revoking[0].id
