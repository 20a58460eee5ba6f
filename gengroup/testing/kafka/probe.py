"""The readiness probe: one ApiVersions v0 request over a blocking socket.

:func:`exchange` sends any one request the same way (the cluster's Metadata
and FindCoordinator questions).

The request is framed and the response decoded by the client's own
:mod:`gengroup.protocol.framing`, so a broker that answers the probe speaks
the wire format gengroup itself will use. Version 0 is the one every broker
accepts before it has told anyone what else it supports.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Final, TypeVar

from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.api_versions.v0.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode

from gengroup._errors import ProtocolError
from gengroup.protocol.framing import FrameBuffer, decode_response, encode_request

from ._base import KafkaHarnessError

__all__ = ["exchange", "probe_api_versions"]

T = TypeVar("T")

_MAX_RESPONSE: Final = 1 << 20
_CLIENT_ID: Final = "gengroup-harness"


def _exchange(sock: socket.socket, request: bytes) -> bytes | bytearray:
    """Send a request frame and return the payload of the first response frame."""
    sock.sendall(request)
    frames = FrameBuffer(max_frame=_MAX_RESPONSE)
    while (payload := frames.next_frame()) is None:
        chunk = sock.recv(64 * 1024)
        if not chunk:
            raise ConnectionError("the broker closed the connection mid-response")
        frames.feed(chunk)
    return payload


def exchange(host: str, port: int, request: Any, response_cls: type[T], *, timeout: float) -> T:
    """Send one request over a new blocking connection and return the decoded response.

    Args:
        host: The broker's host.
        port: The broker's client port.
        request: A kio request of a version the broker accepts.
        response_cls: The kio response class of the same API and version.
        timeout: Seconds allowed for connecting and for each socket operation.

    Raises:
        OSError: The connection failed (refused, reset, timed out).
        KafkaHarnessError: The answer could not be decoded or names another request.
    """
    correlation_id = int.from_bytes(os.urandom(4), "big") & 0x7FFFFFFF
    frame = encode_request(request, correlation_id=correlation_id, client_id=_CLIENT_ID)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        try:
            payload = _exchange(sock, frame)
            answered, response = decode_response(response_cls, payload)
        except ProtocolError as exc:
            raise KafkaHarnessError(f"undecodable {response_cls.__name__}: {exc}") from exc
    if answered != correlation_id:
        raise KafkaHarnessError(
            f"{response_cls.__name__} has correlation id {answered}, expected {correlation_id}"
        )
    return response


def probe_api_versions(
    host: str = "127.0.0.1", port: int = 9092, *, timeout: float = 5.0
) -> dict[int, tuple[int, int]]:
    """Send one ApiVersions v0 request and return the broker's version table.

    Args:
        host: The broker's host.
        port: The broker's client port.
        timeout: Seconds allowed for connecting and for each socket operation.

    Returns:
        ``{api_key: (min_version, max_version)}`` for every API the broker accepts.

    Raises:
        OSError: The connection failed (refused, reset, timed out).
        KafkaHarnessError: The broker answered something that is not a successful
            ApiVersions response.
    """
    response = exchange(host, port, ApiVersionsRequest(), ApiVersionsResponse, timeout=timeout)
    if response.error_code != ErrorCode.none:
        raise KafkaHarnessError(f"ApiVersions failed with {response.error_code.name}")
    return {
        int(api.api_key): (int(api.min_version), int(api.max_version)) for api in response.api_keys
    }
