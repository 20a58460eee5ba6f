"""Fault injection for the embedded broker, and per-API error responses.

Theory of operation:

Like franz-go's ``kfake.ControlKey``, a test installs a *control* for an API key
(or for every key) with :meth:`Faults.add` (usually through
:meth:`gengroup.broker.FakeCluster.control`). Every decoded request is shown to
the installed controls, oldest first, as an :class:`Intercepted` value (header,
decoded kio request, broker id). A handler returns ``None`` (or :data:`PASS`) to
let the request through untouched -- then the next control is asked -- or an
action that *handles* it:

* :class:`Delay` -- hold the request for some seconds of event-loop time, then
  serve it normally (or apply a follow-up action);
* :class:`Drop` -- swallow it: no response is ever sent, so the client times out.
  Kafka answers a connection's requests in order, so a request that never
  completes stalls its connection: nothing after it is answered either, until
  the client gives up and closes it (what a hung broker looks like);
* :class:`Fail` -- answer it with an error code, in the shape Kafka uses for
  that API and version (:func:`error_response`);
* :class:`Respond` -- answer it with a response object the test built;
* :class:`Disconnect` -- close the client's connection without answering.

A control added with ``once=True`` removes itself the first time it handles a
request; a persistent control stays until :meth:`Control.remove` is called.
Handlers run synchronously on the event loop and must not block.

:func:`error_response` is also what the server uses for NOT_COORDINATOR and
similar whole-request refusals, so injected errors look exactly like real ones.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias
from uuid import UUID

from kio.schema.errors import ErrorCode

from ..protocol.framing import build, response_module
from ..protocol.versions import ApiKey

__all__ = [
    "PASS",
    "Action",
    "Control",
    "ControlHandler",
    "Delay",
    "Disconnect",
    "Drop",
    "Fail",
    "Faults",
    "Intercepted",
    "Pass",
    "Respond",
    "error_response",
]

_ZERO: Final = datetime.timedelta(0)
_NIL_UUID: Final = UUID(int=0)


@dataclass(frozen=True, slots=True)
class Intercepted:
    """A request as a control handler sees it.

    Attributes:
        broker_id: the node id of the broker that received it.
        api_key: the request's API key.
        api_version: the request's version.
        correlation_id: the header's correlation id.
        client_id: the header's client id (may be ``None``).
        header: the decoded kio request header.
        request: the decoded kio request.
    """

    broker_id: int
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header: Any
    request: Any


@dataclass(frozen=True, slots=True)
class Pass:
    """Let the request through (the same as returning ``None``)."""


PASS: Final = Pass()


@dataclass(frozen=True, slots=True)
class Delay:
    """Hold the request for ``seconds`` of event-loop time.

    Attributes:
        seconds: how long to hold it.
        then: what to do afterwards; ``None`` serves the request normally.
    """

    seconds: float
    then: Action | None = None


@dataclass(frozen=True, slots=True)
class Drop:
    """Never answer the request.

    The connection stays open but stalls: later requests on it are read and
    discarded, as behind a request that never completes on a real broker.
    """


@dataclass(frozen=True, slots=True)
class Fail:
    """Answer the request with ``error_code`` everywhere the API carries one.

    Attributes:
        error_code: the Kafka error code, e.g. 15 for COORDINATOR_NOT_AVAILABLE.
        message: the error message, for APIs whose responses carry one.
    """

    error_code: int
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Respond:
    """Answer the request with this kio response (it must match the request's version)."""

    response: Any


@dataclass(frozen=True, slots=True)
class Disconnect:
    """Close the client's connection instead of answering."""


Action: TypeAlias = Pass | Delay | Drop | Fail | Respond | Disconnect
ControlHandler: TypeAlias = Callable[[Intercepted], Action | None]


@dataclass(eq=False)
class Control:
    """An installed control; see :meth:`Faults.add`.

    Attributes:
        api_key: the API it intercepts (``None``: every API).
        handler: the function deciding what to do with each request.
        once: remove the control after it handled one request.
        broker_id: only intercept requests to this broker (``None``: any).
        handled: how many requests it handled so far.
    """

    api_key: int | None
    handler: ControlHandler
    once: bool = False
    broker_id: int | None = None
    handled: int = 0
    _owner: Faults | None = field(default=None, repr=False)

    @property
    def active(self) -> bool:
        """Whether the control is still installed."""
        return self._owner is not None

    def remove(self) -> None:
        """Uninstall the control (idempotent)."""
        owner, self._owner = self._owner, None
        if owner is not None and self in owner.controls:
            owner.controls.remove(self)


class Faults:
    """The ordered list of installed controls, shared by every broker of a cluster."""

    def __init__(self) -> None:
        self.controls: list[Control] = []

    def add(
        self,
        api_key: int | None,
        handler: ControlHandler,
        *,
        once: bool = False,
        broker_id: int | None = None,
    ) -> Control:
        """Install a control.

        Args:
            api_key: the API to intercept, or ``None`` for every API.
            handler: called with each matching :class:`Intercepted` request.
            once: remove the control after the first request it handles.
            broker_id: only intercept requests received by this broker.

        Returns:
            The :class:`Control`; call :meth:`Control.remove` to uninstall it.
        """
        control = Control(
            None if api_key is None else int(api_key), handler, once, broker_id, _owner=self
        )
        self.controls.append(control)
        return control

    def clear(self) -> None:
        """Remove every control."""
        for control in list(self.controls):
            control.remove()

    def decide(self, call: Intercepted) -> Action | None:
        """Ask the matching controls, oldest first, what to do with ``call``.

        Returns:
            The first action other than :class:`Pass`, or ``None``.
        """
        for control in list(self.controls):
            if not control.active:
                continue
            if control.api_key is not None and control.api_key != call.api_key:
                continue
            if control.broker_id is not None and control.broker_id != call.broker_id:
                continue
            action = control.handler(call)
            if action is None or isinstance(action, Pass):
                continue
            control.handled += 1
            if control.once:
                control.remove()
            return action
        return None


# --------------------------------------------------------------------------- error responses


def _ec(code: int) -> ErrorCode:
    return ErrorCode(code)


def error_response(
    api_key: int, version: int, request: Any, code: int, message: str | None = None
) -> Any:
    """Build the response Kafka sends when a whole request fails with ``code``.

    The error is put where Kafka puts it for that API and version: in the
    top-level ``error_code`` when there is one, otherwise in every topic,
    partition, group or key the request named.

    Args:
        api_key: the request's API key.
        version: the request's version.
        request: the decoded kio request.
        code: the Kafka error code.
        message: an error message for responses that carry one.

    Returns:
        A kio response of the same API and version.

    Raises:
        ValueError: the API is not one the embedded broker serves.
    """
    mod = response_module(api_key, version)
    e = _ec(code)
    key = ApiKey(api_key)
    if key is ApiKey.API_VERSIONS:
        return build(
            mod.ApiVersionsResponse,
            error_code=e,
            api_keys=(),
            throttle_time=_ZERO,
            supported_features=(),
            finalized_features_epoch=-1,
            finalized_features=(),
            zk_migration_ready=False,
        )
    if key is ApiKey.METADATA:
        topics = tuple(
            build(
                mod.MetadataResponseTopic,
                error_code=e,
                name=t.name,
                topic_id=getattr(t, "topic_id", None) or _NIL_UUID,
                is_internal=False,
                partitions=(),
                topic_authorized_operations=-2147483648,
            )
            for t in (request.topics or ())
        )
        return build(
            mod.MetadataResponse,
            throttle_time=_ZERO,
            brokers=(),
            cluster_id=None,
            controller_id=-1,
            topics=topics,
            cluster_authorized_operations=-2147483648,
            error_code=e,
        )
    if key is ApiKey.PRODUCE:
        return build(
            mod.ProduceResponse,
            throttle_time=_ZERO,
            node_endpoints=(),
            responses=tuple(
                build(
                    mod.TopicProduceResponse,
                    name=t.name,
                    partition_responses=tuple(
                        build(
                            mod.PartitionProduceResponse,
                            index=p.index,
                            error_code=e,
                            base_offset=-1,
                            log_append_time=None,
                            log_start_offset=-1,
                            record_errors=(),
                            error_message=message,
                        )
                        for p in t.partition_data
                    ),
                )
                for t in request.topic_data
            ),
        )
    if key is ApiKey.FETCH:
        if version >= 7:
            return build(
                mod.FetchResponse,
                throttle_time=_ZERO,
                error_code=e,
                session_id=0,
                responses=(),
            )
        return build(
            mod.FetchResponse,
            throttle_time=_ZERO,
            responses=tuple(
                build(
                    mod.FetchableTopicResponse,
                    topic=t.topic,
                    partitions=tuple(
                        build(
                            mod.PartitionData,
                            partition_index=p.partition,
                            error_code=e,
                            high_watermark=-1,
                            last_stable_offset=-1,
                            log_start_offset=-1,
                            aborted_transactions=None,
                            records=None,
                        )
                        for p in t.partitions
                    ),
                )
                for t in request.topics
            ),
        )
    if key is ApiKey.LIST_OFFSETS:
        return build(
            mod.ListOffsetsResponse,
            throttle_time=_ZERO,
            topics=tuple(
                build(
                    mod.ListOffsetsTopicResponse,
                    name=t.name,
                    partitions=tuple(
                        build(
                            mod.ListOffsetsPartitionResponse,
                            partition_index=p.partition_index,
                            error_code=e,
                            timestamp=-1,
                            offset=-1,
                            leader_epoch=-1,
                        )
                        for p in t.partitions
                    ),
                )
                for t in request.topics
            ),
        )
    if key is ApiKey.FIND_COORDINATOR:
        if version >= 4:
            return build(
                mod.FindCoordinatorResponse,
                throttle_time=_ZERO,
                coordinators=tuple(
                    build(
                        mod.Coordinator,
                        key=k,
                        node_id=-1,
                        host="",
                        port=-1,
                        error_code=e,
                        error_message=message,
                    )
                    for k in request.coordinator_keys
                ),
            )
        return build(
            mod.FindCoordinatorResponse,
            throttle_time=_ZERO,
            error_code=e,
            error_message=message,
            node_id=-1,
            host="",
            port=-1,
        )
    if key is ApiKey.JOIN_GROUP:
        return build(
            mod.JoinGroupResponse,
            throttle_time=_ZERO,
            error_code=e,
            generation_id=-1,
            protocol_type=None,
            protocol_name=None if version >= 7 else "",
            leader="",
            skip_assignment=False,
            member_id="",
            members=(),
        )
    if key is ApiKey.SYNC_GROUP:
        return build(
            mod.SyncGroupResponse,
            throttle_time=_ZERO,
            error_code=e,
            protocol_type=None,
            protocol_name=None,
            assignment=b"",
        )
    if key is ApiKey.HEARTBEAT:
        return build(mod.HeartbeatResponse, throttle_time=_ZERO, error_code=e)
    if key is ApiKey.LEAVE_GROUP:
        return build(mod.LeaveGroupResponse, throttle_time=_ZERO, error_code=e, members=())
    if key is ApiKey.OFFSET_COMMIT:
        return build(
            mod.OffsetCommitResponse,
            throttle_time=_ZERO,
            topics=tuple(
                build(
                    mod.OffsetCommitResponseTopic,
                    name=t.name,
                    partitions=tuple(
                        build(
                            mod.OffsetCommitResponsePartition,
                            partition_index=p.partition_index,
                            error_code=e,
                        )
                        for p in t.partitions
                    ),
                )
                for t in request.topics
            ),
        )
    if key is ApiKey.OFFSET_FETCH:
        if version >= 8:
            return build(
                mod.OffsetFetchResponse,
                throttle_time=_ZERO,
                groups=tuple(
                    build(
                        mod.OffsetFetchResponseGroup, group_id=g.group_id, topics=(), error_code=e
                    )
                    for g in request.groups
                ),
            )
        return build(
            mod.OffsetFetchResponse,
            throttle_time=_ZERO,
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
    if key is ApiKey.DESCRIBE_GROUPS:
        return build(
            mod.DescribeGroupsResponse,
            throttle_time=_ZERO,
            groups=tuple(
                build(
                    mod.DescribedGroup,
                    error_code=e,
                    error_message=message,
                    group_id=g,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=-2147483648,
                )
                for g in request.groups
            ),
        )
    if key is ApiKey.LIST_GROUPS:
        return build(mod.ListGroupsResponse, throttle_time=_ZERO, error_code=e, groups=())
    if key is ApiKey.DELETE_GROUPS:
        return build(
            mod.DeleteGroupsResponse,
            throttle_time=_ZERO,
            results=tuple(
                build(mod.DeletableGroupResult, group_id=g, error_code=e)
                for g in request.groups_names
            ),
        )
    if key is ApiKey.CREATE_TOPICS:
        return build(
            mod.CreateTopicsResponse,
            throttle_time=_ZERO,
            topics=tuple(
                build(
                    mod.CreatableTopicResult,
                    name=t.name,
                    topic_id=_NIL_UUID,
                    error_code=e,
                    error_message=message,
                    topic_config_error_code=_ec(0),
                    num_partitions=-1,
                    replication_factor=-1,
                    configs=None,
                )
                for t in request.topics
            ),
        )
    if key is ApiKey.DELETE_TOPICS:
        if version >= 6:
            entries = [(t.name, t.topic_id) for t in request.topics]
        else:
            entries = [(n, _NIL_UUID) for n in request.topic_names]
        return build(
            mod.DeleteTopicsResponse,
            throttle_time=_ZERO,
            responses=tuple(
                build(
                    mod.DeletableTopicResult,
                    name=n,
                    topic_id=i,
                    error_code=e,
                    error_message=message,
                )
                for n, i in entries
            ),
        )
    if key is ApiKey.CREATE_PARTITIONS:
        return build(
            mod.CreatePartitionsResponse,
            throttle_time=_ZERO,
            results=tuple(
                build(
                    mod.CreatePartitionsTopicResult,
                    name=t.name,
                    error_code=e,
                    error_message=message,
                )
                for t in request.topics
            ),
        )
    raise ValueError(f"no error response for api key {api_key}")  # pragma: no cover
