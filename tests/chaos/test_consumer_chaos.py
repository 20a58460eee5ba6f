"""The short consumer-group chaos run (``consumer.py``): member processes and brokers hurt
on a seeded schedule; nothing lost, every duplicate explained by a fault, the group caught up.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gengroup.broker import FakeCluster
from gengroup.testing.kafka import KafkaCluster

from .consumer import run_chaos, verify


async def test_member_chaos_on_the_embedded_broker(tmp_path: Path) -> None:
    async with FakeCluster(initial_rebalance_delay_ms=0) as fake:
        run = await run_chaos(fake.bootstrap, tmp_path, seed=5, seconds=25)
    outcome = verify(run)
    assert len(run.members.timeline) > 3  # faults happened (3 of the entries are starts)
    assert outcome.processed == sum(run.ends.values()) > 0


@pytest.mark.kafka
@pytest.mark.timeout(600)  # a hang guard: the cluster's start is part of the first test using it
async def test_member_and_broker_chaos_on_a_three_broker_cluster(
    tmp_path: Path, healed_cluster: KafkaCluster
) -> None:
    run = await run_chaos(
        healed_cluster.bootstrap, tmp_path, seed=13, seconds=40, cluster=healed_cluster
    )
    outcome = verify(run)
    assert any("broker" in f.action for f in run.broker)
    assert outcome.processed == sum(run.ends.values()) > 0
