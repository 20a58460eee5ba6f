"""Heartbeat (key 12): a member's liveness, and how it learns of a rebalance.

Version notes: v0-v4 served. v3 adds static membership
(``group_instance_id``); v4 is flexible. The answer is a single error code.
"""

from __future__ import annotations

from typing import Any, Final

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..coordinator import HeartbeatInput
from ._base import ZERO, ApiSpec, Context, ec, group_handler, member_input

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.HEARTBEAT


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """Heartbeat failing with ``code``."""
    mod = response_module(KEY, version)
    return build(mod.HeartbeatResponse, throttle_time=ZERO, error_code=ec(code))


def _input(ctx: Context, req: Any, v: int) -> HeartbeatInput:
    return member_input(HeartbeatInput, req)


#: Hand the heartbeat to the coordinator; the answer is its error code.
handle: Final = group_handler(
    error_response, _input, lambda req, v, out: error_response(v, req, out.error_code)
)

SPEC: Final = ApiSpec(KEY, 0, 4, handle, error_response)
