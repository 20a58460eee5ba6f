"""The compiled record loop against its pure-Python reference.

:mod:`gengroup.protocol._speedups` must decode exactly what
``records._decode_records_py`` decodes: the same :class:`Record` objects for
valid input, and :class:`~gengroup._errors.CorruptRecordError` wherever the
Python loop rejects the input (which it does with ``CorruptRecordError``,
``IndexError`` or ``ValueError``, all translated to ``CorruptRecordError`` at
the batch boundary). The inputs are valid batches, near-valid record bodies
(lying lengths, over-long and overflowing varints, non-canonical encodings,
header keys that are not UTF-8) and random bytes, each decoded with junk around it
so that reading past ``end`` would show.
"""

from __future__ import annotations

import dataclasses
import datetime
import gc
import importlib
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gengroup._errors import CorruptRecordError, ProtocolError
from gengroup.protocol import records
from gengroup.protocol.records import Compression, Record, encode_batch, scan_batches

from .conftest import compiled_loop
from .fuzz import run, targets

SETTINGS = settings(
    max_examples=400,
    deadline=datetime.timedelta(seconds=2),
    suppress_health_check=[HealthCheck.too_slow],
)

INT64 = st.integers(-(2**63), 2**63 - 1)
nullable = st.none() | st.binary(max_size=30)
header_keys = st.text(max_size=6)
items = st.lists(
    st.tuples(
        nullable,
        nullable,
        st.lists(st.tuples(header_keys, nullable), max_size=3),
        st.integers(-(2**40), 2**40),
    ),
    max_size=8,
)

Outcome = tuple[str, Any]


def outcome(loop: Callable[..., list[Record]], *args: Any) -> Outcome:
    """What a record loop makes of its arguments: the records, or 'corrupt'."""
    try:
        result = loop(*args)
    except (CorruptRecordError, IndexError, ValueError) as exc:
        if loop is records._decode_records_py:
            return ("corrupt", None)
        assert type(exc) is CorruptRecordError, repr(exc)
        return ("corrupt", None)
    assert type(result) is list
    fields = []
    for record in result:
        assert type(record) is Record
        for value in (record.key, record.value):
            assert value is None or type(value) is bytes
        assert type(record.headers) is tuple
        for header in record.headers:
            assert type(header) is tuple and type(header[0]) is str
            assert header[1] is None or type(header[1]) is bytes
        assert type(record.offset) is int and type(record.timestamp) is int
        fields.append((record.offset, record.timestamp, record.key, record.value, record.headers))
    return ("ok", fields)


def assert_same(
    buf: bytes, pos: int, end: int, count: int, base_offset: int, base_timestamp: int
) -> Outcome:
    """Run both loops on the same arguments and require the same outcome."""
    args = (buf, pos, end, count, base_offset, base_timestamp)
    expected = outcome(records._decode_records_py, *args)
    actual = outcome(compiled_loop(), *args)  # type: ignore[arg-type]
    assert actual == expected, args
    return expected


def varint(value: int, padding: int = 0) -> bytes:
    """``value`` (unsigned, already zigzagged) as LEB128 with ``padding`` redundant bytes."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value == 0 and padding == 0:
            out.append(byte)
            return bytes(out)
        if value == 0:
            padding -= 1
        out.append(byte | 0x80)


def zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


@st.composite
def near_valid_record(draw: st.DrawFn) -> bytes:
    """One record: valid (possibly with redundant varint bytes) or, one time in
    three, with fields that lie about their lengths, overflow or are mutated."""
    lie = draw(st.integers(0, 2)) == 0

    def pick(honest: list[int], lying: list[int]) -> int:
        return draw(st.sampled_from(lying if lie else honest))

    def length_of(data: bytes | None) -> bytes:
        n = -1 if data is None else len(data)
        n += pick([0], [0, 0, 1, -1, -2, 2**30])
        raw = zigzag(n) if n >= -(2**31) else 3
        return varint(raw, pick([0, 0, 1, 2], [0, 1, 4, 9]))

    body = bytearray([draw(st.integers(0, 255))])  # attributes
    if lie:
        delta = draw(st.sampled_from([2**64 - 1, 2**64, 2**70]) | st.integers(0, 2**64 - 1))
        body += varint(delta, draw(st.sampled_from([0, 1, 3])))
        body += varint(draw(st.sampled_from([2**32 - 1, 2**32, 2**35])), pick([0], [0, 1, 2]))
    else:
        delta = draw(st.integers(0, 300) | st.integers(0, 2**64 - 1))
        body += varint(delta, 1 if delta < 2**56 and draw(st.booleans()) else 0)
        body += varint(draw(st.integers(0, 300) | st.integers(0, 2**32 - 1)))
    for _ in range(2):  # key, value
        data = draw(nullable)
        body += length_of(data)
        body += data or b""
    keys = st.binary(max_size=6) if lie else header_keys.map(str.encode)
    headers = draw(st.lists(st.tuples(keys, nullable), max_size=3))
    body += varint(zigzag(len(headers) + pick([0], [0, 1, -1, 100])))
    for key, value in headers:
        body += length_of(key) + key + length_of(value) + (value or b"")
    if lie:
        body += draw(st.sampled_from([b"", b"\x00", b"\xff"]))
        if draw(st.booleans()):  # a mutated byte
            body[draw(st.integers(0, len(body) - 1))] = draw(st.integers(0, 255))
    size = len(body) + pick([0], [0, 0, 1, -1, -len(body), 10])
    return varint(zigzag(size), pick([0, 0, 1], [0, 1, 5])) + bytes(body)


@SETTINGS
@given(
    body=st.lists(near_valid_record(), max_size=4).map(b"".join),
    count_delta=st.sampled_from([0, 0, 0, 1, -1, -100, 2**31 - 1]),
    junk=st.binary(max_size=12),
    base_offset=st.sampled_from([0, 2**63 - 1, -(2**63)]) | INT64,
    base_timestamp=st.sampled_from([0, -1, 2**63 - 1, -(2**63)]) | INT64,
)
def test_near_valid_bodies(
    body: bytes, count_delta: int, junk: bytes, base_offset: int, base_timestamp: int
) -> None:
    buf = junk + body + junk
    count = max(0, _records_in(body)) + count_delta
    assert_same(buf, len(junk), len(junk) + len(body), count, base_offset, base_timestamp)


def _records_in(body: bytes) -> int:
    """How many records a body's length prefixes claim (a count to test with)."""
    pos = n = 0
    while pos < len(body):
        raw = shift = 0
        while pos < len(body):
            byte = body[pos]
            pos += 1
            raw |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        pos += max(raw >> 1, 0) if not raw & 1 else 0
        n += 1
    return n


@SETTINGS
@given(
    batch=items,
    base_offset=st.sampled_from([0, 2**63 - 1, 2**63 - 3, -(2**63)]) | INT64,
    junk=st.binary(max_size=12),
    data=st.data(),
)
def test_valid_and_mutated_batches(
    batch: list[Any], base_offset: int, junk: bytes, data: st.DataObject
) -> None:
    encoded = encode_batch(batch, base_offset=base_offset, last_offset_delta=max(len(batch), 1))
    (raw,), _ = scan_batches(encoded)
    body = bytearray(encoded[61:])
    mutations = data.draw(st.integers(0, 3))
    for _ in range(mutations if body else 0):
        kind = data.draw(st.sampled_from(["set", "insert", "delete", "truncate"]))
        at = data.draw(st.integers(0, len(body) - 1)) if body else 0
        if kind == "set" and body:
            body[at] = data.draw(st.integers(0, 255))
        elif kind == "insert":
            body[at:at] = data.draw(st.binary(min_size=1, max_size=3))
        elif kind == "delete":
            del body[at : at + data.draw(st.integers(1, 3))]
        else:
            del body[at:]
    buf = junk + bytes(body) + junk
    result = assert_same(
        buf, len(junk), len(junk) + len(body), len(batch), base_offset, raw.base_timestamp
    )
    if not mutations:
        assert result[0] == "ok"
        assert len(result[1]) == len(batch)
        assert result[1][-1:] == [] or result[1][-1][0] == base_offset + len(batch) - 1


@SETTINGS
@given(
    buf=st.binary(max_size=200),
    data=st.data(),
    base_offset=INT64,
    base_timestamp=INT64,
)
def test_random_bytes(
    buf: bytes, data: st.DataObject, base_offset: int, base_timestamp: int
) -> None:
    pos = data.draw(st.integers(0, len(buf)))
    end = data.draw(st.integers(max(pos - 3, 0), len(buf) + 3))
    count = data.draw(st.integers(-2, 40))
    assert_same(buf, pos, end, count, base_offset, base_timestamp)


EDGE_CASES = [
    # (record body after its length prefix, what it tests)
    (b"\x00" + varint(2**64 - 1) + b"\x00\x01\x01\x00", "largest varlong timestamp delta"),
    (b"\x00" + b"\xff" * 9 + b"\x01" + b"\x00\x01\x01\x00", "varlong of exactly 64 bits"),
    (b"\x00" + b"\xff" * 9 + b"\x02" + b"\x00\x01\x01\x00", "varlong overflowing 64 bits"),
    (b"\x00" + b"\xff" * 10 + b"\x00" + b"\x00\x01\x01\x00", "varlong longer than 10 bytes"),
    (b"\x00\x00" + b"\xff\xff\xff\xff\x0f" + b"\x01\x01\x00", "varint of exactly 32 bits"),
    (b"\x00\x00" + b"\xff\xff\xff\xff\x1f" + b"\x01\x01\x00", "varint overflowing 32 bits"),
    (b"\x00\x00" + b"\x80\x80\x80\x80\x80\x00" + b"\x01\x01\x00", "varint longer than 5 bytes"),
    (b"\x00\x00\x00\x01\x01\x80\x00", "non-canonical zero header count"),
    (b"\x00\x00\x00\x01\x01\x02\x02\xff\x01", "header key that is not UTF-8"),
    (b"\x00\x00\x00\x01\x01\x02\x04hi\x01", "one header with a null value"),
    (b"\x00\x00\x00\x01\x01\x02\x01\x01", "null header key"),
    (b"\x00\x00\x00\x01\x01\x02\x04hi\x03", "negative header value length"),
    (b"\x00\x00\x00\x03\x01\x00", "negative key length"),
    (b"\x00\x00\x00\x01\x05\x00", "negative value length"),
    (b"\x00\x00\x00\x06ab\x01\x00", "key longer than its record"),
    (b"\x00\x00\x00\x01\x01\x01", "odd header count"),
    (b"\x00\x00\x00\x01\x01\x7e", "header count larger than the record"),
    (b"", "empty record"),
]


@pytest.mark.parametrize(("body", "what"), EDGE_CASES, ids=[w for _, w in EDGE_CASES])
@pytest.mark.parametrize("length_delta", [0, 1, -1])
def test_edge_cases(body: bytes, what: str, length_delta: int) -> None:
    encoded = varint(zigzag(len(body) + length_delta)) + body
    for tail in (b"", b"\x00" * 12, b"\xff" * 12):
        buf = encoded + tail
        assert_same(buf, 0, len(encoded), 1, 2**63 - 1, 2**63 - 1)
        assert_same(buf, 0, len(encoded), 1, 0, -(2**63))


def test_edge_cases_are_not_all_rejected() -> None:
    accepted = [
        what
        for body, what in EDGE_CASES
        if assert_same(varint(zigzag(len(body))) + body, 0, len(body) + 1, 1, 0, 0)[0] == "ok"
    ]
    assert accepted == [
        "largest varlong timestamp delta",
        "varlong of exactly 64 bits",
        "varint of exactly 32 bits",
        "non-canonical zero header count",
        "header key that is not UTF-8",  # read as U+FFFD, as Kafka's Java consumer does
        "one header with a null value",
    ]


def test_offsets_and_timestamps_beyond_int64_stay_exact() -> None:
    encoded = encode_batch(
        [(b"k", b"v", (), 2**62), (None, None, (), -(2**62))], base_offset=2**63 - 1
    )
    (raw,), _ = scan_batches(encoded)
    result = assert_same(encoded, 61, len(encoded), 2, 2**63 - 1, 2**63 - 1)
    assert result[0] == "ok"
    assert [r[0] for r in result[1]] == [2**63 - 1, 2**63]
    assert result[1][1][1] == 2**63 - 1 - 2**63
    assert raw.base_timestamp == 2**62


def test_the_compiled_loop_is_built_and_selected() -> None:
    # Fails, never skips, when the install did not compile the extension.
    module = importlib.import_module("gengroup.protocol._speedups")
    if not os.environ.get("GENGROUP_PURE_PYTHON"):
        assert records._decode_records is module.decode_records
    # it stores the dataclass's slots directly rather than calling __init__
    assert module.configure(records.Record, CorruptRecordError) is True


def test_frame_buffers_come_from_the_compiled_module_unless_pure_python() -> None:
    # A frame received in place needs a buffer of its size that it overwrites
    # whole: the compiled one skips zeroing it; the fallback is bytearray.
    from gengroup.protocol import framing

    module = importlib.import_module("gengroup.protocol._speedups")
    expected = bytearray if os.environ.get("GENGROUP_PURE_PYTHON") else module.new_buffer
    assert framing._new_buffer is expected
    made = module.new_buffer(3_000_000)
    assert type(made) is bytearray and len(made) == 3_000_000
    assert module.new_buffer(0) == bytearray()
    with pytest.raises(ValueError):
        module.new_buffer(-1)


def test_compiled_records_are_frozen_and_left_out_of_the_cyclic_gc() -> None:
    module = importlib.import_module("gengroup.protocol._speedups")
    encoded = encode_batch([(b"k", b"v", (("h", b"x"),), 1), (None, None, (), 2)])
    made = module.decode_records(encoded, 61, len(encoded), 2, 0, 0)
    assert [gc.is_tracked(record) for record in made] == [False, False]
    # The Python loop's records are tracked (it cannot untrack), and equal.
    reference = records._decode_records_py(encoded, 61, len(encoded), 2, 0, 0)
    assert all(gc.is_tracked(record) for record in reference)
    gc.collect()
    assert made == reference
    with pytest.raises(dataclasses.FrozenInstanceError):
        made[0].value = b"changed"  # type: ignore[misc]


def test_log_append_time_reaches_compiled_and_pure_records(record_loop: str) -> None:
    encoded = encode_batch(
        [(b"k", b"v", (), 5), (b"k", b"w", (), 6)],
        timestamp_type=records.TimestampType.LOG_APPEND_TIME,
        max_timestamp=99,
    )
    (raw,), _ = scan_batches(encoded)
    assert [r.timestamp for r in records.decode_raw([raw])] == [99, 99]


def test_pure_python_is_forced_by_the_environment() -> None:
    code = (
        "from gengroup.protocol import records as r;"
        "print(r._decode_records is r._decode_records_py)"
    )
    for env_value, expected in (("1", "True"), ("", "False")):
        env = {**os.environ, "GENGROUP_PURE_PYTHON": env_value}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == expected


def test_a_record_class_without_slots_is_built_through_its_constructor() -> None:
    module = importlib.import_module("gengroup.protocol._speedups")

    class Plain:
        def __init__(self, *fields: object) -> None:
            self.fields = fields

    try:
        assert module.configure(Plain, CorruptRecordError) is False
        (record,) = module.decode_records(b"\x0e\x00\x02\x02\x01\x02k\x00", 0, 8, 1, 5, 7)
        assert record.fields == (6, 8, None, b"k", ())
    finally:
        module.configure(records.Record, CorruptRecordError)


def test_record_fuzz_target(record_loop: str) -> None:
    (target,) = [t for t in targets(seeds_per_target=40, seed=20261124) if t.name == "records"]
    stats = run(target, 2_000, seed=1)
    assert stats.findings == [], "\n".join(stats.findings)
    assert stats.typed_errors > 0 and stats.decoded > 0, stats


@pytest.mark.parametrize("codec", list(Compression))
def test_protocol_errors_of_compressed_batches_are_unchanged(
    record_loop: str, codec: Compression
) -> None:
    encoded = encode_batch([(b"k", b"v" * 100, (), 1)], compression=codec)
    (raw,), _ = scan_batches(encoded)
    if codec == Compression.NONE:
        assert len(raw.decode(max_decompressed_size=10).records) == 1
    else:
        with pytest.raises(ProtocolError):
            raw.decode(max_decompressed_size=10)
