"""The exception hierarchy of gengroup and the complete Kafka error-code table.

Theory of operation:

Foreign exceptions are translated at the boundary (socket errors, kio decode
errors, compression errors) into this small, documented hierarchy, like
httpcore's ``map_exceptions``. Two families matter most:

* :class:`BrokerError` -- the broker answered with a non-zero error code. Every
  code of Kafka's table (taken from kio's generated ``ErrorCode`` enum, which is
  generated from Apache Kafka's ``Errors.java``) maps to an instance carrying
  ``code``, ``name`` and ``retriable``; the codes a client acts on get their own
  subclass so callers can ``except`` them by type. Each class also says what a
  client does about it: :attr:`BrokerError.action` is one of
  ``"find_coordinator"``, ``"refresh_metadata"``, ``"rejoin"``,
  ``"reset_member"``, ``"retry"`` or ``"fail"``. Which class a code gets is
  decided by the one error table, :mod:`gengroup._error_table`: a code without
  a class of its own gets the base class of its action, and
  :func:`is_retriable` reads the same table for every retry loop.
* Connection failures separate "you closed it" (:class:`ConnectionClosed`)
  from "it broke" (:class:`BrokenConnection`), like trio's
  ``ClosedResourceError`` / ``BrokenResourceError``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Final, Self

from kio.schema.errors import ErrorCode

from ._error_table import RETRY_ACTIONS, Action, policy_for

# No __all__: the package namespace (gengroup/__init__.py) lists the public errors.


class GengroupError(Exception):
    """Base class of every exception gengroup raises on purpose.

    Every one can be copied (``copy.copy``) and pickled, whatever its
    constructor takes: the copy has the same class, message and attributes.
    """

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_error, (type(self), self.args, self.__dict__))


def _rebuild_error(
    cls: type[BaseException], args: tuple[object, ...], state: dict[str, Any]
) -> BaseException:
    """An error of ``cls`` holding ``args`` and ``state``, built without its
    constructor, whose parameters need not be ``args``."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


def copy_error(exc: BaseException) -> BaseException:
    """A distinct error like ``exc``, to raise in one more task.

    One exception object raised in several tasks would mix their tracebacks,
    and ``raise exc from exc`` makes a cause chain without an end. The copy has
    ``exc``'s class, message and attributes, and a traceback, cause, context
    and notes of its own. A foreign error that cannot be rebuilt (a
    constructor and a ``__new__`` that refuse its ``args``) comes as a
    :class:`GengroupError` naming it; ``raise copy_error(exc) from exc`` chains
    it to ``exc`` either way.
    """
    twin: BaseException | None
    try:
        twin = copy.copy(exc)  # a builtin's constructor fills its C fields
    except Exception:
        twin = None
    if twin is None or twin is exc or type(twin) is not type(exc):
        try:
            twin = _rebuild_error(type(exc), exc.args, getattr(exc, "__dict__", {}))
        except Exception:
            return GengroupError(f"{type(exc).__name__}: {exc}")
    twin.__traceback__ = twin.__cause__ = twin.__context__ = None
    twin.__suppress_context__ = False
    notes = getattr(twin, "__notes__", None)
    if isinstance(notes, list):
        twin.__notes__ = list(notes)
    return twin


class ConfigError(GengroupError, ValueError):
    """A configuration value is invalid (raised at construction, before any I/O)."""


class ProtocolError(GengroupError):
    """Bytes from the peer could not be parsed: truncated, corrupted or hostile input."""


class CorruptRecordError(ProtocolError):
    """A record batch failed its CRC check or its contents are inconsistent."""


class DecompressionLimitExceeded(CorruptRecordError):
    """A compressed record batch decompresses to more than the reader allows.

    The records are not damaged: the batch holds more data than the limit
    lets one batch be decompressed into, a guard against decompression bombs
    (a few KiB on the wire can inflate to gigabytes). A consumer group's
    limit is its ``max_decompressed_bytes`` setting (64 MiB by default):
    raise it to read such a batch. The Java consumer has no such limit.
    """


class MissingDependency(GengroupError, ImportError):
    """An optional dependency a feature needs is not installed (the message names the extra)."""


class UnsupportedVersion(GengroupError):
    """The broker and gengroup share no version of an API that is needed."""


class KafkaConnectionError(GengroupError):
    """Base class of connection-level failures."""


class BufferExhausted(GengroupError, TimeoutError):
    """``Producer.send`` found no room in the buffer (``buffer_bytes``) within ``max_block``.

    Records are queued faster than the brokers take them (or the brokers are
    unreachable); the record was not queued. As Java's ``BufferExhaustedException``.
    """


class BrokenConnection(KafkaConnectionError):
    """The connection to a broker broke (reset, refused, EOF, malformed frame).

    Every request in flight on a broken connection fails with this error.
    """


class ClusterUnreachable(BrokenConnection):
    """No broker of the cluster could be reached: every address was tried and failed.

    Attributes:
        causes: each address tried (``host:port``) and why it failed
            ("connection refused", "DNS lookup failed: ...", "connect timed out", ...).
        unreachable_for: seconds since the cluster was last reachable (0 on the first failure).
        exhausted: True once ``unreachable_for`` passed the client's
            ``unreachable_timeout``: the client stops retrying and this error
            reaches the caller (a consumer group's ``async for``).
    """

    def __init__(
        self, causes: dict[str, str], unreachable_for: float = 0.0, *, exhausted: bool = False
    ) -> None:
        tried = "; ".join(f"{addr}: {cause}" for addr, cause in causes.items()) or "no address"
        lead = (
            f"cluster unreachable for {unreachable_for:.1f} s"
            if unreachable_for
            else "cluster unreachable"
        )
        super().__init__(f"{lead}; tried {tried}")
        self.causes = dict(causes)
        self.unreachable_for = unreachable_for
        self.exhausted = exhausted


def exhausted_unreachable(
    exc: BaseException,
) -> ClusterUnreachable | CoordinatorUnavailable | None:
    """The exhausted outage error ``exc`` is or carries, if any.

    An outage is the cluster unreachable (:class:`ClusterUnreachable`) or the
    key's coordinator unavailable (:class:`CoordinatorUnavailable`); either
    stops being retried once it has lasted ``unreachable_timeout``.
    Follows ``__cause__`` and ``__context__``: a coordinator lookup that timed
    out while the cluster was unreachable carries the error as its context.
    The first outage error on the chain decides: ``None`` while it is not
    ``exhausted`` yet.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (ClusterUnreachable, CoordinatorUnavailable)):
            return seen if seen.exhausted else None
        seen = seen.__cause__ or seen.__context__
    return None


class ConnectionClosed(KafkaConnectionError):
    """The connection was closed by this process (``aclose()`` was called)."""


class ClosedInFlight(ConnectionClosed):
    """A record's producer was closed while the broker had not answered its Produce request.

    The producer (or the :class:`~gengroup.io.cluster.Cluster` it shares) was
    closed after the request carrying the record had gone out, and before an
    answer came: the broker may have written the record, so sending it again
    may write it twice (as after a :class:`RequestTimedOut` for an unanswered
    request). A :class:`ConnectionClosed` that is not this one means the
    record was never sent.
    """


class RequestTimedOut(KafkaConnectionError):
    """A request got no response within its timeout.

    From a connection's own deadline, the connection is closed. From the
    producer's ``delivery_timeout``, the connection stays open for its other
    requests, and the records may yet be written if the answer comes later.
    """


class AuthenticationError(GengroupError):
    """A broker did not accept this client's credentials: SASL authentication failed.

    Never retried: the same credentials would fail again, and a broker may
    lock out a user after repeated failures. Raised by the connection attempt,
    it reaches the caller of the client (``async for`` over a consumer group,
    ``Producer.send``, every ``Admin`` operation) at once.

    Attributes:
        broker: the broker's ``host:port``.
        mechanism: the SASL mechanism (``"SCRAM-SHA-256"`` ...), or ``"TLS"``.
    """

    def __init__(self, message: str, *, broker: str, mechanism: str) -> None:
        super().__init__(message)
        self.broker = broker
        self.mechanism = mechanism


class TLSError(AuthenticationError):
    """A TLS connection to a broker could not be established with a verified peer.

    The broker's certificate was not signed by a trusted authority
    (``reason="certificate verify failed"``), does not name the host connected
    to (``reason="hostname mismatch"``), or the broker refused the handshake,
    e.g. for a missing or untrusted client certificate
    (``reason="rejected by the broker"``). Not retried: the configuration or
    the certificates must change. A handshake cut short by a broker that goes
    away is a :class:`BrokenConnection` instead, and retried.

    Attributes:
        reason: one of the three reasons above.
    """

    def __init__(self, message: str, *, broker: str, reason: str) -> None:
        super().__init__(message, broker=broker, mechanism="TLS")
        self.reason = reason


class DeserializationError(GengroupError):
    """A key or value deserializer raised; names the topic, partition and offset."""


class GenerationEnded(GengroupError):
    """An operation was attempted on a generation that has already ended.

    Raised locally: nothing was sent to the broker. A task of a generation
    that lets its own generation's one out while the generation is ending
    exits as its cancellation would have made it (no failure).

    Attributes:
        identity: the generation that had ended (a ``GenerationIdentity``;
            None if not known).
    """

    def __init__(self, message: str, identity: Any = None) -> None:
        super().__init__(message)
        self.identity: Any = identity


class TopicDeleted(GengroupError):
    """Offsets given to ``gen.commit(offsets)`` were not stored: their topic was
    deleted (or deleted and created again) since the generation formed.

    The commit's other partitions were stored; the generation ends (the member
    rejoins). Kafka deleted the topic's committed offsets with it.

    Attributes:
        partitions: the partitions whose offsets were not stored (TopicPartition).
    """

    def __init__(self, message: str, partitions: Iterable[Any] = ()) -> None:
        super().__init__(message)
        self.partitions: frozenset[Any] = frozenset(partitions)


class GroupClosed(GengroupError):
    """:meth:`~gengroup.ConsumerGroup.next` was called on a closed group.

    ``async for gen in group`` ends quietly instead.
    """


class TaskStuckError(GengroupError):
    """A generation's task did not return within the teardown deadline after cancellation.

    If a task's exception ended the generation, it is this error's
    ``__cause__`` (it was also logged at ERROR, with its traceback, when raised).
    """


class GroupsNotDeleted(GengroupError, ExceptionGroup[Exception]):
    """:meth:`Admin.delete_groups <gengroup.Admin.delete_groups>` of several
    groups could not delete some of them; it tried every one.

    An exception group of each failed group's error (``except*
    GroupIdNotFound`` works); its message names each failed group and why.

    Attributes:
        deleted: the groups that were deleted, in the order given.
        errors: each group that was not deleted, and its error
            (:class:`GroupIdNotFound`, a NON_EMPTY_GROUP :class:`BrokerError`,
            a :class:`TimeoutError` ...).
    """

    deleted: list[str]
    _failed: list[str]

    def __new__(cls, deleted: Sequence[str], errors: Mapping[str, Exception]) -> Self:
        failed = "; ".join(f"{g!r} ({type(e).__name__}: {e})" for g, e in errors.items())
        total = len(deleted) + len(errors)
        message = f"{len(errors)} of {total} groups not deleted: {failed}"
        if deleted:
            message += f"; deleted: {', '.join(map(repr, deleted))}"
        self = super().__new__(cls, message, list(errors.values()))
        self.deleted = list(deleted)
        self._failed = list(errors)
        return self

    @property
    def errors(self) -> dict[str, Exception]:
        """Each group that was not deleted, and its error."""
        return dict(zip(self._failed, self.exceptions, strict=True))


class BrokerError(GengroupError):
    """The broker answered with a non-zero error code.

    Attributes:
        code: Kafka's numeric error code.
        name: Kafka's name for it, e.g. ``ILLEGAL_GENERATION``.
        retriable: whether Kafka marks it retriable.
        action: what a client does about it.
    """

    action: ClassVar[Action] = "fail"

    def __init__(self, code: int, message: str | None = None) -> None:
        policy = policy_for(code)
        self.code = code
        self.name = policy.name
        self.retriable = policy.kafka_retriable
        text = f"{self.name} ({code})"
        if message:
            text += f": {message}"
        super().__init__(text)


class RetriableBrokerError(BrokerError):
    """A transient broker error: retry after a backoff."""

    action: ClassVar[Action] = "retry"


class CoordinatorError(BrokerError):
    """The group coordinator moved or is unavailable: look it up again."""

    action: ClassVar[Action] = "find_coordinator"


class StaleMetadataError(BrokerError):
    """Partition leadership or topic existence changed: refresh metadata."""

    action: ClassVar[Action] = "refresh_metadata"


class RebalanceError(BrokerError):
    """The group is rebalancing: end the generation and rejoin with the same member id."""

    action: ClassVar[Action] = "rejoin"


class MemberResetError(BrokerError):
    """The member or its generation is no longer known: rejoin with an empty member id."""

    action: ClassVar[Action] = "reset_member"


class OffsetOutOfRange(BrokerError):
    """The requested offset is outside the partition's log."""


class UnknownTopicOrPartition(StaleMetadataError):
    """The topic or partition does not exist on this broker."""


class NotLeaderOrFollower(StaleMetadataError):
    """This broker does not lead the partition."""


class CoordinatorLoadInProgress(RetriableBrokerError):
    """The coordinator is loading the group's state: retry."""


class CoordinatorNotAvailable(CoordinatorError):
    """The coordinator is not available."""


class NotCoordinator(CoordinatorError):
    """This broker is not the group's coordinator."""


class CoordinatorUnavailable(CoordinatorNotAvailable):
    """FindCoordinator answered COORDINATOR_NOT_AVAILABLE: no broker serves the key now.

    Kafka answers so while the partition of its internal topic that holds the
    key (``__consumer_offsets`` for a group) has no leader: for seconds while
    that leadership moves, and for good when the topic cannot be created (fewer
    live brokers than ``offsets.topic.replication.factor``). The lookup retries
    it, with backoff, like any coordinator error, until it has lasted the
    client's ``unreachable_timeout``. A consumer group also raises it when the
    coordinator FindCoordinator found answered the group's requests
    NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE for that long; the message
    names the broker and the request.

    Attributes:
        key: the coordinator key (the group id).
        unavailable_for: seconds since FindCoordinator first answered so
            without a coordinator found since (0 on the first answer).
        exhausted: True once ``unavailable_for`` passed the client's
            ``unreachable_timeout``: the client stops retrying and this error
            reaches the caller (a consumer group's ``async for``).
    """

    def __init__(
        self,
        key: str,
        unavailable_for: float = 0.0,
        *,
        exhausted: bool = False,
        message: str | None = None,
    ) -> None:
        lead = f"no coordinator for {key!r}"
        if unavailable_for:
            lead += f" for {unavailable_for:.1f} s"
        super().__init__(
            ErrorCode.coordinator_not_available, f"{lead}: {message}" if message else lead
        )
        self.key = key
        self.unavailable_for = unavailable_for
        self.exhausted = exhausted
        self.broker_message = message


class IllegalGeneration(MemberResetError):
    """The generation id is not the group's current one."""


class UnknownMemberId(MemberResetError):
    """The member id is not known to the coordinator."""


class RebalanceInProgress(RebalanceError):
    """The group is rebalancing."""


class MemberIdRequired(BrokerError):
    """KIP-394: rejoin with the member id the coordinator generated."""

    action: ClassVar[Action] = "rejoin"


class FencedInstanceId(BrokerError):
    """Another member with the same ``group.instance.id`` took over (fatal)."""


class GroupIdNotFound(BrokerError):
    """The group does not exist."""


class TopicAlreadyExists(BrokerError):
    """The topic already exists."""


class InvalidSessionTimeout(BrokerError):
    """The session timeout is outside the broker's allowed range."""


class InconsistentGroupProtocol(BrokerError):
    """The member's protocols share nothing with the group's."""


class UnsupportedVersionError(BrokerError):
    """The broker does not support the version of the request."""


class GroupMaxSizeReached(BrokerError):
    """The group is full."""


class TopicAuthorizationFailed(BrokerError):
    """The broker's ACLs do not let this client's principal use the topic (fatal)."""


class GroupAuthorizationFailed(BrokerError):
    """The broker's ACLs do not let this client's principal use the group (fatal)."""


class ClusterAuthorizationFailed(BrokerError):
    """The broker's ACLs do not let this client's principal do this cluster operation (fatal)."""


class FencedMemberEpoch(MemberResetError):
    """KIP-848: the member's epoch is not the coordinator's: it lost its partitions
    and rejoins with epoch 0."""


class StaleMemberEpoch(RetriableBrokerError):
    """KIP-848: a commit carried an epoch the member has moved past: send it again
    with the newest one."""


class UnreleasedInstanceId(BrokerError):
    """KIP-848: a member with this ``group_instance_id`` is still in the group (fatal)."""


class UnsupportedAssignor(BrokerError):
    """KIP-848: the broker has no server-side assignor of the name asked for (fatal)."""


class GroupProtocolUnsupported(UnsupportedVersion):
    """The broker does not speak the group protocol chosen with ``group_protocol``."""


_SPECIFIC: Final[dict[int, type[BrokerError]]] = {
    ErrorCode.offset_out_of_range: OffsetOutOfRange,
    ErrorCode.unknown_topic_or_partition: UnknownTopicOrPartition,
    ErrorCode.not_leader_or_follower: NotLeaderOrFollower,
    ErrorCode.coordinator_load_in_progress: CoordinatorLoadInProgress,
    ErrorCode.coordinator_not_available: CoordinatorNotAvailable,
    ErrorCode.not_coordinator: NotCoordinator,
    ErrorCode.illegal_generation: IllegalGeneration,
    ErrorCode.unknown_member_id: UnknownMemberId,
    ErrorCode.rebalance_in_progress: RebalanceInProgress,
    ErrorCode.member_id_required: MemberIdRequired,
    ErrorCode.fenced_instance_id: FencedInstanceId,
    ErrorCode.group_id_not_found: GroupIdNotFound,
    ErrorCode.topic_already_exists: TopicAlreadyExists,
    ErrorCode.invalid_session_timeout: InvalidSessionTimeout,
    ErrorCode.inconsistent_group_protocol: InconsistentGroupProtocol,
    ErrorCode.unsupported_version: UnsupportedVersionError,
    ErrorCode.group_max_size_reached: GroupMaxSizeReached,
    ErrorCode.topic_authorization_failed: TopicAuthorizationFailed,
    ErrorCode.group_authorization_failed: GroupAuthorizationFailed,
    ErrorCode.cluster_authorization_failed: ClusterAuthorizationFailed,
    ErrorCode.fenced_member_epoch: FencedMemberEpoch,
    ErrorCode.stale_member_epoch: StaleMemberEpoch,
    ErrorCode.unreleased_instance_id: UnreleasedInstanceId,
    ErrorCode.unsupported_assignor: UnsupportedAssignor,
}

#: The class of a code without one of its own: the base class of its action.
_BY_ACTION: Final[dict[Action, type[BrokerError]]] = {
    "find_coordinator": CoordinatorError,
    "refresh_metadata": StaleMetadataError,
    "rejoin": RebalanceError,
    "reset_member": MemberResetError,
    "retry": RetriableBrokerError,
    "fail": BrokerError,
}


def error_for_code(code: int, message: str | None = None) -> BrokerError:
    """Return the typed exception for a non-zero Kafka error code.

    Args:
        code: the error code from a response.
        message: optional context (API, topic, partition, broker message).

    Returns:
        An instance of the most specific :class:`BrokerError` subclass.
    """
    cls = _SPECIFIC.get(code) or _BY_ACTION[policy_for(code).action]
    return cls(code, message)


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise :func:`error_for_code` unless ``code`` is zero."""
    if code:
        raise error_for_code(code, message)


def is_retriable(exc: BaseException) -> bool:
    """Whether the request that failed with ``exc`` is worth sending again.

    Connection failures are; a broker error is when Kafka marks it retriable or
    its action (find the coordinator, refresh metadata, retry) comes before a
    retry. Anything else (a bug, a local error) is not -- in particular an
    :class:`AuthenticationError` (wrong credentials, an untrusted certificate)
    is never retried.
    """
    if isinstance(exc, AuthenticationError):
        return False
    if isinstance(exc, (ClusterUnreachable, CoordinatorUnavailable)):
        return not exc.exhausted
    if isinstance(exc, KafkaConnectionError):
        return True
    if isinstance(exc, BrokerError):
        return exc.retriable or exc.action in RETRY_ACTIONS
    return False
