"""Counters of a consumer group member, as a plain snapshot and for Prometheus.

Theory of operation:

A :class:`GroupMetrics` is owned by one :class:`~gengroup.ConsumerGroup` and
counted where things happen: the prefetcher counts fetch requests (full or
incremental, partitions named), answers, records and bytes; the group's
coordinator client counts commits; the run loop counts generations and keeps
the newest one's timings. Counting is a few integer additions on paths that
already do far more, so it is always on.
:meth:`GroupMetrics.snapshot` copies the counters (``group.metrics()``),
cheap enough to log periodically. :func:`prometheus_collector` adapts a group to the
``prometheus_client`` registry (optional extra ``metrics``): each scrape
takes a snapshot, so nothing is exported that the snapshot does not hold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from .timings import RebalanceTimings

__all__ = ["GroupMetrics", "prometheus_collector"]


@dataclass(slots=True)
class GroupMetrics:
    """A member's counters (all counts since the group was entered).

    The group holds the live instance; ``group.metrics()`` hands out a copy
    made by :meth:`snapshot`.

    Attributes:
        fetches: Fetch answers received.
        fetch_errors: Fetch requests that failed, and partitions Fetch answers gave an error.
        fetch_requests_full: Fetch requests that named every partition they
            fetched (the first of a fetch session, or sessionless).
        fetch_requests_incremental: Fetch requests of an incremental fetch
            session (naming only partitions new or changed since the previous one).
        fetch_partitions_sent: partitions named in Fetch requests, all requests
            together (a full request names each partition it fetches).
        fetch_partitions_forgotten: partitions incremental requests removed
            from their session.
        fetch_session_resets: fetch sessions dropped after an error (the next
            request was full again).
        records: records fetched.
        bytes: record bytes fetched (as received, before decompression).
        commits_ok: OffsetCommit requests the coordinator accepted in full.
        commits_failed: OffsetCommit requests refused or failed.
        generations: generations this member joined (1 + rebalances).
        last_timings: how the newest generation formed (None before the first).
        last_generation: the newest generation's label, id and sequence
            (``"3 (#2)"``; generation ids may repeat, the sequence does not).
    """

    fetches: int = 0
    fetch_errors: int = 0
    fetch_requests_full: int = 0
    fetch_requests_incremental: int = 0
    fetch_partitions_sent: int = 0
    fetch_partitions_forgotten: int = 0
    fetch_session_resets: int = 0
    records: int = 0
    bytes: int = 0
    commits_ok: int = 0
    commits_failed: int = 0
    generations: int = 0
    last_timings: RebalanceTimings | None = None
    last_generation: str = ""

    def snapshot(self) -> GroupMetrics:
        """A copy of the counters as they are now."""
        return replace(self)


#: (name, help) of each counter exported to Prometheus, after ``gengroup_``.
_COUNTERS = (
    ("fetches", "Fetch answers received"),
    ("fetch_errors", "Fetch requests that failed"),
    ("fetch_requests_full", "Fetch requests naming every partition they fetched"),
    ("fetch_requests_incremental", "Incremental Fetch requests of a fetch session"),
    ("fetch_partitions_sent", "Partitions named in Fetch requests"),
    ("fetch_partitions_forgotten", "Partitions removed from fetch sessions"),
    ("fetch_session_resets", "Fetch sessions dropped after an error"),
    ("records", "Records fetched"),
    ("bytes", "Record bytes fetched, as received"),
    ("commits_ok", "Offset commits accepted"),
    ("commits_failed", "Offset commits refused or failed"),
    ("generations", "Generations joined"),
)


def prometheus_collector(snapshot: Callable[[], GroupMetrics], group_id: str) -> Any:
    """A ``prometheus_client`` collector exporting a group's counters.

    Register it with ``prometheus_client.REGISTRY.register(
    prometheus_collector(group.metrics, group.config.group_id))``. Needs the
    ``metrics`` extra (``prometheus_client``).

    Args:
        snapshot: returns the counters (``group.metrics``).
        group_id: the ``group`` label of every sample.

    Raises:
        ImportError: ``prometheus_client`` is not installed.
    """
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.registry import Collector

    class _Collector(Collector):
        def collect(self) -> Iterator[Any]:
            now = snapshot()
            for name, doc in _COUNTERS:
                family = CounterMetricFamily(f"gengroup_{name}", doc, labels=["group"])
                family.add_metric([group_id], getattr(now, name))
                yield family
            rebalance = GaugeMetricFamily(
                "gengroup_last_rebalance_seconds",
                "How long forming the newest generation took, previous teardown included",
                labels=["group"],
            )
            if now.last_timings is not None:
                rebalance.add_metric([group_id], now.last_timings.total)
            yield rebalance

    return _Collector()
