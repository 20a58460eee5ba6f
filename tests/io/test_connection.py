"""BrokerConnection against the real broker, and against a tiny scripted fake server."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gc
import struct
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest
import trio
import trio.testing
from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
from kio.schema.errors import ErrorCode

from gengroup._errors import (
    BrokenConnection,
    ConnectionClosed,
    KafkaConnectionError,
    ProtocolError,
    RequestTimedOut,
)
from gengroup._types import TopicPartition
from gengroup.io.connection import BrokerConnection, open_connection
from gengroup.protocol.framing import (
    EncodedRequest,
    FrameBuffer,
    decode_request,
    encode_response,
    response_module,
)
from gengroup.protocol.versions import ApiKey
from tests.consumer.helpers import TaskSteps
from tests.embedded import api_versions, list_offsets, metadata
from tests.io import create_topic, long_poll_fetch

HANG_GUARD = 30.0


def metadata_request(version: int = 12) -> Any:
    """Metadata of every topic, creating none."""
    return metadata(version, None, auto=False)


@asynccontextmanager
async def connection_with_topic(bootstrap: str, topic: str) -> AsyncIterator[BrokerConnection]:
    """A connection to the broker at ``bootstrap``, once ``topic`` (1 partition) exists."""
    await create_topic(bootstrap, topic)
    host, port = bootstrap.rsplit(":", 1)
    async with open_connection(host, int(port)) as conn:
        yield conn


# ---------------------------------------------------------------------------- real broker


@pytest.mark.kafka
async def test_many_concurrent_requests_are_matched_by_correlation_id(
    bootstrap: str, topic: str
) -> None:
    async with connection_with_topic(bootstrap, topic) as conn:
        lo_version = conn.versions[ApiKey.LIST_OFFSETS]
        md_version = conn.versions[ApiKey.METADATA]
        makers: list[tuple[Callable[[], Any], str]] = [
            (lambda: metadata_request(md_version), "MetadataResponse"),
            (lambda: api_versions(3), "ApiVersionsResponse"),
            (lambda: list_offsets(lo_version, topic, 0, -1), "ListOffsetsResponse"),
        ]
        results: dict[int, tuple[str, Any]] = {}

        async def one(i: int) -> None:
            make, expected = makers[i % len(makers)]
            results[i] = (expected, await conn.request(make()))

        with anyio.fail_after(HANG_GUARD):
            async with anyio.create_task_group() as tg:
                for i in range(150):
                    tg.start_soon(one, i)
        assert len(results) == 150
        for expected, resp in results.values():
            assert type(resp).__name__ == expected
            if expected == "ListOffsetsResponse":
                assert resp.topics[0].name == topic
        assert conn.is_usable


@pytest.mark.kafka
async def test_request_timeout_raises_and_closes_the_connection(bootstrap: str, topic: str) -> None:
    async with connection_with_topic(bootstrap, topic) as conn:
        fetch = long_poll_fetch(conn.versions[ApiKey.FETCH], TopicPartition(topic, 0), 10.0)
        with anyio.fail_after(HANG_GUARD), pytest.raises(RequestTimedOut):
            await conn.request(fetch, timeout=0.3)
        assert not conn.is_usable
        with pytest.raises(KafkaConnectionError):
            await conn.request(metadata_request())


@pytest.mark.kafka
async def test_aclose_fails_waiters_with_connection_closed(bootstrap: str, topic: str) -> None:
    async with connection_with_topic(bootstrap, topic) as conn:
        fetch = long_poll_fetch(conn.versions[ApiKey.FETCH], TopicPartition(topic, 0), 10.0)
        errors: list[BaseException] = []

        async def waiter() -> None:
            try:
                await conn.request(fetch)
            except KafkaConnectionError as exc:
                errors.append(exc)

        with anyio.fail_after(HANG_GUARD):
            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(waiter)
                await anyio.sleep(0.3)
                await conn.aclose()
        assert len(errors) == 3
        assert all(type(e) is ConnectionClosed for e in errors), errors
        with pytest.raises(ConnectionClosed):
            await conn.request(metadata_request())
        await conn.wait_closed()


async def test_connect_refused_is_broken_connection() -> None:
    # Grab a free port, close it, and connect to nothing.
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()
    # (Started the way Cluster starts it: ``open_connection`` currently wraps
    # the error in its task group's ExceptionGroup.)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(HANG_GUARD), pytest.raises(BrokenConnection):
            await tg.start(BrokerConnection("127.0.0.1", port, connect_timeout=2.0).serve)


# ---------------------------------------------------------------------------- fake server

Handler = Callable[[anyio.abc.ByteStream, Any, Any], Awaitable[None]]


def api_versions_response() -> ApiVersionsResponse:
    return ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=(
            ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=0, max_version=3),
            ApiVersion(api_key=ApiKey.METADATA, min_version=0, max_version=12),
        ),
        throttle_time=datetime.timedelta(0),
    )


def metadata_response(cluster_id: str) -> Any:
    mod = response_module(ApiKey.METADATA, 12)
    return mod.MetadataResponse(
        throttle_time=datetime.timedelta(0),
        brokers=(),
        cluster_id=cluster_id,
        controller_id=-1,
        topics=(),
    )


@asynccontextmanager
async def fake_broker(on_request: Handler) -> AsyncIterator[int]:
    """A loopback server: answers ApiVersions itself, hands other requests to ``on_request``."""

    async def serve_one(stream: anyio.abc.ByteStream) -> None:
        buf = FrameBuffer()
        try:
            async with stream:
                await serve_frames(stream, buf)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return

    async def serve_frames(stream: anyio.abc.ByteStream, buf: FrameBuffer) -> None:
        while True:
            buf.feed(await stream.receive())
            while (frame := buf.next_frame()) is not None:
                header, request = decode_request(frame)
                if header.request_api_key == ApiKey.API_VERSIONS:
                    answer = api_versions_response()
                    await stream.send(encode_response(answer, correlation_id=header.correlation_id))
                else:
                    await on_request(stream, header, request)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve_one)
        try:
            yield port
        finally:
            tg.cancel_scope.cancel()


async def test_out_of_order_responses_reach_their_own_waiters() -> None:
    parked: list[int] = []
    all_in = anyio.Event()
    streams: list[anyio.abc.ByteStream] = []

    async def on_request(stream: anyio.abc.ByteStream, header: Any, request: Any) -> None:
        parked.append(header.correlation_id)
        streams.append(stream)
        if len(parked) == 5:
            all_in.set()
            for cid in reversed(parked):  # answer newest first, one at a time
                await stream.send(
                    encode_response(metadata_response(f"cid-{cid}"), correlation_id=cid)
                )
                await anyio.sleep(0.05)

    async with fake_broker(on_request) as port, open_connection("127.0.0.1", port) as conn:
        answers: dict[int, str] = {}
        order: list[int] = []

        async def ask(i: int) -> None:
            resp = await conn.request(metadata_request())
            answers[i] = resp.cluster_id
            order.append(i)

        with anyio.fail_after(HANG_GUARD):
            async with anyio.create_task_group() as tg:
                for i in range(5):
                    tg.start_soon(ask, i)
                    await anyio.sleep(0.01)  # deterministic send order
        # Request i got correlation id parked[i]; each got the answer made for it.
        assert answers == {i: f"cid-{parked[i]}" for i in range(5)}
        assert order == [4, 3, 2, 1, 0]
        assert conn.is_usable


async def test_a_request_on_a_free_connection_is_written_without_a_task_switch() -> None:
    # A free send lock is taken without a schedule point: the request is
    # written in the caller's task step, before a task started beside it (the
    # refresh beside JoinGroup, the OffsetFetch beside SyncGroup) or the tasks
    # a rebalance cancelled run. Each switch on a rebalance's path let every
    # runnable task of the process run first.
    async def on_request(stream: anyio.abc.ByteStream, header: Any, request: Any) -> None:
        answer = metadata_response("c")
        await stream.send(encode_response(answer, correlation_id=header.correlation_id))

    async with fake_broker(on_request) as port, open_connection("127.0.0.1", port) as conn:
        stream = conn._stream
        assert stream is not None
        send = stream.send
        steps = TaskSteps()
        written_at: list[int] = []
        ran_beside: list[int] = []

        async def counted(data: bytes) -> None:
            written_at.append(steps.steps)
            await send(data)

        async def beside() -> None:
            ran_beside.append(len(written_at))

        stream.send = counted  # type: ignore[method-assign]
        trio.lowlevel.add_instrument(steps)
        try:
            with anyio.fail_after(HANG_GUARD):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(beside)
                    before = steps.steps
                    resp = await conn.request(metadata_request())
        finally:
            trio.lowlevel.remove_instrument(steps)
        assert resp.cluster_id == "c"
        assert written_at == [before]
        assert ran_beside == [1]  # the task beside ran once the request was written


@pytest.mark.parametrize(
    ("garbage", "what"),
    [
        (struct.pack(">i", -5), "negative frame length"),
        (struct.pack(">ii", 4, 987654), "unknown correlation id"),
        (struct.pack(">i", 1_000_000_000), "oversized frame length"),
    ],
)
async def test_garbage_frames_break_the_connection(garbage: bytes, what: str) -> None:
    async def on_request(stream: anyio.abc.ByteStream, header: Any, request: Any) -> None:
        await stream.send(garbage)

    async with fake_broker(on_request) as port, open_connection("127.0.0.1", port) as conn:
        with anyio.fail_after(HANG_GUARD), pytest.raises(BrokenConnection):
            await conn.request(metadata_request())
        assert not conn.is_usable, what
        with pytest.raises(BrokenConnection):
            await conn.request(metadata_request())


async def test_malformed_body_fails_only_that_request() -> None:
    calls = 0

    async def on_request(stream: anyio.abc.ByteStream, header: Any, request: Any) -> None:
        nonlocal calls
        calls += 1
        cid = header.correlation_id
        if calls == 1:
            # A well-framed response whose body is nonsense for a MetadataResponse.
            body = struct.pack(">i", cid) + b"\x00\xff\xff\xff\xff\x42"
            await stream.send(struct.pack(">i", len(body)) + body)
        else:
            await stream.send(encode_response(metadata_response("fine"), correlation_id=cid))

    async with fake_broker(on_request) as port, open_connection("127.0.0.1", port) as conn:
        with anyio.fail_after(HANG_GUARD):
            with pytest.raises(ProtocolError):
                await conn.request(metadata_request())
            assert conn.is_usable
            resp = await conn.request(metadata_request())
        assert resp.cluster_id == "fine"


async def test_eof_mid_response_is_broken_connection() -> None:
    async def on_request(stream: anyio.abc.ByteStream, header: Any, request: Any) -> None:
        await stream.send(struct.pack(">ii", 100, header.correlation_id))  # 8 of 104 bytes
        await stream.aclose()

    async with fake_broker(on_request) as port, open_connection("127.0.0.1", port) as conn:
        with anyio.fail_after(HANG_GUARD), pytest.raises(BrokenConnection):
            await conn.request(metadata_request())


async def test_a_request_waiting_to_send_when_the_broker_drops_the_connection_is_broken() -> None:
    # A request waits for the send lock while another is written; the broker
    # drops the connection meanwhile (a restart, an idle-connection reaper)
    # and the reader clears the stream. The waiting request must fail with
    # what happened, BrokenConnection (retried by every client), not with
    # ConnectionClosed, which says this process closed the connection.
    drop = anyio.Event()

    async def serve_one(stream: anyio.abc.ByteStream) -> None:
        async with stream:
            buf = FrameBuffer()
            while (frame := buf.next_frame()) is None:
                buf.feed(await stream.receive())
            header, _ = decode_request(frame)
            answer = encode_response(api_versions_response(), correlation_id=header.correlation_id)
            await stream.send(answer)
            await drop.wait()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as server:
        server.start_soon(listener.serve, serve_one)
        async with open_connection("127.0.0.1", port) as conn:
            outcome: list[BaseException] = []

            async def blocked() -> None:
                try:
                    await conn.request(metadata_request())
                except KafkaConnectionError as exc:
                    outcome.append(exc)

            with anyio.fail_after(HANG_GUARD):
                async with anyio.create_task_group() as tg:
                    await conn._send_lock.acquire()  # as a request being written holds it
                    tg.start_soon(blocked)
                    while not conn._send_lock.statistics().tasks_waiting:
                        await anyio.sleep(0.001)
                    drop.set()  # the broker hangs up
                    await conn.wait_closed()
                    conn._send_lock.release()
            assert len(outcome) == 1
            assert type(outcome[0]) is BrokenConnection, repr(outcome[0])
            with pytest.raises(BrokenConnection):  # and so does the next request
                await conn.request(metadata_request())
        server.cancel_scope.cancel()


async def test_a_request_after_aclose_is_connection_closed() -> None:
    async def on_request(stream: anyio.abc.ByteStream, header: Any, request: Any) -> None:
        await stream.send(
            encode_response(metadata_response("x"), correlation_id=header.correlation_id)
        )

    async with fake_broker(on_request) as port, open_connection("127.0.0.1", port) as conn:
        await conn.request(metadata_request())
        await conn.aclose()
        with pytest.raises(ConnectionClosed):
            await conn.request(metadata_request())


async def test_garbage_during_version_negotiation_fails_the_open() -> None:
    async def serve_one(stream: anyio.abc.ByteStream) -> None:
        async with stream:
            await stream.receive()
            await stream.send(b"\x00\x00\x00\x03abc")  # a frame too short for anything
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                await stream.receive()  # until the client hangs up

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve_one)
        with anyio.fail_after(HANG_GUARD), pytest.raises(BrokenConnection):
            await tg.start(BrokerConnection("127.0.0.1", port, connect_timeout=5.0).serve)
        tg.cancel_scope.cancel()


async def test_serve_reports_readiness_and_negotiated_versions() -> None:
    async def on_request(stream: anyio.abc.ByteStream, header: Any, request: Any) -> None:
        await stream.send(
            encode_response(metadata_response("x"), correlation_id=header.correlation_id)
        )

    async with fake_broker(on_request) as port, anyio.create_task_group() as tg:
        conn = await tg.start(BrokerConnection("127.0.0.1", port, node_id=7).serve)
        assert conn.versions == {ApiKey.API_VERSIONS: 3, ApiKey.METADATA: 12}
        assert conn.broker_versions[int(ApiKey.METADATA)] == (0, 12)
        assert (await conn.request(metadata_request())).cluster_id == "x"
        await conn.aclose()


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_large_responses_arrive_whole_received_in_place(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Over plain TCP a large frame is received straight into a buffer of the
    # frame's size (gengroup.io.inplace): on trio from the socket, on asyncio
    # through the transport's buffered protocol. Every response is whole, and
    # small ones around the large ones are unaffected.
    received_in_place = 0
    received_into = FrameBuffer.received_into

    def counting(self: FrameBuffer, count: int) -> None:
        nonlocal received_in_place
        received_in_place += 1
        received_into(self, count)

    monkeypatch.setattr(FrameBuffer, "received_into", counting)
    sizes = [3_000_000, 10, 700_000, 20, 5_000_000]

    answered = 0

    async def on_request(stream: anyio.abc.ByteStream, header: Any, request: Any) -> None:
        nonlocal answered
        answer = metadata_response(chr(ord("a") + answered) * sizes[answered])
        answered += 1
        await stream.send(encode_response(answer, correlation_id=header.correlation_id))

    async def scenario() -> list[str]:
        async with fake_broker(on_request) as port, open_connection("127.0.0.1", port) as conn:
            with anyio.fail_after(HANG_GUARD):
                return [(await conn.request(metadata_request())).cluster_id for _ in sizes]

    ids = anyio.run(scenario, backend=backend)
    assert [len(i) for i in ids] == sizes
    assert all(len(set(i)) == 1 for i in ids)  # each one letter throughout, none mixed
    assert received_in_place >= 3  # the three large frames, at least one read each


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_eof_or_close_mid_large_response_fails_the_request(backend: str) -> None:
    anyio.run(eof_or_close_mid_large_response, backend=backend)


async def eof_or_close_mid_large_response() -> None:
    # A large frame is received in place (see above): a peer that hangs up in
    # its middle breaks the connection, and closing the connection ourselves
    # while the rest is awaited ends the request at once; neither hangs.
    async def hang_up(stream: anyio.abc.ByteStream, header: Any, request: Any) -> None:
        await stream.send(struct.pack(">ii", 2_000_000, header.correlation_id) + bytes(400_000))
        await stream.aclose()

    async with fake_broker(hang_up) as port, open_connection("127.0.0.1", port) as conn:
        with anyio.fail_after(HANG_GUARD), pytest.raises(BrokenConnection):
            await conn.request(metadata_request())

    async def stall(stream: anyio.abc.ByteStream, header: Any, request: Any) -> None:
        await stream.send(struct.pack(">ii", 2_000_000, header.correlation_id) + bytes(400_000))
        await anyio.sleep_forever()

    async with fake_broker(stall) as port, open_connection("127.0.0.1", port) as conn:

        async def close_soon() -> None:
            await anyio.sleep(0.2)  # the request is sent and partly answered
            await conn.aclose()

        with anyio.fail_after(HANG_GUARD):
            async with anyio.create_task_group() as tg:
                tg.start_soon(close_soon)
                with pytest.raises(ConnectionClosed):
                    await conn.request(metadata_request())


def test_a_garbage_frame_length_breaks_the_connection_on_asyncio_too() -> None:
    # On asyncio the connection reads through the transport's buffered
    # protocol (gengroup.io.inplace): a length out of bounds still breaks the
    # connection as a malformed frame.
    async def on_request(stream: anyio.abc.ByteStream, header: Any, request: Any) -> None:
        await stream.send(struct.pack(">i", 1_000_000_000) + bytes(300_000))

    async def scenario() -> None:
        async with fake_broker(on_request) as port, open_connection("127.0.0.1", port) as conn:
            with anyio.fail_after(HANG_GUARD), pytest.raises(BrokenConnection, match="malformed"):
                await conn.request(metadata_request())

    anyio.run(scenario, backend="asyncio")


def test_the_asyncio_reader_leaves_a_bad_frame_length_to_the_read_loop() -> None:
    # The transport calls get_buffer() itself: an exception there would be a
    # "fatal error" of asyncio's, logged by the event loop. A length out of
    # bounds is left to the read loop instead, whose next_frame() raises it.
    from gengroup.io.inplace import _InPlaceProtocol

    buf = FrameBuffer(max_frame=1000)
    buf.feed(struct.pack(">i", 10**9))
    protocol = _InPlaceProtocol(buf, object(), lambda: False)
    into = protocol.get_buffer(-1)  # does not raise
    into[:4] = b"more"
    protocol.buffer_updated(4)
    with pytest.raises(ProtocolError):
        buf.next_frame()


async def cancelled_natively(conn: BrokerConnection) -> None:
    """Send a Metadata request on asyncio and cancel its task as asyncio does
    (``task.cancel()``: ``asyncio.timeout``, ``wait_for``), at the first yield."""
    task = asyncio.current_task()
    assert task is not None

    async def cancelled() -> None:
        asyncio.get_running_loop().call_soon(task.cancel)
        await conn.request(metadata_request())

    with pytest.raises(asyncio.CancelledError):
        await cancelled()
    task.uncancel()


def test_a_request_cancelled_natively_once_written_keeps_the_connection_usable() -> None:
    # asyncio's own cancellation (task.cancel(): asyncio.timeout, wait_for)
    # is stopped by no shield: it lands at the send's yield right after the
    # frame went into the transport. The broker answers that request; its
    # answer must be dropped as a cancelled caller's, not break the
    # connection as an unknown correlation id.
    answered: list[int] = []

    async def on_request(stream: anyio.abc.ByteStream, header: Any, request: Any) -> None:
        answered.append(header.correlation_id)
        answer = metadata_response(f"cid-{header.correlation_id}")
        await stream.send(encode_response(answer, correlation_id=header.correlation_id))

    async def scenario() -> None:
        async with fake_broker(on_request) as port, open_connection("127.0.0.1", port) as conn:
            await cancelled_natively(conn)
            with anyio.fail_after(HANG_GUARD):
                resp = await conn.request(metadata_request())
            assert resp.cluster_id == f"cid-{answered[-1]}"
            assert len(answered) == 2  # the cancelled request was written and answered
            assert conn.is_usable

    anyio.run(scenario, backend="asyncio")


def test_requests_cancelled_natively_under_back_pressure_are_written_and_answered() -> None:
    # The broker stops reading: the transport asks the writer to wait. A
    # request cancelled natively then (task.cancel()) was written all the
    # same, into the transport's buffer before any wait: its answer comes and
    # is dropped, and nothing is left waiting for an answer that cannot come
    # (which would close the connection at its deadline, failing the requests
    # then in flight).
    gate = anyio.Event()
    seen: list[int] = []

    async def on_request(stream: anyio.abc.ByteStream, header: Any, request: Any) -> None:
        seen.append(header.correlation_id)
        if len(seen) == 1:
            await gate.wait()  # reads nothing more meanwhile
        answer = metadata_response(f"cid-{header.correlation_id}")
        await stream.send(encode_response(answer, correlation_id=header.correlation_id))

    async def scenario() -> None:
        async with fake_broker(on_request) as port, open_connection("127.0.0.1", port) as conn:
            protocol: Any = conn._stream
            protocol = protocol._protocol  # anyio's asyncio stream's

            def writable() -> bool:
                return bool(protocol.write_event.is_set())  # a new event at each pause

            first = asyncio.create_task(conn.request(metadata(12, ["x"], auto=False)))
            await asyncio.sleep(0.05)
            names = [f"topic-{i:06d}-" + "y" * 200 for i in range(40000)]
            big = asyncio.create_task(conn.request(metadata(12, names, auto=False)))
            with anyio.fail_after(HANG_GUARD):
                while writable():
                    await asyncio.sleep(0.01)
            big.cancel()
            small = asyncio.create_task(conn.request(metadata(12, ["b"], auto=False), timeout=2))
            await asyncio.sleep(0.05)
            assert not writable()  # still waiting: the small one came after the wait
            small.cancel()
            for task in (big, small):
                with pytest.raises(asyncio.CancelledError):
                    await task
            gate.set()
            with anyio.fail_after(HANG_GUARD):
                await first
                resp = await conn.request(metadata(12, ["c"], auto=False))
            assert resp.cluster_id == f"cid-{seen[-1]}"
            assert len(seen) == 4 and conn.awaiting == 0
            await asyncio.sleep(2.5)  # past the small one's timeout
            assert conn.is_usable

    anyio.run(scenario, backend="asyncio")


# ---------------------------------------------------------------------------- sends that block


def huge() -> EncodedRequest:
    """A request too large for the loopback socket's buffers: its send blocks
    while the peer reads nothing."""
    return EncodedRequest(int(ApiKey.METADATA), 12, True, "HugeRequest", bytes(32 << 20))


@asynccontextmanager
async def deaf_peer() -> AsyncIterator[BrokerConnection]:
    """A connection whose peer stops reading at its first request (left unanswered)."""
    heard = anyio.Event()

    async def on_request(stream: anyio.abc.ByteStream, header: Any, request: Any) -> None:
        heard.set()
        await anyio.sleep_forever()

    async with (
        fake_broker(on_request) as port,
        open_connection("127.0.0.1", port, request_timeout=30.0) as conn,
        anyio.create_task_group() as tg,
    ):

        async def unanswered() -> None:
            with contextlib.suppress(KafkaConnectionError):
                await conn.request(metadata_request(), timeout=10_000)

        tg.start_soon(unanswered)
        await heard.wait()
        yield conn
        tg.cancel_scope.cancel()


async def test_a_send_that_blocks_times_out_and_closes_the_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with deaf_peer() as conn:
        start = anyio.current_time()
        with pytest.raises(RequestTimedOut, match=r"send blocked for 30\.0 s"):
            await conn.request(huge())
        assert anyio.current_time() - start == pytest.approx(30.0)
        assert not conn.is_usable
        with pytest.raises(RequestTimedOut):
            await conn.request(metadata_request())


async def test_a_caller_cancelled_mid_send_does_not_cut_the_frame(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The frame is written whole or the connection dropped: the caller's
    # cancellation waits for the send, which here ends at its own deadline.
    async with deaf_peer() as conn:
        start = anyio.current_time()
        with anyio.move_on_after(1.0), pytest.raises(RequestTimedOut, match="send blocked"):
            await conn.request(huge())
        assert anyio.current_time() - start == pytest.approx(30.0)
        assert not conn.is_usable


def test_a_send_that_blocks_times_out_on_asyncio_too() -> None:
    async def scenario() -> None:
        async with deaf_peer() as conn:
            conn.request_timeout = 0.5
            with pytest.raises(RequestTimedOut, match="send blocked"):
                await conn.request(huge())
            assert not conn.is_usable

    anyio.run(scenario, backend="asyncio")


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_connection_the_broker_dropped_is_freed_without_a_garbage_collection(
    backend: str,
) -> None:
    """A service's connections come and go (idle ones reaped by the broker,
    fetch connections of ended generations): one that broke must be freed when
    dropped, with its buffers (256 KiB on asyncio), not kept in a reference
    cycle until a full garbage collection, which CPython runs rarely."""
    dropped: list[weakref.ref[BrokerConnection]] = []

    async def on_request(stream: anyio.abc.ByteStream, header: Any, request: Any) -> None:
        await stream.aclose()  # the broker drops the connection

    async def main() -> None:
        async with fake_broker(on_request) as port:
            async with open_connection("127.0.0.1", port) as conn:
                with anyio.fail_after(HANG_GUARD), contextlib.suppress(BrokenConnection):
                    await conn.request(metadata_request())
                dropped.append(weakref.ref(conn))
            del conn

    gc.collect()
    gc.disable()
    try:
        anyio.run(main, backend=backend)
        alive = [ref() for ref in dropped if ref() is not None]
    finally:
        gc.enable()
    assert len(dropped) == 1
    assert not alive, "the dropped connection is still alive, in a reference cycle"
