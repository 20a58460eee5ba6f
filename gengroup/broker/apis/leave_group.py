"""LeaveGroup (key 13): members leave a group, which then rebalances.

Version notes: v0-v5 served. v0-v2 name one member (``member_id``) and
answer with one error code (the member's own error folded into it); v3 batches
members (with ``group_instance_id``) and answers per member; v5 adds a reason
per member.
"""

from __future__ import annotations

from typing import Any, Final

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..coordinator import LeaveGroupInput, MemberIdentity
from ._base import NONE, ZERO, ApiSpec, Context, ec, from_output, group_handler

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.LEAVE_GROUP


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """LeaveGroup failing with ``code`` (top-level, no members)."""
    mod = response_module(KEY, version)
    return build(mod.LeaveGroupResponse, throttle_time=ZERO, error_code=ec(code), members=())


def _input(ctx: Context, req: Any, v: int) -> LeaveGroupInput:
    if v < 3:
        members: tuple[MemberIdentity, ...] = (MemberIdentity(req.member_id),)
    else:
        members = tuple(
            MemberIdentity(m.member_id, m.group_instance_id, getattr(m, "reason", None))
            for m in req.members
        )
    return LeaveGroupInput(req.group_id, members)


def _answer(req: Any, v: int, out: Any) -> Any:
    mod = response_module(KEY, v)
    error = out.error_code
    if v < 3 and error is NONE and out.members:
        error = out.members[0].error_code
    if v < 3:
        return build(mod.LeaveGroupResponse, throttle_time=ZERO, error_code=error)
    members = tuple(from_output(mod.MemberResponse, m) for m in out.members)
    return build(mod.LeaveGroupResponse, throttle_time=ZERO, error_code=error, members=members)


#: Hand the departures to the coordinator.
handle: Final = group_handler(error_response, _input, _answer)

SPEC: Final = ApiSpec(KEY, 0, 5, handle, error_response)
