"""The short chaos variant (``chaos.py``) on the embedded broker and on real Kafka."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from gengroup.broker import FakeCluster
from gengroup.testing.kafka import KafkaBroker

from .chaos import check, run_chaos


async def test_chaos_on_the_embedded_broker_lands_every_offset_once(tmp_path: Path) -> None:
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        members = await run_chaos(cluster.bootstrap, tmp_path / "lake", tmp_path, 7, seconds=10)
        await check(members, 7)


@pytest.mark.kafka
async def test_chaos_on_kafka_lands_every_offset_once_as_spark_reads_it(
    tmp_path: Path, kafka: KafkaBroker, spark: Any
) -> None:
    from gengroup.lake.spark import verify

    members = await run_chaos(kafka.bootstrap, tmp_path / "lake", tmp_path, 11, seconds=10)
    ends = await check(members, 11)
    report = await anyio.to_thread.run_sync(
        verify, spark, str(members.lake), kafka.bootstrap, [members.topic], ends
    )
    assert report.ok, report.text()
    assert sum(p.topic_records for p in report.partitions) == members.produced
