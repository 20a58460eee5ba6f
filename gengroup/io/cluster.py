"""The cluster view: bootstrap, metadata, the connection pool, coordinator lookup.

Theory of operation:

A :class:`Cluster` is an async context manager owning one task group in which
every :class:`~gengroup.io.connection.BrokerConnection`'s reader task runs. At
most one connection per broker is kept; a broken one is dropped from the pool
and replaced on next use. Connection attempts to one node are serialised by a
per-node lock so that a burst of callers opens one socket, not many.

A request that may go to any broker (metadata, FindCoordinator) uses the
least-loaded usable connection. With none open, :meth:`Cluster.any_connection`
tries the known brokers, then the bootstrap addresses they do not cover, each
group in random order (as the Java client and librdkafka do: a list that
every service configures alike would otherwise send them all to its first
address). An attempt that has not finished after :data:`CONNECT_STAGGER`
seconds does not hold the next one up: the next address is tried beside it
(RFC 8305's "happy eyeballs"), and the first connection made wins, the
others are cancelled. A broker that accepts connections and never answers
therefore costs a fraction of a second, not ``connect_timeout``. What a
caller whose deadline passed waited on (:meth:`Cluster.waiting_on`: a
round's attempts, the set-up of a connection to a leader or coordinator,
each with its step) is recorded by :mod:`gengroup.io.setups`.

Metadata is fetched on demand and cached: the broker map (node id -> address),
and per topic its id and each partition's leader and epoch, never taken back
to an older epoch, and updated by the leader a refusal names
(:mod:`~gengroup.io.metadata`). Callers that get
NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION (any
:class:`~gengroup._errors.StaleMetadataError`), or cannot reach a partition's
leader, call :meth:`Cluster.refresh_metadata` and retry. Requests that may go
to any broker use the least-loaded usable connection, falling back to the
known brokers and the bootstrap addresses. A broker that left a request
unanswered for its whole timeout (a hung broker: a long GC pause, a network
black hole; reported by its connection, whether or not the caller still
waited, or by :meth:`Cluster.unanswered` when a caller's own deadline cut
its wait first) is *silent* until it answers again: those requests go to the other
brokers first, opening a connection if need be (a silent broker is tried
only once every other address failed), as the Java client disconnects such
a node and picks another.

Reachability is tracked where "no broker at all" is decided,
:meth:`Cluster.any_connection`: when every known broker and bootstrap
address fails it raises :class:`~gengroup._errors.ClusterUnreachable` naming
each address and its cause, and logs one WARNING when the cluster goes from
reachable to unreachable (and one INFO when it comes back), never one per
attempt. Once the cluster has been unreachable for ``unreachable_timeout``
seconds the error is marked exhausted, which the error table does not retry:
every retry loop above stops and the error reaches the caller. A broker that
accepts connections and closes each one at once on its first request after
ApiVersions (a listener that requires SASL, to a client without it) counts
the same way once every known address does it (:meth:`Cluster.call` raises
the exhausted error); any answer on any connection ends an outage. One such
close is not enough: a broker stopping closes the connections it has, and
may do so to one that just sent its first request. An address counts once a
connection opened after such a close was closed the same way, and only then
is a client without SASL asked whether the listener requires it (a broker
that stopped refuses the next connection instead, which is said as that):
in the :class:`~gengroup._errors.BrokenConnection` that request raises,
and in the WARNING and the outage once every known address does it.

A connection with no request in flight for ``connections_max_idle`` seconds
is closed and dropped from the pool before the broker's own idle limit
closes it under a request (:mod:`gengroup.io.idle`).

Every request goes out through :meth:`Cluster.call` (version negotiated on
the connection that carries it, see :mod:`gengroup.io.request`); every retry
waits the one backoff of :mod:`gengroup.io.retry`, from ``retry_backoff``.

Every connection is secured alike: the cluster's :class:`~gengroup.io.security.Security`
(TLS and SASL settings) and the one TLS context built from it at construction
go to each :class:`~gengroup.io.connection.BrokerConnection` it opens. An
:class:`~gengroup._errors.AuthenticationError` (TLS or SASL) is not a
connection failure to try the next address with: it comes out of
:meth:`Cluster.any_connection` at once, and nothing retries it; for
:data:`AUTH_REFUSAL_MEMORY` it answers the next connections to that broker
without another login. The refusals of all its connections are logged once
per cause (:mod:`gengroup.io.logins`).

FindCoordinator retries what the error table retries (NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, connection failures
...) with backoff until its deadline; following a coordinator that moves is
:class:`gengroup.io.coordinator.CoordinatorClient`'s job. A coordinator that
cannot be found is tracked like an unreachable cluster, per key: the first
COORDINATOR_NOT_AVAILABLE answer logs one INFO (a coordinator moving is
unavailable for a moment), one :data:`LONG_UNAVAILABLE` later a WARNING (the
next coordinator found one INFO), each such answer raises
:class:`~gengroup._errors.CoordinatorUnavailable` saying for how long, and
once FindCoordinator has answered so for ``unreachable_timeout`` seconds, with
no coordinator found between, the error is exhausted and reaches the caller.
The lookup's own deadline does not reset that clock, so the callers that look
the coordinator up again and again (a group forming) still stop. A
coordinator that merely moves (seconds of COORDINATOR_NOT_AVAILABLE) or loads
(FindCoordinator answers; the group's requests answer
COORDINATOR_LOAD_IN_PROGRESS) is ridden out.
"""

from __future__ import annotations

import copy
import logging
import random
from collections.abc import Iterable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Self, Unpack

import anyio
import anyio.abc
from kio.schema.errors import ErrorCode

from .._config import check_brokers_type, check_cluster_timings, check_idle_limit
from .._errors import (
    AuthenticationError,
    BrokenConnection,
    ClusterUnreachable,
    ConfigError,
    ConnectionClosed,
    CoordinatorUnavailable,
    GengroupError,
    KafkaConnectionError,
    raise_for_code,
)
from .._types import TopicPartition, parse_address
from ..protocol.framing import build, check_client_id, ms
from ..protocol.versions import ApiKey
from . import request as _request
from .connection import BrokerConnection
from .idle import IdleReaper
from .logins import Logins
from .metadata import BrokerInfo, PartitionInfo, TopicInfo, apply_leader_hint, keep_newer
from .outage import Outage
from .retry import ClientClosed, retry, unanswered
from .security import PLAINTEXT, Security, SecuritySettings
from .setups import Round, SetUps, connect_cause, format_address

#: Seconds for which a broker's refusal of the client's login (TLS or SASL;
#: not OAUTHBEARER, whose provider may hand out a better token next time)
#: is the answer to another connection to it, without logging in again: the
#: final commit and LeaveGroup of a group ended by the refusal, and the other
#: channels' connections, would each be refused again (a failed login each,
#: which brokers count and may lock a principal out for), as the Java
#: client keeps a node's authentication failure for its reconnect backoff.
AUTH_REFUSAL_MEMORY: Final = 10.0

__all__ = [
    "CONNECT_STAGGER",
    "LONG_UNAVAILABLE",
    "BrokerInfo",
    "Cluster",
    "PartitionInfo",
    "TopicInfo",
    "ms",
    "parse_address",
]

log = logging.getLogger("gengroup.cluster")

#: What a request on a closed cluster raises (:class:`ClientClosed`, at once).
_CLOSED: Final = (
    "the Cluster is closed (its `async with` exited, or that of the Admin, Producer or "
    "ConsumerGroup that opened it): nothing is sent"
)

#: Seconds a connection attempt of :meth:`Cluster.any_connection` runs alone
#: before the next address is tried beside it.
CONNECT_STAGGER: Final = 0.5

#: Seconds FindCoordinator may answer COORDINATOR_NOT_AVAILABLE for a key
#: before it is a WARNING (before, an INFO: a coordinator moving is
#: unavailable for a moment).
LONG_UNAVAILABLE = 10.0


@dataclass(slots=True)
class CoordinatorOutage:
    """A key's coordinator unavailable: since when, the latest such answer, WARNING said."""

    since: float
    last: float
    warned: bool = False


class Cluster:
    """A pool of broker connections and the cached cluster metadata.

    Args:
        bootstrap: ``host:port`` addresses to start from.
        client_id: sent in every request header.
        connect_timeout: seconds to connect and negotiate versions.
        request_timeout: default seconds to wait for a response.
        retry_backoff: base seconds between retries (doubling up to 1 s, jittered by ±20%).
        unreachable_timeout: seconds the cluster may stay unreachable (no
            broker answers at all) before :class:`~gengroup._errors.ClusterUnreachable`
            stops being retried, and FindCoordinator may keep answering
            COORDINATOR_NOT_AVAILABLE for a key before
            :class:`~gengroup._errors.CoordinatorUnavailable` does; None
            retries forever.
        connections_max_idle: seconds after which a connection with no request
            in flight is closed (None: never); below the brokers' own limit.
        security: TLS and SASL settings of every connection (default: plain TCP).
        **settings: the same settings by name instead (``security_protocol``,
            ``sasl_mechanism`` ..., see :class:`~gengroup.io.security.Security`).

    Raises:
        ConfigError: an invalid address, duration or security setting.
        GengroupError: entered twice or after :meth:`aclose`, or left unentered.

    Example::

        async with Cluster(["127.0.0.1:9092"]) as cluster:
            await cluster.refresh_metadata(["payments"])

        async with Cluster(["kafka.example:9093"], security_protocol="SASL_SSL",
                           sasl_mechanism="SCRAM-SHA-512", sasl_username="billing",
                           sasl_password=secret) as cluster:
            ...
    """

    def __init__(
        self,
        bootstrap: Sequence[str] | str,
        *,
        client_id: str = "gengroup",
        connect_timeout: float = 10.0,
        request_timeout: float = 30.0,
        retry_backoff: float = 0.1,
        unreachable_timeout: float | None = None,
        connections_max_idle: float | None = 540.0,
        security: Security | None = None,
        **settings: Unpack[SecuritySettings],
    ) -> None:
        check_brokers_type(bootstrap, " (a Producer or an Admin also takes an open Cluster)")
        if isinstance(bootstrap, str):
            bootstrap = [a for a in bootstrap.split(",") if a.strip()]
        if not bootstrap:
            raise ConfigError("at least one bootstrap broker address is required")
        self.bootstrap = [parse_address(a) for a in bootstrap]
        check_client_id(client_id)
        check_cluster_timings(connect_timeout, request_timeout, retry_backoff, unreachable_timeout)
        check_idle_limit(connections_max_idle)
        self.client_id = client_id
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.retry_backoff = retry_backoff
        self.unreachable_timeout = unreachable_timeout
        if security is not None and settings:
            raise ConfigError(f"pass either security or {', '.join(settings)}, not both")
        self.security = Security(**settings) if settings else Security.of(security or PLAINTEXT)
        self._tls = self.security.tls_context()
        #: Whether the cluster is unreachable, since when, and its log.
        self.outage = Outage()
        #: Addresses whose connections the broker closed on their first request
        #: after the set-up, with no answer since: when, and what to say of it.
        self._unanswered: dict[tuple[str, int], tuple[float, str]] = {}
        #: Addresses whose connection the broker closed so once, with no answer
        #: since: when, and how many connections had been opened by then (a
        #: connection opened later that is closed the same way puts the address
        #: in ``_unanswered``).
        self._closed_once: dict[tuple[str, int], tuple[float, int]] = {}
        #: How many connections this cluster opened (each one's serial number).
        self._opened = 0
        #: Addresses that left a request unanswered for its whole timeout, with
        #: no answer since (see :meth:`unanswered`).
        self._silent: set[tuple[str, int]] = set()
        #: Addresses that refused this client's login (TLS or SASL): when, and the error.
        self._refused: dict[tuple[str, int], tuple[float, AuthenticationError]] = {}
        #: Every connection's logins, refused ones logged once per cause.
        self.logins = Logins()
        #: By (key, key type): FindCoordinator answering COORDINATOR_NOT_AVAILABLE,
        #: with no coordinator found for that key since.
        self.coordinator_outages: dict[tuple[str, int], CoordinatorOutage] = {}
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        #: By topic, the partitions whose cached leader a hint gave (io/metadata.py).
        self._hinted: dict[str, set[int]] = {}
        self.cluster_id: str | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack = AsyncExitStack()
        self._conns: dict[tuple[int | tuple[str, int], str], BrokerConnection] = {}
        self._locks: dict[tuple[int | tuple[str, int], str], anyio.Lock] = {}
        self._inflight: dict[BrokerConnection, int] = {}
        #: Closes the connections idle for ``connections_max_idle`` (the one task that does).
        self.idle = IdleReaper(connections_max_idle, self._conns, self._inflight)
        #: The attempts of the latest :meth:`any_connection` round that did not
        #: end with a connection or with every attempt failed: still going, or
        #: cancelled (until the next request to any broker).
        self._round: Round | None = None
        #: The set-ups of connections opened by node id (not in a round).
        self._setups = SetUps()
        self._metadata_lock = anyio.Lock()
        self._closed = False

    async def __aenter__(self) -> Self:
        if self._tg is not None or self._closed:
            raise GengroupError("a Cluster can be entered only once, and not after aclose()")
        self._tg = await self._stack.enter_async_context(anyio.create_task_group())
        self.idle.start(self._tg)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._tg is None:
            raise GengroupError("the Cluster was not entered (async with)")
        # Every connection is closed first, so the task group's serve tasks
        # return by themselves; the body's exception (if any) is not handed
        # to the task group, so it propagates as itself, unwrapped.
        await self.aclose()
        await self._stack.aclose()

    async def aclose(self) -> None:
        """Close every pooled connection; no new one is opened afterwards.

        Connection readers only stop when their connection is closed, so a
        connection opened while this runs would keep the task group open:
        hence the flag, checked by every open.
        """
        self._closed = True
        self.idle.stop()
        while self._conns:
            conns = list(self._conns.values())
            self._conns.clear()
            for conn in conns:
                await conn.aclose()

    # ------------------------------------------------------------------ connections

    def _address(self, node_id: int) -> tuple[str, int]:
        info = self.brokers.get(node_id)
        if info is None:
            raise BrokenConnection(f"broker {node_id} is not in the cluster metadata")
        return info.host, info.port

    async def _open(
        self, key: int | tuple[str, int], channel: str = "default", round_: Round | None = None
    ) -> BrokerConnection:
        """The pooled connection to ``key`` on ``channel``, opened if need be; its set-up is
        recorded in ``round_`` (an :meth:`any_connection` round's attempt),
        else in the set-ups by address (see :mod:`gengroup.io.setups`)."""
        slot = (key, channel)
        conn = self._conns.get(slot)
        if conn is not None and conn.is_usable:
            return self.idle.lent(conn)
        lock = self._locks.setdefault(slot, anyio.Lock())
        async with lock:
            conn = self._conns.get(slot)
            if conn is not None and conn.is_usable:
                return self.idle.lent(conn)
            if self._tg is None:
                raise GengroupError("the Cluster is not open: use `async with Cluster(...)`")
            if self._closed:
                raise ClientClosed(_CLOSED)
            if isinstance(key, int):
                host, port = self._address(key)
                node_id = key
            else:
                (host, port), node_id = key, -1
            refused = self._refused.get((host, port))
            if refused is not None and anyio.current_time() < refused[0] + AUTH_REFUSAL_MEMORY:
                raise copy.copy(refused[1])  # the same credentials: not a login again
            self._refused.pop((host, port), None)
            new = BrokerConnection(
                host,
                port,
                node_id=node_id,
                client_id=self.client_id,
                connect_timeout=self.connect_timeout,
                request_timeout=self.request_timeout,
                security=self.security,
                tls=self._tls,
            )
            new.on_answer = partial(self._answered, (host, port))
            self._opened += 1
            new.on_unanswered_close = partial(self._closed_unanswered, (host, port), self._opened)
            new.on_refused = partial(self._refused_login, (host, port))
            new.logins = self.logins
            new.on_timed_out = partial(self._silent.add, (host, port))
            if round_ is not None:
                round_.opening[format_address(host, port)] = new
            setup = None if round_ is not None else self._setups.begin(new)
            try:
                await self._tg.start(new.serve)
            except BaseException as exc:
                if setup is not None:  # a caller that gave up: kept for waiting_on()
                    self._setups.end(setup, cut=isinstance(exc, anyio.get_cancelled_exc_class()))
                if isinstance(exc, AuthenticationError):
                    self._refused_login((host, port), exc)
                raise
            if setup is not None:
                self._setups.end(setup, cut=False)
            if self._closed:  # aclose() ran while this one was connecting
                await new.aclose()
                raise ClientClosed(_CLOSED)
            self._conns[slot] = new
            if (host, port) not in self._unanswered:
                self.outage.ended()  # any broker answering means the cluster is reachable
            return new

    async def connection(self, node_id: int, channel: str = "default") -> BrokerConnection:
        """The pooled connection to broker ``node_id`` (opened if needed).

        Args:
            node_id: the broker.
            channel: which of the broker's connections. A broker answers the
                requests of one connection strictly in order, so traffic that
                waits on the broker -- Fetch long polls (``"fetch"``), parked
                JoinGroup/SyncGroup and the heartbeats between them
                (``"group"``) -- gets a connection of its own and never delays
                commits or metadata, nor waits behind them.
        """
        return await self._open(node_id, channel)

    def awaiting(self, node_id: int, channel: str = "default") -> int:
        """How many answers are still to come on the pooled connection to
        ``node_id`` on ``channel`` (0 if none is open)."""
        conn = self._conns.get((node_id, channel))
        return conn.awaiting if conn is not None and conn.is_usable else 0

    async def any_connection(self) -> BrokerConnection:
        """A connection to any reachable broker, preferring the least loaded.

        With none open, the known brokers and then the other bootstrap
        addresses are tried, each in random order, the next one beside an
        attempt still unanswered after :data:`CONNECT_STAGGER` seconds; the
        first connection made is returned. Silent brokers are tried only once
        every other address failed (a pooled connection to one would win any
        race at once).

        Raises:
            ClusterUnreachable: every address failed (each with its cause).
            AuthenticationError: a broker refused the client's login.
            ConnectionClosed: the cluster is closed.
        """
        if self._round is not None and self._round.cancelled is not None:
            self._round = None  # what it waited on was said, if anyone asked
        usable = [
            c
            for (_, ch), c in self._conns.items()
            if ch == "default" and c.is_usable and (c.host, c.port) not in self._silent
        ]
        if usable:
            if any(c.has_answered for c in usable):
                self.outage.ended()
            # Requests whose callers gave up count too: the answer comes after theirs.
            return min(usable, key=lambda c: (self._inflight.get(c, 0), c.awaiting))
        tried_from = anyio.current_time()
        brokers: list[int | tuple[str, int]] = list(self.brokers)
        random.shuffle(brokers)
        known = self._broker_addresses()
        bootstrap = [a for a in self.bootstrap if a not in known]
        random.shuffle(bootstrap)
        candidates = [*brokers, *bootstrap]

        def silent(key: int | tuple[str, int]) -> bool:
            return (key if isinstance(key, tuple) else self._address(key)) in self._silent

        causes: dict[str, str] = {}
        for round_ in ([k for k in candidates if not silent(k)], list(filter(silent, candidates))):
            if round_:
                conn, failed = await self._first_to_connect(round_)
                if conn is not None:
                    return conn
                causes |= failed
        raise self._unreachable(causes, tried_from)

    async def _first_to_connect(
        self, candidates: list[int | tuple[str, int]]
    ) -> tuple[BrokerConnection | None, dict[str, str]]:
        """The first connection made to one of ``candidates`` (None if every
        attempt failed), and the cause of each failure by address.

        The attempts start in order, each one as soon as the one before it
        failed or after :data:`CONNECT_STAGGER` seconds, whichever comes
        first; the first connection made cancels the attempts still going.
        A :class:`~gengroup._errors.ConnectionClosed` (the cluster closed)
        or an error that is not a connection failure (an
        :class:`~gengroup._errors.AuthenticationError`) is raised at once.
        """
        names = [self._name(key) for key in candidates]
        attempts: dict[str, tuple[float, str | None]] = {}
        self._round = this = Round(attempts)
        won: list[BrokerConnection] = []
        fatal: list[Exception] = []

        async def attempt(key: int | tuple[str, int], name: str, done: anyio.Event) -> None:
            attempts[name] = (anyio.current_time(), None)
            try:
                conn = await self._open(key, round_=this)
            except ConnectionClosed as exc:
                fatal.append(exc)
            except KafkaConnectionError as exc:
                attempts[name] = (attempts[name][0], connect_cause(exc))
            except Exception as exc:
                fatal.append(exc)
            else:
                won.append(conn)
            finally:
                done.set()
            if won or fatal:
                tg.cancel_scope.cancel()

        try:
            async with anyio.create_task_group() as tg:
                for key, name in zip(candidates, names, strict=True):
                    done = anyio.Event()
                    tg.start_soon(attempt, key, name, done)
                    with anyio.move_on_after(CONNECT_STAGGER):
                        await done.wait()
        except BaseException:
            this.cancelled = anyio.current_time()  # kept for waiting_on()
            raise
        if self._round is this:
            self._round = None
        if fatal:
            raise fatal[0]
        causes = {n: cause for n in names if (cause := attempts.get(n, (0.0, None))[1])}
        return (won[0] if won else None), causes

    def _name(self, key: int | tuple[str, int]) -> str:
        """``host:port`` of a broker or bootstrap address."""
        if isinstance(key, tuple):
            return format_address(*key)
        info = self.brokers.get(key)
        return f"broker {key}" if info is None else format_address(info.host, info.port)

    def waiting_on(self) -> dict[str, str]:
        """What requests wait on now, by address: the attempts of a connection
        round to any broker still going or just cancelled (how long each went
        unanswered, or why it failed), the latest set-up of a connection to a
        broker by node id (a leader, a coordinator) still going or cut by its
        caller, and the open connections with requests unanswered.

        For a caller whose deadline passed with no error to name (say, a
        producer waiting for a topic's metadata), to say what it waited on.

        Returns:
            ``host:port`` (``host:port (node 1)`` for a set-up by node id) ->
            its state, e.g. ``"connecting, no answer for 3.0 s"``,
            ``"connected, no answer to ApiVersions for 3.0 s"``, ``"connection
            refused"`` or ``"connected, 1 request(s) unanswered (the first:
            Metadata)"``.
        """
        out = {} if self._round is None else self._round.said(anyio.current_time())
        out |= self._setups.said()
        for (_, channel), conn in self._conns.items():
            if channel == "default" and conn.is_usable and conn.awaiting:
                said = f"connected, {conn.awaiting} request(s) unanswered"
                if conn.first_unanswered:
                    said += f" (the first: {conn.first_unanswered})"
                out.setdefault(format_address(conn.host, conn.port), said)
        return out

    def setting_up(self, node_id: int) -> str | None:
        """The state of the latest set-up of a connection to broker ``node_id``
        going on or cut by its caller (``"connected, no answer to ApiVersions
        for 3.0 s"``; None: none)."""
        info = self.brokers.get(node_id)
        return None if info is None else self._setups.of(info.host, info.port)

    def _broker_addresses(self) -> set[tuple[str, int]]:
        return {(b.host, b.port) for b in self.brokers.values()}

    def _unreachable(self, causes: dict[str, str], tried_from: float) -> ClusterUnreachable:
        """The error for "no address answered" since ``tried_from``; logs the change once.

        The outage counts from the start of the first round of attempts that
        failed, not its end: attempts that time out (a broker that accepts
        connections and never answers) would otherwise add a round of
        ``connect_timeout`` to ``unreachable_timeout``.
        """

        def said() -> str:
            return "; ".join(f"{a}: {c}" for a, c in causes.items())

        if self.outage.since is None:
            self.outage.began(tried_from, said())
        down = self.outage.lasts(said)
        limit = self.unreachable_timeout
        return ClusterUnreachable(causes, down, exhausted=limit is not None and down >= limit)

    def _refused_login(self, address: tuple[str, int], exc: AuthenticationError) -> None:
        # An OAUTHBEARER login asks the token provider anew: the next may succeed.
        if self.security.sasl_mechanism != "OAUTHBEARER":
            self._refused[address] = (anyio.current_time(), exc)

    def unanswered(self, node_id: int) -> None:
        """Broker ``node_id`` did not answer a caller for as long as it could
        wait (its deadline cut the wait; the connection stays open for the
        other callers): requests to any broker go to the others first until
        it answers again (any answer on any connection to it ends that)."""
        info = self.brokers.get(node_id)
        if info is not None:
            self._silent.add((info.host, info.port))

    def _answered(self, address: tuple[str, int]) -> None:
        self._silent.discard(address)
        if self._unanswered or self._closed_once:
            self._unanswered.pop(address, None)
            self._closed_once.pop(address, None)
        if self.outage.since is not None:
            self.outage.ended()

    def _closed_unanswered(self, address: tuple[str, int], serial: int, said: str) -> None:
        """Connection number ``serial``, to ``address``, was closed on its first
        request after the set-up.

        A broker does that to every connection when the client speaks to it
        wrongly (no SASL on a listener that requires it), and a broker
        stopping may do it to the connections it has. So the address counts
        once a connection opened after the first such close is closed the same
        way (a stopped broker refuses it instead): once every address known
        does it, the cluster is unreachable (logged once), until an answer
        comes; :meth:`call` raises the exhausted outage once it lasted
        ``unreachable_timeout``, counted from the first close.
        """
        once = self._closed_once.get(address)
        if once is None or serial <= once[1]:
            self._closed_once.setdefault(address, (anyio.current_time(), self._opened))
            return
        said += ", and again on a later connection"
        if not self.security.uses_sasl:
            said += " (does the listener require SASL? check security_protocol)"
        self._unanswered.setdefault(address, (once[0], said))
        if self.outage.since is None and self._all_unanswered():
            # Since the last of them began to: an address that did so long ago
            # (a broker gone since) does not make a new outage old at once.
            since = max(at for at, _ in self._unanswered.values())
            self.outage.began(since, "; ".join(self._unanswered_causes().values()))

    def _all_unanswered(self) -> bool:
        return (self._broker_addresses() | set(self.bootstrap)) <= self._unanswered.keys()

    def _unanswered_causes(self) -> dict[str, str]:
        return {format_address(*a): said for a, (_, said) in self._unanswered.items()}

    def _unanswered_outage(self) -> ClusterUnreachable | None:
        """The exhausted outage of brokers that close every connection unanswered, if it is one."""
        if self.outage.since is None or not self._all_unanswered():
            return None
        down = self.outage.lasts(lambda: "; ".join(self._unanswered_causes().values()))
        limit = self.unreachable_timeout
        if limit is None or down < limit:
            return None
        return ClusterUnreachable(self._unanswered_causes(), down, exhausted=True)

    async def call(
        self,
        node_id: int | None,
        key: ApiKey,
        make: _request.MakeRequest,
        *,
        timeout: float | None = None,
        channel: str = "default",
        expect_response: bool = True,
        check: str | None = None,
    ) -> Any:
        """Build the request of ``key`` for ``node_id``'s version, send it, return the response.

        Args:
            node_id: the broker (None: any broker, the least loaded).
            key: the API.
            make: builds the request from the negotiated version's kio module.
            timeout: seconds to wait for the response (default: ``request_timeout``).
            channel: which of the broker's connections (see :meth:`connection`).
            expect_response: False for a request the broker does not answer.
            check: if given, a non-zero top-level error code raises its typed
                error with this context (see :func:`gengroup.io.request.call`).
        """
        conn = await (
            self.any_connection() if node_id is None else self.connection(node_id, channel)
        )
        # Counted in flight (for any_connection) while in use.
        inflight = self._inflight
        inflight[conn] = inflight.get(conn, 0) + 1
        try:
            return await _request.call(
                conn, key, make, timeout=timeout, expect_response=expect_response, check=check
            )
        except KafkaConnectionError as exc:
            if conn.has_answered:
                raise
            outage = self._unanswered_outage()
            if outage is not None:
                raise outage from exc
            said = self._unanswered.get((conn.host, conn.port))
            if said is not None and isinstance(exc, BrokenConnection):
                # The address closes every connection so: say it (and ask a
                # client without SASL whether the listener requires it).
                raise BrokenConnection(f"{conn}: {said[1]}") from exc
            raise
        finally:
            inflight[conn] -= 1
            if not inflight[conn]:
                del inflight[conn]

    # ------------------------------------------------------------------ metadata

    async def refresh_metadata(
        self, topics: Iterable[str] | None = None, *, allow_auto_create: bool = False
    ) -> dict[str, TopicInfo]:
        """Fetch metadata for ``topics`` (None: every topic) and update the cache.

        Returns:
            The topics in the response, by name (with their error codes: a
            missing topic has ``UNKNOWN_TOPIC_OR_PARTITION``).
        """
        names = None if topics is None else sorted(set(topics))

        def make(mod: Any) -> Any:
            return build(
                mod.MetadataRequest,
                topics=None
                if names is None
                else tuple(build(mod.MetadataRequestTopic, name=n, topic_id=None) for n in names),
                allow_auto_topic_creation=allow_auto_create,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )

        async with self._metadata_lock:
            resp: Any = await self.call(None, ApiKey.METADATA, make)
            self.cluster_id = resp.cluster_id
            brokers = {
                int(b.node_id): BrokerInfo(int(b.node_id), b.host, int(b.port), b.rack)
                for b in resp.brokers
            }
            if brokers:
                self.brokers = brokers
            result: dict[str, TopicInfo] = {}
            for t in resp.topics:
                if t.name is None:
                    continue
                parts = {
                    int(p.partition_index): PartitionInfo(
                        int(p.partition_index),
                        int(p.leader_id),
                        int(p.leader_epoch),
                        tuple(int(r) for r in p.replica_nodes),
                        int(p.error_code),
                    )
                    for p in t.partitions
                }
                topic_id = t.topic_id if getattr(t, "topic_id", None) else None
                info = TopicInfo(t.name, topic_id, parts, int(t.error_code), bool(t.is_internal))
                hinted = self._hinted.pop(t.name, ())  # a Metadata answer replaces hints
                if info.error_code == 0:
                    info = keep_newer(self.topics.get(t.name), info, hinted)
                    self.topics[t.name] = info
                else:
                    self.topics.pop(t.name, None)
                result[t.name] = info
            if names is None:
                for gone in set(self.topics) - set(result):
                    del self.topics[gone]
                    self._hinted.pop(gone, None)
            return result

    def leader_for(self, tp: TopicPartition) -> int:
        """The cached leader of ``tp`` (-1 if unknown)."""
        topic = self.topics.get(tp.topic)
        if topic is None:
            return -1
        part = topic.partitions.get(tp.partition)
        return -1 if part is None else part.leader

    def take_leader_hint(self, tp: TopicPartition, part: Any, response: Any) -> bool:
        """A broker's word on who leads ``tp`` now (KIP-951: ``part`` of a
        ``response`` refusing it, Produce v10+ or Fetch v16; a
        :class:`~gengroup.protocol.fetch.PartitionFetch` is both), taken if
        newer than the cache (:func:`~gengroup.io.metadata.apply_leader_hint`):
        whether it was."""
        hint = getattr(part, "current_leader", None)
        if hint is None:
            return False
        endpoints = getattr(response, "node_endpoints", ())
        return apply_leader_hint(self.topics, self.brokers, self._hinted, tp, hint, endpoints)

    def partition_count(self, topic: str) -> int | None:
        """The cached partition count of ``topic`` (None if unknown)."""
        info = self.topics.get(topic)
        return None if info is None else len(info.partitions)

    # ------------------------------------------------------------------ coordinator

    async def find_coordinator(
        self, key: str, *, key_type: int = 0, timeout: float | None = None
    ) -> int:
        """Find the coordinator of group ``key`` (key_type 0) and return its node id.

        Retries coordinator errors and connection failures with backoff until
        ``timeout`` (default: ``request_timeout``) passes.

        Raises:
            BrokerError: a non-retriable error (e.g. GROUP_AUTHORIZATION_FAILED).
            CoordinatorUnavailable: FindCoordinator has answered
                COORDINATOR_NOT_AVAILABLE for ``unreachable_timeout`` (exhausted).
            TimeoutError: no coordinator was found in time.
        """
        limit = self.request_timeout if timeout is None else timeout

        def timed_out(last: BaseException | None) -> TimeoutError:
            said = unanswered(self.waiting_on()) if last is None else f"last error: {last}"
            return TimeoutError(f"no coordinator for {key!r} within {limit} s ({said})")

        return await retry(
            f"FindCoordinator {key!r}",
            lambda: self._find_coordinator_once(key, key_type),
            timeout=limit,
            backoff=self.retry_backoff,
            on_timeout=timed_out,
        )

    async def _find_coordinator_once(self, key: str, key_type: int) -> int:
        resp: Any = await self.call(
            None,
            ApiKey.FIND_COORDINATOR,
            lambda mod: build(
                mod.FindCoordinatorRequest, key=key, key_type=key_type, coordinator_keys=(key,)
            ),
        )
        entry = resp.coordinators[0] if hasattr(resp, "coordinators") else resp
        code = int(entry.error_code)
        if code == ErrorCode.coordinator_not_available:
            raise self._coordinator_unavailable(key, key_type, entry.error_message)
        raise_for_code(code, entry.error_message)
        node = int(entry.node_id)
        self.brokers.setdefault(node, BrokerInfo(node, entry.host, int(entry.port)))
        outage = self.coordinator_outages.pop((key, key_type), None)
        if outage is not None:
            log.info(
                "coordinator of %r found (node %d) after %.1f s unavailable",
                key,
                node,
                anyio.current_time() - outage.since,
            )
        return node

    def _coordinator_unavailable(
        self, key: str, key_type: int, message: str | None
    ) -> CoordinatorUnavailable:
        """The error for FindCoordinator's COORDINATOR_NOT_AVAILABLE; logs the change once.

        The first answer is INFO (a coordinator moving is unavailable for a
        moment), one that comes :data:`LONG_UNAVAILABLE` or more after it a
        WARNING, once. An answer that comes more than ``unreachable_timeout`` after the
        previous one (nobody looked meanwhile: an admin call that gave up,
        then a new one much later) starts the count anew: what happened in
        between is not known.
        """
        now = anyio.current_time()
        limit = self.unreachable_timeout
        said = f": {message}" if message else ""
        outage = self.coordinator_outages.get((key, key_type))
        if outage is None or (limit is not None and now - outage.last > limit):
            outage = self.coordinator_outages[(key, key_type)] = CoordinatorOutage(now, now)
            log.info("coordinator of %r not available%s; looking it up again", key, said)
        outage.last = now
        down = now - outage.since
        if down >= LONG_UNAVAILABLE and not outage.warned:
            outage.warned = True
            log.warning("coordinator of %r not available for %.0f s%s", key, down, said)
        exhausted = limit is not None and down >= limit
        return CoordinatorUnavailable(key, down, exhausted=exhausted, message=message)
