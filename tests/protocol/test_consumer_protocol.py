"""Tests of the consumer protocol's subscription and assignment codecs.

kio's generated schemas (from Kafka's own JSON message definitions) serve as an
independent oracle for the wire layout of versions 0-3.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import struct
from typing import Any

import pytest
from hypothesis import given, strategies as st
from kio.serial import entity_writer

from gengroup._errors import ProtocolError
from gengroup.protocol.consumer_protocol import (
    LATEST_VERSION,
    Assignment,
    Subscription,
    TopicPartitions,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

# ----------------------------------------------------------------------------- strategies

names = st.text(max_size=12)
int32s = st.integers(-(2**31), 2**31 - 1)
topic_partitions: st.SearchStrategy[TopicPartitions] = st.lists(
    st.tuples(names, st.lists(int32s, max_size=5).map(tuple)), max_size=4
).map(tuple)
user_data = st.none() | st.binary(max_size=20)
versions = st.integers(0, LATEST_VERSION)

subscriptions = st.builds(
    Subscription,
    topics=st.lists(names, max_size=5).map(tuple),
    user_data=user_data,
    owned_partitions=topic_partitions,
    generation_id=int32s,
    rack=st.none() | names,
    version=versions,
)
assignments = st.builds(
    Assignment, partitions=topic_partitions, user_data=user_data, version=versions
)


def as_version(sub: Subscription, version: int) -> Subscription:
    """What a subscription looks like after a trip through ``version``."""
    return Subscription(
        topics=sub.topics,
        user_data=sub.user_data,
        owned_partitions=sub.owned_partitions if version >= 1 else (),
        generation_id=sub.generation_id if version >= 2 else -1,
        rack=sub.rack if version >= 3 else None,
        version=version,
    )


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def string(s: str) -> bytes:
    raw = s.encode()
    return i16(len(raw)) + raw


# ----------------------------------------------------------------------------- known vectors

V3_SUBSCRIPTION = (
    i16(3)
    + i32(2)
    + string("a")
    + string("bb")
    + i32(1)
    + b"x"
    + i32(1)
    + string("a")
    + i32(2)
    + i32(0)
    + i32(5)
    + i32(7)
    + string("r1")
)
V3_SUBSCRIPTION_VALUE = Subscription(
    topics=("a", "bb"),
    user_data=b"x",
    owned_partitions=(("a", (0, 5)),),
    generation_id=7,
    rack="r1",
    version=3,
)


def test_known_v3_subscription() -> None:
    assert encode_subscription(V3_SUBSCRIPTION_VALUE) == V3_SUBSCRIPTION
    assert decode_subscription(V3_SUBSCRIPTION) == V3_SUBSCRIPTION_VALUE


def test_known_v0_subscription_null_user_data() -> None:
    data = i16(0) + i32(1) + string("orders") + i32(-1)
    assert decode_subscription(data) == Subscription(topics=("orders",), version=0)
    assert encode_subscription(Subscription(topics=("orders",)), version=0) == data


def test_known_assignment() -> None:
    data = i16(1) + i32(2) + string("t0") + i32(2) + i32(0) + i32(1) + string("t1")
    data += i32(0) + i32(3) + b"abc"
    expected = Assignment(partitions=(("t0", (0, 1)), ("t1", ())), user_data=b"abc", version=1)
    assert decode_assignment(data) == expected
    assert encode_assignment(expected, version=1) == data


def test_empty_assignment_bytes_is_empty_assignment() -> None:
    assert decode_assignment(b"") == Assignment(partitions=(), user_data=None, version=0)


def test_empty_subscription_bytes_is_an_error() -> None:
    with pytest.raises(ProtocolError):
        decode_subscription(b"")


def test_lower_versions_drop_fields_they_cannot_carry() -> None:
    sub = V3_SUBSCRIPTION_VALUE
    assert decode_subscription(encode_subscription(sub, 0)) == as_version(sub, 0)
    assert decode_subscription(encode_subscription(sub, 1)) == as_version(sub, 1)
    assert decode_subscription(encode_subscription(sub, 2)) == as_version(sub, 2)
    assert len(encode_subscription(sub, 0)) < len(encode_subscription(sub, 1))


@pytest.mark.parametrize("version", [4, 5, 99, 2**15 - 1])
def test_newer_subscription_version_parses_known_fields(version: int) -> None:
    future_fields = i32(123) + string("a field from the future") + b"\x00" * 9
    data = i16(version) + V3_SUBSCRIPTION[2:] + future_fields
    assert decode_subscription(data) == dataclasses.replace(V3_SUBSCRIPTION_VALUE, version=version)


@pytest.mark.parametrize("version", [4, 2**15 - 1])
def test_newer_assignment_version_parses_known_fields(version: int) -> None:
    body = encode_assignment(Assignment(partitions=(("t", (1, 2)),), user_data=None))[2:]
    decoded = decode_assignment(i16(version) + body + b"\x01\x02\x03")
    assert decoded == Assignment(partitions=(("t", (1, 2)),), user_data=None, version=version)


def test_negative_nullable_lengths_mean_null() -> None:
    # Java's generated readers treat every negative length of a nullable field as null.
    sub = i16(3) + i32(0) + i32(-7) + i32(0) + i32(-1) + i16(-5)
    assert decode_subscription(sub) == Subscription(topics=(), version=3)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(i16(-1) + i32(0) + i32(-1), id="negative-version"),
        pytest.param(i16(0) + i32(-1) + i32(-1), id="null-topics-array"),
        pytest.param(i16(0) + i32(1) + i16(-1) + i32(-1), id="null-topic-name"),
        pytest.param(i16(0) + i32(1) + i16(2) + b"\xff\xfe" + i32(-1), id="invalid-utf8"),
        pytest.param(i16(0) + i32(2**31 - 1) + string("a"), id="huge-count"),
        pytest.param(i16(1) + i32(0) + i32(-1) + b"\x00\x00", id="v1-short-owned"),
        pytest.param(i16(1) + i32(0) + i32(-1) + i32(1) + string("t") + i32(-1), id="null-parts"),
        pytest.param(i16(2) + i32(0) + i32(-1) + i32(0) + b"\x00\x00", id="short-generation"),
        pytest.param(i16(3) + i32(0) + i32(-1) + i32(0) + i32(1) + i16(4) + b"ab", id="short-rack"),
        pytest.param(b"\x00", id="one-byte"),
    ],
)
def test_malformed_subscription(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_subscription(data)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\x00", id="one-byte"),
        pytest.param(i16(-3) + i32(0) + i32(-1), id="negative-version"),
        pytest.param(i16(0), id="version-only"),
        pytest.param(i16(0) + i32(-1) + i32(-1), id="null-partitions-array"),
        pytest.param(i16(0) + i32(0), id="missing-user-data"),
        pytest.param(i16(0) + i32(0) + i32(5) + b"abc", id="short-user-data"),
    ],
)
def test_malformed_assignment(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_assignment(data)


@pytest.mark.parametrize("version", [-1, 4, 100])
def test_encode_rejects_unknown_versions(version: int) -> None:
    with pytest.raises(ValueError):
        encode_subscription(Subscription(topics=()), version)
    with pytest.raises(ValueError):
        encode_assignment(Assignment(), version)


def test_encode_rejects_values_that_do_not_fit() -> None:
    with pytest.raises(ValueError):
        encode_subscription(Subscription(topics=("x" * 40000,)))
    with pytest.raises(ValueError):
        encode_subscription(Subscription(topics=(), generation_id=2**31))
    with pytest.raises(ValueError):
        encode_assignment(Assignment(partitions=(("t", (2**31,)),)))


def test_assignment_mapping_helpers() -> None:
    a = Assignment.from_mapping({"b": [2, 0], "a": [1], "empty": []}, user_data=b"u")
    assert a.partitions == (("a", (1,)), ("b", (0, 2)))
    assert a.user_data == b"u"
    merged = Assignment(partitions=(("t", (3, 1)), ("u", (0,)), ("t", (1, 2))))
    assert merged.as_mapping() == {"t": [1, 2, 3], "u": [0]}


# ----------------------------------------------------------------------------- properties


@given(subscriptions, versions)
def test_subscription_round_trip(sub: Subscription, version: int) -> None:
    assert decode_subscription(encode_subscription(sub, version)) == as_version(sub, version)


@given(assignments, versions)
def test_assignment_round_trip(a: Assignment, version: int) -> None:
    decoded = decode_assignment(encode_assignment(a, version))
    assert decoded == dataclasses.replace(a, version=version)


@given(subscriptions, versions, st.binary(max_size=16))
def test_subscription_trailing_bytes_ignored(sub: Subscription, version: int, tail: bytes) -> None:
    data = encode_subscription(sub, version) + tail
    assert decode_subscription(data) == as_version(sub, version)


@given(assignments, versions, st.binary(max_size=16))
def test_assignment_trailing_bytes_ignored(a: Assignment, version: int, tail: bytes) -> None:
    decoded = decode_assignment(encode_assignment(a, version) + tail)
    assert decoded == dataclasses.replace(a, version=version)


@given(subscriptions, versions, st.data())
def test_truncated_subscription_raises(
    sub: Subscription, version: int, data: st.DataObject
) -> None:
    full = encode_subscription(sub, version)
    cut = data.draw(st.integers(0, len(full) - 1))
    if version >= 1 and cut == len(encode_subscription(sub, 0)):
        # Cut right after the version-0 fields: kafka-go's truncated version 1,
        # read as version 0 on purpose.
        assert decode_subscription(full[:cut]) == as_version(sub, 0)
        return
    with pytest.raises(ProtocolError):
        decode_subscription(full[:cut])


@given(assignments, versions, st.data())
def test_truncated_assignment_raises(a: Assignment, version: int, data: st.DataObject) -> None:
    full = encode_assignment(a, version)
    cut = data.draw(st.integers(1, len(full) - 1))
    with pytest.raises(ProtocolError):
        decode_assignment(full[:cut])


@given(st.binary(max_size=200))
def test_garbage_subscription_only_raises_protocol_error(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_subscription(data)


@given(st.binary(max_size=200))
def test_garbage_assignment_only_raises_protocol_error(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_assignment(data)


@given(subscriptions, versions, st.data())
def test_corrupted_subscription_only_raises_protocol_error(
    sub: Subscription, version: int, data: st.DataObject
) -> None:
    raw = bytearray(encode_subscription(sub, version))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] = data.draw(st.integers(0, 255))
    with contextlib.suppress(ProtocolError):
        decode_subscription(bytes(raw))


# ----------------------------------------------------------------------------- kio oracle


def _kio_bytes(module: str, name: str, version: int, **values: Any) -> bytes:
    mod = importlib.import_module(f"kio.schema.{module}.v{version}.data")
    cls = getattr(mod, name)
    entity = cls(**values)
    buf = io.BytesIO()
    entity_writer(cls)(buf, entity)
    return struct.pack(">h", version) + buf.getvalue()


def _kio_tps(module: str, version: int, groups: TopicPartitions) -> tuple[Any, ...]:
    tp = importlib.import_module(f"kio.schema.{module}.v{version}.data").TopicPartition
    return tuple(tp(topic=topic, partitions=parts) for topic, parts in groups)


@given(subscriptions, versions)
def test_subscription_matches_kio(sub: Subscription, version: int) -> None:
    module = "consumer_protocol_subscription"
    fields: dict[str, Any] = {"topics": sub.topics, "user_data": sub.user_data}
    if version >= 1:
        fields["owned_partitions"] = _kio_tps(module, version, sub.owned_partitions)
    if version >= 2:
        fields["generation_id"] = sub.generation_id
    if version >= 3:
        fields["rack_id"] = sub.rack
    expected = _kio_bytes(module, "ConsumerProtocolSubscription", version, **fields)
    assert encode_subscription(sub, version) == expected


@given(assignments, versions)
def test_assignment_matches_kio(a: Assignment, version: int) -> None:
    module = "consumer_protocol_assignment"
    expected = _kio_bytes(
        module,
        "ConsumerProtocolAssignment",
        version,
        assigned_partitions=_kio_tps(module, version, a.partitions),
        user_data=a.user_data,
    )
    assert encode_assignment(a, version) == expected
