from collections.abc import Sequence
from typing import Any

from .records import Record

def configure(record_type: type[Record], error_type: type[Exception], /) -> bool: ...
def decode_records(
    buf: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    /,
) -> list[Record]: ...
def arrow_columns(
    segments: Sequence[
        tuple[bytes | bytearray | memoryview, int, int, int, int, int, int, int, int]
    ],
    /,
) -> tuple[Any, ...]: ...
def new_buffer(n: int, /) -> bytearray: ...
