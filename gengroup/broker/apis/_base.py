"""What every API module shares: the spec, the handler context, small helpers."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from ...protocol.framing import build
from ..coordinator import Request
from ..fetch_sessions import FetchSessionCache
from ..log import Partition
from ..state import ClusterState

__all__ = [
    "CLOSE",
    "CloseAfter",
    "INT32_MIN",
    "NIL_UUID",
    "NONE",
    "NO_RESPONSE",
    "ZERO",
    "ApiSpec",
    "Context",
    "ErrorResponse",
    "Handler",
    "ec",
    "epoch_datetime",
    "from_output",
    "group_handler",
    "member_input",
    "ms",
    "per_partition",
    "topic_result",
]

ZERO: Final = datetime.timedelta(0)
NIL_UUID: Final = uuid.UUID(int=0)
NONE: Final = ErrorCode.none
INT32_MIN: Final = -(2**31)
T = TypeVar("T")
_MS: Final = datetime.timedelta(milliseconds=1)
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class _Sentinel:
    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


#: Handler result: send nothing (Produce with acks=0).
NO_RESPONSE: Final = _Sentinel("NO_RESPONSE")
#: Handler result: close the connection without answering.
CLOSE: Final = _Sentinel("CLOSE")


@dataclass(frozen=True, slots=True)
class CloseAfter:
    """Handler result: send ``response``, then close the connection (as Kafka does
    after a failed SASL authentication)."""

    response: Any


def ms(value: Any) -> int:
    """Milliseconds from a kio duration field (timedelta) or a plain int."""
    if isinstance(value, datetime.timedelta):
        return value // _MS
    return int(value)


def ec(code: int) -> ErrorCode:
    """The kio error code of an int."""
    return ErrorCode(code)


def epoch_datetime(epoch_ms: int) -> datetime.datetime | None:
    """kio's representation of an epoch-milliseconds timestamp (-1: None)."""
    return None if epoch_ms < 0 else _EPOCH + datetime.timedelta(milliseconds=epoch_ms)


def per_partition(
    topic_type: Any,
    topics: Iterable[Any],
    answer: Callable[[Any, Any], Any],
    *,
    name: str = "name",
    partitions: str = "partitions",
    answers: str = "partitions",
) -> tuple[Any, ...]:
    """A response's topic list: one entry per requested topic, one answer per partition.

    Args:
        topic_type: the kio type of a response topic.
        topics: the request's topics.
        answer: ``(topic, partition) -> partition response``.
        name: the field naming a topic, in the request and the response.
        partitions: the request topic's field listing its partitions.
        answers: the response topic's field listing the partition answers.
    """
    entries = []
    for t in topics:
        parts = tuple(answer(t, p) for p in getattr(t, partitions))
        entries.append(build(topic_type, **{name: getattr(t, name), answers: parts}))
    return tuple(entries)


def topic_result(
    result_type: Any, name: str, code: int, message: str | None, /, **values: Any
) -> Any:
    """A per-topic result (the topic admin APIs): name, error code and message, and ``values``."""
    return build(result_type, name=name, error_code=ec(code), error_message=message, **values)


def from_output(cls: type[T], output: Any, /, **values: Any) -> T:
    """The kio entry ``cls`` carrying the same-named fields of a coordinator output.

    The coordinator's outputs name their fields as Kafka's responses do, so an
    entry copies them (those ``cls`` lacks are dropped); ``values`` are set on
    top (nested entries, fields that change with the version).
    """
    copied = {f.name: getattr(output, f.name) for f in fields(output)}
    return build(cls, **{**copied, **values})


@dataclass(frozen=True, slots=True)
class Context:
    """What a handler knows about the request beyond its body.

    Attributes:
        state: the cluster's shared state.
        node_id: the node id of the broker that received the request.
        client_host: the client's address, Kafka-style (``/127.0.0.1``).
        client_id: the request header's client id.
        fetch_sessions: the receiving broker's incremental fetch sessions.
    """

    state: ClusterState
    node_id: int
    client_host: str
    client_id: str | None
    fetch_sessions: FetchSessionCache

    def leader_error(self, part: Partition | None, current_epoch: int = -1) -> int:
        """The error for serving ``part`` here (0 if this broker leads it)."""
        if part is None:
            return ErrorCode.unknown_topic_or_partition
        if current_epoch >= 0:
            if current_epoch > part.leader_epoch:
                return ErrorCode.unknown_leader_epoch
            if current_epoch < part.leader_epoch:
                return ErrorCode.fenced_leader_epoch
        if part.leader != self.node_id:
            return ErrorCode.not_leader_or_follower
        return 0

    def not_coordinator(self, group_id: str | None) -> int:
        """0 if this broker coordinates ``group_id``, else the error to answer."""
        node = self.state.coordinator_for(group_id or "")
        if node == self.node_id:
            return 0
        return ErrorCode.coordinator_not_available if node < 0 else ErrorCode.not_coordinator

    async def group_call(self, request: Request, group_ids: Sequence[str | None]) -> Any:
        """Submit a request to the coordinator from this broker and wait for its reply.

        Returns:
            The coordinator's output, or ``None`` if the groups' coordinator
            moved away from this broker while the request was parked.
        """
        return await self.state.group_call(request, group_ids=group_ids, broker_id=self.node_id)

    def coordinator_error(self, group_id: str | None) -> ErrorCode:
        """The error for a group this broker could not answer for (moved or not its own)."""
        return ec(self.not_coordinator(group_id) or ErrorCode.not_coordinator)


Handler = Callable[[Context, Any, int], Awaitable[Any]]


class ErrorResponse(Protocol):
    """Builds an API's answer carrying one error code for every part of the request."""

    def __call__(
        self, version: int, request: Any, code: int, message: str | None = None
    ) -> Any: ...


def group_handler(
    error_response: ErrorResponse,
    to_input: Callable[[Context, Any, int], Request],
    answer: Callable[[Any, int, Any], Any],
) -> Handler:
    """The handler of an API that names one group (``request.group_id``).

    A broker that does not coordinate the group answers NOT_COORDINATOR (or
    COORDINATOR_NOT_AVAILABLE); otherwise the request goes to the coordinator
    and, if the group's coordinator moved while it was parked, is answered
    NOT_COORDINATOR.

    Args:
        error_response: the API's answer carrying one error code.
        to_input: ``(context, request, version) -> coordinator input``.
        answer: ``(request, version, coordinator output) -> response``.
    """

    async def handle(ctx: Context, req: Any, v: int) -> Any:
        if code := ctx.not_coordinator(req.group_id):
            return error_response(v, req, code)
        out = await ctx.group_call(to_input(ctx, req, v), [req.group_id])
        if out is None:
            return error_response(v, req, ErrorCode.not_coordinator)
        return answer(req, v, out)

    return handle


def member_input(make: Callable[..., T], req: Any, **fields: Any) -> T:
    """A coordinator input from a request naming its sender's generation.

    Args:
        make: the input type.
        req: the request: ``group_id``, ``generation_id``, ``member_id`` and,
            from the version that adds it, ``group_instance_id``.
        fields: the input's other fields.
    """
    return make(
        group_id=req.group_id,
        generation_id=int(req.generation_id),
        member_id=req.member_id,
        group_instance_id=getattr(req, "group_instance_id", None),
        **fields,
    )


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """Everything the broker knows about one API.

    Attributes:
        key: the API key.
        min_version: the oldest version served.
        max_version: the newest version served.
        handle: ``await handle(context, request, version)``: the response, or
            :data:`NO_RESPONSE` / :data:`CLOSE` / :class:`CloseAfter`.
        error_response: ``error_response(version, request, code, message)``:
            the response Kafka sends when the whole request fails with
            ``code``, the error put where Kafka puts it for that version.
        enabled: ``enabled(state)``: whether ApiVersions advertises the API
            on this cluster (None: always).
    """

    key: int
    min_version: int
    max_version: int
    handle: Handler
    error_response: ErrorResponse
    enabled: Callable[[ClusterState], bool] | None = None

    def supports(self, version: int) -> bool:
        """Whether ``version`` is served."""
        return self.min_version <= version <= self.max_version
