"""JoinGroup (key 11): join a classic consumer group, parked until the rebalance ends.

Version notes: v0-v9 served. v1 adds the rebalance timeout (v0 uses the
session timeout); v4 requires a known member id (a new member is answered
MEMBER_ID_REQUIRED with its id, then rejoins); v5 adds static membership
(``group_instance_id``); v7 makes the protocol name nullable and adds the
protocol type; v8 adds a reason; v9 adds ``skip_assignment``. The coordinator
receives the version and applies what changes with it.
"""

from __future__ import annotations

from typing import Any, Final

from ...protocol.framing import response_module
from ...protocol.versions import ApiKey
from ..coordinator import JoinGroupInput, JoinGroupOutput
from ._base import ZERO, ApiSpec, Context, ec, from_output, group_handler, ms

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.JOIN_GROUP


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """JoinGroup failing with ``code`` (top-level), no generation nor members."""
    return _answer(request, version, JoinGroupOutput(ec(code)))


def _input(ctx: Context, req: Any, v: int) -> JoinGroupInput:
    session_ms = ms(req.session_timeout)
    return JoinGroupInput(
        group_id=req.group_id,
        member_id=req.member_id,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=ms(req.rebalance_timeout) if v >= 1 else session_ms,
        protocol_type=req.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in req.protocols),
        group_instance_id=getattr(req, "group_instance_id", None),
        client_id=ctx.client_id or "",
        client_host=ctx.client_host,
        require_known_member_id=v >= 4,
        version=v,
        reason=getattr(req, "reason", None),
    )


def _answer(req: Any, v: int, out: JoinGroupOutput) -> Any:
    mod = response_module(KEY, v)
    return from_output(
        mod.JoinGroupResponse,
        out,
        throttle_time=ZERO,
        protocol_name=out.protocol_name if v >= 7 else (out.protocol_name or ""),
        members=tuple(from_output(mod.JoinGroupResponseMember, m) for m in out.members),
    )


#: Hand the join to the coordinator; answers when the group's rebalance completes.
handle: Final = group_handler(error_response, _input, _answer)

SPEC: Final = ApiSpec(KEY, 0, 9, handle, error_response)
