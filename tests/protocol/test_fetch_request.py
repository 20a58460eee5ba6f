"""Fetch requests written straight to bytes are the bytes kio writes.

:func:`encode_fetch_request` replaces kio's generic writer on the fetch path;
:func:`encode_request` writes every request's header by hand. Both are
compared here with kio's own encoding (the dataclasses of
:func:`build_fetch_request`, written by kio's entity writer, header
included), for random requests of every Fetch version gengroup speaks (v13+
naming topics by id), and
the result is read back by kio's reader, as a broker would.
"""

from __future__ import annotations

import io
import struct
import uuid
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from kio.serial import entity_reader, entity_writer

from gengroup import TopicPartition
from gengroup.protocol.fetch import build_fetch_request
from gengroup.protocol.fetch_request import encode_fetch_request
from gengroup.protocol.framing import (
    EncodedRequest,
    decode_request,
    encode_request,
    request_identity,
    request_module,
)
from gengroup.protocol.versions import ApiKey

INT32_MAX, INT64_MAX = (1 << 31) - 1, (1 << 63) - 1


def kio_frame(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    """The frame as kio alone writes it: its header class and its entity writer."""
    cls = type(request)
    header = cls.__header_schema__(
        request_api_key=cls.__api_key__,
        request_api_version=cls.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    buf = io.BytesIO()
    entity_writer(type(header))(buf, header)
    entity_writer(cls)(buf, request)
    body = buf.getvalue()
    return struct.pack(">i", len(body)) + body


TOPIC_NAMES = ["t", "orders", "ünïcode-topic", "x" * 200]
topics = st.sampled_from(TOPIC_NAMES)
partitions = st.builds(TopicPartition, topics, st.integers(0, INT32_MAX))
client_ids = st.none() | st.text(max_size=40)


@st.composite
def fetch_arguments(draw: st.DrawFn) -> dict[str, Any]:
    positions = draw(st.dictionaries(partitions, st.integers(0, INT64_MAX), max_size=12))
    per_partition = draw(st.booleans())
    limits = st.integers(1, 2 * INT32_MAX)
    return {
        "positions": positions,
        "max_wait": draw(st.floats(0, 600, allow_nan=False)),
        "min_bytes": draw(st.integers(0, INT32_MAX)),
        "max_bytes": draw(limits),
        "partition_max_bytes": (
            {tp: draw(limits) for tp in positions} if per_partition else draw(limits)
        ),
        "isolation_level": draw(st.sampled_from(["read_uncommitted", "read_committed", 0, 1])),
        "leader_epochs": draw(
            st.none() | st.fixed_dictionaries({tp: st.integers(-1, INT32_MAX) for tp in positions})
        ),
        "session_id": draw(st.integers(0, INT32_MAX)),
        "session_epoch": draw(st.integers(-1, INT32_MAX)),
        "forgotten": draw(st.lists(partitions, max_size=6, unique=True)),
        "topic_ids": {name: draw(st.uuids(allow_nil=False)) for name in TOPIC_NAMES},
    }


@pytest.mark.parametrize("version", range(11, 17))
@settings(max_examples=300, deadline=None)
@given(
    args=fetch_arguments(),
    correlation_id=st.integers(-(1 << 31), INT32_MAX),
    client_id=client_ids,
)
def test_a_fetch_written_by_hand_is_the_fetch_kio_writes(
    version: int, args: dict[str, Any], correlation_id: int, client_id: str | None
) -> None:
    reference = build_fetch_request(version, **args)
    encoded = encode_fetch_request(version, **args)
    expected = kio_frame(reference, correlation_id, client_id)
    assert encode_request(encoded, correlation_id=correlation_id, client_id=client_id) == expected
    # The kio request's frame, with the header written by hand, is the same.
    assert encode_request(reference, correlation_id=correlation_id, client_id=client_id) == expected
    # And a broker reads the request back.
    header, request = decode_request(expected[4:])
    assert request == reference
    assert header.correlation_id == correlation_id and header.client_id == client_id
    assert request_identity(encoded) == (int(ApiKey.FETCH), version, "FetchRequest")


def test_only_the_versions_it_knows_are_written_by_hand() -> None:
    with pytest.raises(ValueError, match="Fetch v17"):
        encode_fetch_request(
            17,
            {TopicPartition("t", 0): 0},
            max_wait=0.5,
            min_bytes=1,
            max_bytes=1 << 20,
            partition_max_bytes=1 << 20,
            isolation_level=0,
        )


@pytest.mark.parametrize("version", [13, 16])
@pytest.mark.parametrize("forgotten", [False, True])
def test_a_topic_without_an_id_is_refused_from_v13(version: int, forgotten: bool) -> None:
    args: dict[str, Any] = {
        "max_wait": 0.5,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "partition_max_bytes": 1 << 20,
        "isolation_level": 0,
        "topic_ids": {"t": uuid.uuid4()},
    }
    tp = TopicPartition("other", 0)
    positions = {TopicPartition("t", 0): 0} if forgotten else {tp: 0}
    dropped = [tp] if forgotten else []
    for write in (encode_fetch_request, build_fetch_request):
        with pytest.raises(ValueError, match="no id for 'other'"):
            write(version, positions, forgotten=dropped, **args)


@pytest.mark.parametrize("client_id", [None, "", "gengroup-ü"])
@pytest.mark.parametrize(
    ("key", "version"),
    [(ApiKey.API_VERSIONS, 3), (ApiKey.METADATA, 12), (ApiKey.JOIN_GROUP, 5)],
)
def test_request_headers_written_by_hand_are_kios(
    key: ApiKey, version: int, client_id: str | None
) -> None:
    # A flexible (header v2) and non-flexible (header v1) request of other APIs.
    cls = request_module(key, version)
    request = next(
        getattr(cls, name)
        for name in dir(cls)
        if name.endswith("Request") and getattr(getattr(cls, name), "__version__", None) == version
    )
    header_cls = request.__header_schema__
    header = header_cls(
        request_api_key=key, request_api_version=version, correlation_id=7, client_id=client_id
    )
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header)
    written = EncodedRequest(int(key), version, bool(header_cls.__flexible__), "x", b"")
    frame = encode_request(written, correlation_id=7, client_id=client_id)
    assert frame[4:] == buf.getvalue()
    read, size = entity_reader(header_cls)(memoryview(frame[4:]), 0)
    assert read == header and size == len(frame) - 4


def test_a_client_id_too_long_for_the_header_is_refused() -> None:
    written = EncodedRequest(int(ApiKey.METADATA), 12, True, "x", b"")
    assert encode_request(written, correlation_id=1, client_id="c" * 32767)
    with pytest.raises(ValueError, match="client id of 32768 bytes"):
        encode_request(written, correlation_id=1, client_id="c" * 32768)
