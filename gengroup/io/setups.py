"""Connections being set up: what a caller whose deadline passed waited on.

Theory of operation:

A connection's set-up is TCP (and TLS), then ApiVersions, then the SASL
authentication (:attr:`BrokerConnection.stage
<gengroup.io.connection.BrokerConnection.stage>`). A broker that accepts
connections and never answers holds it at one of those steps until
``connect_timeout``; a caller whose own deadline is shorter gives up first,
with no error to name. So the :class:`~gengroup.io.cluster.Cluster` keeps a
record of the set-ups under way, and keeps it once the caller gave up (the
set-up cancelled, its step as it was then), for the caller's timeout message
to name the address and the step (``Cluster.waiting_on``):

* :class:`Round`: the attempts of one round of ``Cluster.any_connection``
  (the known brokers and the bootstrap addresses, raced), dropped at the
  next request to any broker;
* :class:`SetUps`: the connections opened to a broker by node id (a
  partition's leader, a coordinator), by address. A record is dropped when
  its set-up ends, done or failed (the failure is then the error to name),
  and replaced by the next set-up to that address.

Nothing here runs on the request path: only opening a connection records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from .._errors import KafkaConnectionError
from .connection import BrokerConnection

__all__ = ["Round", "SetUp", "SetUps", "connect_cause", "format_address", "step"]


def format_address(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def connect_cause(exc: KafkaConnectionError) -> str:
    """The cause of a failed connection attempt, without the address (the caller names it)."""
    text = str(exc)
    head, sep, tail = text.partition(": ")
    return tail if sep and head.startswith("cannot connect to ") else text


def step(conn: BrokerConnection | None) -> str:
    """The step a connection's set-up is at, said for one that went unanswered."""
    if conn is None or conn.stage == "connecting":
        return "connecting, no answer"  # TCP (and TLS) not established yet
    if conn.stage == "ready":
        return "connected and set up"
    return f"connected, no answer to {conn.stage}"


@dataclass(slots=True)
class Round:
    """One round of ``Cluster.any_connection``'s connection attempts.

    Attributes:
        attempts: by address, when its attempt started and why it failed
            (None: not finished).
        opening: by address, the connection its attempt set up (its stage
            kept as it was when the round was cancelled).
        cancelled: when the round was cancelled (None: it goes on).
    """

    attempts: dict[str, tuple[float, str | None]] = field(default_factory=dict)
    opening: dict[str, BrokerConnection] = field(default_factory=dict)
    cancelled: float | None = None

    def said(self, now: float) -> dict[str, str]:
        """Each address and its state: why it failed, or how long it went
        unanswered and at which step of the set-up (TCP, ApiVersions, SASL)."""
        end = now if self.cancelled is None else self.cancelled
        return {
            name: cause or f"{step(self.opening.get(name))} for {end - started:.1f} s"
            for name, (started, cause) in self.attempts.items()
        }


@dataclass(slots=True)
class SetUp:
    """The set-up of one connection to a broker by node id.

    Attributes:
        conn: the connection (its :attr:`~BrokerConnection.stage` is the step).
        started: when the set-up began.
        cut: when its caller gave up, cancelling it (None: it goes on).
    """

    conn: BrokerConnection
    started: float
    cut: float | None = None

    def said(self, now: float) -> str:
        """Its step and how long it went unanswered (until it was cut)."""
        end = now if self.cut is None else self.cut
        return f"{step(self.conn)} for {end - self.started:.1f} s"


class SetUps:
    """The latest set-up of a connection to each broker address, by node id,
    while it goes on and once its caller gave up on it."""

    __slots__ = ("_latest",)

    def __init__(self) -> None:
        self._latest: dict[str, SetUp] = {}

    def begin(self, conn: BrokerConnection) -> SetUp:
        """Record the set-up of ``conn`` starting now (replacing the one before)."""
        record = self._latest[conn.address] = SetUp(conn, anyio.current_time())
        return record

    def end(self, record: SetUp, *, cut: bool) -> None:
        """The set-up of ``record`` ended: done or failed (dropped), or ``cut``
        by its caller (kept, its step and duration as they are now)."""
        if cut:
            record.cut = anyio.current_time()
        elif self._latest.get(record.conn.address) is record:
            del self._latest[record.conn.address]

    def of(self, host: str, port: int) -> str | None:
        """The state of the latest set-up to ``host:port`` (None: none)."""
        record = self._latest.get(format_address(host, port))
        return None if record is None else record.said(anyio.current_time())

    def said(self) -> dict[str, str]:
        """Each address (with its node id) and the state of its set-up:
        ``"host:port (node 1)": "connected, no answer to ApiVersions for 3.0 s"``."""
        now = anyio.current_time()
        return {
            address if record.conn.node_id < 0 else f"{address} (node {record.conn.node_id})": (
                record.said(now)
            )
            for address, record in self._latest.items()
        }
