"""OffsetFetch (key 9): read a group's committed offsets.

Version notes: v1-v9 served (v10 names topics by id only). v1 answers errors
per partition only; v2 adds a top-level error code (partitions then carry
only their own errors); ``topics = null`` (v2+) means every committed
partition; v5 adds the committed leader epoch; v7 adds ``require_stable``; v8
batches groups (``groups``, one answer with its own error per group, groups
coordinated elsewhere answered NOT_COORDINATOR) instead of one top-level
group.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..coordinator import (
    OffsetFetchGroup,
    OffsetFetchGroupOutput,
    OffsetFetchInput,
    OffsetFetchTopic,
)
from ._base import NONE, ZERO, ApiSpec, Context, ec, from_output, group_handler

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.OFFSET_FETCH


def _topics(mod: Any, v: int, topics: Any, part_error: Any = NONE) -> tuple[Any, ...]:
    """The committed offsets of a group's topics (v8+ classes are plural)."""
    topic_cls, part_cls = (
        (mod.OffsetFetchResponseTopics, mod.OffsetFetchResponsePartitions)
        if v >= 8
        else (mod.OffsetFetchResponseTopic, mod.OffsetFetchResponsePartition)
    )
    return tuple(
        from_output(
            topic_cls,
            t,
            partitions=tuple(
                from_output(
                    part_cls,
                    p,
                    error_code=p.error_code if p.error_code is not NONE else part_error,
                )
                for p in t.partitions
            ),
        )
        for t in topics
    )


def _group(mod: Any, group_id: str | None, code: Any, topics: tuple[Any, ...] = ()) -> Any:
    return build(mod.OffsetFetchResponseGroup, group_id=group_id, topics=topics, error_code=code)


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """OffsetFetch failing with ``code``: per group (v8+), else top-level and per partition."""
    mod = response_module(KEY, version)
    e = ec(code)
    if version >= 8:
        groups = tuple(_group(mod, g.group_id, e) for g in request.groups)
        return build(mod.OffsetFetchResponse, throttle_time=ZERO, groups=groups)
    return build(
        mod.OffsetFetchResponse,
        throttle_time=ZERO,
        error_code=e,
        topics=tuple(
            build(
                mod.OffsetFetchResponseTopic,
                name=t.name,
                partitions=tuple(
                    build(
                        mod.OffsetFetchResponsePartition,
                        partition_index=i,
                        committed_offset=-1,
                        committed_leader_epoch=-1,
                        metadata="",
                        error_code=e,
                    )
                    for i in t.partition_indexes
                ),
            )
            for t in (request.topics or ())
        ),
    )


async def _fetch_offsets(
    ctx: Context, groups: Sequence[OffsetFetchGroup], require_stable: bool
) -> dict[int, OffsetFetchGroupOutput]:
    """Ask the coordinator for the groups this broker coordinates, by request index."""
    mine = {i: g for i, g in enumerate(groups) if not ctx.not_coordinator(g.group_id)}
    if not mine:
        return {}
    out: Any = await ctx.group_call(
        OffsetFetchInput(tuple(mine.values()), require_stable),
        [g.group_id for g in mine.values()],
    )
    if out is None:
        return {}
    return dict(zip(mine, out.groups, strict=True))


def _wanted(topics: Any) -> tuple[OffsetFetchTopic, ...] | None:
    if topics is None:
        return None
    return tuple(OffsetFetchTopic(t.name, tuple(t.partition_indexes)) for t in topics)


def _require_stable(req: Any) -> bool:
    return bool(getattr(req, "require_stable", False))


def _one_group_input(ctx: Context, req: Any, v: int) -> OffsetFetchInput:
    return OffsetFetchInput(
        (OffsetFetchGroup(req.group_id, _wanted(req.topics)),), _require_stable(req)
    )


def _one_group_answer(req: Any, v: int, out: Any) -> Any:
    mod = response_module(KEY, v)
    (group,) = out.groups
    return build(
        mod.OffsetFetchResponse,
        throttle_time=ZERO,
        error_code=group.error_code,
        topics=_topics(mod, v, group.topics, group.error_code if v < 2 else NONE),
    )


_one_group: Final = group_handler(error_response, _one_group_input, _one_group_answer)


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Ask the coordinator for the committed offsets of the groups this broker coordinates."""
    if v < 8:
        return await _one_group(ctx, req, v)
    mod = response_module(KEY, v)
    groups = [
        OffsetFetchGroup(
            g.group_id,
            _wanted(g.topics),
            getattr(g, "member_id", None),
            int(getattr(g, "member_epoch", -1)),
        )
        for g in req.groups
    ]
    got = await _fetch_offsets(ctx, groups, _require_stable(req))
    out_groups = [
        _group(mod, g.group_id, ctx.coordinator_error(g.group_id))
        if (result := got.get(i)) is None
        else _group(mod, g.group_id, result.error_code, _topics(mod, v, result.topics))
        for i, g in enumerate(groups)
    ]
    return build(mod.OffsetFetchResponse, throttle_time=ZERO, groups=tuple(out_groups))


SPEC: Final = ApiSpec(KEY, 1, 9, handle, error_response)
