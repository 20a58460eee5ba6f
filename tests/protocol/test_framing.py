"""Framing over kio and version negotiation, sans-IO."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings, strategies as st
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.heartbeat.v4.response import HeartbeatResponse
from kio.schema.metadata.v12.response import MetadataResponse

from gengroup._errors import ProtocolError, UnsupportedVersion
from gengroup.protocol.framing import (
    FrameBuffer,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from gengroup.protocol.versions import CLIENT_VERSIONS, ApiKey, negotiate, require


def test_request_round_trip_through_frames() -> None:
    req = HeartbeatRequest(group_id="g", generation_id=3, member_id="m", group_instance_id=None)
    data = encode_request(req, correlation_id=42, client_id="c")
    buf = FrameBuffer()
    buf.feed(data[:3])
    assert buf.next_frame() is None
    buf.feed(data[3:] + data)
    first, second = buf.next_frame(), buf.next_frame()
    assert first == second and first is not None
    assert buf.next_frame() is None and buf.buffered == 0
    header, decoded = decode_request(first)
    assert header.correlation_id == 42 and header.client_id == "c"
    assert decoded == req


def test_response_round_trip() -> None:
    import datetime

    from kio.schema.errors import ErrorCode

    resp = HeartbeatResponse(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none)
    frame = encode_response(resp, correlation_id=9)
    cid, decoded = decode_response(HeartbeatResponse, frame[4:])
    assert cid == 9 and decoded == resp


def test_oversized_or_negative_frames_are_protocol_errors() -> None:
    buf = FrameBuffer(max_frame=100)
    buf.feed(struct.pack(">i", 101))
    with pytest.raises(ProtocolError, match="outside"):
        buf.next_frame()
    neg = FrameBuffer()
    neg.feed(struct.pack(">i", -5))
    with pytest.raises(ProtocolError):
        neg.next_frame()


def test_unknown_api_is_unsupported_version_with_the_header_fields() -> None:
    payload = struct.pack(">hhi", 9999, 0, 77)
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(payload)
    assert info.value.correlation_id == 77  # type: ignore[attr-defined]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_responses_only_raise_protocol_error(data: bytes) -> None:
    for cls in (HeartbeatResponse, MetadataResponse):
        with contextlib.suppress(ProtocolError):
            decode_response(cls, data)


def test_negotiation_picks_the_highest_common_version() -> None:
    broker = {
        int(ApiKey.JOIN_GROUP): (0, 7),
        int(ApiKey.FETCH): (4, 18),
        int(ApiKey.HEARTBEAT): (5, 9),
    }
    chosen = negotiate(broker)
    assert chosen[ApiKey.JOIN_GROUP] == 7
    assert chosen[ApiKey.FETCH] == CLIENT_VERSIONS[ApiKey.FETCH][1]
    assert ApiKey.HEARTBEAT not in chosen  # no overlap
    with pytest.raises(UnsupportedVersion, match=r"HEARTBEAT .*\(Apache Kafka 2\.4 or later"):
        require(chosen, ApiKey.HEARTBEAT)
    with pytest.raises(UnsupportedVersion, match=r"Apache Kafka 4\.0 or later"):
        require(chosen, ApiKey.CONSUMER_GROUP_HEARTBEAT)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.binary(max_size=300), max_size=8),
    st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=20),
)
def test_frames_come_out_whole_however_the_stream_is_cut(
    payloads: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    buf = FrameBuffer()
    got: list[bytes] = []
    pos = 0
    step = 0
    while pos < len(stream):
        size = cuts[step % len(cuts)]
        step += 1
        buf.feed(memoryview(stream)[pos : pos + size] if step % 2 else stream[pos : pos + size])
        pos += size
        while (frame := buf.next_frame()) is not None:
            got.append(frame)
        assert buf.buffered == len(stream[:pos]) - sum(4 + len(f) for f in got)
    assert got == payloads
    assert buf.next_frame() is None and buf.buffered == 0


def test_reads_ask_for_the_rest_of_the_frame_within_bounds() -> None:
    buf = FrameBuffer()
    assert buf.wanted() == 64 * 1024  # nothing known yet
    big = struct.pack(">i", 3 * 1024 * 1024)
    buf.feed(big[:2])
    assert buf.wanted() == 64 * 1024  # the length prefix is still cut
    buf.feed(big[2:] + bytes(100))
    assert buf.next_frame() is None  # as the reader does after each read
    assert buf.wanted() == 1024 * 1024  # 3 MiB left: at most 1 MiB a read
    buf.feed(bytes(3 * 1024 * 1024 - 300_000 - 100))
    assert buf.wanted() == 300_000  # exactly the rest of the frame
    buf.feed(bytes(300_000 - 1000))
    assert buf.wanted() == 64 * 1024  # a small rest: still a normal read
    buf.feed(bytes(1000))
    assert buf.next_frame() == bytes(3 * 1024 * 1024)
    assert buf.wanted() == 64 * 1024


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from([0, 7, 262_144, 262_145, 300_000, 600_000]), max_size=5),
    st.lists(st.one_of(st.integers(1, 5), st.integers(30_000, 400_000)), min_size=1, max_size=20),
    st.lists(st.booleans(), min_size=1, max_size=20),
)
def test_large_frames_received_in_place_come_out_whole(
    sizes: list[int], cuts: list[int], in_place: list[bool]
) -> None:
    # A reader that can receive into a buffer (socket.recv_into) takes the
    # view receive_into() offers when there is one, else it feeds; either way
    # the frames come out whole, in order, and the buffered count stays true.
    payloads = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    buf = FrameBuffer()
    got: list[bytes] = []
    pos = step = direct = 0
    while pos < len(stream):
        size = cuts[step % len(cuts)]
        into = buf.receive_into() if in_place[step % len(in_place)] else None
        step += 1
        if into is None:
            buf.feed(stream[pos : pos + size])
            pos += size
        else:
            assert len(into) > 0
            count = min(size, len(into), len(stream) - pos)
            into[:count] = stream[pos : pos + count]
            buf.received_into(count)
            pos += count
            direct += 1
        while (frame := buf.next_frame()) is not None:
            got.append(bytes(frame))
        assert buf.buffered == min(pos, len(stream)) - sum(4 + len(f) for f in got)
    assert got == payloads
    assert buf.next_frame() is None and buf.buffered == 0 and buf.receive_into() is None


def test_a_large_frame_is_received_in_place_after_its_first_bytes() -> None:
    frame = bytes(range(256)) * 4096  # 1 MiB
    stream = struct.pack(">i", len(frame)) + frame
    buf = FrameBuffer()
    buf.feed(stream[:2])
    assert buf.receive_into() is None  # the length prefix is still cut
    buf.feed(stream[2:1000])
    into = buf.receive_into()
    assert into is not None and len(into) == len(frame) - 996  # the rest, in one view
    assert buf.wanted() == len(into)  # the rest, also for a reader that feeds instead
    into[:] = stream[1000:]
    buf.received_into(len(into))
    assert buf.receive_into() is None  # full: bytes that come now are fed, after it
    buf.feed(struct.pack(">i", 2) + b"ok")
    out = buf.next_frame()
    assert type(out) is bytearray and out == frame  # no join: the buffer itself
    assert buf.next_frame() == b"ok"
    assert buf.next_frame() is None


def test_an_out_of_bounds_length_fails_before_any_buffer_is_made() -> None:
    buf = FrameBuffer(max_frame=1_000_000)
    buf.feed(struct.pack(">i", 2_000_000) + bytes(10))
    with pytest.raises(ProtocolError):
        buf.receive_into()
