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

Dispatch. What the broker knows about each API -- its versions, its handler
and its error shape -- lives in its module of :mod:`gengroup.broker.apis`;
the server looks the request's API key up in the registry
(:data:`~gengroup.broker.apis.SPECS`), asks the fault controls
(:mod:`gengroup.broker.faults`) and runs the handler with a
:class:`~gengroup.broker.apis.Context`.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.abc
from kio.schema.errors import ErrorCode

from .._errors import ProtocolError, UnsupportedVersion
from ..protocol.framing import API_VERSIONS_KEY, FrameBuffer, decode_request, encode_response
from ..protocol.versions import ApiKey
from .apis import CLOSE, NO_RESPONSE, SPECS, ApiSpec, Context, api_versions
from .faults import Delay, Disconnect, Drop, Fail, Intercepted, Respond
from .state import ClusterState

__all__ = ["BrokerServer"]

log = logging.getLogger("gengroup.broker")

_KEYS: Final[frozenset[int]] = frozenset(int(k) for k in ApiKey)


class _Next(enum.Enum):
    """What a connection does after a request."""

    SERVE = "serve"
    CLOSE = "close"
    STALL = "stall"


@dataclass(eq=False)
class _Connection:
    stream: anyio.abc.ByteStream
    client_host: str
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


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
    """

    def __init__(self, state: ClusterState, node_id: int, port: int = 0) -> None:
        self.state = state
        self.node_id = node_id
        self.port = port
        self._connections: set[_Connection] = set()
        self._scope: anyio.CancelScope | None = None

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
        conn = _Connection(stream, _peer_host(stream))
        self._connections.add(conn)
        try:
            with conn.scope:
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

    async def _process(self, conn: _Connection, frame: bytes) -> tuple[bytes | None, _Next]:
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
        ctx = Context(self.state, self.node_id, conn.client_host, call.client_id)
        return await spec.handle(ctx, call.request, call.api_version)
