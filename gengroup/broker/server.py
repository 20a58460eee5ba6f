"""The embedded broker's server: listening, connections and dispatch.

Theory of operation:

Each :class:`BrokerServer` is one broker of an embedded cluster, serving
against the cluster's shared :class:`~gengroup.broker.state.ClusterState`: it
owns a TCP listener on loopback and serves each accepted connection in its own
task. :meth:`BrokerServer.handle_stream` serves *any* anyio ``ByteStream``, so
tests can inject an in-memory transport instead of a socket.

Connections. A connection is served strictly in order, one request at a time,
exactly like Kafka (whose network layer mutes a channel while one of its
requests is in flight): read a frame, decode it, hand it to the fault controls,
run the handler -- which may wait, e.g. a long-poll Fetch or a parked
JoinGroup -- write the response, read the next frame. Responses therefore come
back in request order, and a client that multiplexes a long poll and a
heartbeat on one connection sees the heartbeat wait, as it would with Kafka.
Any failure is confined to its connection: a frame whose declared length is
negative or above ``socket.request.max.bytes``, a malformed request, an
unknown API key or an unsupported version all close that connection (Kafka's
behaviour), except ApiVersions with an unsupported version, which is answered
with an ApiVersions v0 response carrying UNSUPPORTED_VERSION and the
ApiVersions range, as Kafka does so a client can retry with a version the
broker knows. A bug in a handler is recorded in :attr:`ClusterState.errors`
and answered UNKNOWN_SERVER_ERROR; the server never crashes.

Security (:mod:`gengroup.broker.security`). With TLS, each accepted stream is
wrapped on the server side before anything is read (:class:`_ServerTLSStream`,
TLS over any byte stream, so in-memory connections get it too); a handshake
that fails on a TLS error -- a client that does not trust the broker's
certificate, a missing client certificate with mutual TLS -- sends the alert
to the client, is logged and counted as a failed authentication, as Kafka
counts it, and closes the connection. With SASL, each connection gets its own
:class:`~gengroup.broker.security.SaslAuthenticator`, which sees every request
once the fault controls let it through and decides whether it reaches the
APIs: before authentication only ApiVersions and the SASL exchange do, and
after a v0 handshake the SASL tokens arrive as raw frames, which the
authenticator gets before any request decoding. Every failed authentication
is logged once (INFO, ``gengroup.broker``) and counted in
:attr:`BrokerServer.failed_authentications`.

Dispatch. What the broker knows about each API -- its versions, its handler
and its error shape -- lives in its module of :mod:`gengroup.broker.apis`;
the server looks the request's API key up in the registry
(:data:`~gengroup.broker.apis.SPECS`), asks the fault controls
(:mod:`gengroup.broker.faults`) and runs the handler with a
:class:`~gengroup.broker.apis.Context`.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import anyio
import anyio.abc
from kio.schema.errors import ErrorCode

from .._errors import ProtocolError, UnsupportedVersion
from ..protocol.framing import API_VERSIONS_KEY, FrameBuffer, decode_request, encode_response
from ..protocol.versions import ApiKey
from .apis import CLOSE, NO_RESPONSE, SPECS, ApiSpec, CloseAfter, Context, api_versions
from .faults import Delay, Disconnect, Drop, Fail, Intercepted, Respond
from .fetch_sessions import FetchSessionCache
from .security import Outcome, SaslAuthenticator, ServerSecurity
from .state import ClusterState

__all__ = ["BrokerServer"]

log = logging.getLogger("gengroup.broker")

_KEYS: Final[frozenset[int]] = frozenset(int(k) for k in ApiKey)
T = TypeVar("T")


class _Next(enum.Enum):
    """What a connection does after a request."""

    SERVE = "serve"
    CLOSE = "close"
    STALL = "stall"


@dataclass(eq=False)
class _Connection:
    stream: anyio.abc.ByteStream
    client_host: str
    sasl: SaslAuthenticator | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


class _ServerTLSStream(anyio.abc.ByteStream):
    """The server side of TLS over any byte stream (sockets and in-memory streams alike).

    Unlike anyio's ``TLSStream.wrap``, a handshake that fails sends its alert
    (a missing client certificate, say) before raising, so the client learns
    why instead of seeing the connection drop. Closing skips TLS's closing
    handshake, as Kafka does. Used by one task at a time (a connection is
    served in order).
    """

    def __init__(self, transport: anyio.abc.ByteStream, context: ssl.SSLContext) -> None:
        self._transport = transport
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)

    async def handshake(self) -> None:
        """Run the TLS handshake.

        Raises:
            ssl.SSLError: the handshake failed (its alert was sent).
            anyio.EndOfStream: the client went away during the handshake.
        """
        await self._run(self._ssl.do_handshake)

    async def _flush(self) -> None:
        data = self._outgoing.read()
        if data:
            await self._transport.send(data)

    async def _run(self, operation: Callable[..., T], *args: Any) -> T:
        while True:
            try:
                result = operation(*args)
            except ssl.SSLWantReadError:
                await self._flush()
                try:
                    self._incoming.write(await self._transport.receive())
                except anyio.EndOfStream:
                    self._incoming.write_eof()
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                raise anyio.EndOfStream from None
            except ssl.SSLError:
                with contextlib.suppress(
                    anyio.BrokenResourceError, anyio.ClosedResourceError, OSError
                ):
                    await self._flush()  # the alert telling the client why
                raise
            else:
                await self._flush()
                return result

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """Receive decrypted bytes; ``EndOfStream`` once the client closed."""
        try:
            data = await self._run(self._ssl.read, max_bytes)
        except ssl.SSLError as exc:
            raise anyio.BrokenResourceError from exc
        if not data:
            raise anyio.EndOfStream
        return data

    async def send(self, item: bytes) -> None:
        """Encrypt and send bytes."""
        try:
            await self._run(self._ssl.write, item)
        except ssl.SSLError as exc:
            raise anyio.BrokenResourceError from exc

    async def send_eof(self) -> None:
        """Not supported by TLS (as with anyio's TLS streams)."""
        raise NotImplementedError("TLS streams do not support send_eof()")

    async def aclose(self) -> None:
        """Close the underlying stream (without TLS's closing handshake)."""
        await self._transport.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        """The underlying stream's attributes (addresses of a socket)."""
        return self._transport.extra_attributes


def _peer_host(stream: anyio.abc.ByteStream) -> str:
    try:
        address = stream.extra(anyio.abc.SocketAttribute.remote_address)
    except anyio.TypedAttributeLookupError:
        return "/memory"
    if isinstance(address, tuple):
        return f"/{address[0]}"
    return f"/{address}"


class BrokerServer:
    """One broker of an embedded cluster.

    Start :meth:`serve` in a task group (``await tg.start(server.serve)``); it
    listens on ``settings.host`` and ``port`` (0: any free port; the chosen one
    is kept so a restart comes back on it) and serves until cancelled.

    Args:
        state: the cluster's shared state.
        node_id: this broker's node id.
        port: the TCP port to listen on.
        security: how the listener secures its connections (TLS, SASL);
            PLAINTEXT if omitted.

    Raises:
        ConfigError: the TLS certificate, key or CA files cannot be loaded.
    """

    def __init__(
        self,
        state: ClusterState,
        node_id: int,
        port: int = 0,
        *,
        security: ServerSecurity | None = None,
    ) -> None:
        self.state = state
        self.node_id = node_id
        self.port = port
        self.security = security if security is not None else ServerSecurity()
        #: This broker's incremental fetch sessions (KIP-227); lost on restart.
        self.fetch_sessions = self._new_fetch_sessions()
        self._tls = self.security.tls_context()
        self._connections: set[_Connection] = set()
        self._scope: anyio.CancelScope | None = None
        #: Failed authentications: TLS handshakes and SASL exchanges that failed.
        self.failed_authentications = 0
        #: SASL authentications that completed (re-authentications included).
        self.authentications = 0
        #: SASL re-authentications that completed (KIP-368).
        self.reauthentications = 0
        #: Connections closed because their SASL session expired.
        self.expired_sessions = 0

    def _new_fetch_sessions(self) -> FetchSessionCache:
        settings = self.state.settings
        return FetchSessionCache(
            settings.max_incremental_fetch_session_cache_slots,
            settings.min_incremental_fetch_session_eviction_ms,
        )

    def __repr__(self) -> str:
        return f"<BrokerServer node={self.node_id} port={self.port}>"

    @property
    def running(self) -> bool:
        """Whether the broker is listening."""
        return self._scope is not None

    @property
    def connection_count(self) -> int:
        """The number of client connections being served."""
        return len(self._connections)

    # ------------------------------------------------------------------ lifecycle

    async def serve(self, *, task_status: anyio.abc.TaskStatus[BrokerServer]) -> None:
        """Listen and serve connections until cancelled or :meth:`stop` is called.

        Reports readiness (the port is bound and the broker marked online)
        through ``task_status``.
        """
        self.state.start()
        self.fetch_sessions = self._new_fetch_sessions()
        host = self.state.settings.host
        listener = await anyio.create_tcp_listener(local_host=host, local_port=self.port)
        self.port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
        self.state.addresses[self.node_id] = (host, self.port)
        stopped = self._stopped = anyio.Event()
        try:
            async with listener, anyio.create_task_group() as tg:
                self._scope = tg.cancel_scope
                self.state.set_online(self.node_id, True)
                task_status.started(self)
                await listener.serve(self.handle_stream, task_group=tg)
        finally:
            self._scope = None
            self.state.set_online(self.node_id, False)
            stopped.set()

    async def stop(self) -> None:
        """Stop listening and drop every connection; returns once stopped."""
        scope, stopped = self._scope, self._stopped
        if scope is None or stopped is None:
            return
        scope.cancel()
        await stopped.wait()

    def cut_connections(self) -> int:
        """Close every client connection (the listener keeps accepting).

        Returns:
            The number of connections cut.
        """
        conns = list(self._connections)
        for conn in conns:
            conn.scope.cancel()
        return len(conns)

    # ------------------------------------------------------------------ connections

    async def handle_stream(self, stream: anyio.abc.ByteStream) -> None:
        """Serve one client connection over any byte stream until it closes.

        Never raises (except cancellation): every failure closes this
        connection only.
        """
        conn = _Connection(stream, _peer_host(stream), self.security.authenticator())
        self._connections.add(conn)
        try:
            with conn.scope:
                if self._tls is not None:
                    conn.stream = await self._tls_handshake(conn, self._tls)
                await self._serve_connection(conn)
        except (
            anyio.EndOfStream,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            OSError,
        ):
            pass
        except ProtocolError as exc:
            log.debug("broker %d: closing connection: %s", self.node_id, exc)
        except Exception as exc:
            self.state.record_error(exc, f"broker {self.node_id} connection")
        finally:
            self._connections.discard(conn)
            await anyio.aclose_forcefully(stream)

    async def _tls_handshake(
        self, conn: _Connection, context: ssl.SSLContext
    ) -> anyio.abc.ByteStream:
        """The connection's stream wrapped in TLS; a failed handshake is logged and counted."""
        tls = _ServerTLSStream(conn.stream, context)
        try:
            # A client that never finishes the handshake is dropped like an idle one.
            with anyio.move_on_after(self.state.settings.connections_max_idle) as scope:
                await tls.handshake()
        except ssl.SSLError as exc:
            self._failed_authentication(conn, "SSL handshake failed", exc.reason or str(exc))
            raise anyio.EndOfStream from None
        if scope.cancelled_caught:
            raise anyio.EndOfStream
        return tls

    def _log(self, level: int, conn: _Connection, message: str, *args: object) -> None:
        """Log about a connection: ``message`` names this broker, then the client, then ``args``."""
        log.log(level, message, self.node_id, conn.client_host, *args)

    def _failed_authentication(self, conn: _Connection, what: str, message: str) -> None:
        self.failed_authentications += 1
        fmt = "broker %d: failed authentication with %s (%s): %s"
        self._log(logging.INFO, conn, fmt, what, message)

    async def _serve_connection(self, conn: _Connection) -> None:
        buf = FrameBuffer(max_frame=self.state.settings.socket_request_max_bytes)
        idle = self.state.settings.connections_max_idle
        stream = conn.stream
        while True:
            frame = buf.next_frame()
            if frame is None:
                if idle is None:
                    data = await stream.receive()
                else:
                    data = b""
                    with anyio.move_on_after(idle) as scope:
                        data = await stream.receive()
                    if scope.cancelled_caught:
                        return  # idle for too long: Kafka's connections.max.idle.ms
                buf.feed(data)
                continue
            if conn.sasl is not None and conn.sasl.expects_raw_token:
                out, after = self._raw_token(conn, frame)
            else:
                out, after = await self._process(conn, frame)
            if out is not None:
                await stream.send(out)
            if after is _Next.CLOSE:
                return
            if after is _Next.STALL:
                # A dropped request: like a broker whose request never
                # completes, nothing more is answered on this connection (Kafka
                # answers in order). Discard input until the client gives up.
                while True:
                    await stream.receive()

    async def _process(
        self, conn: _Connection, frame: bytes | bytearray
    ) -> tuple[bytes | None, _Next]:
        """Handle one request frame: ``(bytes to send or None, what to do next)``."""
        try:
            header, request = decode_request(frame)
        except UnsupportedVersion as exc:
            if getattr(exc, "api_key", None) == API_VERSIONS_KEY:
                cid = int(getattr(exc, "correlation_id", 0))
                return encode_response(api_versions.unsupported(), correlation_id=cid), _Next.SERVE
            log.debug("broker %d: closing connection: %s", self.node_id, exc)
            return None, _Next.CLOSE
        except ProtocolError as exc:
            log.debug("broker %d: closing connection: %s", self.node_id, exc)
            return None, _Next.CLOSE
        api_key = int(header.request_api_key)
        version = int(header.request_api_version)
        cid = int(header.correlation_id)
        spec = SPECS.get(ApiKey(api_key)) if api_key in _KEYS else None
        if spec is None or not spec.supports(version):
            if api_key == API_VERSIONS_KEY:
                return encode_response(api_versions.unsupported(), correlation_id=cid), _Next.SERVE
            log.debug(
                "broker %d: api %d v%d not supported: closing", self.node_id, api_key, version
            )
            return None, _Next.CLOSE

        call = Intercepted(
            broker_id=self.node_id,
            api_key=api_key,
            api_version=version,
            correlation_id=cid,
            client_id=getattr(header, "client_id", None),
            header=header,
            request=request,
        )
        try:
            response = await self._respond(spec, conn, call)
            if isinstance(response, _Next):
                return None, response
            if response is NO_RESPONSE:
                return None, _Next.SERVE
            if response is CLOSE:
                return None, _Next.CLOSE
            if isinstance(response, CloseAfter):
                return encode_response(response.response, correlation_id=cid), _Next.CLOSE
            return encode_response(response, correlation_id=cid), _Next.SERVE
        except Exception as exc:
            self.state.record_error(exc, f"broker {self.node_id} api {api_key} v{version}")
            try:
                response = spec.error_response(version, request, ErrorCode.unknown_server_error)
                return encode_response(response, correlation_id=cid), _Next.SERVE
            except Exception:  # pragma: no cover - the error response itself failed
                return None, _Next.CLOSE

    async def _respond(self, spec: ApiSpec, conn: _Connection, call: Intercepted) -> Any:
        """The fault controls' or the handler's answer to ``call``, or what to do instead."""
        action = self.state.faults.decide(call)
        while isinstance(action, Delay):
            await anyio.sleep(action.seconds)
            action = action.then
        if isinstance(action, Drop):
            return _Next.STALL
        if isinstance(action, Disconnect):
            return _Next.CLOSE
        if isinstance(action, Fail):
            return spec.error_response(
                call.api_version, call.request, action.error_code, action.message
            )
        if isinstance(action, Respond):
            return action.response
        gate = conn.sasl
        if gate is not None:
            outcome = gate.receive(
                call.api_key, call.api_version, call.request, now=anyio.current_time()
            )
            if not outcome.forward:
                return self._sasl_answer(conn, spec, call, outcome)
        ctx = Context(
            self.state, self.node_id, conn.client_host, call.client_id, self.fetch_sessions
        )
        response = await spec.handle(ctx, call.request, call.api_version)
        if gate is not None and call.api_key == API_VERSIONS_KEY and not gate.authenticated:
            gate.api_versions_answered(response.error_code == ErrorCode.none)
        return response

    # ------------------------------------------------------------------ SASL

    def _sasl_answer(self, conn: _Connection, spec: ApiSpec, call: Intercepted, o: Outcome) -> Any:
        """The answer to a request the SASL authenticator kept from the APIs."""
        self._sasl_events(conn, o)
        response = o.response
        if response is None and o.error is not None:
            response = spec.error_response(call.api_version, call.request, o.error)
        if response is None:
            return _Next.CLOSE if o.close else NO_RESPONSE
        return CloseAfter(response) if o.close else response

    def _raw_token(self, conn: _Connection, token: bytes | bytearray) -> tuple[bytes | None, _Next]:
        """Handle a raw SASL token (after a v0 SaslHandshake)."""
        assert conn.sasl is not None
        o = conn.sasl.receive_token(bytes(token), now=anyio.current_time())
        self._sasl_events(conn, o)
        out = None if o.raw is None else len(o.raw).to_bytes(4, "big") + o.raw
        return out, _Next.CLOSE if o.close else _Next.SERVE

    def _sasl_events(self, conn: _Connection, o: Outcome) -> None:
        """Count and log what an authenticator's outcome reports."""
        assert conn.sasl is not None
        if o.failure is not None:
            self._failed_authentication(conn, conn.sasl.mechanism or "SASL", o.failure)
        elif o.completed is not None:
            self.authentications += 1
            if o.completed == "re-authentication":
                self.reauthentications += 1
            fmt = "broker %d: %s %s completed (%s)"
            self._log(logging.DEBUG, conn, fmt, o.completed, conn.sasl.principal)
        elif o.reason is not None:
            if o.reason == "its SASL session expired":
                self.expired_sessions += 1
            self._log(logging.INFO, conn, "broker %d: closing the connection of %s: %s", o.reason)
