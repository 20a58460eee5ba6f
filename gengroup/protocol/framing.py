"""Kafka request/response framing over kio, sans-IO.

Theory of operation:

Every Kafka message on the wire is ``int32 length`` followed by a header and a
payload. kio provides the generated header and payload dataclasses and a native
reader/writer; this module adds the framing, writes request headers itself
(v1, and v2 for flexible versions: a fixed layout that kio's writer would
build a dataclass for on every request), picks the right response header version
(ApiVersions responses always use response header v0, even when flexible), and
translates every decoding failure into :class:`~gengroup._errors.ProtocolError`
so that no foreign exception escapes to the I/O layer. Every payload is first
walked by :mod:`gengroup.protocol.guard`, because kio's native reader trusts
array counts from the wire and aborts the process when a garbage count makes
it allocate gigabytes; the guard turns such bytes into a ProtocolError first.

:class:`FrameBuffer` splits an incoming byte stream into frames; it enforces a
maximum frame size so a hostile peer cannot make us allocate without bound.
Nothing here touches a socket or a clock: bytes in, objects out.

kio imports a schema's module the first time it is used, so the first request
of each API version runs an import. :func:`request_schema` and
:func:`response_schema` are the only places that happens: the I/O layer marks
them as not to be interrupted by Ctrl-C (see :mod:`gengroup.io.connection`).
"""

from __future__ import annotations

import datetime
import io
import os
import struct
import sys
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, fields as dc_fields
from functools import cache
from types import ModuleType
from typing import Any, Final, TypeVar

from kio.index import load_request_schema, load_response_schema
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.serial import entity_reader, entity_writer

from .._errors import ConfigError, ProtocolError, UnsupportedVersion
from .guard import check_entity

__all__ = [
    "API_VERSIONS_KEY",
    "DEFAULT_MAX_FRAME",
    "MAX_CLIENT_ID_BYTES",
    "EncodedRequest",
    "FrameBuffer",
    "build",
    "check_client_id",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "ms",
    "request_identity",
    "request_module",
    "request_schema",
    "response_module",
    "response_schema",
]

API_VERSIONS_KEY: Final = 18
DEFAULT_MAX_FRAME: Final = 128 * 1024 * 1024

_I32 = struct.Struct(">i")
_MIN_READ: Final = 64 * 1024  # a socket read asks for at least this much
_MAX_READ: Final = 1024 * 1024  # and at most this much
_IN_PLACE_MIN: Final = 256 * 1024  # a frame with more than this to come is received in place

# The buffer of a frame received in place: the compiled one is not zeroed
# first (the frame overwrites it whole before it is returned), which saves a
# pass over tens of megabytes a second.
_new_buffer: Callable[[int], bytearray] = bytearray
if not os.environ.get("GENGROUP_PURE_PYTHON"):
    with suppress(ImportError):  # not built, or built before it had new_buffer
        from ._speedups import new_buffer as _new_buffer
_HDR_PREFIX = struct.Struct(">hhi")

T = TypeVar("T")


def _writer_for(cls: type[Any]) -> Any:
    return entity_writer(cls)


def _frame(parts: list[bytes]) -> bytes:
    body = b"".join(parts)
    return _I32.pack(len(body)) + body


def _encode_entity(entity: Any) -> bytes:
    buf = io.BytesIO()
    _writer_for(type(entity))(buf, entity)
    return buf.getvalue()


@dataclass(frozen=True, slots=True)
class EncodedRequest:
    """A request whose body is already bytes: those kio would write for it.

    A hot path with an encoder of its own (Fetch:
    :mod:`gengroup.protocol.fetch_request`) hands this to the connection
    instead of a kio request; :func:`encode_request` adds the header.
    """

    api_key: int
    version: int
    #: Whether the version is flexible (its header has a tagged-field section).
    flexible: bool
    #: The kio request class's name (for messages).
    name: str
    body: bytes


def request_identity(request: Any) -> tuple[int, int, str]:
    """``(api_key, version, name)`` of a kio request or an :class:`EncodedRequest`."""
    if type(request) is EncodedRequest:
        return request.api_key, request.version, request.name
    cls = type(request)
    return int(cls.__api_key__), int(cls.__version__), cls.__name__


_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id length
#: The longest client id a request header holds, in bytes (UTF-8).
MAX_CLIENT_ID_BYTES: Final = (1 << 15) - 1


def check_client_id(client_id: object) -> None:
    """Refuse a client id that no request header holds.

    Raises:
        ConfigError: ``client_id`` is not a string, or longer than
            :data:`MAX_CLIENT_ID_BYTES` in UTF-8.
    """
    if not isinstance(client_id, str):
        raise ConfigError(f"client_id must be a string, got {client_id!r}")
    size = len(client_id.encode())
    if size > MAX_CLIENT_ID_BYTES:
        raise ConfigError(
            f"client_id of {size} bytes: a request header holds {MAX_CLIENT_ID_BYTES} at most"
        )


def _header(
    api_key: int, version: int, flexible: bool, correlation_id: int, cid: bytes | None
) -> bytes:
    # Request header v1, and v2 (flexible) with an empty tagged-field section;
    # the client id stays a nullable int16-length string in both (Kafka's
    # RequestHeader.json: not flexible in any version).
    if cid is None:
        head = _HEADER.pack(api_key, version, correlation_id, -1)
    elif len(cid) > MAX_CLIENT_ID_BYTES:
        raise ValueError(
            f"client id of {len(cid)} bytes: at most {MAX_CLIENT_ID_BYTES} fit a request header"
        )
    else:
        head = _HEADER.pack(api_key, version, correlation_id, len(cid)) + cid
    return head + b"\x00" if flexible else head


def encode_request(request: Any, *, correlation_id: int, client_id: str | None) -> bytes:
    """Encode a request into a length-prefixed frame.

    Args:
        request: a kio request dataclass instance (any API, any version), or
            an :class:`EncodedRequest`.
        correlation_id: the id the response will carry.
        client_id: the client id sent in the header.

    Returns:
        The bytes to write to the socket.
    """
    cid = None if client_id is None else client_id.encode()
    if type(request) is EncodedRequest:
        head = _header(request.api_key, request.version, request.flexible, correlation_id, cid)
        return _frame([head, request.body])
    cls = type(request)
    flexible = bool(cls.__header_schema__.__flexible__)
    head = _header(int(cls.__api_key__), int(cls.__version__), flexible, correlation_id, cid)
    return _frame([head, _encode_entity(request)])


def response_header_cls(response_cls: type[Any]) -> type[Any]:
    """The header class a response of this type is framed with."""
    if int(response_cls.__api_key__) == API_VERSIONS_KEY:
        return ResponseHeaderV0
    return response_cls.__header_schema__  # type: ignore[no-any-return]


def read_correlation_id(payload: bytes | bytearray | memoryview) -> int:
    """Read the correlation id at the start of a response frame's payload."""
    if len(payload) < 4:
        raise ProtocolError(f"response frame of {len(payload)} bytes has no correlation id")
    return int(_I32.unpack_from(payload, 0)[0])


def decode_response(
    response_cls: type[T], payload: bytes | bytearray | memoryview
) -> tuple[int, T]:
    """Decode a response frame payload (without its length prefix).

    Args:
        response_cls: the kio response class expected for the request.
        payload: the frame's bytes after the int32 length.

    Returns:
        ``(correlation_id, response)``.

    Raises:
        ProtocolError: the bytes are not a valid response of that type.
    """
    if type(payload) is bytearray:  # kio reads only read-only buffers
        payload = memoryview(payload).toreadonly()
    header_cls = response_header_cls(response_cls)
    check_entity(response_cls, payload, check_entity(header_cls, payload, 0))
    try:
        header, hsize = entity_reader(header_cls)(payload, 0)
        body, bsize = entity_reader(response_cls)(payload, hsize)  # type: ignore[type-var]
    except ProtocolError:
        raise
    except Exception as exc:  # kio raises many types on bad input
        raise ProtocolError(
            f"malformed {response_cls.__name__} ({len(payload)} bytes): {exc!r}"
        ) from exc
    if hsize + bsize != len(payload):
        raise ProtocolError(
            f"{response_cls.__name__}: {len(payload) - hsize - bsize} trailing bytes in frame"
        )
    return int(header.correlation_id), body


def decode_request(payload: bytes | bytearray | memoryview) -> tuple[Any, Any]:
    """Decode a request frame payload (broker side).

    Returns:
        ``(header, request)``.

    Raises:
        UnsupportedVersion: the API key or version is unknown to kio; the
            header's api key, version and correlation id are on the exception
            as ``api_key``, ``api_version`` and ``correlation_id``.
        ProtocolError: the bytes are malformed.
    """
    if len(payload) < _HDR_PREFIX.size:
        raise ProtocolError("request frame too short for a header")
    if type(payload) is bytearray:  # kio reads only read-only buffers
        payload = memoryview(payload).toreadonly()
    api_key, api_version, correlation_id = _HDR_PREFIX.unpack_from(payload, 0)
    try:
        request_cls = request_schema(api_key, api_version)
    except Exception as exc:
        err = UnsupportedVersion(f"unknown api key {api_key} version {api_version}")
        err.api_key = api_key  # type: ignore[attr-defined]
        err.api_version = api_version  # type: ignore[attr-defined]
        err.correlation_id = correlation_id  # type: ignore[attr-defined]
        raise err from exc
    header_cls = request_cls.__header_schema__
    check_entity(request_cls, payload, check_entity(header_cls, payload, 0))
    try:
        header, hsize = entity_reader(header_cls)(payload, 0)
        body, _ = entity_reader(request_cls)(payload, hsize)
    except Exception as exc:
        raise ProtocolError(f"malformed {request_cls.__name__}: {exc!r}") from exc
    return header, body


def encode_response(response: Any, *, correlation_id: int) -> bytes:
    """Encode a kio response payload with its header into a length-prefixed frame."""
    header = response_header_cls(type(response))(correlation_id=correlation_id)
    return _frame([_encode_entity(header), _encode_entity(response)])


class FrameBuffer:
    """Splits a byte stream into Kafka frames.

    Feed it whatever the socket returned; take complete frame payloads out.
    A declared length that is negative or above ``max_frame`` raises
    :class:`ProtocolError` (the connection must then be closed).

    The received chunks are kept as they came and joined once, when a frame is
    complete: a frame of several megabytes (a Fetch response) is copied once
    here, not grown in a buffer and copied out of it again. A reader that can
    receive into a buffer (``socket.recv_into``) avoids even that copy for
    large frames: see :meth:`receive_into`.
    """

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._chunks: deque[bytes] = deque()
        self._offset = 0  # bytes of the first chunk already returned
        self._size = 0  # bytes received and not returned yet (chunks only)
        self._max = max_frame
        self._frame: bytearray | None = None  # a frame being received in place
        self._filled = 0  # bytes of it received

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes."""
        frame = self._frame
        if frame is not None and data:  # the frame being received in place comes first
            take = min(len(frame) - self._filled, len(data))
            frame[self._filled : self._filled + take] = data[:take]
            self._filled += take
            data = data[take:]
        if data:
            self._chunks.append(data if type(data) is bytes else bytes(data))
            self._size += len(data)

    def receive_into(self) -> memoryview | None:
        """Where to receive the rest of a large frame in place, or None.

        Once a frame's length is known and more than 256 KiB of it is still to
        come, the frame's bytes received so far move into a ``bytearray`` of
        the frame's size, and this returns the part of it still to fill: the
        caller receives into it (``socket.recv_into``) and reports how many
        bytes came with :meth:`received_into`. The frame is then returned by
        :meth:`next_frame` as that ``bytearray``, with no join and no chunk
        objects on the way (measured: a consumer of 1 KB values spent about a
        tenth of its time joining chunks). Otherwise (no length yet, the frame
        mostly here, or complete and not yet taken) it returns None: receive
        and :meth:`feed` as usual.

        Raises:
            ProtocolError: the frame's declared length is out of bounds.
        """
        frame = self._frame
        if frame is not None:  # None once it is full: it waits for next_frame()
            return memoryview(frame)[self._filled :] if self._filled < len(frame) else None
        size = self._next_length()
        if size is None:
            return None
        chunks = self._chunks
        have = self._size - 4  # every buffered byte belongs to this frame when have < size
        if size - have <= _IN_PLACE_MIN:
            return None
        frame = _new_buffer(size)
        pos = 0
        for i, chunk in enumerate(chunks):
            part = memoryview(chunk)[self._offset + 4 :] if i == 0 else chunk
            frame[pos : pos + len(part)] = part
            pos += len(part)
        chunks.clear()
        self._offset = self._size = 0
        self._frame, self._filled = frame, have
        return memoryview(frame)[have:]

    def _next_length(self) -> int | None:
        """The next frame's declared length, once its prefix is here (checked)."""
        if self._size < 4:
            return None
        chunks = self._chunks
        first, offset = chunks[0], self._offset
        if len(first) - offset < 4:  # the length prefix spans chunks: merge them
            first = b"".join([first[offset:], *list(chunks)[1:]])
            chunks.clear()
            chunks.append(first)
            offset = self._offset = 0
        (size,) = _I32.unpack_from(first, offset)
        if size < 0 or size > self._max:
            said = f"frame length {size} outside [0, {self._max}]"
            if size >> 16 in (0x1503, 0x1603):  # a TLS alert's or handshake's record header
                said += " (a TLS record: does the broker speak TLS here? check security_protocol)"
            raise ProtocolError(said)
        return int(size)

    def received_into(self, count: int) -> None:
        """Record that ``count`` bytes were received into the view :meth:`receive_into` gave."""
        self._filled += count

    def next_frame(self) -> bytes | bytearray | None:
        """Return the next complete frame payload, or None if more bytes are needed."""
        in_place = self._frame
        if in_place is not None:
            if self._filled < len(in_place):
                return None
            self._frame = None
            return in_place
        size = self._next_length()
        if size is None:
            return None
        chunks = self._chunks
        first, offset = chunks[0], self._offset
        end = offset + 4 + size
        if self._size < end - offset:
            return None
        self._size -= end - offset
        if end <= len(first):  # the frame lies in the first chunk
            frame = first[offset + 4 : end]
            if end == len(first):
                chunks.popleft()
                end = 0
            self._offset = end
            return frame
        parts = [first[offset + 4 :]]
        chunks.popleft()
        need = end - len(first)
        while need:
            chunk = chunks[0]
            if len(chunk) > need:
                parts.append(chunk[:need])
                self._offset = need
                break
            parts.append(chunk)
            chunks.popleft()
            need -= len(chunk)
        else:
            self._offset = 0
        return b"".join(parts)

    @property
    def buffered(self) -> int:
        """Number of bytes received but not yet returned as a frame."""
        return self._size + (self._filled + 4 if self._frame is not None else 0)

    def wanted(self) -> int:
        """How many bytes to ask the socket for next.

        The rest of the frame being received, within [64 KiB, 1 MiB]: a
        multi-megabyte Fetch response is read in a few large reads rather
        than in many of 64 KiB, each of which costs a system call and a turn
        of the event loop (measured: a quarter of a consumer's CPU time at
        1 KB values went to reads of 64 KiB).
        """
        if self._frame is not None:
            return min(max(len(self._frame) - self._filled, _MIN_READ), _MAX_READ)
        first = self._chunks[0] if self._chunks else b""
        if len(first) - self._offset < 4:
            return _MIN_READ
        (size,) = _I32.unpack_from(first, self._offset)
        return min(max(4 + int(size) - self._size, _MIN_READ), _MAX_READ)


# --------------------------------------------------------------------------- building


@cache  # kio resolves the class by its dotted name on every call
def request_schema(api_key: int, version: int) -> type[Any]:
    """The kio request class of an API version, its module imported on first use.

    Raises:
        Exception: what kio raises for an unknown key or version.
    """
    return load_request_schema(api_key, version)


@cache
def response_schema(api_key: int, version: int) -> type[Any]:
    """The kio response class of an API version, its module imported on first use.

    Raises:
        Exception: what kio raises for an unknown key or version.
    """
    return load_response_schema(api_key, version)


def request_module(api_key: int, version: int) -> ModuleType:
    """The kio module holding a request version's classes (nested types included)."""
    try:
        return sys.modules[request_schema(api_key, version).__module__]
    except Exception as exc:
        raise UnsupportedVersion(f"no request schema for api {api_key} v{version}") from exc


def response_module(api_key: int, version: int) -> ModuleType:
    """The kio module holding a response version's classes."""
    try:
        return sys.modules[response_schema(api_key, version).__module__]
    except Exception as exc:
        raise UnsupportedVersion(f"no response schema for api {api_key} v{version}") from exc


_FIELD_CACHE: dict[type[Any], frozenset[str]] = {}


def build(cls: type[T], /, **values: Any) -> T:
    """Instantiate a kio dataclass, dropping fields this version does not have.

    This lets one code path build a request for a range of API versions: pass
    every field any supported version knows; the ones absent from ``cls`` are
    ignored.
    """
    names = _FIELD_CACHE.get(cls)
    if names is None:
        names = frozenset(f.name for f in dc_fields(cls))  # type: ignore[arg-type]
        _FIELD_CACHE[cls] = names
    return cls(**{k: v for k, v in values.items() if k in names})


def ms(seconds: float) -> datetime.timedelta:
    """A kio duration field (whole milliseconds) from float seconds."""
    return datetime.timedelta(milliseconds=round(seconds * 1000))


def wait_ms(seconds: float) -> datetime.timedelta:
    """How long a broker may wait (a request's int32 ``timeout``), from float
    seconds: whole milliseconds, at most 2**31 - 1 (24.8 days)."""
    return datetime.timedelta(milliseconds=min(round(seconds * 1000), 2**31 - 1))
