"""DeleteGroups (key 42): delete empty groups and their offsets.

Version notes: v0-v2 served (v2 is flexible). One error per group; groups
coordinated elsewhere are answered NOT_COORDINATOR (or
COORDINATOR_NOT_AVAILABLE); a repeated group id is answered once.
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..coordinator import DeleteGroupsInput
from ._base import ZERO, ApiSpec, Context, ec

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.DELETE_GROUPS


def _response(version: int, results: Any) -> Any:
    """The answer, from ``(group id, error code)`` pairs."""
    mod = response_module(KEY, version)
    return build(
        mod.DeleteGroupsResponse,
        throttle_time=ZERO,
        results=tuple(
            build(mod.DeletableGroupResult, group_id=g, error_code=code) for g, code in results
        ),
    )


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """DeleteGroups failing with ``code``: every requested group carries it."""
    return _response(version, ((g, ec(code)) for g in request.groups_names))


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Delete the requested groups this broker coordinates."""
    ids = list(dict.fromkeys(req.groups_names))
    mine = [g for g in ids if not ctx.not_coordinator(g)]
    results: dict[str, ErrorCode] = {}
    if mine:
        out: Any = await ctx.group_call(DeleteGroupsInput(tuple(mine)), mine)
        if out is not None:
            results = {r.group_id: r.error_code for r in out.results}
    return _response(v, ((g, results.get(g, ctx.coordinator_error(g))) for g in ids))


SPEC: Final = ApiSpec(KEY, 0, 2, handle, error_response)
