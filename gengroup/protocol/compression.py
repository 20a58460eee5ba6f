"""Compression codecs of record batches: bounded decompression, compression.

Theory of operation:

Compression uses cramjam. Decompression writes into a bounded output buffer
(``decompress_into``), which stops the codec as soon as the cap is reached;
when the compressed frame advertises its decompressed size (gzip ISIZE, lz4 and
zstd frame content size, snappy length preamble) that size is used as the first
guess, otherwise the buffer grows geometrically up to the cap, so a
decompression bomb costs at most the cap. Snappy is accepted both raw
(librdkafka, and what :func:`compress` writes) and in the xerial framing the
Java producer writes. Sans-IO: bytes in, bytes out.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Final

import cramjam

from .._errors import CorruptRecordError, DecompressionLimitExceeded, ProtocolError

__all__ = ["Compression", "compress", "decompress"]


class Compression(enum.IntEnum):
    """The compression codec of a batch (attribute bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE: Final = 16
_LZ4_MAGIC: Final = b"\x04\x22\x4d\x18"
_ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
_MIN_GUESS: Final = 64 * 1024


def decompress(codec: int, src: memoryview, limit: int) -> bytes | bytearray:
    """Decompress one batch's records blob, refusing to produce more than ``limit`` bytes.

    The result is the codec's output buffer itself, a ``bytearray`` for the
    codecs that decompress into one (gzip, lz4, zstd): a copy into ``bytes``
    would cost as much as a fast codec's decompression.
    """
    try:
        if codec == Compression.GZIP:
            hint = int.from_bytes(src[-4:], "little") if len(src) >= 18 else None
            return _bounded(cramjam.gzip.decompress_into, src, hint, limit)
        if codec == Compression.SNAPPY:
            if src[: len(_XERIAL_MAGIC)].tobytes() == _XERIAL_MAGIC:
                return _xerial_decompress(src, limit)
            return _snappy_block(src, limit)
        if codec == Compression.LZ4:
            return _bounded(cramjam.lz4.decompress_into, src, _lz4_content_size(src), limit)
        if codec == Compression.ZSTD:
            return _bounded(cramjam.zstd.decompress_into, src, _zstd_content_size(src), limit)
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(
            f"cannot decompress {Compression(codec).name} records: {exc}"
        ) from exc
    raise ProtocolError(f"unsupported compression codec {codec}")


def _bounded(
    decompress_into: Callable[[memoryview, bytearray], int],
    src: memoryview,
    hint: int | None,
    limit: int,
) -> bytearray:
    """Run a cramjam ``decompress_into`` with an output buffer that grows up to ``limit``.

    cramjam stops as soon as the output buffer is full, so a decompression
    bomb costs at most ``limit`` bytes of memory and the work to fill them.
    A full buffer is reported as Rust's ``WriteZero`` I/O error ("failed to
    write whole buffer"); only that error makes the buffer grow, any other is
    corruption. (The tests decompress batches larger than the first guess, so
    a change of that message in cramjam would not go unnoticed.)
    """
    size = hint if hint is not None else max(_MIN_GUESS, 8 * len(src))
    size = max(1, min(size, limit))
    while True:
        out = bytearray(size)
        try:
            written = decompress_into(src, out)
        except cramjam.DecompressionError as exc:
            if "write whole buffer" not in str(exc):
                raise
            if size >= limit:
                raise DecompressionLimitExceeded(
                    f"decompressed records exceed max_decompressed_size={limit}"
                ) from exc
            # Missing or lying size hint: grow geometrically (bounded total work).
            size = min(limit, size * 4)
            continue
        del out[written:]  # shrinks in place: the records are not copied again
        return out


def _snappy_block(src: memoryview, limit: int) -> bytes:
    """Decompress one raw snappy block; its preamble states the exact output size."""
    size = cramjam.snappy.decompress_raw_len(src)
    if size > limit:
        raise DecompressionLimitExceeded(
            f"decompressed records exceed max_decompressed_size={limit}"
        )
    return bytes(cramjam.snappy.decompress_raw(src))


def _xerial_decompress(src: memoryview, limit: int) -> bytes:
    """Decompress xerial-framed snappy (Java's ``SnappyOutputStream``).

    Layout: 8-byte magic, int32 version, int32 compatible version, then blocks
    of ``[int32 length][raw snappy block]``, all big-endian.
    """
    if len(src) < _XERIAL_HEADER_SIZE:
        raise CorruptRecordError("truncated xerial snappy header")
    pos = _XERIAL_HEADER_SIZE
    size = len(src)
    parts: list[bytes] = []
    total = 0
    while pos < size:
        if size - pos < 4:
            raise CorruptRecordError("truncated xerial snappy block length")
        length = int.from_bytes(src[pos : pos + 4], "big", signed=True)
        pos += 4
        if length < 0 or length > size - pos:
            raise CorruptRecordError(f"xerial snappy block length {length} overruns the data")
        part = _snappy_block(src[pos : pos + length], limit - total)
        total += len(part)
        parts.append(part)
        pos += length
    return b"".join(parts)


def _lz4_content_size(src: memoryview) -> int | None:
    """The content size an lz4 frame header advertises, if any (only a hint)."""
    if len(src) >= 14 and src[:4].tobytes() == _LZ4_MAGIC and src[4] & 0x08:
        return int.from_bytes(src[6:14], "little")
    return None


def _zstd_content_size(src: memoryview) -> int | None:
    """The content size a zstd frame header advertises, if any (only a hint)."""
    if len(src) < 6 or src[:4].tobytes() != _ZSTD_MAGIC:
        return None
    descriptor = src[4]
    single_segment = bool(descriptor & 0x20)
    field_size = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    if not field_size:
        return None
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03]
    if len(src) < pos + field_size:
        return None
    value = int.from_bytes(src[pos : pos + field_size], "little")
    return value + 256 if field_size == 2 else value


def compress(codec: Compression, data: bytes) -> bytes:
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Compression.LZ4:
        # Independent blocks and no content checksum, like Kafka's Java producer
        # (Kafka's own lz4 reader decompresses every block on its own), and
        # lz4's fast mode (level 0), like librdkafka; cramjam defaults to HC.
        compressor = cramjam.lz4.Compressor(level=0, content_checksum=False, block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unsupported compression codec {codec!r}")
