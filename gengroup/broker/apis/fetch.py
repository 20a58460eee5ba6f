"""Fetch (key 1): read record batches, long-polling for ``min_bytes``.

Version notes: v4-v12 served (v13+ name topics by id only). v3+ carry a
response-wide ``max_bytes``; v4 adds the isolation level (read_committed gets
an empty aborted-transaction list); v7 adds fetch sessions, which are not
implemented: session id 0 / epoch -1 or 0 are accepted and answered "no
session", anything else FETCH_SESSION_ID_NOT_FOUND or
INVALID_FETCH_SESSION_EPOCH, in the top-level error code (v7+), which is also
where :func:`error_response` puts the error from v7. v9 adds the current
leader epoch per partition (fenced or unknown epochs are refused).

Long poll. The handler computes the response; if it carries at least
``min_bytes`` of records, or any partition error, or ``max_wait`` is spent, it
is sent. Otherwise the handler waits on the cluster's *change event* (set and
replaced whenever records are appended, topics or partitions change or
leadership moves) until ``max_wait``'s deadline, and recomputes. No polling:
a produce wakes the waiting fetches at once.
"""

from __future__ import annotations

from typing import Any, Final

import anyio
from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..log import LogError
from ._base import NONE, ZERO, ApiSpec, Context, ec, ms, per_partition

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.FETCH


def _topics(mod: Any, req: Any, answer: Any) -> tuple[Any, ...]:
    return per_partition(mod.FetchableTopicResponse, req.topics, answer, name="topic")


def _partition(
    mod: Any,
    index: int,
    code: int,
    *,
    log_offsets: tuple[int, int] = (-1, -1),
    aborted: tuple[()] | None = None,
    records: bytes | None = None,
) -> Any:
    """A partition's answer; ``log_offsets`` are its high watermark (also the LSO) and log start."""
    hw, start = log_offsets
    return build(
        mod.PartitionData,
        partition_index=index,
        error_code=ec(code),
        high_watermark=hw,
        last_stable_offset=hw,
        log_start_offset=start,
        aborted_transactions=aborted,
        preferred_read_replica=-1,
        records=records,
    )


def _response(mod: Any, code: int, topics: tuple[Any, ...]) -> Any:
    return build(
        mod.FetchResponse, throttle_time=ZERO, error_code=ec(code), session_id=0, responses=topics
    )


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """Fetch failing with ``code``: top-level from v7, else in every partition."""
    mod = response_module(KEY, version)
    if version >= 7:
        return _response(mod, code, ())

    topics = _topics(mod, request, lambda t, p: _partition(mod, int(p.partition), code))
    return build(mod.FetchResponse, throttle_time=ZERO, responses=topics)


def _fetch_once(ctx: Context, mod: Any, req: Any, v: int) -> tuple[Any, int, bool]:
    """Build a Fetch response from the logs' current state.

    Returns:
        ``(response topics, record bytes, any partition error)``.
    """
    state = ctx.state
    read_committed = int(getattr(req, "isolation_level", 0)) == 1
    budget = {"remaining": int(req.max_bytes) if v >= 3 else 2**31 - 1, "total": 0, "errors": 0}

    def answer(ftopic: Any, fpart: Any) -> Any:
        index = int(fpart.partition)
        part = state.topics.partition(ftopic.topic, index)
        code = ctx.leader_error(part, int(getattr(fpart, "current_leader_epoch", -1)))
        records: bytes = b""
        hw, start = -1, -1
        if code == 0:
            assert part is not None
            plog = part.log
            hw, start = plog.high_watermark, plog.log_start_offset
            limit = max(0, min(int(fpart.partition_max_bytes), budget["remaining"]))
            try:
                batches = plog.read(int(fpart.fetch_offset), limit, min_one=budget["total"] == 0)
            except LogError as exc:
                code = exc.code
                # Kafka answers an out-of-range fetch without offsets.
                hw, start = -1, -1
            else:
                if batches:
                    records = b"".join(batches)
                    budget["remaining"] -= len(records)
                    budget["total"] += len(records)
        if code:
            budget["errors"] += 1
        return _partition(
            mod,
            index,
            code,
            log_offsets=(hw, start),
            aborted=() if read_committed else None,
            records=records,
        )

    topics = _topics(mod, req, answer)
    return topics, budget["total"], budget["errors"] > 0


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Answer a Fetch, waiting up to ``max_wait`` for ``min_bytes`` of records."""
    mod = response_module(KEY, v)
    if v >= 7:
        # No incremental fetch sessions: a request to create one (epoch 0)
        # is answered with session id 0, i.e. "no session", which Kafka
        # also does when its session cache is full.
        if int(req.session_id) != 0:
            return error_response(v, req, ErrorCode.fetch_session_id_not_found)
        if int(req.session_epoch) not in (-1, 0):
            return error_response(v, req, ErrorCode.invalid_fetch_session_epoch)
    max_wait_ms = max(0, ms(req.max_wait))
    min_bytes = int(req.min_bytes)
    deadline = anyio.current_time() + max_wait_ms / 1000
    while True:
        changed = ctx.state.changed_event()
        topics_out, total, any_error = _fetch_once(ctx, mod, req, v)
        if total >= min_bytes or any_error or max_wait_ms == 0 or anyio.current_time() >= deadline:
            break
        with anyio.move_on_after(deadline - anyio.current_time()):
            await changed.wait()
    return _response(mod, NONE, topics_out)


SPEC: Final = ApiSpec(KEY, 4, 12, handle, error_response)
