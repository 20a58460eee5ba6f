"""One connection to one Kafka broker (TCP, TLS, SASL), multiplexed by correlation id.

Theory of operation:

A :class:`BrokerConnection` is served by exactly one task, :meth:`serve`,
started in a task group its owner controls (the :class:`~gengroup.io.cluster.Cluster`
or :func:`open_connection`). ``serve`` connects, negotiates API versions, reports
readiness through ``task_status`` and then reads frames forever, routing each to
the waiter registered under its correlation id. It never raises: when the
connection breaks it fails every request in flight with :class:`BrokenConnection`
(or :class:`ConnectionClosed` when we closed it) and returns, so a broken broker
connection never tears down the owner's task group.

Any number of tasks may call :meth:`request` concurrently: each registers a
waiter, writes its frame under a send lock and waits. Responses are decoded in
the caller's task, so a malformed response fails only that request (with
:class:`ProtocolError`) while the framing, and so the connection, stays intact.
A request that outlives its timeout closes the connection, as the Java client
does: its response would otherwise arrive late into an unknown state. Each
request's deadline is its send plus its own timeout (which covers any wait
the broker is asked to make, a Fetch's ``max_wait``, a JoinGroup's rebalance
timeout); a task beside the reader, :meth:`BrokerConnection._watch_deadlines`,
enforces it whether or not the request's caller still waits. A caller that
gave up first (cancelled, or bounded by its own shorter deadline) leaves its
request in flight, and Kafka answers a connection's requests in order: a
request that outlived its deadline unanswered means every later one is stuck
behind it, so the connection fails then, its other requests with it, and the
next request opens a new one.

Security (:mod:`gengroup.io.security`): with ``SSL``/``SASL_SSL`` the TCP
stream is wrapped in TLS (anyio's ``TLSStream``, server name = the broker's
host) before anything is sent; a certificate that does not verify, or a
handshake the broker refuses, raises :class:`~gengroup._errors.TLSError`
naming the cause, which is not retried. With ``SASL_*``, the SASL exchange
of :mod:`gengroup.io.sasl` runs right after ApiVersions, before readiness
is reported; rejected credentials raise
:class:`~gengroup._errors.AuthenticationError` (logged once per cause for
all the client's connections, :mod:`gengroup.io.logins`, and not
retried). When the broker limits the session's lifetime (KIP-368), a task
beside the reader re-authenticates on this same connection before it
expires, holding the send lock so that no other request goes out between
the SASL frames (see :mod:`gengroup.io.sasl` for why in place). It starts the
exchange, and its ``connect_timeout``, once the requests already sent were
answered (a parked JoinGroup included), with the mechanism made ahead of it
(an OAUTHBEARER token, asked of its provider a quarter of the session, at
most a minute, before, while requests go on; asked again if the wait made
it older than half the session), and it is shielded from
cancellation as the reader is (below); closing the connection ends it, and
the token's fetch, at once.

The read loop is shielded from cancellation: the connection lives until its
owner closes it, so that shielded clean-up in a cancelled scope (the final
offset commit of a generation, LeaveGroup) can still use it. Owners therefore
always close their connections on exit (``Cluster.__aexit__``,
``open_connection``).

Ctrl-C on trio: trio raises KeyboardInterrupt wherever unprotected code runs,
and the first use of each API version imports a kio schema module. A
KeyboardInterrupt raised inside an import can be lost (importlib runs part of
its bookkeeping in a weakref callback, whose exceptions Python ignores: the
program runs on) or leave the module half imported (the request then fails
with a misleading error). The schema loaders of :mod:`gengroup.protocol.framing`
are therefore marked KI-protected: a Ctrl-C during an import is delivered at
the main task's next checkpoint instead.
"""

from __future__ import annotations

import itertools
import logging
import math
import random
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeVar, Unpack

import anyio
import anyio.abc
import anyio.lowlevel
import trio
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.errors import ErrorCode

from .._errors import (
    AuthenticationError,
    BrokenConnection,
    ConnectionClosed,
    KafkaConnectionError,
    ProtocolError,
    RequestTimedOut,
    TLSError,
    error_for_code,
)
from ..protocol import framing
from ..protocol.framing import FrameBuffer, decode_response, encode_request, read_correlation_id
from ..protocol.versions import ApiKey, negotiate
from . import sasl
from .inplace import frame_reader, frame_writer
from .logins import Logins
from .security import PLAINTEXT, Security

__all__ = ["BrokerConnection", "ConnectionOptions", "open_connection"]

T = TypeVar("T")

log = logging.getLogger("gengroup.connection")

# See "Ctrl-C on trio" above. Marking is per code object and needs no running
# event loop; under asyncio it has no effect.
for _loader in (framing.request_schema, framing.response_schema):
    trio.lowlevel.enable_ki_protection(_loader.__wrapped__)  # the function its cache calls
del _loader

#: Re-authenticate at this fraction of the session lifetime (jittered between them).
_REAUTH_AT = (0.85, 0.95)
#: Ask for a re-authentication's mechanism (an OAUTHBEARER token) this
#: fraction of the session before it is due, and at most :data:`_FETCH_LEAD_CAP`
#: seconds before: a slow token provider then runs while requests go on.
_FETCH_LEAD = 0.25
_FETCH_LEAD_CAP = 60.0
#: A mechanism made ahead is used only if asked for at most this fraction of
#: the ending session before the exchange starts, else it is made again: the
#: token is still fresh when it is used (see :meth:`BrokerConnection._reauthenticate`).
_FETCHED_MAX_AGE = 0.5
#: Seconds within which a broker closing a connection on its first request
#: after the set-up did so at once: a listener that requires SASL closes it as
#: soon as the request arrives.
_AT_ONCE = 1.0

_SOFTWARE_NAME = "gengroup"
_SOFTWARE_VERSION = "0.1.0"


@dataclass(eq=False)
class _Waiter:
    response_cls: type[Any]
    #: The request's name and timeout, for the message when it times out.
    name: str = ""
    limit: float = math.inf
    event: anyio.Event = field(default_factory=anyio.Event)
    frame: bytes | bytearray | None = None
    error: BaseException | None = None
    #: When the request times out (None: not sent yet).
    deadline: float | None = None
    #: Whether its caller stopped waiting (cancelled) before it was answered.
    abandoned: bool = False


@dataclass(eq=False)
class _Fetched:
    """The mechanism made ahead of a re-authentication, or why it could not be."""

    #: When it was asked for (its token is at most this old).
    asked: float
    done: anyio.Event = field(default_factory=anyio.Event)
    mechanism: sasl.Mechanism | None = None
    error: Exception | None = None


def _without_tracebacks(exc: BaseException) -> BaseException:
    """``exc`` with the tracebacks of it and of its causes and contexts dropped."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        e.__traceback__ = None
        todo += [e.__cause__, e.__context__]
    return exc


def describe_connect_failure(exc: BaseException) -> str:
    """Why a connection attempt failed, in words a user acts on.

    ``connection refused`` (nothing listens there), ``DNS lookup failed: ...``
    (the host name does not resolve), ``connect timed out``, else the error
    itself.
    """
    if isinstance(exc, socket.gaierror):
        return f"DNS lookup failed: {exc.strerror or exc}"
    if isinstance(exc, TimeoutError):
        return "connect timed out"
    if isinstance(exc, anyio.EndOfStream):  # only a TLS handshake reads while connecting
        return (
            "closed by the broker during the TLS handshake "
            "(does it speak TLS on this port? check security_protocol)"
        )
    cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused"
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror.lower()
    return repr(exc)


def tls_failure(exc: BaseException, broker: str) -> TLSError | None:
    """The :class:`TLSError` for a TLS failure the configuration must fix, else None.

    A certificate that does not verify or a handshake alert from the broker
    is one; a handshake cut short (EOF, reset) is an ordinary broken
    connection, worth retrying.
    """
    err = exc
    while not isinstance(err, ssl.SSLError) and err.__cause__ is not None:
        err = err.__cause__
    if isinstance(err, ssl.SSLCertVerificationError):
        # OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH (62) and X509_V_ERR_IP_ADDRESS_MISMATCH (64).
        reason = "hostname mismatch" if err.verify_code in (62, 64) else "certificate verify failed"
        detail = err.verify_message or str(err)
        message = f"TLS handshake with {broker} failed: {reason}: {detail}"
        return TLSError(message, broker=broker, reason=reason)
    if isinstance(err, ssl.SSLError) and not isinstance(
        err, ssl.SSLEOFError | ssl.SSLZeroReturnError | ssl.SSLSyscallError
    ):
        code = err.reason or str(err)
        if "ALERT" in code:
            detail = f"{code} (a client certificate missing or not trusted?)"
            reason = "rejected by the broker"
        elif code == "WRONG_VERSION_NUMBER":
            detail = "the broker does not speak TLS on this port (check security_protocol)"
            reason = "rejected by the broker"
        else:
            return None
        message = f"TLS handshake with {broker} failed: {reason}: {detail}"
        return TLSError(message, broker=broker, reason=reason)
    return None


class BrokerConnection:
    """A multiplexed connection to one broker.

    Create it with :func:`open_connection`, or start :meth:`serve` in a task
    group you own (``conn = await tg.start(BrokerConnection(...).serve)``).

    Args:
        host: the broker's host.
        port: the broker's port.
        node_id: the broker's node id, if known (-1 for a bootstrap address).
        client_id: sent in every request header.
        connect_timeout: seconds to establish TCP and TLS, negotiate versions
            and authenticate.
        request_timeout: default seconds to wait for a response.
        security: TLS and SASL settings (default: plain TCP).
        tls: the TLS context to use (default: built from ``security``; a
            :class:`~gengroup.io.cluster.Cluster` builds one for all its connections).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int = -1,
        client_id: str = "gengroup",
        connect_timeout: float = 10.0,
        request_timeout: float = 30.0,
        security: Security = PLAINTEXT,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.security = security
        self._tls = tls if tls is not None or not security.uses_tls else security.tls_context()
        #: Seconds the broker gave the SASL session (None: unlimited or no SASL).
        self.session_lifetime: float | None = None
        #: How many times the connection re-authenticated (KIP-368).
        self.reauthentications = 0
        #: The step of the set-up under way, for what a caller that gave up
        #: waited on: ``"connecting"`` (TCP, TLS), ``"ApiVersions"``, the SASL
        #: authentication (``"PLAIN authentication"``), then ``"ready"``.
        self.stage = "connecting"
        #: Whether the set-up (ApiVersions, SASL) is done, and whether the broker
        #: answered a request after it.
        self._set_up = False
        self.has_answered = False
        #: Called at every answer to a request after the set-up.
        self.on_answer: Callable[[], None] | None = None
        #: Called if the broker closes the connection at once (within
        #: :data:`_AT_ONCE`) on its first request after the set-up, with what
        #: to say of it; a parked request (JoinGroup, a long poll) cut by a
        #: restart is not that. A listener that requires SASL does it to every
        #: connection, a broker stopping to those it has: the owner tells
        #: which by the next connection.
        self.on_unanswered_close: Callable[[str], None] | None = None
        self._first_sent_at: float | None = None
        #: When the set-up ended, a request was last written or answered, or the
        #: owner last handed it out: what idleness counts from (:mod:`gengroup.io.idle`).
        self.last_active = 0.0
        #: Called when a request went unanswered for its whole timeout (the
        #: connection is then closed).
        self.on_timed_out: Callable[[], None] | None = None
        #: Called when a re-authentication is refused, with the refusal.
        self.on_refused: Callable[[AuthenticationError], None] | None = None
        #: Where refused logins are logged, once per cause: the client's (a
        #: ``Cluster`` shares one among its connections), else its own.
        self.logins = Logins()
        self._read_error: BaseException | None = None
        #: api key -> negotiated version (filled in during :meth:`serve`).
        self.versions: dict[ApiKey, int] = {}
        #: api key -> (min, max) the broker advertised.
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self._stream: anyio.abc.ByteStream | None = None
        self._write: Callable[[bytes], Awaitable[None]] | None = None  # inplace.frame_writer
        self._waiters: dict[int, _Waiter] = {}
        self._cids = itertools.count(1)
        #: One frame written at a time. Taken without a schedule point when
        #: free (``fast_acquire``): a request is written before any task
        #: started beside it runs (the refresh beside JoinGroup, the
        #: OffsetFetch beside SyncGroup) and before the tasks a rebalance
        #: cancelled run their way out; each task switch on a rebalance's
        #: path lets every runnable task of the process run first.
        self._send_lock = anyio.Lock(fast_acquire=True)
        self._failure: KafkaConnectionError | None = None
        #: Whether this process closed the connection (:meth:`aclose`).
        self._closed_here = False
        self._closed = anyio.Event()
        #: Set to wake :meth:`_watch_deadlines`: an earlier deadline, or the
        #: connection closed. (An answer does not wake it: it wakes at the
        #: watched deadline, no later than any other, and watches the next.)
        self._wake = anyio.Event()
        #: The deadline :meth:`_watch_deadlines` sleeps until (inf: none).
        self._watching = math.inf

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    @property
    def address(self) -> str:
        """The broker's ``host:port``."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def is_usable(self) -> bool:
        """True while the connection is open and not broken."""
        return self._stream is not None and self._failure is None

    @property
    def awaiting(self) -> int:
        """Requests sent on this connection whose answer has not come yet, whether
        or not their caller still waits (a request sent now is answered after them)."""
        return len(self._waiters)

    @property
    def first_unanswered(self) -> str | None:
        """The API of the oldest request still unanswered (``"Metadata"``; None: none)."""
        for waiter in self._waiters.values():
            return waiter.name.removesuffix("Request")
        return None

    # ------------------------------------------------------------------ lifecycle

    async def serve(self, *, task_status: anyio.abc.TaskStatus[BrokerConnection]) -> None:
        """Connect, negotiate versions, authenticate, report readiness, then read until closed.

        Raises (before readiness only):
            BrokenConnection: the broker could not be reached or negotiated with.
            TLSError: the broker's certificate did not verify, or it refused the handshake.
            AuthenticationError: SASL authentication failed.
        """
        try:
            with anyio.fail_after(self.connect_timeout):
                if self._tls is None:
                    self._stream = await anyio.connect_tcp(self.host, self.port)
                else:
                    self._stream = await anyio.connect_tcp(
                        self.host,
                        self.port,
                        ssl_context=self._tls,
                        tls_hostname=self.host,
                        # Brokers close TLS connections without close_notify.
                        tls_standard_compatible=False,
                    )
        except (OSError, TimeoutError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            tls_error = tls_failure(exc, self.address)
            if tls_error is not None:
                self.logins.refused(tls_error)
                raise tls_error from exc
            raise BrokenConnection(
                f"cannot connect to {self.host}:{self.port}: {describe_connect_failure(exc)}"
            ) from exc
        self._write = frame_writer(self._stream)
        failure: BaseException | None = None
        phase = "version negotiation"
        self.stage = "ApiVersions"
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._read_loop)
                tg.start_soon(self._watch_deadlines)
                try:
                    with anyio.fail_after(self.connect_timeout):
                        await self._negotiate()
                        if self.security.uses_sasl:
                            phase = self.stage = f"{self.security.sasl_mechanism} authentication"
                            self.session_lifetime = await sasl.authenticate(
                                self, self.security, self.address
                            )
                except AuthenticationError as exc:
                    failure = exc
                    self.logins.refused(exc)
                    self._fail(BrokenConnection(f"{self}: authentication failed"))
                    await self._close_stream()
                except (TimeoutError, KafkaConnectionError, ProtocolError) as exc:
                    failure = self._tls_read_failure() or exc
                    self._fail(BrokenConnection(f"{self}: {phase} failed: {exc!r}"))
                    await self._close_stream()
                except BaseException:
                    # Cancelled while negotiating: the shielded reader only
                    # stops once the stream is closed.
                    self._fail(ConnectionClosed(f"{self}: cancelled while connecting"))
                    await self._close_stream()
                    raise
                else:
                    self._set_up, self.stage = True, "ready"
                    self.last_active = anyio.current_time()
                    if self._tls is not None or self.security.uses_sasl:
                        self.logins.accepted(self.address)
                    if self.session_lifetime is not None:
                        tg.start_soon(self._reauthenticate_loop)
                    task_status.started(self)
                    # If the task that asked for this connection was cancelled
                    # meanwhile, trio does not hand the connection over to the
                    # owner's task group: it stays with the cancelled caller,
                    # which waits for it to end -- and the shielded reader
                    # would never end on its own. Close it instead.
                    try:
                        await anyio.lowlevel.checkpoint_if_cancelled()
                    except BaseException:
                        self._fail(ConnectionClosed(f"{self}: its requester was cancelled"))
                        await self._close_stream()
                        raise
        finally:
            await self._close_stream()
        if isinstance(failure, AuthenticationError):
            raise failure
        if failure is not None:
            hint = ""
            if self._tls is None and isinstance(self._read_error, anyio.EndOfStream):
                hint = " (does the broker speak TLS on this port? check security_protocol)"
            if isinstance(failure, TimeoutError):
                failure = TimeoutError(f"no answer within connect_timeout={self.connect_timeout} s")
            raise BrokenConnection(f"{self}: {phase} failed: {failure!r}{hint}") from failure

    def _tls_read_failure(self) -> TLSError | None:
        """A TLS alert read after the handshake (how TLS 1.3 refuses a client certificate)."""
        if self._read_error is None:
            return None
        error = tls_failure(self._read_error, self.address)
        if error is not None:
            self.logins.refused(error)
        return error

    async def _reauthenticate_loop(self) -> None:
        """Re-authenticate before each session expires, until the connection closes.

        Shielded, as the reader is: a connection that shielded clean-up in a
        cancelled scope still uses (a final commit, LeaveGroup) must not see
        its session expire; the loop ends with the connection.
        """
        with anyio.CancelScope(shield=True):
            await self._reauthenticate_until_closed()

    async def _reauthenticate_until_closed(self) -> None:
        while self.session_lifetime is not None:
            lifetime = self.session_lifetime
            due = anyio.current_time() + lifetime * random.uniform(*_REAUTH_AT)
            lead = min(lifetime * _FETCH_LEAD, _FETCH_LEAD_CAP)
            with anyio.move_on_after(due - lead - anyio.current_time()):
                await self._closed.wait()
                return
            lifetimes: list[float | None] = []
            async with anyio.create_task_group() as tg:

                async def cut_on_close() -> None:
                    # The loop is shielded: closing the connection (a cancelled
                    # block leaving) must not wait for a slow token provider.
                    await self._closed.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(cut_on_close)
                fetched = _Fetched(anyio.current_time())
                tg.start_soon(self._fetch_mechanism, fetched)
                await anyio.sleep_until(due)
                try:
                    lifetimes.append(await self._reauthenticate(fetched, lifetime))
                except Exception as exc:  # the serve task never raises once started
                    # At once, before a request waiting for the lock goes out
                    # on the expired session.
                    self._reauthentication_failed(exc)
                tg.cancel_scope.cancel()
            if not lifetimes:
                await self._close_stream()  # closed, or the re-authentication failed
                return
            self.reauthentications += 1
            self.logins.accepted(self.address)
            self.session_lifetime = lifetimes[0]
            log.debug("%s re-authenticated; next session lasts %s s", self, lifetimes[0])

    def _reauthentication_failed(self, failure: Exception) -> None:
        if isinstance(failure, ConnectionClosed) or self._closed_here:
            return  # closed meanwhile: nothing left to re-authenticate
        if self._failure is not None and not isinstance(failure, AuthenticationError):
            return  # broken meanwhile (a refusal is one all the same: the broker then closes)
        if isinstance(failure, AuthenticationError) and self.on_refused is not None:
            self.on_refused(failure)
        said = str(failure) or repr(failure)
        context = f"{self}: re-authentication failed, closing the connection: "
        if isinstance(failure, AuthenticationError):
            self.logins.refused(failure, context)
        else:
            log.warning("%s%s", context, said)
        self._fail(BrokenConnection(f"{self}: re-authentication failed: {said}"))

    async def _fetch_mechanism(self, fetched: _Fetched) -> None:
        """Make the next re-authentication's mechanism (ask the token provider)
        ahead of it, without the send lock: requests go on meanwhile."""
        try:
            fetched.mechanism = await sasl.mechanism_for(self.security, self.address)
        except Exception as exc:  # raised by the re-authentication, as its own failure
            fetched.error = exc
        finally:
            fetched.done.set()

    async def _reauthenticate(self, fetched: _Fetched, lifetime: float) -> float | None:
        """Run the SASL exchange again on this connection; the new session's lifetime.

        Under the send lock, so that no request arrives after the session
        expired (the broker would close the connection), once the requests
        already sent were answered (in order; one may be parked, a JoinGroup,
        a long poll, each bounded by its deadline). The exchange then runs
        within ``connect_timeout`` with the mechanism ``fetched`` ahead of it,
        made again if the wait made it older than :data:`_FETCHED_MAX_AGE` of
        the ending session (``lifetime``): with OAUTHBEARER the broker ends a
        session when its token expires, and a token at most half a session
        old still has half a session to live, where a refused one would not
        be retried. A SaslHandshake after the session expired still
        re-authenticates: Kafka closes an expired session's connection at its
        next request of another kind.

        Raises:
            TimeoutError: no answer within ``connect_timeout`` (it says so).
        """
        async with self._send_lock:
            # Sent requests have a deadline; those waiting for the lock have none yet.
            for waiter in [w for w in self._waiters.values() if w.deadline is not None]:
                await waiter.event.wait()
            made = False
            try:
                with anyio.fail_after(self.connect_timeout):
                    age = anyio.current_time() - fetched.asked
                    if fetched.done.is_set() and age > lifetime * _FETCHED_MAX_AGE:
                        log.debug("%s: the token fetched %.1f s ago is asked again", self, age)
                        fetched = _Fetched(anyio.current_time())
                        await self._fetch_mechanism(fetched)
                    await fetched.done.wait()
                    if fetched.error is not None:
                        raise fetched.error
                    assert fetched.mechanism is not None
                    made = True
                    return await sasl.authenticate(
                        _Locked(self), self.security, self.address, fetched.mechanism
                    )
            except TimeoutError:
                said = "no answer" if made else "the token provider gave no token"
                raise TimeoutError(
                    f"{said} within connect_timeout={self.connect_timeout} s"
                ) from None

    async def _negotiate(self) -> None:
        req: Any = ApiVersionsRequestV3(
            client_software_name=_SOFTWARE_NAME, client_software_version=_SOFTWARE_VERSION
        )
        resp: Any = await self.request(req)
        if resp.error_code == ErrorCode.unsupported_version:
            resp = await self.request(ApiVersionsRequestV0())
        if resp.error_code != ErrorCode.none:
            raise BrokenConnection(f"{self}: ApiVersions failed: {error_for_code(resp.error_code)}")
        self.broker_versions = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys
        }
        self.versions = negotiate(self.broker_versions)

    async def aclose(self) -> None:
        """Close the connection; requests in flight fail with :class:`ConnectionClosed`."""
        self._closed_here = True
        self._fail(ConnectionClosed(f"{self} was closed"))
        await self._close_stream()

    async def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
        self._closed.set()
        self._wake.set()

    async def wait_closed(self) -> None:
        """Wait until the connection is closed or broken."""
        await self._closed.wait()

    def _unusable(self) -> KafkaConnectionError:
        """The error for a request the connection can no longer carry.

        What ended the connection, as it was recorded (a copy): a
        :class:`BrokenConnection` when the broker dropped it, even if the
        reader has cleared the stream since; :class:`ConnectionClosed` only
        when this process closed it.
        """
        if self._failure is not None:
            return type(self._failure)(str(self._failure))
        if self._closed_here:
            return ConnectionClosed(f"{self} was closed")
        return BrokenConnection(f"{self} is not connected")

    def _fail(self, error: KafkaConnectionError) -> None:
        if self._failure is None:
            self._failure = error
        for waiter in self._waiters.values():
            if waiter.error is None and waiter.frame is None:
                waiter.error = error
            waiter.event.set()
        self._waiters.clear()

    async def _read_loop(self) -> None:
        # Shielded: cancelling the owner's scope must not cut a connection
        # that shielded clean-up (a final offset commit, LeaveGroup) still
        # needs. The loop ends when the stream is closed -- the owner's
        # ``aclose()`` -- or breaks.
        with anyio.CancelScope(shield=True):
            await self._read_frames()

    async def _watch_deadlines(self) -> None:
        """Fail the connection once a request in flight outlives its deadline.

        The waiting caller times its own request too; this covers the
        requests whose caller stopped waiting (cancelled by the end of a
        generation, by an admin call's deadline, or by a heartbeat's own
        bound), which would otherwise leave a connection that no longer
        answers open, and every later request queued on it. Shielded and
        ended by the close, as the reader is.
        """
        with anyio.CancelScope(shield=True):
            while not self._closed.is_set():
                self._wake = anyio.Event()
                first: _Waiter | None = None
                self._watching = math.inf
                for waiter in self._waiters.values():
                    if waiter.deadline is not None and waiter.deadline < self._watching:
                        first, self._watching = waiter, waiter.deadline
                with anyio.CancelScope(deadline=self._watching):
                    await self._wake.wait()
                if first is None or first.event.is_set() or self._closed.is_set():
                    continue  # answered, or closed
                if anyio.current_time() < self._watching:
                    continue  # woken by an earlier deadline: watch that one
                err = RequestTimedOut(f"{self}: no response to {first.name} within {first.limit} s")
                if first.abandoned:  # nobody else says why the connection closed
                    log.info("%s; closing the connection", err)
                self._timed_out(err)
                await self._close_stream()

    def _timed_out(self, error: RequestTimedOut) -> None:
        self._fail(error)
        if self.on_timed_out is not None:
            self.on_timed_out()

    async def _read_frames(self) -> None:
        buf = FrameBuffer()
        stream = self._stream
        if stream is None:
            return  # closed before the reader's first step (a failed negotiation)
        read = frame_reader(stream, buf, closed=lambda: self._stream is None)
        try:
            while True:
                await read()
                while (frame := buf.next_frame()) is not None:
                    cid = read_correlation_id(frame)
                    waiter = self._waiters.pop(cid, None)
                    if waiter is None:
                        raise ProtocolError(f"response with unknown correlation id {cid}")
                    waiter.frame = frame
                    self.last_active = anyio.current_time()
                    waiter.event.set()
                    if self._set_up:
                        self.has_answered = True
                        if self.on_answer is not None:
                            self.on_answer()
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError) as exc:
            # Kept for its kind and message only: its traceback's frames (this
            # one holds ``self``) would make the connection, and its buffers,
            # a cycle that only a full garbage collection frees.
            self._read_error = _without_tracebacks(exc)
            if not self._waiters:  # nobody to tell: a broker's idle reaper, a restart
                log.debug("%s: ended by the broker with no request in flight: %r", self, exc)
            sent = self._first_sent_at
            if (
                sent is not None
                and not self.has_answered
                and self._waiters
                and anyio.current_time() - sent < _AT_ONCE
            ):
                # A listener that requires SASL closes a connection whose
                # first request after ApiVersions is anything else; so does a
                # broker stopping. Which it was shows on the next connection
                # (the owner's to tell: on_unanswered_close).
                said = "closed by the broker on the first request after ApiVersions"
                self._fail(BrokenConnection(f"{self}: {said}"))
                if self.on_unanswered_close is not None:
                    self.on_unanswered_close(said)
            self._fail(BrokenConnection(f"{self} broke: {exc!r}"))
        except anyio.ClosedResourceError:
            # The stream was closed under the reader: what closed it has
            # recorded why (the broker's drop, a timeout, this process).
            self._fail(self._unusable())
        except ProtocolError as exc:
            self._fail(BrokenConnection(f"{self}: malformed frame: {exc}"))
        finally:
            self._fail(BrokenConnection(f"{self} is no longer read"))
            await self._close_stream()

    # ------------------------------------------------------------------ requests

    async def request(
        self,
        request: Any,
        *,
        timeout: float | None = None,
        expect_response: bool = True,
        _lock_held: bool = False,
    ) -> Any:
        """Send one request and wait for its response.

        Args:
            request: a kio request instance, or an
                :class:`~gengroup.protocol.framing.EncodedRequest`.
            timeout: seconds to wait for the response (default: ``request_timeout``).
            expect_response: False for requests the broker does not answer
                (Produce with acks=0).

        Returns:
            The decoded kio response.

        Raises:
            ConnectionClosed: the connection was closed by this process
                (:meth:`aclose`), before or while the request was sent.
            BrokenConnection: the connection broke (the broker dropped it)
                before the response arrived, or before the request could be
                sent: worth retrying on a new connection.
            RequestTimedOut: no response in time (the connection is then
                closed); or a request on a connection that ended so.
            ProtocolError: the response could not be decoded.
        """
        if self._failure is not None or self._stream is None:
            raise self._unusable()
        cid = next(self._cids)
        api_key, version, name = framing.request_identity(request)
        limit = self.request_timeout if timeout is None else timeout
        waiter = _Waiter(framing.response_schema(api_key, version), name, limit)
        frame = encode_request(request, correlation_id=cid, client_id=self.client_id)
        if expect_response:
            self._waiters[cid] = waiter
            if self._first_sent_at is None and self._set_up:
                self._first_sent_at = anyio.current_time()
        lock = None if _lock_held else self._send_lock
        sending = False
        try:
            if lock is not None:
                await lock.acquire()
            try:
                # Ended while this request waited for the lock (dropped by the
                # broker, or closed here): say which.
                stream = self._stream
                if stream is None or self._failure is not None:
                    raise self._unusable()
                # A frame is written whole or the connection is dropped: a
                # cancellation half-way through would corrupt the stream. The
                # shield keeps the caller's cancellation out; the scope's own
                # deadline still ends a send that blocks.
                deadline = anyio.current_time() + self.request_timeout
                with anyio.CancelScope(shield=True, deadline=deadline) as send_scope:
                    sending = True
                    await (stream.send(frame) if self._write is None else self._write(frame))
                self.last_active = anyio.current_time()
                if send_scope.cancelled_caught:
                    err = RequestTimedOut(f"{self}: send blocked for {self.request_timeout} s")
                    self._fail(err)
                    with anyio.CancelScope(shield=True):
                        await self._close_stream()
                    raise err
            finally:
                if lock is not None:
                    lock.release()
        except (anyio.BrokenResourceError, OSError) as exc:
            self._fail(BrokenConnection(f"{self} broke while sending: {exc!r}"))
            raise BrokenConnection(f"{self} broke while sending: {exc!r}") from exc
        except anyio.ClosedResourceError as exc:
            # Closed while sending: by the reader, after the broker dropped
            # the connection, or by this process.
            raise self._unusable() from exc
        except BaseException:
            # Cancelled before the frame was written, or by asyncio's own task.cancel()
            # (no shield stops it) in the send's yield after it was: then it is answered.
            if not sending:
                self._waiters.pop(cid, None)
            elif expect_response:
                self._sent(waiter, abandoned=True)
            raise
        if not expect_response:
            return None
        self._sent(waiter)
        # If the caller is cancelled, the waiter stays registered so that the
        # late response is recognised and dropped by the reader, and
        # _watch_deadlines times it.
        try:
            with anyio.move_on_after(limit) as scope:
                await waiter.event.wait()
        except BaseException:
            waiter.abandoned = True
            raise
        if scope.cancelled_caught and not waiter.event.is_set():
            err = RequestTimedOut(f"{self}: no response to {name} within {limit} s")
            self._timed_out(err)
            await self._close_stream()
            raise err
        if waiter.error is not None:
            raise type(waiter.error)(str(waiter.error)) from waiter.error
        assert waiter.frame is not None
        _, response = decode_response(waiter.response_cls, waiter.frame)
        return response

    def _sent(self, waiter: _Waiter, *, abandoned: bool = False) -> None:
        waiter.abandoned = abandoned
        waiter.deadline = anyio.current_time() + waiter.limit
        if waiter.deadline < self._watching:
            self._wake.set()


class _Locked:
    """A connection seen by a task that holds its send lock (re-authentication)."""

    def __init__(self, conn: BrokerConnection) -> None:
        self._conn = conn
        self.broker_versions = conn.broker_versions

    async def request(self, request: Any, *, timeout: float | None = None) -> Any:
        return await self._conn.request(request, timeout=timeout, _lock_held=True)


class ConnectionOptions(TypedDict, total=False):
    """:class:`BrokerConnection`'s settings taken by :func:`open_connection` (for type checkers)."""

    client_id: str
    connect_timeout: float
    request_timeout: float
    security: Security


@asynccontextmanager
async def open_connection(
    host: str, port: int, **options: Unpack[ConnectionOptions]
) -> AsyncIterator[BrokerConnection]:
    """Open a standalone connection to one broker.

    Args:
        host: the broker's host.
        port: the broker's port.
        **options: ``client_id``, ``connect_timeout``, ``request_timeout`` and
            ``security``, as :class:`BrokerConnection` takes them (same defaults).

    Example::

        async with open_connection("127.0.0.1", 9092) as conn:
            resp = await conn.request(request)
    """
    conn = BrokerConnection(host, port, **options)
    # The task group is entered by hand so that a failure to connect, and an
    # exception from the body, come out as themselves rather than wrapped in
    # an exception group: the serve task never raises once started, and it
    # returns as soon as the connection is closed.
    tg = anyio.create_task_group()
    await tg.__aenter__()
    try:
        await tg.start(conn.serve)
    except BaseException:
        await tg.__aexit__(None, None, None)
        raise
    try:
        yield conn
    finally:
        await conn.aclose()
        await tg.__aexit__(None, None, None)
