"""What an operator reads in the logs: which partitions a member holds, and
commits that keep failing.

Each generation's "formed" line names its partitions (runs folded per topic),
and under a cooperative balancer the partitions it was given and those it
gave up, so a stuck partition can be traced to a member from the logs alone.
Periodic commits that fail are said once at INFO when they start, once more
as a WARNING when they have failed for three commit intervals (10 s at
least), and once when they work again. The embedded broker, in virtual time.
"""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from gengroup import ConsumerGroup, Generation, TopicPartition, run_workers
from gengroup._types import show_partitions
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Fail
from gengroup.membership.balancers import RangeBalancer
from gengroup.membership.cooperative import CooperativeStickyBalancer
from gengroup.protocol.records import NewRecord
from gengroup.protocol.versions import ApiKey

from .cooperative import group_on


def lines(caplog: pytest.LogCaptureFixture, level: int, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "gengroup" and r.levelno == level and text in r.getMessage()
    ]


def test_partitions_are_shown_per_topic_with_runs_folded() -> None:
    tps = [TopicPartition("t", p) for p in (5, 0, 1, 2, 7, 8)] + [TopicPartition("a", 3)]
    assert show_partitions(tps) == "a[3], t[0-2,5,7-8]"
    assert show_partitions([]) == "none"


@pytest.mark.parametrize("balancer", ["range", "cooperative-sticky"])
async def test_a_formed_generation_names_its_partitions(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, balancer: str
) -> None:
    """One member holds t[0-3]; a second joins and takes half: each formed line
    names the member's partitions, and a cooperative one what moved."""
    caplog.set_level(logging.INFO, logger="gengroup")
    offered = RangeBalancer() if balancer == "range" else CooperativeStickyBalancer()
    async with FakeCluster(topics={"t": 4}, initial_rebalance_delay_ms=0) as cluster:
        async with group_on(cluster, "a", [offered]) as first:
            gens = aiter(first)
            alone = await anext(gens)
            assert set(alone.assignments) == {TopicPartition("t", p) for p in range(4)}
            async with group_on(cluster, "b", [offered]) as second:
                other = aiter(second)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(anext, other)
                    if balancer == "cooperative-sticky":  # revokes, then a second round
                        await anext(gens)
                    shared = await anext(gens)
                    nursery.cancel_scope.deadline = trio.current_time() + 5
                kept = set(shared.assignments)
                assert len(kept) == 2
    formed = lines(caplog, logging.INFO, "formed: member")
    assert any("4 partition(s) [t[0-3]]" in line for line in formed), formed
    assert any(f"2 partition(s) [{show_partitions(kept)}]" in line for line in formed), formed
    if balancer == "cooperative-sticky":
        gave = show_partitions({TopicPartition("t", p) for p in range(4)} - kept)
        assert any(f"(added [none], revoked [{gave}])" in line for line in formed), formed
    else:
        assert not any("revoked [" in line for line in formed), formed


async def test_commits_failing_for_long_are_a_warning_once(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Every OffsetCommit refused (a coordinator loading) for two minutes while
    records flow: one INFO when it starts, one WARNING saying for how long and
    what it costs, one INFO when commits work again; not a line per attempt."""
    caplog.set_level(logging.INFO, logger="gengroup")
    done: list[int] = []

    async def handle(gen: Generation, tp: TopicPartition, batch: object) -> None:
        done.append(1)

    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap) as group:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_workers, group, handle)
                await trio.sleep(5)
                refusing = cluster.control(ApiKey.OFFSET_COMMIT, lambda call: Fail(14))
                for _ in range(12):
                    cluster.produce("t", [NewRecord(None, b"v", (), 0)])
                    await trio.sleep(10)
                refusing.remove()
                await trio.sleep(20)
                nursery.cancel_scope.cancel()
        assert cluster.committed_offsets("g")[TopicPartition("t", 0)] == 12
    assert len(done) == 12
    assert len(lines(caplog, logging.INFO, "periodic commit failed")) == 1
    [warning] = lines(caplog, logging.WARNING, "periodic commit has failed for")
    assert "COORDINATOR_LOAD_IN_PROGRESS" in warning and "not committed" in warning
    assert len(lines(caplog, logging.INFO, "periodic commit works again after")) == 1
