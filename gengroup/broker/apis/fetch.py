"""Fetch (key 1): read record batches, long-polling for ``min_bytes``.

Version notes: v4-v16 served. v3+ carry a
response-wide ``max_bytes``; v4 adds the isolation level (read_committed gets
an empty aborted-transaction list); v7 adds incremental fetch sessions
(KIP-227, :mod:`gengroup.broker.fetch_sessions`, one cache per broker): epoch
0 creates a session (session id 0 when the cache is full), epoch -1 closes
the one named and answers without a session, any other epoch is an
incremental request answered with the session's changed partitions only;
session errors (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH) go in
the top-level error code with session id 0 and no partitions, which is also
where :func:`error_response` puts any error from v7. Requests before v7 are
sessionless. v9 adds the current leader epoch per partition (fenced or
unknown epochs are refused). v13 names topics by id, in the request
(fetched and forgotten) and the response: an id no topic has is answered
UNKNOWN_TOPIC_ID (a topic deleted and created again has a new id, so a
request for the old one never reads the new one's log); a session's
partitions are keyed by topic id then, and a session created by requests of
one kind refuses an incremental request of the other with
FETCH_SESSION_TOPIC_ID_ERROR (Kafka's ``FetchManager``). v15 drops
``replica_id``. v16 adds leader hints (KIP-951): a partition refused
NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names its current leader and
epoch (``current_leader``), and ``node_endpoints`` those leaders' addresses
when they are up, as Kafka's ``KafkaApis`` answers.

Order, as Kafka's ``KafkaApis``: a partition named twice is read once; the
partitions are read in request order (an incremental request: the session's
order), those of unknown topics or partitions are answered after the others,
and consecutive partitions of one topic share a topic entry.

Long poll. The handler computes the response; if it carries at least
``min_bytes`` of records, or the partitions' logs hold that much past their
fetch positions (each counted up to its ``partition_max_bytes``, as Kafka's
``DelayedFetch``), or any partition error, or ``max_wait`` is spent, or there
is nothing to read, it is sent. As Kafka's ``KafkaApis``, ``min_bytes`` counts
as at most the request's ``max_bytes``: a request cannot wait for more than it
may carry. Otherwise the handler waits on the
cluster's *change event* (set and replaced whenever records are appended,
topics or partitions change or leadership moves) until ``max_wait``'s
deadline, and recomputes. No polling: a produce wakes the waiting fetches at
once. The session is updated once, with the response finally sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final
from uuid import UUID

import anyio
from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..fetch_sessions import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    ContextKind,
    FetchContext,
    PartitionOutcome,
    PartitionRequest,
)
from ..log import LogError, Partition
from ._base import ZERO, ApiSpec, Context, ec, ms, per_partition

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.FETCH
#: The first version naming topics by id.
_TOPIC_IDS_FROM: Final = 13
#: The first version answering leader hints (KIP-951).
_HINTS_FROM: Final = 16
_NIL: Final = UUID(int=0)
_HINTED: Final = frozenset(
    {int(ErrorCode.not_leader_or_follower), int(ErrorCode.fenced_leader_epoch)}
)

_Answer = tuple[str, Any]
"""A partition's answer and its topic."""


def _partition(
    mod: Any,
    index: int,
    code: int,
    *,
    log_offsets: tuple[int, int] = (-1, -1),
    aborted: tuple[()] | None = None,
    records: bytes | None = None,
    leader: tuple[int, int] | None = None,
) -> Any:
    """A partition's answer; ``log_offsets`` are its high watermark (also the LSO)
    and log start; ``leader``: the leader hint (id, epoch) to name."""
    hw, start = log_offsets
    hint: dict[str, Any] = {}
    if leader is not None:
        hint["current_leader"] = mod.LeaderIdAndEpoch(leader_id=leader[0], leader_epoch=leader[1])
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
        **hint,
    )


def _response(
    mod: Any, code: int, session_id: int, topics: tuple[Any, ...], endpoints: tuple[Any, ...] = ()
) -> Any:
    return build(
        mod.FetchResponse,
        throttle_time=ZERO,
        error_code=ec(code),
        session_id=session_id,
        responses=topics,
        node_endpoints=endpoints,
    )


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """Fetch failing with ``code``: top-level from v7, else in every partition."""
    mod = response_module(KEY, version)
    if version >= 7:
        return _response(mod, code, INVALID_SESSION_ID, ())

    topics = per_partition(
        mod.FetchableTopicResponse,
        request.topics,
        lambda t, p: _partition(mod, int(p.partition), code),
        name="topic",
    )
    return build(mod.FetchResponse, throttle_time=ZERO, responses=topics)


def _key(topic: Any, by_id: bool) -> str:
    """A request's topic as the session keys it: its name, or (v13+) its id's text."""
    if not by_id:
        return str(topic.topic)
    return str(topic.topic_id or _NIL)  # kio reads the nil id as None


def _requested(req: Any, by_id: bool) -> list[PartitionRequest]:
    """The request's partitions, in request order."""
    return [
        PartitionRequest(
            topic=_key(t, by_id),
            partition=int(p.partition),
            fetch_offset=int(p.fetch_offset),
            max_bytes=int(p.partition_max_bytes),
            current_leader_epoch=int(getattr(p, "current_leader_epoch", -1)),
            log_start_offset=int(getattr(p, "log_start_offset", -1)),
            last_fetched_epoch=int(getattr(p, "last_fetched_epoch", -1)),
        )
        for t in req.topics
        for p in t.partitions
    ]


def _forgotten(req: Any, by_id: bool) -> list[tuple[str, int]]:
    """The request's ``forgotten_topics_data`` (v7+) as ``(topic, partition)`` pairs."""
    forgotten = getattr(req, "forgotten_topics_data", ())
    return [(_key(t, by_id), int(p)) for t in forgotten for p in t.partitions]


def _lookup(ctx: Context, key: str, index: int, by_id: bool) -> tuple[Partition | None, int]:
    """The partition a request names (by topic name, or v13+ id), and the error
    answered if there is none."""
    topics = ctx.state.topics
    if not by_id:
        return topics.partition(key, index), ErrorCode.unknown_topic_or_partition
    topic = topics.by_id.get(UUID(key))
    if topic is None:
        return None, ErrorCode.unknown_topic_id
    return topics.partition(topic.name, index), ErrorCode.unknown_topic_or_partition


def _topics(mod: Any, answers: Sequence[_Answer]) -> tuple[Any, ...]:
    """The response's topics: consecutive answers of one topic share an entry
    (named by the request's key: a name, or v13+ a topic id's text)."""
    grouped: list[tuple[str, list[Any]]] = []
    for topic, data in answers:
        if grouped and grouped[-1][0] == topic:
            grouped[-1][1].append(data)
        else:
            grouped.append((topic, [data]))
    return tuple(
        build(
            mod.FetchableTopicResponse,
            topic=topic,
            topic_id=UUID(topic) if hasattr(mod.FetchableTopicResponse, "topic_id") else None,
            partitions=tuple(parts),
        )
        for topic, parts in grouped
    )


def _endpoints(ctx: Context, mod: Any, answers: Sequence[_Answer]) -> tuple[Any, ...]:
    """The ``node_endpoints`` of the leaders the answers' hints name, when up."""
    state = ctx.state
    leaders = {int(data.current_leader.leader_id) for _, data in answers if data.error_code}
    return tuple(
        build(mod.NodeEndpoint, node_id=b, host=state.addresses[b][0], port=state.addresses[b][1])
        for b in sorted(leaders)
        if b in state.online
    )


Read = list[tuple[PartitionRequest, PartitionOutcome, _Answer]]


def _fetch_once(
    ctx: Context, mod: Any, req: Any, v: int, parts: Sequence[PartitionRequest], enough: int
) -> tuple[Read, int, bool]:
    """Read ``parts`` from the logs' current state.

    Returns:
        ``(each partition's outcome and answer, record bytes, any partition
        error)``; partitions of unknown topics or partitions come last. The
        record bytes are the larger of those read and those the logs hold
        past the fetch positions, each partition's counted up to its own
        limit (Kafka's ``DelayedFetch`` measure), counted no further than
        ``enough``.
    """
    read_committed = int(getattr(req, "isolation_level", 0)) == 1
    remaining = int(req.max_bytes) if v >= 3 else 2**31 - 1
    total = 0
    held = 0
    errors = 0
    found: Read = []
    unknown: Read = []
    by_id = v >= _TOPIC_IDS_FROM
    for fpart in parts:
        part, missing = _lookup(ctx, fpart.topic, fpart.partition, by_id)
        code = ctx.leader_error(part, fpart.current_leader_epoch) if part is not None else missing
        leader = None
        if code in _HINTED and v >= _HINTS_FROM and part is not None:
            leader = (part.leader, part.leader_epoch)
        data = b""
        hw, start = -1, -1
        if code == 0:
            assert part is not None
            plog = part.log
            hw, start = plog.high_watermark, plog.log_start_offset
            limit = max(0, min(fpart.max_bytes, remaining))
            try:
                batches = plog.read(fpart.fetch_offset, limit, min_one=total == 0)
            except LogError as exc:
                code = exc.code
                # Kafka answers an out-of-range fetch without offsets.
                hw, start = -1, -1
            else:
                data = b"".join(batches)
                remaining -= len(data)
                total += len(data)
                if held < enough:
                    held += plog.bytes_from(fpart.fetch_offset, min(fpart.max_bytes, enough - held))
        if code:
            errors += 1
        answer = _partition(
            mod,
            fpart.partition,
            code,
            log_offsets=(hw, start),
            aborted=() if read_committed else None,
            records=data,
            leader=leader,
        )
        outcome = PartitionOutcome(code, hw, start, len(data))
        (found if part is not None else unknown).append((fpart, outcome, (fpart.topic, answer)))
    return found + unknown, max(total, held), errors > 0


def _context(ctx: Context, req: Any, v: int) -> FetchContext:
    """The request's fetch-session context (a sessionless one before v7)."""
    by_id = v >= _TOPIC_IDS_FROM
    if v < 7:
        return ctx.fetch_sessions.new_context(
            INVALID_SESSION_ID, FINAL_EPOCH, _requested(req, by_id), (), ctx.state.now_ms()
        )
    return ctx.fetch_sessions.new_context(
        int(req.session_id),
        int(req.session_epoch),
        _requested(req, by_id),
        _forgotten(req, by_id),
        ctx.state.now_ms(),
        by_id=by_id,
    )


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Answer a Fetch, waiting up to ``max_wait`` for ``min_bytes`` of records."""
    mod = response_module(KEY, v)
    context = _context(ctx, req, v)
    max_wait_ms = max(0, ms(req.max_wait))
    # Kafka's KafkaApis: a request waits for no more than it may carry.
    min_bytes = min(int(req.min_bytes), int(req.max_bytes)) if v >= 3 else int(req.min_bytes)
    deadline = anyio.current_time() + max_wait_ms / 1000
    read: Read = []
    while context.kind is not ContextKind.ERROR and context.partitions:
        changed = ctx.state.changed_event()
        read, total, any_error = _fetch_once(ctx, mod, req, v, context.partitions, min_bytes)
        if total >= min_bytes or any_error or max_wait_ms == 0 or anyio.current_time() >= deadline:
            break
        with anyio.move_on_after(deadline - anyio.current_time()):
            await changed.wait()
    answer = ctx.fetch_sessions.respond(context, read, ctx.state.now_ms())
    endpoints = _endpoints(ctx, mod, answer.partitions) if v >= _HINTS_FROM else ()
    return _response(
        mod, answer.error_code, answer.session_id, _topics(mod, answer.partitions), endpoints
    )


SPEC: Final = ApiSpec(KEY, 4, 16, handle, error_response)
