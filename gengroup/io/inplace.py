"""Receiving a connection's bytes, large frames straight into their own buffer.

Theory of operation:

A Fetch response is a frame of up to tens of megabytes. Read through a byte
stream it arrives as chunks that :class:`~gengroup.protocol.framing.FrameBuffer`
joins into one frame: every byte is copied once more than needed, into
freshly allocated memory (measured: a consumer of 1 KB values spent about a
tenth of its time joining). :meth:`FrameBuffer.receive_into` offers instead
the unfilled part of a buffer of the frame's size, once its length is known;
:func:`frame_reader` returns the function the connection's reader task calls
for more bytes, which receives into that view where the transport allows it:

* **trio, plain TCP**: trio's socket stream keeps no buffer of its own, so
  some bytes can be read through the stream and the rest straight from its
  socket (``socket.recv_into``) without breaking their order.
* **asyncio, plain TCP**: the transport reads the socket itself. The reader
  gives it a :class:`asyncio.BufferedProtocol` of its own
  (``transport.set_protocol``), which asks the FrameBuffer where to put each
  read: the frame's view, or a scratch buffer that is then fed. Writing and
  closing still go through the anyio stream, whose protocol the new one
  keeps informed (``pause_writing``, ``resume_writing``, ``connection_lost``).
  This reaches into anyio's asyncio stream (its transport and protocol); if
  they are not where expected, the stream is read as any other.
* **TLS** (and anything else): the stream, as before.

Nothing else changes: the connection's reader task still routes each complete
frame, and the errors are the stream's (``EndOfStream``,
``BrokenResourceError``, ``ClosedResourceError``).

Writing (:func:`frame_writer`), on asyncio over TCP: the frame goes into the
transport's buffer at once, before any await (over TLS: its records, encrypted
in the same step), and only then does the writer wait while the transport
asks it to (``pause_writing``). anyio's ``send`` may wait before writing, and
asyncio's own cancellation (``task.cancel()``: ``asyncio.timeout``,
``wait_for``), which no cancel scope's shield stops, could then stop a frame
that was never written, or one that was: the connection could not tell
which, so it could not tell whether an answer would come; over TLS it broke
the stream (records encrypted, never written). Here a cancellation always
comes after the frame is written. (On trio a shield stops every
cancellation.)
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import sniffio
from anyio.streams.tls import TLSStream

from .._errors import ProtocolError
from ..protocol.framing import FrameBuffer

__all__ = ["frame_reader", "frame_writer"]

_SCRATCH = 256 * 1024  # what asyncio reads at once when no frame is received in place


def frame_reader(
    stream: anyio.abc.ByteStream, buf: FrameBuffer, closed: Callable[[], bool]
) -> Callable[[], Awaitable[None]]:
    """The function that receives the next bytes of ``stream`` into ``buf``.

    Args:
        stream: the connection's stream, read by nobody else from now on.
        buf: the connection's frame buffer.
        closed: whether this process closed the stream (an asyncio transport
            reports both closings alike).

    Returns:
        An async function that waits for more bytes and puts them into
        ``buf``. It raises ``anyio.EndOfStream`` when the peer closed,
        ``anyio.BrokenResourceError`` or ``OSError`` when the connection
        broke, ``anyio.ClosedResourceError`` when this process closed it.
    """

    async def through_the_stream() -> None:
        buf.feed(await stream.receive(buf.wanted()))

    if not isinstance(stream, anyio.abc.SocketStream):
        return through_the_stream  # TLS, or a test's stream
    backend = sniffio.current_async_library()
    if backend == "trio":
        sock = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        if not isinstance(sock, socket.socket):
            return through_the_stream

        async def trio_read() -> None:
            into = buf.receive_into()
            if into is None:
                await through_the_stream()
            else:
                buf.received_into(await _recv_into(sock, into))

        return trio_read
    if backend == "asyncio":
        transport = getattr(stream, "_transport", None)
        inner = getattr(stream, "_protocol", None)
        if not isinstance(transport, asyncio.Transport) or inner is None:
            return through_the_stream
        protocol = _InPlaceProtocol(buf, inner, closed)
        queue = getattr(inner, "read_queue", None)
        if queue:  # bytes the stream read before the switch
            for chunk in queue:
                buf.feed(chunk)
            queue.clear()
        transport.set_protocol(protocol)
        transport.resume_reading()
        return protocol.wait
    return through_the_stream


def frame_writer(stream: anyio.abc.ByteStream) -> Callable[[bytes], Awaitable[None]] | None:
    """The function that writes one whole frame to ``stream`` on asyncio over
    TCP, plain or TLS (see the module doc); None elsewhere: write with ``stream.send``.

    It raises ``anyio.ClosedResourceError`` when this process closed the
    stream, ``anyio.BrokenResourceError`` when the connection was lost.
    """
    if sniffio.current_async_library() != "asyncio":
        return None
    tls = stream if isinstance(stream, TLSStream) else None
    sock = stream if tls is None else tls.transport_stream  # the TCP stream
    if not isinstance(sock, anyio.abc.SocketStream):
        return None
    transport = getattr(sock, "_transport", None)
    inner: Any = getattr(sock, "_protocol", None)  # its write_event: a new one at each pause
    if not isinstance(transport, asyncio.Transport) or not hasattr(inner, "write_event"):
        return None
    encrypt = _encrypter(tls) if tls is not None else None
    if tls is not None and encrypt is None:
        return None

    def check() -> None:
        if getattr(sock, "_closed", False):
            raise anyio.ClosedResourceError
        if transport.is_closing() or getattr(inner, "exception", None) is not None:
            raise anyio.BrokenResourceError from getattr(inner, "exception", None)

    async def write(frame: bytes) -> None:
        check()
        data = frame if encrypt is None else encrypt(frame)
        transport.write(data)  # whole, into the transport's buffer: no await before
        writable = inner.write_event
        if writable.is_set():
            await anyio.lowlevel.cancel_shielded_checkpoint()  # a schedule point, as send's
        else:
            await writable.wait()
            check()

    return write


def _encrypter(tls: TLSStream) -> Callable[[bytes], bytes] | None:
    """What encrypts a frame for ``tls``'s transport at once, without an await
    (its TLS records); None if ``tls`` is not as expected.

    Every write of the connection goes through it. anyio's own ``send`` takes
    the encrypted bytes from the memory BIO and yields before writing them,
    and a cancellation there (which it must then count as breaking the
    stream) would leave the records unwritten and the TLS sequence broken.
    """
    ssl_object = getattr(tls, "_ssl_object", None)
    bio = getattr(tls, "_write_bio", None)
    if not isinstance(ssl_object, ssl.SSLObject) or not isinstance(bio, ssl.MemoryBIO):
        return None

    def encrypt(frame: bytes) -> bytes:
        if getattr(tls, "_broken", False):
            raise anyio.BrokenResourceError
        try:
            ssl_object.write(frame)  # all of it, or nothing (no partial writes)
        except ssl.SSLError as exc:
            # Also a write that must wait for a read (a renegotiation the peer
            # started, which Kafka brokers do not, and which the reader task,
            # the stream's only reader, could not serve in time): the
            # connection fails, typed, rather than hang or write out of order.
            raise anyio.BrokenResourceError from exc
        return bio.read()

    return encrypt


async def _recv_into(sock: socket.socket, into: memoryview) -> int:
    """Receive into ``into`` from the non-blocking ``sock`` (trio): how many bytes came."""
    while True:
        if sock.fileno() < 0:
            raise anyio.ClosedResourceError
        try:
            count = sock.recv_into(into)
        except BlockingIOError:
            await anyio.wait_readable(sock)
            continue
        if not count:
            raise anyio.EndOfStream
        await anyio.lowlevel.checkpoint()  # other tasks run between reads, as with receive()
        return count


class _InPlaceProtocol(asyncio.BufferedProtocol):
    """An asyncio transport's protocol that reads into a FrameBuffer (see the module doc)."""

    def __init__(self, buf: FrameBuffer, inner: Any, closed: Callable[[], bool]) -> None:
        self._buf = buf
        self._inner = inner  # anyio's protocol: it still serves the stream's writes
        self._closed = closed
        self._scratch = bytearray(_SCRATCH)
        self._in_place = False
        self._arrived = asyncio.Event()
        self._eof = False
        self._lost = False
        self._error: BaseException | None = None

    def get_buffer(self, sizehint: int) -> memoryview:
        try:
            into = self._buf.receive_into()
        except ProtocolError:
            # A length out of bounds: fed, the bytes make the reader's
            # next_frame() raise it, as on any other transport.
            into = None
        self._in_place = into is not None
        return into if into is not None else memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> None:
        if not nbytes:
            return
        if self._in_place:
            self._buf.received_into(nbytes)
        else:
            self._buf.feed(bytes(memoryview(self._scratch)[:nbytes]))  # one copy
        self._arrived.set()

    def eof_received(self) -> bool:
        self._eof = True
        self._arrived.set()
        return True  # keep the transport open: the stream closes it

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost, self._error = True, exc
        self._scratch = bytearray()  # nothing is read any more: free it now, not at a collection
        self._arrived.set()
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    async def wait(self) -> None:
        """Wait until bytes arrived since the last call; raise once the connection ended.

        Bytes that arrived before the end are returned first (the caller routes
        the frames they complete); the end is raised by the next call.
        """
        if not self._arrived.is_set():
            if self._eof or self._lost:
                self._raise_end()
            await self._arrived.wait()
        else:
            await anyio.lowlevel.checkpoint()
        self._arrived.clear()
        if self._lost and self._closed():
            raise anyio.ClosedResourceError

    def _raise_end(self) -> None:
        if self._lost and self._closed():
            raise anyio.ClosedResourceError
        if self._lost and self._error is not None:
            raise anyio.BrokenResourceError from self._error
        raise anyio.EndOfStream
