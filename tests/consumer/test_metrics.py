"""A member's counters: the plain snapshot and the Prometheus collectors (the
process-wide one, and the older one per group)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as om_generate_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as om_text_string_to_metric_families,
)
from prometheus_client.parser import text_string_to_metric_families

from gengroup import ConsumerGroup, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Disconnect
from gengroup.consumer.generation import RebalanceTimings
from gengroup.consumer.metrics import GroupMetrics, prometheus_collector, register_prometheus
from gengroup.protocol.records import NewRecord
from gengroup.protocol.versions import ApiKey

TP = TopicPartition("t", 0)
TP_B = TopicPartition("b", 0)
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
            # The commit follows a cut once by itself; after the second it is
            # retried with backoff, and accepted: one failure, two commits.
            cuts = iter([Disconnect(), Disconnect()])
            cluster.control(ApiKey.OFFSET_COMMIT, lambda req: next(cuts, None))
            gen.mark(TP, batch.next_offset)
            await gen.commit()
            now = group.metrics()
            assert now.records == 5 and now.bytes > 50 and now.fetches >= 1
            assert (now.commits_ok, now.commits_failed) == (2, 1)
            assert now.generations == 1 and now.last_timings == gen.timings
            # The embedded broker declines fetch sessions: every request is full.
            assert now.fetch_requests_full >= now.fetches and not now.fetch_requests_incremental
            assert now.fetch_partitions_sent >= now.fetch_requests_full

            registry = CollectorRegistry()
            with pytest.warns(DeprecationWarning, match="register_prometheus"):
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


def _families(text: str, parse: Any) -> dict[str, list[Any]]:
    """Each family of an exposition by name (a name seen twice fails the test)."""
    found: dict[str, list[Any]] = {}
    for family in parse(text):
        assert family.name not in found, f"{family.name} exported twice"
        found[family.name] = family.samples
    return found


def _scrape(registry: CollectorRegistry) -> dict[str, list[Any]]:
    """The registry scraped as Prometheus text and as OpenMetrics, both parsed;
    the OpenMetrics families (the two agree on the samples)."""
    text = _families(generate_latest(registry).decode(), text_string_to_metric_families)
    om = _families(om_generate_latest(registry).decode(), om_text_string_to_metric_families)

    def samples(families: dict[str, list[Any]]) -> dict[str, set[Any]]:
        return {
            name: {(s.name, tuple(sorted(s.labels.items())), s.value) for s in found}
            for name, found in families.items()
        }

    assert samples(text) == samples(om)
    return om


def _records(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    """``gengroup_records_total`` per (group, client_id, member)."""
    return {
        (s.labels["group"], s.labels["client_id"], s.labels["member"]): s.value
        for s in _scrape(registry)["gengroup_records"]
        if s.name == "gengroup_records_total"
    }


async def test_one_process_exports_every_open_group_once_through_one_collector(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two groups, and two members of one of them, in one process: each family
    once, one sample per member; a closed group is no longer exported, and one
    made again in its place takes its labels; registering again is harmless."""
    registry = CollectorRegistry(auto_describe=True)  # checks names, as REGISTRY does
    collector = register_prometheus(registry)
    assert register_prometheus(registry) is collector  # idempotent
    assert register_prometheus() is collector  # the default REGISTRY too, once
    register_prometheus()
    async with FakeCluster(topics={"a": 2, "b": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.produce("a", [NewRecord(None, b"x", (), 0) for _ in range(3)], partition=0)
        cluster.produce("b", [NewRecord(None, b"y", (), 0) for _ in range(2)])
        async with (
            ConsumerGroup("billing", ["a"], cluster.bootstrap, **SETTINGS) as billing,
            ConsumerGroup("audit", ["b"], cluster.bootstrap, **SETTINGS) as audit,
        ):
            for group, tp, n in ((billing, TopicPartition("a", 0), 3), (audit, TP_B, 2)):
                gen = await group.next()
                batch = await gen.fetch(tp).__anext__()
                assert len(batch.records) == n
            assert _records(registry) == {
                ("billing", "gengroup", "0"): 3.0,
                ("audit", "gengroup", "0"): 2.0,
            }
            async with (
                ConsumerGroup(
                    "billing", ["a"], cluster.bootstrap, client_id="second", **SETTINGS
                ) as other,
                ConsumerGroup("billing", ["a"], cluster.bootstrap, **SETTINGS) as third,
            ):
                assert set(_records(registry)) == {
                    ("billing", "gengroup", "0"),
                    ("billing", "second", "0"),
                    ("billing", "gengroup", "1"),
                    ("audit", "gengroup", "0"),
                }
                assert other is not third
            samples = _scrape(registry)["gengroup_last_rebalance_seconds"]
            assert {s.labels["group"] for s in samples} == {"billing", "audit"}
        assert _records(registry) == {}  # closed: no longer exported
        # Made again after the first one closed (as after a failure): exported again.
        async with ConsumerGroup("billing", ["a"], cluster.bootstrap, **SETTINGS) as again:
            gen = await again.next()
            await gen.fetch(TopicPartition("a", 0)).__anext__()
            assert _records(registry) == {("billing", "gengroup", "0"): 3.0}
            gen.cancel()
        assert _records(registry) == {}


def test_a_snapshot_does_not_change_with_the_newest_generation() -> None:
    """A snapshot's rebalance timings are a copy: the newest generation's go on
    changing (its first record's time comes later), the snapshot's do not."""
    counters = GroupMetrics(last_timings=RebalanceTimings(join=0.25))
    taken = counters.snapshot()
    assert counters.last_timings is not None
    counters.last_timings.first_record = 1.5
    assert taken.last_timings == RebalanceTimings(join=0.25)
