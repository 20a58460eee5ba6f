"""Produce (key 0): append record batches to partition leaders.

Version notes: v3-v12 served (v3 is the first with record batches, v13 names
topics by id only and is not served). ``acks`` must be -1, 0 or 1; with
``acks=0`` nothing is answered, and the connection is closed when a
partition failed so the producer refreshes its metadata (Kafka's
behaviour). Transactional batches are refused (INVALID_TXN_STATE). v8 adds
record errors and an error message per partition; v10+ may carry leader
hints: a partition refused NOT_LEADER_OR_FOLLOWER names its current leader and
epoch (``current_leader``), and ``node_endpoints`` that leader's address when
it is up (KIP-951, as Kafka answers).

Idempotent batches (a producer id, from InitProducerId) are checked against
the partition's producer state (:mod:`gengroup.broker.producer_state`): a
retried batch is answered with its first append's base offset and time and is
not appended again; OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH and
the INVALID_RECORD of a negative base sequence are answered as Kafka answers
them, with no error message and with the log start offset.
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ..log import LogError
from ..producer_state import SequenceError
from ..state import ClusterState
from ._base import CLOSE, NO_RESPONSE, ZERO, ApiSpec, Context, ec, epoch_datetime, per_partition

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.PRODUCE


def _is_transactional(records: bytes) -> bool:
    """Whether a produced batch has the transactional attribute bit (0x10)."""
    return len(records) >= 23 and bool(records[22] & 0x10)


def _partition(
    mod: Any,
    index: int,
    code: int,
    message: str | None = None,
    result: tuple[int, int, int] = (-1, -1, -1),
    leader: tuple[int, int] = (-1, -1),
) -> Any:
    base_offset, append_time, start_offset = result
    hint = getattr(mod, "LeaderIdAndEpoch", None)  # v10+
    return build(
        mod.PartitionProduceResponse,
        index=index,
        error_code=ec(code),
        base_offset=base_offset,
        log_append_time=epoch_datetime(append_time),
        log_start_offset=start_offset,
        record_errors=(),
        error_message=message,
        current_leader=None if hint is None else hint(leader_id=leader[0], leader_epoch=leader[1]),
    )


def _response(
    mod: Any,
    req: Any,
    answer: Any,
    state: ClusterState | None = None,
    leaders: set[int] | None = None,
) -> Any:
    """The response of ``answer`` per partition; the leaders it named (``leaders``,
    filled by ``answer``) given as ``node_endpoints`` when up."""
    topics = per_partition(
        mod.TopicProduceResponse,
        req.topic_data,
        answer,
        partitions="partition_data",
        answers="partition_responses",
    )
    endpoints = tuple(
        build(mod.NodeEndpoint, node_id=b, host=state.addresses[b][0], port=state.addresses[b][1])
        for b in sorted(leaders or ())
        if state is not None and b in state.online
    )
    return build(
        mod.ProduceResponse, responses=topics, throttle_time=ZERO, node_endpoints=endpoints
    )


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """Produce failing with ``code``: every requested partition carries it."""
    mod = response_module(KEY, version)
    return _response(mod, request, lambda t, p: _partition(mod, int(p.index), code, message))


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Append each partition's batch if this broker leads it."""
    mod = response_module(KEY, v)
    state = ctx.state
    acks = int(req.acks)
    now = state.wall_ms()
    errors: list[int] = []
    appended: list[bool] = []
    leaders: set[int] = set()  # named in NOT_LEADER_OR_FOLLOWER answers

    def answer(tdata: Any, pdata: Any) -> Any:
        index = int(pdata.index)
        code = 0
        message: str | None = None
        result: tuple[int, int, int] = (-1, -1, -1)
        leader = (-1, -1)
        topic = state.topics.get(tdata.name)
        part = state.topics.partition(tdata.name, index)
        if acks not in (-1, 0, 1):
            code = ErrorCode.invalid_required_acks
        elif topic is None or part is None:
            code = ErrorCode.unknown_topic_or_partition
        elif topic.internal:
            code = ErrorCode.invalid_topic_exception
            message = f"cannot append to internal topic {topic.name}"
        elif (code := ctx.leader_error(part)) != 0:
            if code == ErrorCode.not_leader_or_follower:
                leader = (part.leader, part.leader_epoch)
                leaders.add(part.leader)
        elif pdata.records is None:
            code = ErrorCode.invalid_record
            message = "a produce request must carry exactly one record batch"
        elif _is_transactional(pdata.records):
            code = ErrorCode.invalid_txn_state
            message = "transactions are not supported by the embedded broker"
        else:
            try:
                appended_at = part.log.append(
                    pdata.records,
                    now_ms=now,
                    leader_epoch=part.leader_epoch,
                    log_append_time=topic.log_append_time,
                    max_message_bytes=topic.max_message_bytes(state.settings.max_message_bytes),
                    validate_records=state.settings.validate_records,
                )
            except LogError as exc:
                code, message = exc.code, str(exc)
            except SequenceError as exc:
                # Kafka's answer to a refused sequence (negative, out of
                # order) or epoch carries no message, and the log start offset.
                code, result = exc.code, (-1, -1, part.log.log_start_offset)
            else:
                result = appended_at
                appended.append(True)
        if code:
            errors.append(code)
        return _partition(mod, index, code, message, result, leader)

    response = _response(mod, req, answer, state, leaders if v >= 10 else None)
    if appended:
        state.notify()
    if acks == 0:
        # Kafka sends nothing for acks=0, and closes the connection when a
        # partition failed so the producer refreshes its metadata.
        return CLOSE if errors else NO_RESPONSE
    return response


SPEC: Final = ApiSpec(KEY, 3, 12, handle, error_response)
