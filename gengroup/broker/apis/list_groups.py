"""ListGroups (key 16): the groups this broker coordinates.

Version notes: v0-v5 served. v4 adds a states filter; v5 adds a types filter
and the group type in the answer.
"""

from __future__ import annotations

from typing import Any, Final

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..coordinator import ListGroupsInput
from ._base import ZERO, ApiSpec, Context, ec, from_output

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.LIST_GROUPS


def _response(version: int, code: Any, groups: tuple[Any, ...]) -> Any:
    mod = response_module(KEY, version)
    return build(mod.ListGroupsResponse, throttle_time=ZERO, error_code=code, groups=groups)


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """ListGroups failing with ``code`` (top-level, no groups)."""
    return _response(version, ec(code), ())


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """List the groups coordinated by this broker, filtered as asked."""
    mod = response_module(KEY, v)
    out: Any = await ctx.group_call(
        ListGroupsInput(
            tuple(getattr(req, "states_filter", ()) or ()),
            tuple(getattr(req, "types_filter", ()) or ()),
        ),
        [],
    )
    groups = tuple(
        from_output(mod.ListedGroup, g)
        for g in out.groups
        if ctx.state.coordinator_for(g.group_id) == ctx.node_id
    )
    return _response(v, out.error_code, groups)


SPEC: Final = ApiSpec(KEY, 0, 5, handle, error_response)
