"""DescribeGroups (key 15): groups' state, protocol and members.

Version notes: v0-v6 served. v3 may ask for authorized operations; v4 adds
``group_instance_id`` per member; v6 answers a missing group with
GROUP_ID_NOT_FOUND (before: state "Dead" and no error). Groups coordinated
elsewhere are answered NOT_COORDINATOR (or COORDINATOR_NOT_AVAILABLE).
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..coordinator import DescribedGroup, DescribeGroupsInput
from ._base import INT32_MIN, ZERO, ApiSpec, Context, ec, from_output

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.DESCRIBE_GROUPS

_GROUP_OPS: Final = sum(1 << op for op in (3, 6, 8))


def _response(mod: Any, groups: Any) -> Any:
    return build(mod.DescribeGroupsResponse, throttle_time=ZERO, groups=tuple(groups))


def _described(
    mod: Any, v: int, g: DescribedGroup, include_ops: bool = False, message: str | None = None
) -> Any:
    """The wire form of a group as the coordinator describes it (or an error)."""
    error_code = g.error_code
    if v >= 6 and g.group_state == "Dead" and error_code == ErrorCode.none:
        # From v6 Kafka answers a missing group with GROUP_ID_NOT_FOUND.
        error_code = ErrorCode.group_id_not_found
    return from_output(
        mod.DescribedGroup,
        g,
        error_code=error_code,
        error_message=message,
        members=tuple(from_output(mod.DescribedGroupMember, m) for m in g.members),
        authorized_operations=_GROUP_OPS if include_ops else INT32_MIN,
    )


def _error_group(mod: Any, v: int, group_id: str, code: int, message: str | None = None) -> Any:
    return _described(mod, v, DescribedGroup(group_id, ec(code)), message=message)


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """DescribeGroups failing with ``code``: every requested group carries it."""
    mod = response_module(KEY, version)
    return _response(mod, (_error_group(mod, version, g, code, message) for g in request.groups))


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Describe the requested groups this broker coordinates."""
    mod = response_module(KEY, v)
    include_ops = bool(getattr(req, "include_authorized_operations", False))
    ids = list(req.groups)
    mine = [g for g in ids if not ctx.not_coordinator(g)]
    described: dict[str, Any] = {}
    if mine:
        out: Any = await ctx.group_call(DescribeGroupsInput(tuple(mine)), mine)
        if out is not None:
            described = {g.group_id: g for g in out.groups}
    return _response(
        mod,
        (
            _error_group(mod, v, group_id, ctx.coordinator_error(group_id))
            if group_id not in described
            else _described(mod, v, described[group_id], include_ops)
            for group_id in ids
        ),
    )


SPEC: Final = ApiSpec(KEY, 0, 6, handle, error_response)
