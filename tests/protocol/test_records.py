"""Tests of the RecordBatch v2 codec in :mod:`gengroup.protocol.records`."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import cramjam
import pytest
from crc32c import crc32c
from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch, Record as KioRecord, RecordHeader as KioHeader
from kio.records.writers import write_new_batch
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from gengroup._errors import CorruptRecordError, ProtocolError
from gengroup.protocol.compression import compress
from gengroup.protocol.records import (
    Compression,
    ControlType,
    NewRecord,
    Record,
    RecordBatch,
    RecordInput,
    TimestampType,
    decode_batches,
    decode_batches_partial,
    encode_batch,
    encode_control_batch,
    with_base_offset,
)

TS = 1_700_000_000_123

SAMPLE: list[RecordInput] = [
    (b"key", b"value", [("h1", b"v1"), ("h2", None)], TS),
    (None, None, (), TS + 1),
    (b"", b"", [("", b"")], TS - 5),
    (b"k" * 300, b"v" * 70_000, [("ключ-😀", b"\x00\xff"), ("ascii", b"x" * 200)], TS + 70_000),
    (b"only-key", None, (), TS),
    (None, b"only-value", [("dup", b"1"), ("dup", b"2")], 0),
]


# Every test runs with the compiled and the pure-Python record loop (conftest.py).
pytestmark = pytest.mark.usefixtures("record_loop")


def rebuild(
    batch: bytes,
    *,
    payload: bytes | None = None,
    attributes: int | None = None,
    count: int | None = None,
    magic: int | None = None,
) -> bytes:
    """Replace parts of an encoded batch and fix its length and CRC."""
    header = bytearray(batch[:61])
    body = batch[61:] if payload is None else payload
    if attributes is not None:
        struct.pack_into(">h", header, 21, attributes)
    if count is not None:
        struct.pack_into(">i", header, 57, count)
    if magic is not None:
        struct.pack_into(">b", header, 16, magic)
    struct.pack_into(">i", header, 8, 49 + len(body))
    struct.pack_into(">I", header, 17, crc32c(bytes(header[21:]) + body))
    return bytes(header) + body


def expected(records: Sequence[RecordInput], base_offset: int = 0) -> list[Record]:
    return [
        Record(base_offset + i, ts, key, value, tuple(headers))
        for i, (key, value, headers, ts) in enumerate(records)
    ]


@pytest.mark.parametrize("codec", list(Compression))
def test_round_trip_every_codec(codec: Compression) -> None:
    data = encode_batch(SAMPLE, base_offset=42, compression=codec)
    (batch,) = decode_batches(data)
    assert batch.records == expected(SAMPLE, 42)
    assert batch.compression is codec
    assert batch.magic == 2
    assert batch.base_offset == 42
    assert batch.last_offset_delta == len(SAMPLE) - 1
    assert batch.last_offset == 42 + len(SAMPLE) - 1
    assert batch.next_offset == 42 + len(SAMPLE)
    assert batch.base_timestamp == TS
    assert batch.max_timestamp == TS + 70_000
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert not batch.is_transactional
    assert not batch.is_control
    assert batch.control_type is None
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert batch.partition_leader_epoch == -1


@pytest.mark.parametrize("codec", list(Compression))
def test_round_trip_accepts_bytearray_and_memoryview(codec: Compression) -> None:
    data = encode_batch(SAMPLE, compression=codec)
    padded = b"xx" + data + b"yy"
    assert decode_batches(bytearray(data))[0].records == expected(SAMPLE)
    assert decode_batches(memoryview(padded)[2:-2])[0].records == expected(SAMPLE)


def test_new_record_and_timestamps_are_exact_milliseconds() -> None:
    records = [
        NewRecord(b"a", b"1", (), 1_700_000_000_123),
        NewRecord(b"b", b"2", (), 1_700_000_000_001),
        NewRecord(b"c", b"3", (), -1),
        NewRecord(b"d", b"4", (), 2**62),
    ]
    (batch,) = decode_batches(encode_batch(records))
    assert [r.timestamp for r in batch.records] == [r.timestamp for r in records]
    assert batch.max_timestamp == 2**62


def test_multiple_batches_concatenated() -> None:
    parts = [
        encode_batch(SAMPLE[:2], base_offset=0),
        encode_batch(SAMPLE[2:4], base_offset=2, compression=Compression.ZSTD),
        encode_control_batch(
            ControlType.COMMIT, producer_id=7, producer_epoch=3, timestamp=TS, base_offset=4
        ),
        encode_batch(SAMPLE[4:], base_offset=5, compression=Compression.LZ4),
    ]
    data = b"".join(parts)
    batches, consumed = decode_batches_partial(data)
    assert consumed == len(data)
    assert [b.base_offset for b in batches] == [0, 2, 4, 5]
    assert [b.next_offset for b in batches] == [2, 4, 5, 7]
    records = [r for b in batches if not b.is_control for r in b.records]
    assert records == expected(SAMPLE[:4]) + expected(SAMPLE[4:], 5)


@pytest.mark.parametrize("kind", [ControlType.COMMIT, ControlType.ABORT])
def test_control_batches(kind: ControlType) -> None:
    data = encode_control_batch(
        kind,
        producer_id=1234,
        producer_epoch=5,
        timestamp=TS,
        base_offset=99,
        coordinator_epoch=17,
        partition_leader_epoch=3,
    )
    (batch,) = decode_batches(data)
    assert batch.is_control
    assert batch.is_transactional
    assert batch.control_type is kind
    assert batch.producer_id == 1234
    assert batch.producer_epoch == 5
    assert batch.partition_leader_epoch == 3
    assert batch.next_offset == 100
    (record,) = batch.records
    assert record.offset == 99
    assert record.key == struct.pack(">hh", 0, kind)
    assert record.value == struct.pack(">hi", 0, 17)


def test_control_type_unknown_and_invalid_marker_type() -> None:
    data = encode_batch([(struct.pack(">hh", 0, 7), b"", (), TS)], control=True)
    assert decode_batches(data)[0].control_type is ControlType.UNKNOWN
    with pytest.raises(ValueError):
        encode_control_batch(ControlType.UNKNOWN, producer_id=1, producer_epoch=0, timestamp=TS)


def test_control_batch_without_control_key_is_corrupt() -> None:
    data = encode_batch([(b"x", b"", (), TS)], control=True)
    with pytest.raises(CorruptRecordError):
        decode_batches(data)


def test_transactional_and_idempotent_fields() -> None:
    data = encode_batch(
        SAMPLE[:3],
        producer_id=2**40,
        producer_epoch=32767,
        base_sequence=2**31 - 10,
        transactional=True,
        partition_leader_epoch=12,
    )
    (batch,) = decode_batches(data)
    assert batch.is_transactional
    assert not batch.is_control
    assert batch.control_type is None
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        2**40,
        32767,
        2**31 - 10,
    )
    assert batch.partition_leader_epoch == 12


@pytest.mark.parametrize("codec", list(Compression))
def test_log_append_time_uses_max_timestamp(codec: Compression) -> None:
    append_time = 1_800_000_000_555
    data = encode_batch(
        SAMPLE,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        max_timestamp=append_time,
        compression=codec,
    )
    (batch,) = decode_batches(data)
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.max_timestamp == append_time
    assert [r.timestamp for r in batch.records] == [append_time] * len(SAMPLE)


def test_compacted_and_empty_batches() -> None:
    data = encode_batch(SAMPLE[:2], base_offset=10, last_offset_delta=9)
    (batch,) = decode_batches(data)
    assert [r.offset for r in batch.records] == [10, 11]
    assert batch.next_offset == 20
    empty = encode_batch([], base_offset=30, last_offset_delta=4, max_timestamp=TS)
    (batch,) = decode_batches(empty)
    assert batch.records == []
    assert batch.next_offset == 35
    # An empty batch carrying a compression codec and no payload is accepted too.
    (batch,) = decode_batches(rebuild(empty, attributes=int(Compression.ZSTD)))
    assert batch.records == []
    with pytest.raises(ValueError):
        encode_batch([])
    with pytest.raises(ValueError):
        encode_batch(SAMPLE[:2], last_offset_delta=0)


def test_with_base_offset_keeps_crc_valid() -> None:
    data = with_base_offset(encode_batch(SAMPLE[:2]), 1000)
    (batch,) = decode_batches(data)
    assert [r.offset for r in batch.records] == [1000, 1001]
    with pytest.raises(ValueError):
        with_base_offset(b"short", 1)


def test_encode_rejects_bad_input() -> None:
    with pytest.raises(TypeError):
        encode_batch([("text", b"v", (), TS)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        encode_batch([(b"k", b"v", [(b"bytes-key", b"v")], TS)])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        encode_batch(SAMPLE[:1], producer_epoch=2**15)
    with pytest.raises(ValueError):
        encode_batch([(b"k", b"v", (), 2**63)])
    with pytest.raises(ValueError):
        encode_batch(SAMPLE[:1], timestamp_type=2)


# ---------------------------------------------------------- header names not UTF-8

# A header name of a record written by segmentio/kafka-go, whose string keys
# hold any bytes; Kafka does not check header names.
GO_HEADER_NAME = b"\xff\xfe-trace"


def batch_with_header_name(
    name: bytes, codec: Compression = Compression.NONE, *, base_offset: int = 0
) -> bytes:
    """Three records; the middle one's header is named by the raw bytes ``name``.

    ``encode_batch`` takes str names only: a placeholder of the same length is
    swapped for ``name`` in the records, then they are compressed.
    """
    placeholder = b"#" * len(name)
    plain = encode_batch(
        [
            (None, b"before", [("ok", b"1")], TS),
            (None, b"binary-header-name", [(placeholder.decode(), b"x")], TS),
            (None, b"after", (), TS),
        ],
        base_offset=base_offset,
    )
    assert plain[61:].count(placeholder) == 1
    body = plain[61:].replace(placeholder, name)
    payload = body if codec is Compression.NONE else compress(codec, body)
    return rebuild(plain, payload=payload, attributes=int(codec))


@pytest.mark.parametrize("codec", list(Compression))
def test_a_header_name_that_is_not_utf8_reads_as_java_reads_it(codec: Compression) -> None:
    """Every record of the batch is read, and the bad bytes of the name are
    U+FFFD, as in the Java consumer. The whole batch used to be refused as
    CorruptRecordError (so were the good records around it, at every retry)."""
    (batch,) = decode_batches(batch_with_header_name(GO_HEADER_NAME, codec, base_offset=5))
    assert batch.records == [
        Record(5, TS, None, b"before", (("ok", b"1"),)),
        Record(6, TS, None, b"binary-header-name", (("\ufffd\ufffd-trace", b"x"),)),
        Record(7, TS, None, b"after", ()),
    ]


@pytest.mark.parametrize(
    "name",
    [
        b"\xff",
        b"\x80",
        b"\xc0\x80",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"a\xe2\x82",
        b"\xe2\x28\xa1",
    ],
)
def test_header_names_decode_as_python_replaces(name: bytes) -> None:
    """Overlong forms, surrogates, code points above U+10FFFF, cut-short and
    bad sequences: both record loops give what ``bytes.decode(errors="replace")``
    gives, a str that encodes to UTF-8 again (so a record read can be sent again)."""
    (batch,) = decode_batches(batch_with_header_name(name))
    ((got, _),) = batch.records[1].headers
    assert got == name.decode("utf-8", "replace")
    assert "\ufffd" in got
    assert got.encode() == got.encode("utf-8", "strict")


def test_encode_refuses_a_header_name_that_is_not_encodable() -> None:
    """A str name with a lone surrogate (what ``surrogateescape`` makes of bad
    bytes) cannot be written: encoding fails rather than send other bytes."""
    with pytest.raises(UnicodeEncodeError):
        encode_batch([(None, b"v", [("\udcff\udcfe-trace", b"x")], TS)])


# ---------------------------------------------------------------- snappy framing


def xerial(data: bytes, block: int) -> bytes:
    """Frame ``data`` the way Java's xerial SnappyOutputStream does."""
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for start in range(0, len(data), block):
        compressed = bytes(cramjam.snappy.compress_raw(data[start : start + block]))
        out += struct.pack(">i", len(compressed)) + compressed
    return bytes(out)


@pytest.mark.parametrize("block", [1, 1000, 32 * 1024, 1 << 20])
def test_xerial_snappy_decode(block: int) -> None:
    plain = encode_batch(SAMPLE, base_offset=5)
    data = rebuild(plain, payload=xerial(plain[61:], block), attributes=int(Compression.SNAPPY))
    (batch,) = decode_batches(data)
    assert batch.compression is Compression.SNAPPY
    assert batch.records == expected(SAMPLE, 5)


def test_xerial_snappy_corrupt_framing() -> None:
    plain = encode_batch(SAMPLE[:2])
    framed = xerial(plain[61:], 1000)
    snappy = int(Compression.SNAPPY)
    for bad in (framed[:12], framed[:-1], framed[:16] + b"\xff\xff\xff\xff" + framed[20:]):
        with pytest.raises(CorruptRecordError):
            decode_batches(rebuild(plain, payload=bad, attributes=snappy))


# ------------------------------------------------------------ truncation and CRC


def test_truncated_last_batch_returns_complete_batches() -> None:
    first = encode_batch(SAMPLE[:2])
    second = encode_batch(SAMPLE[2:], base_offset=2, compression=Compression.GZIP)
    for cut in range(len(second)):
        data = first + second[:cut]
        batches, consumed = decode_batches_partial(data)
        assert consumed == len(first)
        assert [b.records for b in batches] == [expected(SAMPLE[:2])]
        assert decode_batches(data)[0].records == expected(SAMPLE[:2])
    assert decode_batches_partial(second[:100]) == ([], 0)
    assert decode_batches_partial(b"") == ([], 0)


def test_crc_mismatch_raises() -> None:
    data = bytearray(encode_batch([(b"k", b"abcdef", (), TS)]))
    data[data.index(b"abcdef")] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batches(data)
    # Without verification the (structurally valid) flipped value comes through.
    (batch,) = decode_batches(data, verify_crc=False)
    assert batch.records[0].value == b"`bcdef"


def test_crc_mismatch_in_a_middle_batch_raises() -> None:
    good = encode_batch(SAMPLE[:1])
    bad = bytearray(encode_batch(SAMPLE[1:2], base_offset=1))
    bad[30] ^= 0x40
    with pytest.raises(CorruptRecordError):
        decode_batches(good + bytes(bad) + good)


def test_unsupported_magic_and_codec() -> None:
    data = encode_batch(SAMPLE[:1])
    with pytest.raises(ProtocolError, match="magic"):
        decode_batches(rebuild(data, magic=1))
    for codec in (5, 6, 7):
        with pytest.raises(ProtocolError, match="unsupported"):
            decode_batches(rebuild(data, attributes=codec))


def test_batch_length_below_minimum() -> None:
    data = bytearray(encode_batch(SAMPLE[:1]))
    struct.pack_into(">i", data, 8, 48)
    with pytest.raises(CorruptRecordError):
        decode_batches(data)
    struct.pack_into(">i", data, 8, -1)
    with pytest.raises(CorruptRecordError):
        decode_batches(data)


def test_inconsistent_contents_raise() -> None:
    data = encode_batch(SAMPLE[:3])
    body = data[61:]
    cases = {
        "extra byte": body + b"\x00",
        "missing byte": body[:-1],
        "record length too short": b"\x02" + body[2:],
        "negative record length": b"\x03" + body[1:],
    }
    for name, payload in cases.items():
        with pytest.raises(CorruptRecordError):
            decode_batches(rebuild(data, payload=payload))
            pytest.fail(name)
    for count in (0, 2, 4, 2**31 - 1, -1):
        with pytest.raises(CorruptRecordError):
            decode_batches(rebuild(data, count=count))


def test_hostile_varints_and_headers() -> None:
    base = encode_batch([(None, None, (), 0)])
    # length, attributes, timestamp delta, offset delta, key, value, header count
    overlong = b"\xff" * 11
    payloads = [
        b"\x0e\x00" + overlong,  # timestamp delta longer than 10 bytes
        b"\x0e\x00\x00" + b"\xff\xff\xff\xff\x7f" + b"\x01\x01\x00",  # offset delta > 32 bits
        b"\x0e\x00\x00\x00\x01\x01" + b"\xfe\xff\xff\xff\x0f",  # 2**31 - 1 headers
        b"\x0c\x00\x00\x00\x01\x01\x02\x01\x01\x01",  # null header key
        b"\x0c\x00\x00\x00\x01\x01\x02\x00\x05\x01",  # negative header value length
        b"\x0e\x00\x00\x00\x05\x01\x00\x00\x00",  # negative key length
    ]
    for payload in payloads:
        with pytest.raises(CorruptRecordError):
            decode_batches(rebuild(base, payload=payload))


@pytest.mark.parametrize(
    "codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
)
def test_decompression_limit(codec: Compression) -> None:
    records = [(None, bytes(100_000), (), TS)] * 40  # ~4 MB of zeros
    data = encode_batch(records, compression=codec)
    assert len(data) < 1_000_000
    assert len(decode_batches(data)[0].records) == 40
    with pytest.raises(ProtocolError, match="max_decompressed_size"):
        decode_batches(data, max_decompressed_size=1_000_000)


def test_decompression_limit_xerial() -> None:
    plain = encode_batch([(None, bytes(100_000), (), TS)] * 40)
    data = rebuild(plain, payload=xerial(plain[61:], 1 << 16), attributes=2)
    assert len(decode_batches(data)[0].records) == 40
    with pytest.raises(ProtocolError, match="max_decompressed_size"):
        decode_batches(data, max_decompressed_size=1_000_000)


@pytest.mark.parametrize(
    "codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
)
def test_corrupt_compressed_payload(codec: Compression) -> None:
    data = encode_batch(SAMPLE, compression=codec)
    payload = bytearray(data[61:])
    payload[len(payload) // 2 :] = bytes(len(payload) - len(payload) // 2)
    with pytest.raises(CorruptRecordError):
        decode_batches(rebuild(data, payload=bytes(payload)))
    with pytest.raises(CorruptRecordError):
        decode_batches(rebuild(data, payload=b"garbage"))


def test_multi_member_gzip_outgrows_its_size_hint() -> None:
    # Java's GZIPInputStream reads concatenated members; the ISIZE trailer then
    # only covers the last member, so the first output buffer is too small.
    plain = encode_batch([(None, bytes(200_000), (), TS), (b"k", b"v" * 50, (), TS)])
    body = plain[61:]
    cut = len(body) - 10
    payload = bytes(cramjam.gzip.compress(body[:cut])) + bytes(cramjam.gzip.compress(body[cut:]))
    (batch,) = decode_batches(rebuild(plain, payload=payload, attributes=1))
    assert [r.value for r in batch.records] == [bytes(200_000), b"v" * 50]


@pytest.mark.parametrize("claimed", [0, 10, 2**32 - 1])
def test_lying_size_hints_are_only_hints(claimed: int) -> None:
    plain = encode_batch([(None, bytes(300_000), (), TS)])
    body = plain[61:]
    gz = bytearray(cramjam.gzip.compress(body))
    gz[-4:] = claimed.to_bytes(4, "little")  # the gzip ISIZE trailer
    zs = bytearray(cramjam.zstd.compress(body))
    assert zs[4] >> 6 == 2  # a 4-byte frame content size follows the descriptor
    zs[6:10] = claimed.to_bytes(4, "little")
    for codec, payload in ((Compression.GZIP, gz), (Compression.ZSTD, zs)):
        data = rebuild(plain, payload=bytes(payload), attributes=int(codec))
        try:
            (batch,) = decode_batches(data)
        except CorruptRecordError:
            continue  # the codec itself noticed the inconsistency
        assert batch.records[0].value == bytes(300_000)


# ------------------------------------------------------------------ kio interop


def test_kio_reads_what_we_write() -> None:
    data = encode_batch(SAMPLE, base_offset=7, producer_id=3, producer_epoch=1, base_sequence=0)
    kio_batch, size = read_batch(data, 0)
    assert size == len(data)
    assert [(r.offset, r.key, r.value) for r in kio_batch.records] == [
        (7 + i, key, value) for i, (key, value, _, _) in enumerate(SAMPLE)
    ]
    assert [tuple((h.key, h.value) for h in r.headers) for r in kio_batch.records] == [
        tuple((k.encode(), v) for k, v in headers) for _, _, headers, _ in SAMPLE
    ]


def test_we_read_what_kio_writes() -> None:
    import datetime
    import io

    stamp = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    records = tuple(
        KioRecord(
            attributes=i8(0),
            timestamp=TZAwareMicros.parse(stamp + datetime.timedelta(seconds=i)),
            offset=i64(100 + i),
            key=b"k%d" % i,
            value=None if i == 1 else b"v" * i,
            headers=(KioHeader(key=b"h", value=None),) if i == 2 else (),
        )
        for i in range(3)
    )
    buffer = io.BytesIO()
    write_new_batch(
        buffer,
        NewRecordBatch(
            producer_id=i64(-1),
            producer_epoch=i16(-1),
            base_sequence=i32(-1),
            records=records,
            attributes=i16(0),
        ),
    )
    (batch,) = decode_batches(buffer.getvalue())
    base = int(stamp.timestamp() * 1000)
    assert batch.records == [
        Record(100, base, b"k0", b"", ()),
        Record(101, base + 1000, b"k1", None, ()),
        Record(102, base + 2000, b"k2", b"vv", (("h", None),)),
    ]
    assert isinstance(batch, RecordBatch)
