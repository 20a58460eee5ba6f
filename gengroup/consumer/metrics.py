"""Counters of a consumer group member, as a plain snapshot and for Prometheus.

Theory of operation:

A :class:`GroupMetrics` is owned by one :class:`~gengroup.ConsumerGroup` and
counted where things happen: the prefetcher counts fetch requests (full or
incremental, partitions named), answers, records and bytes; the group's
coordinator client counts commits; the run loop counts generations and keeps
the newest one's timings. Counting is a few integer additions on paths that
already do far more, so it is always on.
:meth:`GroupMetrics.snapshot` copies the counters (``group.metrics()``),
cheap enough to log periodically.

For Prometheus (optional extra ``metrics``) one collector serves the whole
process: :func:`register_prometheus` registers it, once per registry. Every
group adds its counters to it when entered (:func:`export`) and removes them
when closed (:func:`unexport`); the collector holds the groups weakly, so a
group dropped without being closed disappears too. Each scrape yields each
metric family once, with one sample per open group member, labelled
``group``, ``client_id`` and ``member`` (a number that tells apart members
of one group with one client id in the process), each taking a snapshot: so
a process can run any number of groups, and make a new one after another
failed, without two collectors exporting the same names.
:func:`prometheus_collector`, the older per-group collector (deprecated),
still works for a process with a single group.
"""

from __future__ import annotations

import itertools
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .timings import RebalanceTimings

__all__ = ["GroupMetrics", "export", "prometheus_collector", "register_prometheus", "unexport"]


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
        """A copy of the counters as they are now (the timings copied too: the
        newest generation's go on changing, its first record's time for one)."""
        timings = self.last_timings
        return replace(self, last_timings=None if timings is None else replace(timings))


#: (name, help) of each counter exported to Prometheus, after ``gengroup_``.
_COUNTERS = (
    ("fetches", "Fetch answers received"),
    ("fetch_errors", "Fetch requests that failed, and partition errors in Fetch answers"),
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


#: The labels of the process-wide collector's samples.
_LABELS = ("group", "client_id", "member")


@dataclass(frozen=True, slots=True)
class _Exported:
    """One open group member as the process-wide collector exports it."""

    labels: tuple[str, str, str]
    counters: GroupMetrics


# The open groups (held weakly), the collector and the registries it is in.
# Scrapes run in the exporter's thread (prometheus_client's HTTP server), so
# the set is changed and read under a lock.
_lock = threading.Lock()
_registering = threading.Lock()
_live: weakref.WeakKeyDictionary[object, _Exported] = weakref.WeakKeyDictionary()
_collector: Any = None
_registries: weakref.WeakSet[Any] = weakref.WeakSet()


def export(owner: object, group_id: str, client_id: str, counters: GroupMetrics) -> None:
    """Export ``counters`` through the process-wide collector while ``owner`` is alive
    and until :func:`unexport` (``ConsumerGroup`` calls both itself).

    The samples are labelled ``group``, ``client_id`` and ``member``: the
    smallest number, from ``"0"``, that no other exported member of this
    group with this client id holds. A group made again after another closed
    takes the number the old one freed, so its series go on (as a counter reset).

    Args:
        owner: what the counters belong to (the group; held weakly).
        group_id: the ``group`` label.
        client_id: the ``client_id`` label.
        counters: the live counters (a snapshot is taken at each scrape).
    """
    with _lock:
        if owner in _live:
            return
        taken = {e.labels[2] for e in _live.values() if e.labels[:2] == (group_id, client_id)}
        member = next(str(i) for i in itertools.count() if str(i) not in taken)
        _live[owner] = _Exported((group_id, client_id, member), counters)


def unexport(owner: object) -> None:
    """Stop exporting ``owner``'s counters (nothing if they are not exported)."""
    with _lock:
        _live.pop(owner, None)


def _families(exported: Sequence[tuple[Sequence[str], GroupMetrics]], labels: Sequence[str]) -> Any:
    """Each metric family once, with a sample per (label values, snapshot)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    for name, doc in _COUNTERS:
        family = CounterMetricFamily(f"gengroup_{name}", doc, labels=labels)
        for values, now in exported:
            family.add_metric(values, getattr(now, name))
        yield family
    rebalance = GaugeMetricFamily(
        "gengroup_last_rebalance_seconds",
        "How long forming the newest generation took, previous teardown included",
        labels=labels,
    )
    for values, now in exported:
        if now.last_timings is not None:
            rebalance.add_metric(values, now.last_timings.total)
    yield rebalance


def register_prometheus(registry: Any = None) -> Any:
    """Export every open :class:`~gengroup.ConsumerGroup` of the process to Prometheus.

    Registers the process-wide collector in ``registry``, once: calling it
    again (for each group, or each time one is made) does nothing more. Each
    scrape yields every ``gengroup_*`` family once, with one sample per open
    group member, labelled ``group``, ``client_id`` and ``member`` (see
    :func:`export`); a closed group is no longer exported. Needs the
    ``metrics`` extra (``prometheus_client``).

    Args:
        registry: a ``prometheus_client`` ``CollectorRegistry`` (default:
            ``prometheus_client.REGISTRY``).

    Returns:
        The collector (the same one for every registry).

    Raises:
        ImportError: ``prometheus_client`` is not installed.
        ValueError: ``registry`` already holds other collectors of these
            names (e.g. one made by :func:`prometheus_collector`).

    Example::

        from gengroup.consumer.metrics import register_prometheus

        register_prometheus()  # once, or at each start: it is idempotent
        async with ConsumerGroup("billing", ["payments"], bootstrap) as group:
            ...
    """
    from prometheus_client import REGISTRY

    target = REGISTRY if registry is None else registry
    with _registering:  # not _lock: registering may collect (auto_describe)
        collector = _process_collector()
        if target not in _registries:
            target.register(collector)
            _registries.add(target)
        return collector


def _process_collector() -> Any:
    """The process-wide collector (made at the first call)."""
    from prometheus_client.registry import Collector

    global _collector

    class _Groups(Collector):
        def collect(self) -> Iterator[Any]:
            with _lock:
                exported = list(_live.values())
            yield from _families([(e.labels, e.counters.snapshot()) for e in exported], _LABELS)

    if _collector is None:
        _collector = _Groups()
    return _collector


def prometheus_collector(snapshot: Callable[[], GroupMetrics], group_id: str) -> Any:
    """A ``prometheus_client`` collector exporting one group's counters, labelled ``group``.

    Deprecated: use :func:`register_prometheus`, which exports every open
    group of the process. This one works for a process with a single group,
    registered once: two of these in one registry export the same names
    (``REGISTRY.register`` refuses the second, so a second group, or a group
    made again after a failure, cannot be registered), and it keeps exporting
    a closed group. Needs the ``metrics`` extra (``prometheus_client``).

    Warns:
        DeprecationWarning: at each call.

    Args:
        snapshot: returns the counters (``group.metrics``).
        group_id: the ``group`` label of every sample.

    Raises:
        ImportError: ``prometheus_client`` is not installed.
    """
    from prometheus_client.registry import Collector

    warnings.warn(
        "prometheus_collector() exports one group and cannot be registered twice in a "
        "registry; call gengroup.consumer.metrics.register_prometheus() once instead, "
        "which exports every open ConsumerGroup",
        DeprecationWarning,
        stacklevel=2,
    )

    class _Collector(Collector):
        def collect(self) -> Iterator[Any]:
            yield from _families([((group_id,), snapshot())], ("group",))

    return _Collector()
