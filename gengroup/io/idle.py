"""Closing the pooled connections a client leaves idle, before the broker does.

Theory of operation:

A Kafka broker closes a connection on which nothing came for its own
``connections.max.idle.ms`` (10 minutes by default). A request the client
writes just as the broker closes the connection goes down with it: it fails
with :class:`~gengroup._errors.BrokenConnection` and is sent again on a new
connection, with a WARNING for nothing. So, as the Java client does with its
``connections.max.idle.ms`` (9 minutes by default, below the broker's; in
librdkafka the setting is off unless set), a :class:`~gengroup.io.cluster.Cluster` closes a pooled
connection itself once it has had no request in flight for
``connections_max_idle`` seconds, and takes it out of the pool; the next
request to that broker opens a new one, as after any close.

A connection is idle from its :attr:`~gengroup.io.connection.BrokerConnection.last_active`:
the latest of the end of its set-up, the writing of a request on it, an
answer on it, and the moment the pool last handed it to a caller
(``Cluster._open``). It is never idle while a request is in flight: counted
by the cluster (``Cluster.call`` takes it from the pool and counts it with
no await between, until the call ends) or waiting on the connection for its
answer (a request whose caller stopped waiting stays there: a parked
JoinGroup, a long poll), however long that lasts.

One :class:`IdleReaper` task per cluster does the work, not a timer per
request. It sleeps until the earliest moment a connection could have been
idle for the limit: the expiry of the oldest idle one, else a whole limit
from now (a connection in use now, or opened later, is active at some time
after now, so it cannot expire sooner), and no sooner than :data:`LOOK_AGAIN`
(a limit of a few microseconds must not make it spin). Then it checks the pool again. A
connection found idle is taken out of the pool in the same step as the
check, with no await between: once found idle, no caller can take it. It is
closed after that; nobody waits on it, and its reader ends. Nor is a
connection closed between a caller taking it and its request being written:
the pool stamps it active when it hands it out, and the caller counts it in
flight before any await (``Cluster.call``), or, for a connection a round of
``Cluster.any_connection`` just opened, once the round's other attempts are
cancelled (a close of their sockets, not a whole limit).

Fetch sessions (:mod:`gengroup.consumer.fetch_sessions`) do not mind: a
session is the broker's by its id, whichever connection names it, so the
next Fetch names it on the new connection; one the broker evicted meanwhile
is answered FETCH_SESSION_ID_NOT_FOUND and started anew, as always.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

import anyio
import anyio.abc

from .connection import BrokerConnection

__all__ = ["LOOK_AGAIN", "IdleReaper"]

log = logging.getLogger("gengroup.cluster")

#: The least time (seconds) between two looks at the pool: a connection
#: idle past a smaller limit is closed up to this much late.
LOOK_AGAIN = 0.01


class IdleReaper:
    """Closes a cluster's pooled connections idle for ``limit`` seconds.

    Args:
        limit: seconds without a request in flight (``connections_max_idle``;
            None: connections are never closed for being idle).
        pool: the cluster's connections by (broker, channel) (the reaper
            removes those it closes).
        inflight: the cluster's count of requests in flight by connection.

    Attributes:
        closed: how many connections it closed.
    """

    def __init__(
        self,
        limit: float | None,
        pool: MutableMapping[Any, BrokerConnection],
        inflight: MutableMapping[BrokerConnection, int],
    ) -> None:
        self.limit = limit
        self._pool = pool
        self._inflight = inflight
        self._scope: anyio.CancelScope | None = None
        self._stopped = False
        self.closed = 0

    def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Start the reaper's task in the cluster's task group ``tg`` (none without a limit)."""
        if self.limit is not None:
            tg.start_soon(self._run, self.limit)

    def lent(self, conn: BrokerConnection) -> BrokerConnection:
        """``conn``, which the pool hands to a caller now: active now."""
        conn.last_active = anyio.current_time()
        return conn

    async def _run(self, limit: float) -> None:
        with anyio.CancelScope() as self._scope:
            if self._stopped:
                return
            while True:
                wake = await self.reap(limit)
                await anyio.sleep_until(wake)

    def stop(self) -> None:
        """End the reaper's task (the cluster is closing)."""
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()

    async def reap(self, limit: float) -> float:
        """Close the connections idle for ``limit`` seconds now; return when to look again."""
        now = anyio.current_time()
        wake = now + limit
        idle: list[tuple[str, BrokerConnection]] = []
        for slot, conn in list(self._pool.items()):
            if not conn.is_usable or self._inflight.get(conn) or conn.awaiting:
                continue  # broken (replaced on next use) or in use
            expiry = conn.last_active + limit
            if expiry > now:
                wake = min(wake, expiry)
                continue
            # Out of the pool before any await: no caller takes it from now on.
            del self._pool[slot]
            idle.append((slot[1], conn))
        for channel, conn in idle:
            self.closed += 1
            log.debug(
                "%s, %s connection: closed, idle for %.1f s (connections_max_idle=%g s)",
                conn,
                channel,
                now - conn.last_active,
                limit,
            )
            await conn.aclose()
        return max(wake, now + LOOK_AGAIN)
