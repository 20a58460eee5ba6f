"""The payload guard: malformed lengths become ProtocolError, valid bytes always pass."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import struct
from pkgutil import resolve_name
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st
from kio.schema.heartbeat.v4.response import HeartbeatResponse
from kio.schema.index import schema_name_map
from kio.schema.join_group.v5.request import JoinGroupRequest
from kio.schema.join_group.v9.request import JoinGroupRequest as JoinGroupRequestV9
from kio.schema.metadata.v5.response import MetadataResponse as MetadataResponseV5
from kio.schema.metadata.v12.response import MetadataResponse
from kio.serial import entity_writer
from kio.serial._introspect import EntityTupleField, classify_field
from kio.static.constants import EntityType
from kio.static.primitive import Records, i64Timedelta

from gengroup._errors import ProtocolError, UnsupportedVersion
from gengroup.protocol.framing import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from gengroup.protocol.guard import check_entity, compile_plan

# --------------------------------------------------------------------------- crafted payloads

_HUGE_UVARINT = b"\xff\xff\xff\xff\x0f"  # 2**35 - 1: a compact count of ~34 billion


def _join_group_with_huge_protocols() -> bytes:
    request = JoinGroupRequest(
        group_id="g",
        session_timeout=datetime.timedelta(seconds=10),
        rebalance_timeout=datetime.timedelta(seconds=10),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(),
    )
    frame = encode_request(request, correlation_id=1, client_id="c")
    payload = frame[4:]
    # v5 is not flexible and protocols is the last field: its int32 count ends the frame.
    assert payload[-4:] == b"\x00\x00\x00\x00"
    return payload[:-4] + struct.pack(">i", 2**31 - 1)


#: name -> (class, payload, is_request). Decoded by kio's native reader alone
#: (checked once, in a subprocess), the compact-count payloads abort the process
#: (a reservation of 2**35 pointers fails); the legacy int32 counts ask for
#: 16 GiB, which aborts too under an address-space limit (``ulimit -v``) and is
#: merely reserved by an overcommitting kernel; the heartbeat one has no array
#: for the reader to preallocate and is kept as a tagged-field case.
CRAFTED: dict[str, tuple[type[Any], bytes, bool]] = {
    # header v1 (correlation id, no tags), throttle, brokers count 2**35 - 2.
    "metadata_v12_brokers": (
        MetadataResponse,
        b"\x00\x00\x00\x07\x00" + b"\x00\x00\x00\x00" + _HUGE_UVARINT,
        False,
    ),
    # header v0, throttle, brokers int32 count 2**31 - 1.
    "metadata_v5_brokers": (
        MetadataResponseV5,
        b"\x00\x00\x00\x07" + b"\x00\x00\x00\x00" + b"\x7f\xff\xff\xff",
        False,
    ),
    # header v1, throttle, error code, then a tagged-field count of 2**35 - 1.
    "heartbeat_v4_tags": (
        HeartbeatResponse,
        b"\x00\x00\x00\x07\x00" + b"\x00\x00\x00\x00\x00\x00" + _HUGE_UVARINT,
        False,
    ),
    "join_group_v5_protocols": (JoinGroupRequest, _join_group_with_huge_protocols(), True),
    # header v2 (api key 11, version 9, correlation id, null client id, no tags),
    # group id "", both timeouts, member id "", null instance id, protocol type "",
    # then a protocols count of 2**35 - 2.
    "join_group_v9_protocols": (
        JoinGroupRequestV9,
        b"\x00\x0b\x00\x09\x00\x00\x00\x01\xff\xff\x00"
        + b"\x01"
        + bytes(8)
        + b"\x01\x00\x01"
        + _HUGE_UVARINT,
        True,
    ),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_huge_counts_are_protocol_errors(name: str) -> None:
    cls, payload, is_request = CRAFTED[name]
    with pytest.raises(ProtocolError):
        if is_request:
            decode_request(payload)
        else:
            decode_response(cls, payload)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
@example(CRAFTED["metadata_v12_brokers"][1])
@example(CRAFTED["metadata_v5_brokers"][1])
@example(CRAFTED["heartbeat_v4_tags"][1])
def test_garbage_after_a_valid_prefix_only_raises_protocol_error(data: bytes) -> None:
    for cls in (HeartbeatResponse, MetadataResponse, MetadataResponseV5):
        with contextlib.suppress(ProtocolError):
            decode_response(cls, data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
@example(CRAFTED["join_group_v5_protocols"][1])
@example(CRAFTED["join_group_v9_protocols"][1])
def test_garbage_requests_only_raise_protocol_errors(data: bytes) -> None:
    with contextlib.suppress(ProtocolError, UnsupportedVersion):
        decode_request(data)


# --------------------------------------------------------------------------- specific rules


def _metadata_v5(brokers: bytes) -> bytes:
    return b"\x00\x00\x00\x07" + b"\x00\x00\x00\x00" + brokers


def test_null_array_where_not_nullable_is_rejected() -> None:
    with pytest.raises(ProtocolError, match="brokers: invalid array count -1"):
        check_entity(MetadataResponseV5, _metadata_v5(b"\xff\xff\xff\xff"), 4)


def test_negative_string_length_is_rejected() -> None:
    # one broker: node id, then a host length of -2.
    broker = b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01" + b"\xff\xfe" + bytes(10)
    with pytest.raises(ProtocolError, match="host: invalid length -2"):
        check_entity(MetadataResponseV5, _metadata_v5(broker), 4)


def test_string_longer_than_the_payload_is_rejected() -> None:
    broker = b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x10" + bytes(10)
    with pytest.raises(ProtocolError, match="host: length 16 exceeds"):
        check_entity(MetadataResponseV5, _metadata_v5(broker), 4)


def test_tagged_field_size_beyond_the_payload_is_rejected() -> None:
    payload = b"\x00\x00\x00\x00\x00\x00" + b"\x01" + b"\x05\x7f"  # one tag, 127 bytes
    with pytest.raises(ProtocolError, match="tagged field 5 of 127 bytes"):
        check_entity(HeartbeatResponse, payload)


def test_truncated_payload_is_rejected() -> None:
    with pytest.raises(ProtocolError, match="ends inside"):
        check_entity(HeartbeatResponse, b"\x00\x00\x00")


# --------------------------------------------------------------------------- every schema


def _all_schema_classes() -> list[type[Any]]:
    return [
        resolve_name(path)
        for versions in schema_name_map.values()
        for by_type in versions.values()
        for path in by_type.values()
    ]


def test_every_kio_schema_compiles_and_every_array_element_has_a_size() -> None:
    seen: set[type[Any]] = set()

    def visit(cls: type[Any]) -> None:
        if cls in seen:
            return
        seen.add(cls)
        compile_plan(cls)
        for field in dataclasses.fields(cls):
            kind = classify_field(field)
            if isinstance(kind, EntityTupleField):
                # The "an array of N elements needs N bytes" bound relies on this.
                assert compile_plan(kind.type_).minimum >= 1, kind.type_
            inner = getattr(kind, "type_", None)
            if dataclasses.is_dataclass(inner):
                visit(inner)  # type: ignore[arg-type]

    for cls in _all_schema_classes():
        visit(cls)
    assert len(seen) > 1000


# --------------------------------------------------------------------------- valid bytes pass

_APIS = (
    "api_versions",
    "metadata",
    "fetch",
    "list_offsets",
    "produce",
    "find_coordinator",
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "describe_groups",
    "list_groups",
    "consumer_group_heartbeat",
    "consumer_group_describe",
    "create_topics",
    "delete_topics",
    "describe_configs",
)


def _classes(entity_type: EntityType) -> list[type[Any]]:
    return [
        resolve_name(by_type[entity_type])
        for name in _APIS
        for by_type in schema_name_map[name].values()
    ]


_RESPONSES = _classes(EntityType.response)
_REQUESTS = _classes(EntityType.request)


def _encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


# kio's phantom Records type (record batches as opaque bytes) has no strategy of
# its own; any bytes are valid as far as the framing is concerned.
st.register_type_strategy(Records, st.binary(max_size=64))
# kio's own i64Timedelta strategy reaches durations its reader cannot build
# again (beyond 2**63 microseconds); brokers send nothing near that.
st.register_type_strategy(
    i64Timedelta,
    st.integers(-(2**53), 2**53).map(
        lambda ms: i64Timedelta.parse(datetime.timedelta(milliseconds=ms))
    ),
)

_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]


@settings(max_examples=400, deadline=None, suppress_health_check=_SLOW)
@given(st.sampled_from(_RESPONSES + _REQUESTS).flatmap(st.from_type))
def test_guard_accepts_every_valid_encoding(entity: Any) -> None:
    data = _encode(entity)
    assert check_entity(type(entity), data) == len(data)
    padded = b"\x01\x02\x03" + data
    assert check_entity(type(entity), memoryview(padded), 3) == len(padded)


@settings(max_examples=300, deadline=None, suppress_health_check=_SLOW)
@given(st.sampled_from(_RESPONSES).flatmap(st.from_type), st.integers(-(2**31), 2**31 - 1))
def test_valid_responses_decode_through_the_guard(response: Any, correlation_id: int) -> None:
    frame = encode_response(response, correlation_id=correlation_id)
    assert decode_response(type(response), frame[4:]) == (correlation_id, response)


@settings(max_examples=300, deadline=None, suppress_health_check=_SLOW)
@given(
    st.sampled_from(_REQUESTS).flatmap(st.from_type),
    st.integers(-(2**31), 2**31 - 1),
    st.none() | st.text(max_size=20),
)
def test_valid_requests_decode_through_the_guard(
    request: Any, correlation_id: int, client_id: str | None
) -> None:
    frame = encode_request(request, correlation_id=correlation_id, client_id=client_id)
    header, decoded = decode_request(frame[4:])
    assert decoded == request
    assert header.correlation_id == correlation_id and header.client_id == client_id
