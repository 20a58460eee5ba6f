"""Malformed and hostile input closes only the offending connection.

Kafka's behaviour, reproduced: a frame that cannot be parsed, a declared
length above ``socket.request.max.bytes`` (or negative), an unknown API key or
an unsupported version closes the connection; ApiVersions with an unsupported
version is instead answered with an ApiVersions v0 response carrying
UNSUPPORTED_VERSION (35) and the ApiVersions range the broker supports.
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest
import trio
import trio.testing
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0

from gengroup.broker import BrokerSettings, FakeCluster
from gengroup.broker.apis import SPECS
from gengroup.io.connection import BrokerConnection
from gengroup.protocol.framing import FrameBuffer, decode_response, encode_request

from . import api_versions, connect, fetch, frame, metadata


def header(api_key: int, version: int, cid: int = 42, *, flexible: bool = False) -> bytes:
    out = struct.pack(">hhih", api_key, version, cid, 4) + b"evil"
    return out + (b"\x00" if flexible else b"")


def configured(**settings: Any) -> FakeCluster:
    """A cluster with topic ``t`` (one partition) and these broker settings."""
    return FakeCluster(topics={"t": 1}, settings=BrokerSettings(**settings))


@asynccontextmanager
async def raw(cluster: FakeCluster) -> AsyncIterator[anyio.abc.SocketStream]:
    host, port = cluster.address(0)
    stream = await anyio.connect_tcp(host, port)
    async with stream:
        yield stream


async def closed_by_peer(stream: anyio.abc.SocketStream) -> bool:
    """True if the server closed the connection (EOF or reset) without answering."""
    try:
        with anyio.fail_after(5):
            data = await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
        return True
    raise AssertionError(f"expected the connection to be closed, got {data!r}")


async def refused(cluster: FakeCluster, data: bytes, *, eof: bool = False) -> None:
    """A new raw connection sends ``data`` (then EOF if asked): the server closes it."""
    async with raw(cluster) as evil:
        await evil.send(data)
        if eof:
            await evil.send_eof()
        assert await closed_by_peer(evil)


async def still_served(conn: BrokerConnection) -> None:
    resp = await conn.request(metadata(12, ["t"]))
    assert resp.topics[0].error_code == 0


HOSTILE: dict[str, Callable[[], bytes]] = {
    "garbage frame": lambda: frame(os.urandom(64)),
    "garbage without a frame": lambda: b"\x01\x02\x03" + os.urandom(200),
    "huge length": lambda: struct.pack(">i", 2**31 - 1) + b"x" * 10,
    "negative length": lambda: struct.pack(">i", -5),
    "unknown api key": lambda: frame(header(999, 0)),
    "known api, version kio lacks": lambda: frame(header(1, 99, flexible=True)),
    "Fetch v13 (by topic id) with a body of zeros": lambda: frame(
        header(1, 13, flexible=True) + b"\x00" * 40
    ),
    "Produce v2 (below the supported range)": lambda: frame(header(0, 2) + b"\x00" * 20),
    "truncated Metadata body": lambda: frame(header(3, 1) + b"\x00\x00\x00\x05\x00"),
    "header only": lambda: frame(b"\x00\x03"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
async def test_hostile_frames_close_only_that_connection(
    name: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as good:
        await still_served(good)
        # "garbage without a frame" declares ~16 MB: the server waits for the rest, like Kafka
        await refused(cluster, HOSTILE[name](), eof=name == "garbage without a frame")
        await still_served(good)
        assert cluster.servers[0].connection_count == 1
        assert not cluster.errors


async def test_truncated_frame_then_eof(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as good:
        await refused(cluster, struct.pack(">i", 100) + b"only ten b", eof=True)
        await still_served(good)
        assert not cluster.errors


async def test_oversized_frame_over_the_configured_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with configured(socket_request_max_bytes=1024) as cluster:
        async with connect(cluster) as good:
            await refused(cluster, struct.pack(">i", 1025))
            await still_served(good)


async def read_frame(stream: anyio.abc.ByteStream) -> bytes:
    buf = FrameBuffer()
    while (got := buf.next_frame()) is None:
        buf.feed(await stream.receive())
    return got


@pytest.mark.parametrize("version", [5, 99])
async def test_api_versions_unsupported_version_is_answered_v0(
    version: int, autojump_clock: trio.testing.MockClock
) -> None:
    async with FakeCluster() as cluster, raw(cluster) as stream:
        await stream.send(frame(header(18, version, cid=1234, flexible=True) + b"\x01\x02"))
        cid, resp = decode_response(ApiVersionsResponseV0, await read_frame(stream))
        assert cid == 1234
        assert resp.error_code == 35
        assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == [(18, 0, 4)]
        # the connection stays open: a supported version is then answered
        await stream.send(encode_request(api_versions(3), correlation_id=5, client_id="x"))
        cls = type(api_versions(3)).__module__.replace("request", "response")
        module = __import__(cls, fromlist=["_"])
        cid, resp = decode_response(module.ApiVersionsResponse, await read_frame(stream))
        assert (cid, resp.error_code) == (5, 0)
        assert {int(k.api_key) for k in resp.api_keys} == {int(key) for key in SPECS}


async def test_api_versions_v3_with_an_invalid_software_name(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster() as cluster, connect(cluster) as conn:
        request = type(api_versions(3))(
            client_software_name="bad name!", client_software_version="1"
        )
        resp = await conn.request(request)
        assert resp.error_code == 42  # INVALID_REQUEST, like Kafka
        assert (await conn.request(api_versions(3))).error_code == 0


async def test_gengroup_client_sees_the_close_as_a_broken_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from gengroup._errors import BrokenConnection

    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as conn:
        with pytest.raises(BrokenConnection):
            # Fetch v17 is not advertised: Kafka closes the connection.
            await conn.request(fetch(17, "t", 0, 0, topic_ids={"t": uuid.uuid4()}))
        assert not conn.is_usable
        assert not cluster.errors


async def test_many_clients_survive_a_hostile_one(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(topics={"t": 1}) as cluster:
        async with connect(cluster) as a, connect(cluster) as b, connect(cluster) as c:
            for make in HOSTILE.values():
                await refused(cluster, make(), eof=True)
                for conn in (a, b, c):
                    await still_served(conn)
        assert not cluster.errors


async def test_idle_connections_are_closed_when_configured(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with configured(connections_max_idle=600) as cluster, raw(cluster) as idle:
        start = trio.current_time()
        assert await closed_by_peer_after(idle, 700)
        assert trio.current_time() - start == pytest.approx(600)


async def closed_by_peer_after(stream: anyio.abc.SocketStream, seconds: float) -> bool:
    try:
        with anyio.fail_after(seconds):
            await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
        return True
    return False  # pragma: no cover


async def test_creating_the_offsets_topic_explicitly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from . import create_topics

    async with FakeCluster(brokers=2, offsets_topic_num_partitions=4) as cluster:
        async with connect(cluster) as conn:
            resp = await conn.request(create_topics(7, ("__consumer_offsets", 1)))
            assert resp.topics[0].error_code == 0
            topic = cluster.state.topics.by_name["__consumer_offsets"]
            assert topic.internal
            assert len(topic.partitions) == 4
            resp = await conn.request(create_topics(7, ("__consumer_offsets", 1)))
            assert resp.topics[0].error_code == 36
            all_topics = await conn.request(metadata(12, None))
            (internal,) = all_topics.topics
            assert internal.is_internal
        assert not cluster.errors
