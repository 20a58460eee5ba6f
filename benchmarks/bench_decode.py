"""Benchmark gengroup's RecordBatch v2 decoder against kio's, on the same bytes.

Builds ``--records`` records (``--value-size``-byte values, 10-byte keys, no
headers) in batches of ``--batch-size`` records, encodes them once per codec
with :func:`gengroup.protocol.records.encode_batch`, then times, best of
``--repeat`` runs:

* ``gengroup``: :func:`gengroup.protocol.records.decode_batches` (CRC checked),
  with the compiled record loop (``gengroup.protocol._speedups``) when it is
  built; ``gengroup-py``: the same call with the pure-Python record loop
  (what ``GENGROUP_PURE_PYTHON=1`` selects).
* ``arrow``: :func:`gengroup.protocol.arrow.batches_to_arrow` after
  :func:`~gengroup.protocol.records.scan_batches` (CRC checked): the batches
  straight into one ``pyarrow.Table``, with the compiled column filler when it
  is built; ``arrow-py``: the same call on the pure-Python path (Records from
  the pure-Python loop, columns from ``pyarrow.array``).
* ``kio``: kio 0.6.5's ``kio.records.readers.read_batch`` (CRC checked). kio
  has no decompression, so for compressed codecs the peer is kio's
  ``read_record`` loop over the payload decompressed by cramjam, after a CRC
  check with the same crc32c package.

gengroup pauses the cyclic GC while it decodes (see the module's theory of
operation); kio does not. ``--no-gc`` disables the GC for the whole run, which
compares the two decoding loops alone.

Prints records/s for each; it asserts only that both decoders saw the same
number of records, never anything about time.

Run: ``.venv/bin/python benchmarks/bench_decode.py``
"""

from __future__ import annotations

import gc
import random
import struct
import time
from collections.abc import Callable
from functools import partial

import cramjam
from crc32c import crc32c
from kio.records.readers import read_batch, read_record
from kio.static.primitive import i64
from options import benchmark_parser

from gengroup.protocol import arrow, records
from gengroup.protocol.records import Compression, decode_batches, encode_batch, scan_batches

_HEADER = struct.Struct(">qiibIhiqqqhii")
_KIO_DECOMPRESS: dict[Compression, Callable[[memoryview], bytes]] = {
    Compression.LZ4: lambda b: bytes(cramjam.lz4.decompress(b)),
    Compression.ZSTD: lambda b: bytes(cramjam.zstd.decompress(b)),
    Compression.GZIP: lambda b: bytes(cramjam.gzip.decompress(b)),
    Compression.SNAPPY: lambda b: bytes(cramjam.snappy.decompress_raw(b)),
}


def build(n_records: int, batch_size: int, value_size: int, codec: Compression) -> bytes:
    """Encode ``n_records`` records in batches of ``batch_size`` with ``codec``."""
    rng = random.Random(42)
    # Text-like values (37 symbols) so that the codecs have something to do.
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789 "
    table = bytes(alphabet[i % len(alphabet)] for i in range(256))
    base_ts = 1_700_000_000_000
    parts = []
    for start in range(0, n_records, batch_size):
        items = []
        for i in range(start, min(start + batch_size, n_records)):
            value = rng.randbytes(value_size).translate(table)
            items.append((b"key-%06d" % i, value, (), base_ts + i))
        parts.append(encode_batch(items, base_offset=start, compression=codec))
    return b"".join(parts)


def gengroup_decode(data: bytes) -> int:
    """Decode with gengroup; return the number of records."""
    return sum(len(batch.records) for batch in decode_batches(data))


def gengroup_decode_py(data: bytes) -> int:
    """Decode with gengroup's pure-Python record loop; return the number of records."""
    compiled = records._decode_records
    records._decode_records = records._decode_records_py
    try:
        return gengroup_decode(data)
    finally:
        records._decode_records = compiled


def arrow_decode(data: bytes) -> int:
    """Decode into one Arrow table; return its number of rows."""
    return int(arrow.batches_to_arrow(scan_batches(data)[0]).num_rows)


def arrow_decode_py(data: bytes) -> int:
    """Decode into one Arrow table on the pure-Python path; return its number of rows."""
    saved = arrow._arrow_columns, records._decode_records
    arrow._arrow_columns = None
    records._decode_records = records._decode_records_py
    try:
        return arrow_decode(data)
    finally:
        arrow._arrow_columns, records._decode_records = saved


def kio_decode_plain(data: bytes) -> int:
    """Decode uncompressed batches with kio's batch reader; return the record count."""
    pos = 0
    total = 0
    while pos < len(data):
        batch, size = read_batch(data, pos)
        total += len(batch.records)
        pos += size
    return total


def kio_decode_compressed(data: bytes, codec: Compression) -> int:
    """CRC + cramjam decompression + kio's record reader; return the record count."""
    decompress = _KIO_DECOMPRESS[codec]
    view = memoryview(data)
    pos = 0
    total = 0
    while pos < len(data):
        header = _HEADER.unpack_from(data, pos)
        base_offset, batch_length, crc, base_timestamp, count = (
            header[0],
            header[1],
            header[4],
            header[7],
            header[12],
        )
        end = pos + 12 + batch_length
        if crc32c(view[pos + 21 : end]) != crc:
            raise ValueError("CRC mismatch")
        payload = decompress(view[pos + 61 : end])
        offset = 0
        for _ in range(count):
            _record, size = read_record(payload, i64(base_timestamp), i64(base_offset), offset)
            offset += size
        total += count
        pos = end
    return total


def best_rate(fn: Callable[[], int], repeat: int) -> tuple[float, int]:
    """Run ``fn`` ``repeat`` times; return (best records/s, records per run)."""
    best = float("inf")
    count = 0
    for _ in range(repeat):
        start = time.perf_counter()
        count = fn()
        best = min(best, time.perf_counter() - start)
    return count / best, count


def main() -> None:
    """Run the benchmark and print records/s per codec and decoder."""
    parser = benchmark_parser(__doc__, records=200_000, repeat=5)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument(
        "--codecs", default="none,lz4,zstd", help="comma-separated: none,gzip,snappy,lz4,zstd"
    )
    parser.add_argument("--no-gc", action="store_true", help="disable the cyclic GC throughout")
    args = parser.parse_args()
    if args.no_gc:
        gc.disable()

    print(
        f"{args.records} records, {args.value_size}-byte values, "
        f"{args.batch_size} records/batch, best of {args.repeat}"
        f"{', GC disabled' if args.no_gc else ''}"
    )
    compiled = records._decode_records is not records._decode_records_py
    print(f"compiled record loop: {'yes' if compiled else 'no (pure Python in both columns)'}")
    print(f"compiled Arrow columns: {'yes' if arrow._arrow_columns else 'no'}")
    print(
        f"{'codec':<8} {'bytes':>10} {'gengroup rec/s':>16} {'gengroup-py rec/s':>18} "
        f"{'arrow rec/s':>14} {'arrow-py rec/s':>15} {'kio rec/s':>14} {'vs py':>6} "
        f"{'vs kio':>7} {'arrow vs gengroup':>18}"
    )
    for name in args.codecs.split(","):
        codec = Compression[name.strip().upper()]
        data = build(args.records, args.batch_size, args.value_size, codec)
        ours, n_ours = best_rate(partial(gengroup_decode, data), args.repeat)
        py, n_py = best_rate(partial(gengroup_decode_py, data), args.repeat)
        columnar, n_columnar = best_rate(partial(arrow_decode, data), args.repeat)
        columnar_py, n_columnar_py = best_rate(partial(arrow_decode_py, data), args.repeat)
        if codec == Compression.NONE:
            peer, n_peer = best_rate(partial(kio_decode_plain, data), args.repeat)
        else:
            peer, n_peer = best_rate(partial(kio_decode_compressed, data, codec), args.repeat)
        counts = (n_ours, n_py, n_columnar, n_columnar_py, n_peer)
        if set(counts) != {args.records}:
            raise SystemExit(f"record count mismatch: {counts}")
        print(
            f"{codec.name:<8} {len(data):>10} {ours:>16,.0f} {py:>18,.0f} {columnar:>14,.0f} "
            f"{columnar_py:>15,.0f} {peer:>14,.0f} {ours / py:>5.1f}x {ours / peer:>6.1f}x "
            f"{columnar / ours:>17.1f}x"
        )


if __name__ == "__main__":
    main()
