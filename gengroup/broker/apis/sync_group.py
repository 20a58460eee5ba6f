"""SyncGroup (key 14): the leader's assignments out, each member's assignment back.

Version notes: v0-v5 served. v3 adds static membership
(``group_instance_id``); v5 adds the protocol type and name, which must match
the group's (else INCONSISTENT_GROUP_PROTOCOL). The coordinator receives the
version.
"""

from __future__ import annotations

from typing import Any, Final

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..coordinator import SyncGroupInput
from ._base import ZERO, ApiSpec, Context, ec, group_handler, member_input

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.SYNC_GROUP


def _response(version: int, code: Any, protocol_type: Any, name: Any, assignment: bytes) -> Any:
    mod = response_module(KEY, version)
    return build(
        mod.SyncGroupResponse,
        throttle_time=ZERO,
        error_code=code,
        protocol_type=protocol_type,
        protocol_name=name,
        assignment=assignment,
    )


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """SyncGroup failing with ``code`` (top-level), with an empty assignment."""
    return _response(version, ec(code), None, None, b"")


def _input(ctx: Context, req: Any, v: int) -> SyncGroupInput:
    return member_input(
        SyncGroupInput,
        req,
        protocol_type=getattr(req, "protocol_type", None),
        protocol_name=getattr(req, "protocol_name", None),
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in req.assignments),
        version=v,
    )


def _answer(req: Any, v: int, out: Any) -> Any:
    return _response(v, out.error_code, out.protocol_type, out.protocol_name, out.assignment)


#: Hand the sync to the coordinator; answers once the leader's assignment is in.
handle: Final = group_handler(error_response, _input, _answer)

SPEC: Final = ApiSpec(KEY, 0, 5, handle, error_response)
