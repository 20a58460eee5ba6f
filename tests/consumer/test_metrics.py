"""A member's counters: the plain snapshot and the Prometheus collector."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry, generate_latest

from gengroup import ConsumerGroup, KafkaConnectionError, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Disconnect
from gengroup.consumer.metrics import GroupMetrics, prometheus_collector
from gengroup.protocol.records import NewRecord
from gengroup.protocol.versions import ApiKey

TP = TopicPartition("t", 0)
SETTINGS = {"session_timeout": 10.0, "heartbeat_interval": 1.0, "commit_interval": 0.0}


async def test_counters_follow_fetches_commits_and_generations(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.produce("t", [NewRecord(None, b"x" * 10, (), 0) for _ in range(5)])
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            assert group.metrics() == GroupMetrics()
            gen = await group.next()
            batch = await gen.fetch(TP).__anext__()
            gen.mark(TP, 3)
            await gen.commit()
            cuts = iter([Disconnect(), Disconnect()])  # the commit follows a cut once
            cluster.control(ApiKey.OFFSET_COMMIT, lambda req: next(cuts, None))
            gen.mark(TP, batch.next_offset)
            with pytest.raises(KafkaConnectionError):
                await gen.commit()
            now = group.metrics()
            assert now.records == 5 and now.bytes > 50 and now.fetches >= 1
            assert (now.commits_ok, now.commits_failed) == (1, 1)
            assert now.generations == 1 and now.last_timings is gen.timings
            # The embedded broker declines fetch sessions: every request is full.
            assert now.fetch_requests_full >= now.fetches and not now.fetch_requests_incremental
            assert now.fetch_partitions_sent >= now.fetch_requests_full

            registry = CollectorRegistry()
            registry.register(prometheus_collector(group.metrics, "g"))
            text = generate_latest(registry).decode()
            assert 'gengroup_records_total{group="g"} 5.0' in text
            assert 'gengroup_commits_failed_total{group="g"} 1.0' in text
            assert 'gengroup_generations_total{group="g"} 1.0' in text
            assert 'gengroup_fetch_requests_incremental_total{group="g"} 0.0' in text
            assert (
                f'gengroup_fetch_partitions_sent_total{{group="g"}} {now.fetch_partitions_sent}.0'
                in text
            )
            assert "gengroup_last_rebalance_seconds" in text
            gen.cancel()
