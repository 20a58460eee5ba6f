"""The client's one way to send a request: negotiate, build, send, check.

Theory of operation:

A Kafka request is built for the version negotiated with the connection that
carries it, so the version and the connection must be picked together.
:func:`call` does the four steps every caller used to spell out: read the
version of the API the connection negotiated, give its kio module to the
caller's ``make`` (which builds the request from the module's classes), send
the request, and turn the response's top-level error code into the typed
exception of :mod:`gengroup._errors` (when asked to: some callers interpret
the codes themselves). Per-item codes are the caller's to read;
:func:`raise_item_errors` raises the first non-zero one.

:meth:`gengroup.io.cluster.Cluster.call` picks the connection (a node's or
any broker's) and counts it in flight around this function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import anyio.lowlevel

from .._errors import raise_for_code
from ..protocol.framing import request_module, response_module
from ..protocol.versions import ApiKey, require
from .connection import BrokerConnection

__all__ = ["MakeRequest", "call", "preload", "raise_item_errors"]

#: Builds a request from the kio module of the negotiated version.
MakeRequest = Callable[[ModuleType], Any]


async def call(
    conn: BrokerConnection,
    key: ApiKey,
    make: MakeRequest,
    *,
    timeout: float | None = None,
    expect_response: bool = True,
    check: str | None = None,
) -> Any:
    """Send the request ``make`` builds for ``key`` on ``conn`` and return the response.

    Args:
        conn: the connection (its negotiated versions decide the request's).
        key: the API.
        make: builds the request from the version's kio module (the version
            is ``module.<Request class>.__version__`` if it matters).
        timeout: seconds to wait for the response (default: the connection's).
        expect_response: False for requests the broker does not answer
            (Produce with ``acks=0``): returns None once sent.
        check: if given, a non-zero top-level ``error_code`` of the response
            raises its typed error with this text as context.

    Raises:
        UnsupportedVersion: the broker shares no version of ``key`` with gengroup.
        KafkaConnectionError: the connection failed.
        BrokerError: the top-level error code is set (with ``check``).
    """
    request = make(request_module(key, require(conn.versions, key)))
    if not expect_response:
        await conn.request(request, timeout=timeout, expect_response=False)
        return None
    response = await conn.request(request, timeout=timeout)
    if check is not None:
        raise_for_code(int(getattr(response, "error_code", 0)), check)
    return response


async def preload(conn: BrokerConnection, keys: Iterable[ApiKey]) -> None:
    """Load the kio schemas of ``keys`` at the versions ``conn`` negotiated.

    kio imports a schema's module the first time it is used, a few
    milliseconds of work each; a member whose partitions are about to be
    handed over does it while it waits instead. Keys the connection shares no
    version of are passed over (their requests fail when sent).

    Each module is a checkpoint of its own: an answer that arrives meanwhile
    (SyncGroup's, which a generation's first heartbeat counts from) waits
    for one import at most, not for all of them.
    """
    for key in keys:
        version = conn.versions.get(key)
        if version is not None:
            request_module(key, version)
            await anyio.lowlevel.checkpoint()
            response_module(key, version)
            await anyio.lowlevel.checkpoint()


def raise_item_errors(items: Iterable[Any], context: Callable[[Any], str]) -> None:
    """Raise the typed error of the first item with a non-zero ``error_code``.

    Args:
        items: response entries (topics, groups, partitions ...).
        context: the error's message for an item.
    """
    for item in items:
        if item.error_code:
            raise_for_code(int(item.error_code), context(item))
