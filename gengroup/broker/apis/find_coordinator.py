"""FindCoordinator (key 10): where a group's coordinator is.

Version notes: v0-v6 served. Only group coordinators (key type 0) exist;
transaction coordinators (key type 1) are refused with INVALID_REQUEST. v1
adds the key type and an error message; v4 batches keys (one answer per key
in ``coordinators``) instead of one top-level answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ._base import ZERO, ApiSpec, Context, ec

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.FIND_COORDINATOR

_Entry = tuple[int, int, str, int, str | None]


def _response(mod: Any, v: int, req: Any, entry: Callable[[str], _Entry]) -> Any:
    """The answer, from ``entry(key) -> (error, node, host, port, message)``."""

    def fields(key: str) -> dict[str, Any]:
        code, node, host, port, message = entry(key)
        return {
            "node_id": node,
            "host": host,
            "port": port,
            "error_code": ec(code),
            "error_message": message,
        }

    if v >= 4:
        coordinators = tuple(
            build(mod.Coordinator, key=key, **fields(key)) for key in req.coordinator_keys
        )
        return build(mod.FindCoordinatorResponse, throttle_time=ZERO, coordinators=coordinators)
    return build(mod.FindCoordinatorResponse, throttle_time=ZERO, **fields(req.key))


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """FindCoordinator failing with ``code``: for every key (v4+) or top-level."""
    mod = response_module(KEY, version)
    return _response(mod, version, request, lambda key: (code, -1, "", -1, message))


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Answer with the group coordinator of each key."""
    mod = response_module(KEY, v)
    key_type = int(getattr(req, "key_type", 0))

    def entry(key: str) -> _Entry:
        if key_type != 0:
            return (
                ErrorCode.invalid_request,
                -1,
                "",
                -1,
                "the embedded broker only has group coordinators (key type 0)",
            )
        node = ctx.state.coordinator_for(key)
        if node < 0:
            return ErrorCode.coordinator_not_available, -1, "", -1, None
        host, port = ctx.state.addresses[node]
        return 0, node, host, port, None

    return _response(mod, v, req, entry)


SPEC: Final = ApiSpec(KEY, 0, 6, handle, error_response)
