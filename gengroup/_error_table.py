"""The one error table: what a client does about each Kafka error code (sans-IO).

Theory of operation:

Every non-zero error code a broker can answer gets one :class:`ErrorPolicy`,
read by every part of the client that meets error codes: the typed exceptions
of :mod:`gengroup._errors` (which class a code raises), the retry helper of
:mod:`gengroup.io.retry` (what is retried, and what is done before the retry),
the group member (:func:`outcome_for`), the fetcher, the producer and
:class:`~gengroup.admin.Admin`.

A policy has two columns:

* ``action`` -- what any request's caller does: ``"find_coordinator"`` (the
  coordinator moved: look it up again), ``"refresh_metadata"`` (leadership or
  topic existence changed), ``"rejoin"`` (the group is rebalancing),
  ``"reset_member"`` (the member id or generation is unknown), ``"retry"``
  (transient: back off and send again) or ``"fail"``.
* ``outcome`` -- what the group member does (:class:`Outcome`): the action,
  seen from the member's run loop, where stale metadata is an ordinary retry
  and a few codes Kafka calls fatal (``UNKNOWN_SERVER_ERROR``) are worth
  rejoining for.

Codes without an entry of their own follow Kafka's ``retriable`` flag (from
kio's generated ``ErrorCode`` enum, which is generated from Apache Kafka's
``Errors.java``): ``"retry"`` / ``RETRY`` if retriable, else ``"fail"`` /
``FATAL``. Codes kio does not know are ``"fail"`` / ``FATAL``.

Nothing here does I/O: the table is data and two lookups.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final, Literal

from kio.schema.errors import ErrorCode

__all__ = [
    "ERROR_OUTCOMES",
    "ERROR_TABLE",
    "RETRY_ACTIONS",
    "Action",
    "ErrorPolicy",
    "Outcome",
    "outcome_for",
    "policy_for",
]

Action = Literal["find_coordinator", "refresh_metadata", "rejoin", "reset_member", "retry", "fail"]

#: The actions after which the same request is worth sending again.
RETRY_ACTIONS: Final[frozenset[Action]] = frozenset(
    {"find_coordinator", "refresh_metadata", "retry"}
)


class Outcome(enum.Enum):
    """What a group member does about an error."""

    REJOIN = "rejoin"
    RESET_MEMBER = "reset_member"
    FIND_COORDINATOR = "find_coordinator"
    RETRY = "retry"
    FATAL = "fatal"


@dataclass(frozen=True, slots=True)
class ErrorPolicy:
    """What to do about one error code.

    Attributes:
        code: Kafka's numeric error code.
        name: Kafka's name for it (``UNKNOWN_ERROR_CODE_<n>`` for unknown codes).
        kafka_retriable: whether Kafka marks the code retriable.
        action: what a request's caller does about it.
        outcome: what a group member does about it.
    """

    code: int
    name: str
    kafka_retriable: bool
    action: Action
    outcome: Outcome

    @property
    def retriable(self) -> bool:
        """Whether sending the request again (after the action) may succeed."""
        return self.kafka_retriable or self.action in RETRY_ACTIONS


_E = ErrorCode

#: Codes whose action is not the default one of their ``retriable`` flag.
_ACTIONS: Final[dict[int, Action]] = {
    _E.not_coordinator: "find_coordinator",
    _E.coordinator_not_available: "find_coordinator",
    _E.coordinator_load_in_progress: "retry",
    _E.rebalance_in_progress: "rejoin",
    _E.member_id_required: "rejoin",  # KIP-394: rejoin with the generated member id
    _E.illegal_generation: "reset_member",
    _E.unknown_member_id: "reset_member",
    _E.unknown_topic_or_partition: "refresh_metadata",
    _E.not_leader_or_follower: "refresh_metadata",
    _E.leader_not_available: "refresh_metadata",
    _E.replica_not_available: "refresh_metadata",
    _E.kafka_storage_error: "refresh_metadata",
    _E.fenced_leader_epoch: "refresh_metadata",
    _E.unknown_leader_epoch: "refresh_metadata",
    _E.offset_not_available: "refresh_metadata",
    _E.unknown_topic_id: "refresh_metadata",
    _E.inconsistent_topic_id: "refresh_metadata",
    _E.not_controller: "refresh_metadata",
    # Kafka's flag says nothing of these; a client cannot fix them by retrying.
    _E.offset_out_of_range: "fail",
    _E.fenced_instance_id: "fail",
    _E.group_id_not_found: "fail",
    _E.topic_already_exists: "fail",
    _E.invalid_session_timeout: "fail",
    _E.inconsistent_group_protocol: "fail",
    _E.unsupported_version: "fail",
    _E.group_max_size_reached: "fail",
    # Wrong credentials or mechanism: retrying only repeats the failure (and
    # may lock the user out), so these are never retried.
    _E.sasl_authentication_failed: "fail",
    _E.unsupported_sasl_mechanism: "fail",
    _E.illegal_sasl_state: "fail",
    # The consumer group protocol (KIP-848). A fenced member rejoins with epoch
    # 0 and no partitions; a commit under an epoch the member has moved past is
    # sent again under the newest one (as the Java client does).
    _E.fenced_member_epoch: "reset_member",
    _E.stale_member_epoch: "retry",
    _E.unreleased_instance_id: "fail",
    _E.unsupported_assignor: "fail",
}

#: Codes whose member outcome is not the one their action implies.
_OUTCOME_OVERRIDES: Final[dict[int, Outcome]] = {
    # The coordinator hit an unexpected error: joining again usually works.
    _E.unknown_server_error: Outcome.RETRY,
}

_OUTCOME_OF_ACTION: Final[dict[Action, Outcome]] = {
    "rejoin": Outcome.REJOIN,
    "reset_member": Outcome.RESET_MEMBER,
    "find_coordinator": Outcome.FIND_COORDINATOR,
    "retry": Outcome.RETRY,
    "fail": Outcome.FATAL,
}


def _policy(code: ErrorCode) -> ErrorPolicy:
    retriable = bool(code.retriable)
    action = _ACTIONS.get(code, "retry" if retriable else "fail")
    outcome = _OUTCOME_OVERRIDES.get(code)
    if outcome is None:
        if action == "refresh_metadata":  # the member has no metadata to refresh
            outcome = Outcome.RETRY if retriable else Outcome.FATAL
        else:
            outcome = _OUTCOME_OF_ACTION[action]
    return ErrorPolicy(int(code), code.name.upper(), retriable, action, outcome)


#: Every error code kio knows -> its policy.
ERROR_TABLE: Final[dict[int, ErrorPolicy]] = {int(c): _policy(c) for c in ErrorCode}

#: Every error code kio knows -> what a member does about it.
ERROR_OUTCOMES: Final[dict[int, Outcome]] = {
    code: policy.outcome for code, policy in ERROR_TABLE.items()
}


def policy_for(code: int) -> ErrorPolicy:
    """The policy of error ``code`` (``"fail"`` / ``FATAL`` for codes kio does not know)."""
    found = ERROR_TABLE.get(code)
    if found is None:
        return ErrorPolicy(code, f"UNKNOWN_ERROR_CODE_{code}", False, "fail", Outcome.FATAL)
    return found


def outcome_for(code: int) -> Outcome:
    """What a group member does about error ``code``."""
    return policy_for(code).outcome
