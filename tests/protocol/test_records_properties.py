"""Property tests of the RecordBatch v2 codec: round trips and hostile input.

Hostile-input properties assert that decoding only ever raises
:class:`~gengroup._errors.ProtocolError` (or its subclass
:class:`~gengroup._errors.CorruptRecordError`) and finishes well within the
hypothesis deadline.
"""

from __future__ import annotations

import datetime

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gengroup._errors import CorruptRecordError, ProtocolError
from gengroup.protocol.records import (
    Compression,
    ControlType,
    RecordBatch,
    RecordInput,
    decode_batches,
    decode_batches_partial,
    encode_batch,
    encode_control_batch,
)
from tests.protocol.test_records import rebuild, xerial

# Every test runs with the compiled and the pure-Python record loop (conftest.py).
pytestmark = pytest.mark.usefixtures("record_loop")

SETTINGS = settings(
    max_examples=60,
    deadline=datetime.timedelta(seconds=2),
    suppress_health_check=[HealthCheck.too_slow],
)

INT64 = st.integers(-(2**63), 2**63 - 1)
small_bytes = st.binary(max_size=40)
nullable = st.none() | small_bytes
headers = st.lists(st.tuples(st.text(max_size=8), nullable), max_size=3)
# Any two timestamps of a batch differ by less than 2**63: the delta is a signed varlong.
timestamps = st.integers(-1, 2**45) | st.integers(-(2**62), 2**62 - 1)
records = st.lists(st.tuples(nullable, nullable, headers, timestamps), min_size=1, max_size=12)
codecs = st.sampled_from(list(Compression))


@st.composite
def batch_specs(draw: st.DrawFn) -> tuple[list[RecordInput], dict[str, object]]:
    items: list[RecordInput] = list(draw(records))
    options: dict[str, object] = {
        "base_offset": draw(st.integers(0, 2**62)),
        "compression": draw(codecs),
        "producer_id": draw(st.integers(-1, 2**63 - 1)),
        "producer_epoch": draw(st.integers(-1, 2**15 - 1)),
        "base_sequence": draw(st.integers(-1, 2**31 - 1)),
        "transactional": draw(st.booleans()),
        "partition_leader_epoch": draw(st.integers(-1, 2**31 - 1)),
        "timestamp_type": draw(st.sampled_from([0, 1])),
    }
    return items, options


@st.composite
def valid_streams(draw: st.DrawFn) -> bytes:
    """One to three encoded batches (possibly a control batch), concatenated."""
    parts = []
    offset = 0
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 4)) == 0:
            kind = draw(st.sampled_from([ControlType.COMMIT, ControlType.ABORT]))
            parts.append(
                encode_control_batch(
                    kind, producer_id=5, producer_epoch=0, timestamp=0, base_offset=offset
                )
            )
            offset += 1
        else:
            items = draw(records)
            codec = draw(codecs)
            parts.append(encode_batch(items, base_offset=offset, compression=codec))
            offset += len(items)
    return b"".join(parts)


def decode_hostile(data: bytes, verify_crc: bool) -> list[RecordBatch] | None:
    """Decode, allowing only ProtocolError (CorruptRecordError is a subclass)."""
    try:
        batches, consumed = decode_batches_partial(
            data, verify_crc=verify_crc, max_decompressed_size=1 << 20
        )
    except ProtocolError:
        return None
    assert 0 <= consumed <= len(data)
    return batches


@SETTINGS
@given(spec=batch_specs())
def test_round_trip(spec: tuple[list[RecordInput], dict[str, object]]) -> None:
    items, options = spec
    data = encode_batch(items, **options)  # type: ignore[arg-type]
    batches, consumed = decode_batches_partial(data)
    assert consumed == len(data)
    (batch,) = batches
    base_offset = options["base_offset"]
    assert isinstance(base_offset, int)
    max_ts = max(item[3] for item in items)
    assert batch.base_offset == base_offset
    assert batch.next_offset == base_offset + len(items)
    assert batch.compression == options["compression"]
    assert batch.timestamp_type == options["timestamp_type"]
    assert batch.is_transactional == options["transactional"]
    assert batch.producer_id == options["producer_id"]
    assert batch.producer_epoch == options["producer_epoch"]
    assert batch.base_sequence == options["base_sequence"]
    assert batch.partition_leader_epoch == options["partition_leader_epoch"]
    assert batch.max_timestamp == max_ts
    assert len(batch.records) == len(items)
    for i, (record, (key, value, hdrs, ts)) in enumerate(zip(batch.records, items, strict=True)):
        assert record.offset == base_offset + i
        assert record.timestamp == (max_ts if options["timestamp_type"] else ts)
        assert record.key == key
        assert record.value == value
        assert record.headers == tuple(hdrs)


@SETTINGS
@given(data=st.binary(max_size=300), verify_crc=st.booleans())
def test_arbitrary_bytes_only_raise_protocol_errors(data: bytes, verify_crc: bool) -> None:
    decode_hostile(data, verify_crc)


@SETTINGS
@given(
    header=st.binary(min_size=61, max_size=61),
    body=st.binary(max_size=200),
    verify_crc=st.booleans(),
)
def test_arbitrary_batches_with_plausible_framing(
    header: bytes, body: bytes, verify_crc: bool
) -> None:
    # Magic 2 and a consistent length get random bytes past the framing checks.
    data = bytearray(header + body)
    data[8:12] = (49 + len(body)).to_bytes(4, "big")
    data[16] = 2
    decode_hostile(bytes(data), verify_crc)


@SETTINGS
@given(stream=valid_streams(), data=st.data())
def test_truncations_return_a_prefix_of_the_batches(stream: bytes, data: st.DataObject) -> None:
    full, consumed = decode_batches_partial(stream)
    assert consumed == len(stream)
    cut = data.draw(st.integers(0, len(stream)))
    batches, used = decode_batches_partial(stream[:cut])
    assert used <= cut
    assert batches == full[: len(batches)]
    assert used == sum(len(encoded) for encoded in _split(stream)[: len(batches)])


def _split(stream: bytes) -> list[bytes]:
    parts = []
    pos = 0
    while pos < len(stream):
        end = pos + 12 + int.from_bytes(stream[pos + 8 : pos + 12], "big")
        parts.append(stream[pos:end])
        pos = end
    return parts


@SETTINGS
@given(stream=valid_streams(), data=st.data(), verify_crc=st.booleans())
def test_bit_flips_only_raise_protocol_errors(
    stream: bytes, data: st.DataObject, verify_crc: bool
) -> None:
    mutated = bytearray(stream)
    flips = data.draw(st.lists(st.integers(0, len(stream) * 8 - 1), min_size=1, max_size=4))
    for bit in flips:
        mutated[bit // 8] ^= 1 << (bit % 8)
    decode_hostile(bytes(mutated), verify_crc)


@SETTINGS
@given(stream=valid_streams(), data=st.data())
def test_crc_catches_flips_in_the_checked_region(stream: bytes, data: st.DataObject) -> None:
    first = _split(stream)[0]
    bit = data.draw(st.integers(21 * 8, len(first) * 8 - 1))
    mutated = bytearray(stream)
    mutated[bit // 8] ^= 1 << (bit % 8)
    try:
        decode_batches(bytes(mutated))
    except CorruptRecordError:
        return
    raise AssertionError("a flipped bit inside the CRC-covered region went unnoticed")


@SETTINGS
@given(
    items=records,
    codec=codecs,
    data=st.data(),
)
def test_mutated_record_bodies_behind_a_valid_crc(
    items: list[RecordInput], codec: Compression, data: st.DataObject
) -> None:
    # Corrupt the (uncompressed) records, then recompress and fix the CRC, so
    # the record parser itself sees hostile bytes even with verify_crc=True.
    plain = encode_batch(items)
    body = bytearray(plain[61:])
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(body) - 1))
        body[position] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        body = body[: data.draw(st.integers(0, len(body)))]
    raw = bytes(body)
    if codec == Compression.NONE:
        payload = raw
    elif codec == Compression.SNAPPY and data.draw(st.booleans()):
        payload = xerial(raw, data.draw(st.integers(1, 64)))
    elif codec == Compression.SNAPPY:
        payload = bytes(cramjam.snappy.compress_raw(raw))
    elif codec == Compression.GZIP:
        payload = bytes(cramjam.gzip.compress(raw))
    elif codec == Compression.LZ4:
        payload = bytes(cramjam.lz4.compress(raw))
    else:
        payload = bytes(cramjam.zstd.compress(raw))
    count = data.draw(st.sampled_from([len(items), 0, 1, 2**31 - 1, -5]))
    decode_hostile(rebuild(plain, payload=payload, attributes=int(codec), count=count), True)


@SETTINGS
@given(
    stream=valid_streams(),
    payload=st.binary(min_size=1, max_size=64),
    codec=st.sampled_from(
        [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
    ),
)
def test_garbage_compressed_payloads(stream: bytes, payload: bytes, codec: Compression) -> None:
    first = _split(stream)[0]
    for candidate in (payload, b"\x82SNAPPY\x00" + payload):
        decode_hostile(rebuild(first, payload=candidate, attributes=int(codec)), True)
