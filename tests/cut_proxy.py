"""A TCP proxy in front of one broker that can lose a Produce answer.

The proxy forwards every request to the broker and every answer back, except
that Metadata answers name the proxy instead of the broker (so a client
bootstrapped on the proxy sends everything through it), and a Produce
answer it is told to lose: the broker got the request and answered it, and
the proxy then cuts the client's connection instead of forwarding the answer
(at once, or once :attr:`CutProxy.release` is set). That is a lost response:
the records were written, and the client cannot know.

It works in front of any broker speaking the Kafka protocol (the real one or
the embedded one).
"""

from __future__ import annotations

import contextlib
import dataclasses
import struct
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc
from kio.index import load_response_schema

from gengroup.protocol.framing import decode_response, encode_response
from gengroup.protocol.versions import ApiKey

_REQUEST_HEAD = struct.Struct(">hhi")  # api key, version, correlation id
_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


class _Frames:
    """Reads the frames (length prefix included) of a stream."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self._stream = stream
        self._buf = bytearray()

    async def next(self) -> bytes:
        """The next frame; raises ``anyio.EndOfStream`` (or the like) once the stream ends."""
        buf = self._buf
        while True:
            if len(buf) >= 4:
                size = int.from_bytes(buf[:4], "big", signed=True)
                if len(buf) >= 4 + size:
                    frame = bytes(buf[: 4 + size])
                    del buf[: 4 + size]
                    return frame
            buf += await self._stream.receive()


class CutProxy:
    """A proxy of the broker at ``upstream`` (``"host:port"``); run it with
    ``await task_group.start(proxy.run)``, then bootstrap on :attr:`bootstrap`."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self._upstream = (host, int(port))
        self.port = 0
        #: Lose the answers of the next this many Produce requests.
        self.lose_produce_answers = 0
        #: Wait for :attr:`release` before cutting a connection whose answer is lost.
        self.hold = False
        self.release = anyio.Event()
        #: Produce requests forwarded, and answers lost.
        self.produce_requests = 0
        self.lost = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Accept connections until cancelled."""
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        async with listener:
            self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
            task_status.started()
            await listener.serve(self._serve)

    async def _serve(self, client: anyio.abc.SocketStream) -> None:
        try:
            upstream = await anyio.connect_tcp(*self._upstream)
        except OSError:
            await client.aclose()
            return
        asked: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        losing: set[int] = set()  # correlation ids of Produce requests whose answer is lost
        async with client, upstream, anyio.create_task_group() as tg:

            async def requests() -> None:
                frames = _Frames(client)
                while True:
                    frame = await frames.next()
                    key, version, correlation = _REQUEST_HEAD.unpack_from(frame, 4)
                    asked[correlation] = (key, version)
                    if key == ApiKey.PRODUCE:
                        self.produce_requests += 1
                        if self.lose_produce_answers > 0:
                            self.lose_produce_answers -= 1
                            losing.add(correlation)
                    await upstream.send(frame)

            async def answers() -> None:
                frames = _Frames(upstream)
                while True:
                    frame = await frames.next()
                    correlation = int.from_bytes(frame[4:8], "big", signed=True)
                    key, version = asked.pop(correlation, (-1, -1))
                    if correlation in losing:  # written by the broker; the client never knows
                        self.lost += 1
                        if self.hold:
                            await self.release.wait()
                        tg.cancel_scope.cancel()
                        return
                    if key == ApiKey.METADATA:
                        frame = self._rewritten(frame, version)
                    await client.send(frame)

            async def pump(direction: Callable[[], Awaitable[None]]) -> None:
                with contextlib.suppress(*_GONE):
                    await direction()
                tg.cancel_scope.cancel()

            tg.start_soon(pump, requests)
            tg.start_soon(pump, answers)

    def _rewritten(self, frame: bytes, version: int) -> bytes:
        """A Metadata answer naming the proxy as every broker."""
        cls = load_response_schema(int(ApiKey.METADATA), version)
        correlation, response = decode_response(cls, frame[4:])
        brokers = tuple(
            dataclasses.replace(b, host="127.0.0.1", port=self.port)  # type: ignore[type-var]
            for b in response.brokers  # type: ignore[attr-defined]
        )
        response = dataclasses.replace(response, brokers=brokers)  # type: ignore[type-var]
        return encode_response(response, correlation_id=correlation)
