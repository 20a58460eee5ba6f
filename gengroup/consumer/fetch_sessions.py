"""The prefetcher's fetch sessions: one per broker connection, counted and logged.

Theory of operation:

The prefetcher keeps up to two Fetch requests in flight per broker, each on
its own connection, and each connection carries its own incremental fetch
session (:class:`~gengroup.protocol.fetch_session.FetchSession`), so the
requests of one session are strictly sequential as Kafka requires.
:class:`FetchSessions` holds them for one prefetcher, keyed by broker and
connection, counts every request in the member's metrics (full or
incremental, partitions named and forgotten, sessions dropped) and logs once
per change of state: a session dropped, a broker declining sessions (once,
until it grants one).

When the prefetcher ends, its sessions are not closed with a request of
their own (one more round trip on the way out of every generation): their
ids go to ``retired``, shared by the group's prefetchers, and the next
prefetcher's first request on the same connection names the old id with
epoch 0, which makes the broker drop it as it creates the new session (or
the first request on another connection, when the next prefetcher leaves
that one to the answer still to come: :meth:`FetchSessions.take_over`). The
sessions left when the group ends are evicted by the broker.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

from .._types import TopicPartition
from ..protocol.fetch_session import FetchSession
from .metrics import GroupMetrics

__all__ = ["FetchSessions"]

log = logging.getLogger("gengroup")


class FetchSessions:
    """The fetch sessions of one prefetcher, by (broker, connection).

    Args:
        group_id: the group, for log lines.
        enabled: ``GroupConfig.fetch_sessions``.
        metrics: the member's counters.
        retired: the session ids ended prefetchers left, by (broker,
            connection): taken (and closed) by the sessions made here, and
            given the ids of these sessions by :meth:`retire`.
    """

    def __init__(
        self,
        group_id: str,
        enabled: bool,
        metrics: GroupMetrics,
        retired: dict[tuple[int, str], int] | None = None,
    ) -> None:
        self._group_id = group_id
        self._enabled = enabled
        self._metrics = metrics
        self._retired = {} if retired is None else retired
        self._sessions: dict[tuple[int, str], FetchSession] = {}
        #: Brokers that declined a session (logged once).
        self._declined: set[int] = set()

    def __iter__(self) -> Iterator[FetchSession]:
        """The sessions made so far."""
        return iter(list(self._sessions.values()))

    def session(self, node: int, channel: str) -> FetchSession:
        """The session of ``node``'s connection ``channel`` (made on first use)."""
        session = self._sessions.get((node, channel))
        if session is None:
            close = self._retired.pop((node, channel), 0)
            session = self._sessions[node, channel] = FetchSession(self._enabled, close)
        return session

    def take_over(self, node: int, channels: Iterable[str], skipped: Iterable[str]) -> None:
        """The prefetcher fetches from ``node`` on ``channels``, not on
        ``skipped`` (connections still awaiting an ended prefetcher's answers):
        the sessions retired on those are closed by the first requests on the
        ``channels`` that close none of their own (a session is the broker's
        by its id, whichever connection names it)."""
        free = [
            c
            for c in channels
            if (node, c) not in self._retired and (node, c) not in self._sessions
        ]
        for channel in skipped:
            if not free:
                return
            session_id = self._retired.pop((node, channel), 0)
            if session_id:
                self._retired[node, free.pop(0)] = session_id

    def held(self, node: int, channel: str, partitions: Iterable[TopicPartition]) -> int:
        """How many of ``partitions`` the session of ``node``'s ``channel`` holds."""
        session = self._sessions.get((node, channel))
        if session is None:
            return 0
        cached = session.partitions
        return sum(tp in cached for tp in partitions)

    def counted(self, node: int, session: FetchSession, resets: int) -> None:
        """Count the request ``session`` planned last (``resets``: its count of
        resets before); log a session dropped or declined."""
        plan = session.last_plan
        if plan is None:
            return
        metrics = self._metrics
        if plan.full:
            metrics.fetch_requests_full += 1
        else:
            metrics.fetch_requests_incremental += 1
        metrics.fetch_partitions_sent += len(plan.send)
        metrics.fetch_partitions_forgotten += len(plan.forgotten)
        if session.resets != resets:
            metrics.fetch_session_resets += 1
            log.info(
                "group %s: fetch session %d with broker %d dropped (%s); the next request is full",
                self._group_id,
                plan.session_id,
                node,
                session.reset_reason,
            )
        if plan.epoch == 0 and session.last_answer_used and not session.session_id:
            if node not in self._declined:
                self._declined.add(node)
                log.info(
                    "group %s: broker %d declined a fetch session; requests stay full",
                    self._group_id,
                    node,
                )
        elif session.established:
            self._declined.discard(node)

    def retire(self) -> None:
        """The prefetcher ended: leave the sessions' ids to the next one."""
        for key, session in self._sessions.items():
            if session.session_id:
                self._retired[key] = session.session_id
        self._sessions.clear()
