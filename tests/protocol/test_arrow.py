"""Batches decoded into Arrow tables: the compiled columns against the pure-Python path.

:func:`gengroup.protocol.arrow.batches_to_arrow` has two implementations: the
compiled ``arrow_columns`` of :mod:`gengroup.protocol._speedups`, which fills
the column buffers without a Python object per record, and the pure-Python
one, which builds the columns from the record loop's :class:`Record` objects.
Both must give identical tables (same schema, same values, valid buffers) and
reject exactly the same inputs with :class:`CorruptRecordError`. They are run
on record bodies that are valid, near-valid (lying lengths, overflowing
varints, invalid UTF-8) and random, and on whole batches, compressed or not,
valid and mutated, with every batch attribute the columns depend on.
"""

from __future__ import annotations

import importlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.ipc
import pytest
from hypothesis import given, strategies as st

from gengroup._errors import CorruptRecordError, DecompressionLimitExceeded, ProtocolError
from gengroup.protocol import arrow, records
from gengroup.protocol.records import (
    Compression,
    ControlType,
    Record,
    TimestampType,
    decode_raw,
    encode_batch,
    encode_control_batch,
    scan_batches,
    with_base_offset,
)

from .test_records import GO_HEADER_NAME, batch_with_header_name
from .test_speedups import (
    EDGE_CASES,
    INT64,
    SETTINGS,
    _records_in,
    items,
    near_valid_record,
    varint,
    zigzag,
)

INT64_MIN = -(2**63)
attributes = st.sampled_from([0, 0x08, 0x20, 0x28]) | st.integers(0, 0xFFFF)


def compiled_columns() -> Any:
    """The compiled column filler; fails the test if the extension is not built."""
    try:
        module = importlib.import_module("gengroup.protocol._speedups")
    except ImportError as exc:
        pytest.fail(f"the compiled decoder is not built ({exc}); reinstall with a C compiler")
    module.configure(records.Record, CorruptRecordError)
    return module.arrow_columns


@pytest.fixture
def pure_python() -> Iterator[None]:
    """Run the body with the pure-Python Arrow path and the pure-Python record loop."""
    saved = arrow._arrow_columns, records._decode_records
    arrow._arrow_columns = None
    records._decode_records = records._decode_records_py
    try:
        yield
    finally:
        arrow._arrow_columns, records._decode_records = saved


def both(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """``fn`` run with the compiled path and with the pure-Python path: (compiled, pure)."""
    saved = arrow._arrow_columns, records._decode_records
    try:
        arrow._arrow_columns = compiled_columns()
        compiled = outcome(fn, *args, **kwargs)
        arrow._arrow_columns = None
        records._decode_records = records._decode_records_py
        pure = outcome(fn, *args, **kwargs)
    finally:
        arrow._arrow_columns, records._decode_records = saved
    return compiled, pure


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """("ok", table), or the type of the gengroup error ``fn`` raised."""
    try:
        table = fn(*args, **kwargs)
    except ProtocolError as exc:
        return ("error", type(exc))
    assert isinstance(table, pa.Table)
    table.validate(full=True)
    assert table.schema == arrow.arrow_schema()
    return ("ok", table)


def plain(table: Any) -> list[dict[str, Any]]:
    """The rows, timestamps as integers (any int64 is one; not every one is a datetime)."""
    as_int = table.column("timestamp").cast(pa.int64())
    rows: list[dict[str, Any]] = table.set_column(1, "timestamp", as_int).to_pylist()
    return rows


def assert_identical(compiled: tuple[str, Any], pure: tuple[str, Any]) -> tuple[str, Any]:
    assert compiled[0] == pure[0], (compiled, pure)
    if compiled[0] == "ok":
        assert compiled[1].equals(pure[1]), (compiled[1], pure[1])
        assert plain(compiled[1]) == plain(pure[1])
    else:
        assert compiled[1] is pure[1]
    return compiled


# ---------------------------------------------------------------- record bodies


def reference_body(
    buf: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    attrs: int,
    max_timestamp: int,
    min_offset: int,
) -> Any:
    """What the record loop and ``_records_of`` make of a body, as a table."""
    try:
        decoded = records._decode_records_py(buf, pos, end, count, base_offset, base_timestamp)
    except (IndexError, ValueError) as exc:
        raise CorruptRecordError(repr(exc)) from exc
    for record in decoded:
        if attrs & 0x08:
            object.__setattr__(record, "timestamp", max_timestamp)  # as _records_of does
        if attrs & 0x20 and (record.key is None or len(record.key) < 4):
            raise CorruptRecordError("control record without a control key")
    arrow._check_int64(decoded)
    return arrow.records_to_arrow([r for r in decoded if r.offset >= min_offset])


def compiled_body(*segment: Any) -> Any:
    columns = compiled_columns()([segment])
    return pa.Table.from_batches([arrow._wrap(pa, arrow.arrow_schema(), columns)])


def assert_same_body(*segment: Any) -> tuple[str, Any]:
    return assert_identical(outcome(compiled_body, *segment), outcome(reference_body, *segment))


@SETTINGS
@given(
    body=st.lists(near_valid_record(), max_size=4).map(b"".join),
    count_delta=st.sampled_from([0, 0, 0, 1, -1, -100]),
    junk=st.binary(max_size=12),
    base_offset=st.sampled_from([0, 2**63 - 1, -(2**63)]) | INT64,
    base_timestamp=st.sampled_from([0, -1, 2**63 - 1, -(2**63)]) | INT64,
    attrs=attributes,
    max_timestamp=INT64,
    min_offset=st.sampled_from([INT64_MIN, 0, 1, 2**62]) | INT64,
)
def test_near_valid_bodies(
    body: bytes,
    count_delta: int,
    junk: bytes,
    base_offset: int,
    base_timestamp: int,
    attrs: int,
    max_timestamp: int,
    min_offset: int,
) -> None:
    buf = junk + body + junk
    count = max(0, _records_in(body)) + count_delta
    assert_same_body(
        buf,
        len(junk),
        len(junk) + len(body),
        count,
        base_offset,
        base_timestamp,
        attrs,
        max_timestamp,
        min_offset,
    )


@SETTINGS
@given(buf=st.binary(max_size=200), data=st.data(), base_offset=INT64, base_timestamp=INT64)
def test_random_bytes(
    buf: bytes, data: st.DataObject, base_offset: int, base_timestamp: int
) -> None:
    pos = data.draw(st.integers(0, len(buf)))
    end = data.draw(st.integers(max(pos - 3, 0), len(buf) + 3))
    count = data.draw(st.integers(-2, 40))
    attrs = data.draw(attributes)
    assert_same_body(buf, pos, end, count, base_offset, base_timestamp, attrs, 0, INT64_MIN)


@pytest.mark.parametrize(("body", "what"), EDGE_CASES, ids=[w for _, w in EDGE_CASES])
@pytest.mark.parametrize("length_delta", [0, 1, -1])
def test_edge_cases(body: bytes, what: str, length_delta: int) -> None:
    encoded = varint(zigzag(len(body) + length_delta)) + body
    for tail in (b"", b"\x00" * 12, b"\xff" * 12):
        buf = encoded + tail
        for base, ts in ((2**63 - 1, 2**63 - 1), (0, -(2**63)), (0, 0)):
            assert_same_body(buf, 0, len(encoded), 1, base, ts, 0, 0, INT64_MIN)


UTF8_KEYS = [
    b"",
    b"plain",
    "é€𝄞".encode(),
    b"\xc0\x80",  # overlong NUL
    b"\xc1\xbf",  # overlong
    b"\xe0\x80\xaf",  # overlong
    b"\xe0\xa0\x80",  # smallest 3-byte
    b"\xed\x9f\xbf",  # last before the surrogates
    b"\xed\xa0\x80",  # a surrogate
    b"\xef\xbf\xbf",
    b"\xf0\x8f\xbf\xbf",  # overlong 4-byte
    b"\xf0\x90\x80\x80",
    b"\xf4\x8f\xbf\xbf",  # U+10FFFF
    b"\xf4\x90\x80\x80",  # above U+10FFFF
    b"\xf5\x80\x80\x80",
    b"\xff",
    b"\x80",
    b"a\xe2\x82",  # cut short
    b"\xe2\x28\xa1",  # bad continuation
]


@pytest.mark.parametrize("name", UTF8_KEYS)
def test_header_keys_decode_as_python_replaces(name: bytes) -> None:
    """Both columns hold what the record loop reads: UTF-8 as it is, other
    bytes as U+FFFD (``errors="replace"``), and the record is kept."""
    record = (
        b"\x00\x00\x00\x01\x01\x02" + varint(zigzag(len(name))) + name + varint(zigzag(1)) + b"v"
    )
    body = varint(zigzag(len(record))) + record
    result = assert_same_body(body, 0, len(body), 1, 0, 0, 0, 0, INT64_MIN)
    assert result[0] == "ok"
    text = name.decode("utf-8", "replace")
    assert result[1].column("headers").to_pylist() == [[{"key": text, "value": b"v"}]]


@SETTINGS
@given(name=st.binary(max_size=8))
def test_random_header_keys(name: bytes) -> None:
    test_header_keys_decode_as_python_replaces(name)


@pytest.mark.parametrize("codec", list(Compression))
def test_a_header_name_that_is_not_utf8_keeps_its_batch_in_both_paths(
    codec: Compression,
) -> None:
    """A record whose header name is not UTF-8 between two good ones: the
    table holds the three records of ``decode_raw``, the name with U+FFFD, in
    both paths. The batch used to be CorruptRecordError in both."""
    raws, _ = scan_batches(batch_with_header_name(GO_HEADER_NAME, codec))
    compiled, pure = both(arrow.batches_to_arrow, raws)
    _, table = assert_identical(compiled, pure)
    assert table.column("value").to_pylist() == [b"before", b"binary-header-name", b"after"]
    assert table.column("headers").to_pylist() == [
        [{"key": "ok", "value": b"1"}],
        [{"key": "\ufffd\ufffd-trace", "value": b"x"}],
        [],
    ]
    assert plain(table) == plain(arrow.records_to_arrow(decode_raw(raws)))


# ---------------------------------------------------------------- whole batches

codecs = st.sampled_from(list(Compression))


@st.composite
def encoded_batches(draw: st.DrawFn) -> bytes:
    """Valid batches of any codec, with log-append time, control and empty batches."""
    out = []
    offset = draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["data", "data", "data", "control", "empty"]))
        if kind == "control":
            control = draw(st.sampled_from([ControlType.ABORT, ControlType.COMMIT]))
            out.append(
                encode_control_batch(
                    control, producer_id=1, producer_epoch=0, timestamp=5, base_offset=offset
                )
            )
            offset += 1
            continue
        batch = [] if kind == "empty" else draw(items)
        gap = draw(st.integers(0, 2))  # compaction removed the tail
        timestamp_type = draw(st.sampled_from(list(TimestampType)))
        out.append(
            encode_batch(
                batch,
                base_offset=offset,
                compression=draw(codecs),
                timestamp_type=timestamp_type,
                last_offset_delta=max(len(batch) - 1 + gap, 0),
                max_timestamp=draw(st.integers(-(2**40), 2**40)),
            )
        )
        offset += max(len(batch) + gap, 1)
    return b"".join(out)


@SETTINGS
@given(data=encoded_batches(), min_offset=st.none() | st.integers(0, 2**40 + 40))
def test_valid_batches_give_the_records_of_decode_raw(data: bytes, min_offset: int | None) -> None:
    raws, _ = scan_batches(data)
    compiled, pure = both(arrow.batches_to_arrow, raws, min_offset=min_offset)
    assert_identical(compiled, pure)
    expected = decode_raw(raws, min_offset=min_offset)
    assert compiled[0] == "ok"
    table = compiled[1]
    assert table.column("offset").to_pylist() == [r.offset for r in expected]
    assert table.column("key").to_pylist() == [r.key for r in expected]
    assert table.column("value").to_pylist() == [r.value for r in expected]
    assert table.column("headers").to_pylist() == [
        [{"key": k, "value": v} for k, v in r.headers] for r in expected
    ]
    timestamps = table.column("timestamp").cast(pa.int64()).to_pylist()
    assert timestamps == [r.timestamp for r in expected]


@SETTINGS
@given(data=encoded_batches(), mutations=st.lists(st.tuples(st.integers(0), st.integers(0, 255))))
def test_mutated_batches(data: bytes, mutations: list[tuple[int, int]]) -> None:
    buf = bytearray(data)
    for at, byte in mutations:
        if buf:
            buf[at % len(buf)] = byte
    try:
        raws, _ = scan_batches(bytes(buf), verify_crc=False)
    except ProtocolError:
        return
    assert_identical(*both(arrow.batches_to_arrow, raws, max_decompressed_size=4096))


def test_offsets_and_timestamps_beyond_int64_are_corrupt_in_both_paths() -> None:
    beyond = encode_batch([(b"k", b"v", (), 1), (None, None, (), 2)], base_offset=2**63 - 1)
    (raw,), _ = scan_batches(beyond)
    assert decode_raw([raw])[1].offset == 2**63  # the Record path keeps it
    assert both(arrow.batches_to_arrow, [raw]) == (("error", CorruptRecordError),) * 2
    # a timestamp delta past int64 (the encoder cannot make one): a hand-made body
    record = b"\x00" + varint(zigzag(1)) + b"\x00\x01\x01\x00"
    body = varint(zigzag(len(record))) + record
    late = (body, 0, len(body), 1, 0, 2**63 - 1)
    assert records._decode_records_py(*late)[0].timestamp == 2**63
    assert assert_same_body(*late, 0, 0, INT64_MIN) == ("error", CorruptRecordError)
    # ...unless the batch uses log-append time, whose timestamp replaces it
    result = assert_same_body(*late, 0x08, 7, INT64_MIN)
    assert result[0] == "ok"
    assert result[1].column("timestamp").cast(pa.int64()).to_pylist() == [7]


def test_an_earlier_corrupt_batch_is_reported_before_a_later_codec_error() -> None:
    bad = bytearray(encode_batch([(b"k", b"v", (), 1)], base_offset=0))
    bad[-1] = 0x7F  # the last byte (header count) lies
    huge = encode_batch([(b"k", b"v" * 5000, (), 1)], base_offset=1, compression=Compression.LZ4)
    raws, _ = scan_batches(bytes(bad) + huge, verify_crc=False)
    result = both(arrow.batches_to_arrow, raws, max_decompressed_size=1000)
    assert result == (("error", CorruptRecordError),) * 2
    (raw,) = raws[1:]
    result = both(arrow.batches_to_arrow, [raw], max_decompressed_size=1000)
    assert result == (("error", DecompressionLimitExceeded),) * 2
    # an offset beyond int64 counts as an error of the earlier batch too
    beyond = encode_batch([(b"k", b"v", (), 1)] * 2, base_offset=2**63 - 1)
    huge = with_base_offset(huge, 0)
    raws, _ = scan_batches(beyond + huge)
    result = both(arrow.batches_to_arrow, raws, max_decompressed_size=1000)
    assert result == (("error", CorruptRecordError),) * 2


def test_many_batches_become_several_chunks_with_the_same_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = b"".join(
        encode_batch([(b"k%d" % i, b"v" * i, [("h", None)], i)] * 3, base_offset=3 * i)
        for i in range(20)
    )
    raws, _ = scan_batches(data)
    whole = assert_identical(*both(arrow.batches_to_arrow, raws))[1]
    assert whole.column("offset").num_chunks == 1
    monkeypatch.setattr(arrow, "_CHUNK_BYTES", 200)
    chunked = assert_identical(*both(arrow.batches_to_arrow, raws))[1]
    assert chunked.column("offset").num_chunks > 5
    assert chunked.equals(whole)


def test_no_batches_give_an_empty_table() -> None:
    compiled, pure = assert_identical(*both(arrow.batches_to_arrow, []))
    assert compiled == "ok" and pure.num_rows == 0


def test_records_to_arrow_matches_the_schema_and_values() -> None:
    recs = [
        Record(3, 1_700_000_000_000, None, b"v", ()),
        Record(4, -5, b"k", None, (("a", b"1"), ("b", None))),
    ]
    table = arrow.records_to_arrow(recs)
    assert table.schema == arrow.arrow_schema()
    assert table.to_pydict()["headers"] == [
        [],
        [{"key": "a", "value": b"1"}, {"key": "b", "value": None}],
    ]
    with pytest.raises(CorruptRecordError):
        arrow.records_to_arrow([Record(2**63, 0, None, None, ())])


def test_min_offset_outside_int64_is_refused() -> None:
    with pytest.raises(ValueError, match="min_offset"):
        arrow.batches_to_arrow([], min_offset=2**63)


# ---------------------------------------------------------------- selection


def test_the_compiled_path_is_built_and_selected() -> None:
    # Fails, never skips, when the install did not compile the extension.
    columns = compiled_columns()
    if not os.environ.get("GENGROUP_PURE_PYTHON"):
        assert arrow._arrow_columns is columns


_IPC_OF_TABLE = """
import sys
from gengroup.protocol import arrow, records
from gengroup.protocol.records import Compression, encode_batch, scan_batches
import pyarrow as pa
data = b"".join(
    encode_batch([(b"k", b"v" * i, [("h", b"x")], 10 * i), (None, None, (), 0)],
                 base_offset=2 * i, compression=Compression(i % 5))
    for i in range(30)
)
raws, _ = scan_batches(data)
table = arrow.batches_to_arrow(raws, min_offset=3)
print("compiled" if arrow._arrow_columns else "pure", file=sys.stderr)
sink = pa.BufferOutputStream()
with pa.ipc.new_stream(sink, table.schema) as writer:
    writer.write_table(table)
sys.stdout.buffer.write(sink.getvalue().to_pybytes())
"""


def test_pure_python_is_forced_by_the_environment_and_gives_the_same_table() -> None:
    tables = {}
    for env_value, expected in (("1", "pure"), ("", "compiled")):
        env = {**os.environ, "GENGROUP_PURE_PYTHON": env_value}
        out = subprocess.run(
            [sys.executable, "-c", _IPC_OF_TABLE], env=env, capture_output=True, check=True
        )
        assert out.stderr.decode().strip() == expected
        tables[expected] = pyarrow.ipc.open_stream(io.BytesIO(out.stdout)).read_all()
    assert tables["pure"].num_rows == 57
    assert tables["pure"].equals(tables["compiled"])


def test_without_pyarrow_a_typed_error_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['pyarrow'] = None\n"
        "import gengroup\n"
        "from gengroup.protocol import arrow\n"
        "calls = [lambda: arrow.batches_to_arrow([]), arrow.arrow_schema,\n"
        "         lambda: gengroup.FetchedBatch('t', 0, [], 0, 0).to_arrow(),\n"
        "         lambda: gengroup.fetched_to_arrow([])]\n"
        "for call in calls:\n"
        "    try:\n"
        "        call()\n"
        "    except gengroup.MissingDependency as exc:\n"
        "        assert isinstance(exc, ImportError)\n"
        "        print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert len(lines) == 4
    assert all("pip install 'gengroup[arrow]'" in line for line in lines)


def test_importing_gengroup_does_not_import_pyarrow() -> None:
    code = "import sys, gengroup, gengroup.protocol.arrow; print('pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
