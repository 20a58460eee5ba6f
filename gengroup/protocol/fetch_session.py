"""Incremental fetch sessions (KIP-227), client side, sans-IO.

Theory of operation:

A Fetch that names every partition costs bytes and broker CPU per partition
on every round trip, also for the many partitions of a large assignment that
have nothing new. A *fetch session* lets the broker remember the partitions
and their fetch parameters: after a first *full* request, each *incremental*
request names only the partitions that are new to the session or whose
parameters changed (fetch offset, ``partition_max_bytes``, leader epoch), and
lists in ``forgotten_topics_data`` those the session must drop; the broker
fetches every partition of the session and answers only for those with
something new (records, a changed high watermark or log start offset, an
error). A partition missing from an incremental answer had nothing new: that
is not an error.

One :class:`FetchSession` serves one sequence of requests that is strictly
sequential (one request in flight, each answered before the next is built):
the broker checks that the epochs come in order. A consumer keeping two
requests in flight to a broker keeps one session per in-flight slot.

Each request is planned from the *desired set*: every partition the caller
wants fetched by this request, with its :class:`PartitionParams`. The session
is that set exactly: a partition the caller leaves out this time (its buffer
is full, another request fetches it, it was revoked) is forgotten, or the
broker would go on fetching it from a stale cached offset. Positions always
come from the caller, never from the session: the session only decides
which of them must be sent again.

Epochs, as the Java client numbers them: 0 asks for a new session (a full
request), then 1, 2, ... wrapping from ``INT32_MAX`` to 1; -1 is a
sessionless full request (sessions turned off). The session's state moves
only when an answer is read:

* a full request answered with session id 0: the broker declined (the
  session cache is full, or sessions are off); the next request is full with
  epoch 0 again;
* answered with a session id: incremental requests follow;
* ``FETCH_SESSION_ID_NOT_FOUND``: the session is gone; the next request is
  full with no session id;
* ``INVALID_FETCH_SESSION_EPOCH``, ``FETCH_SESSION_TOPIC_ID_ERROR`` (a
  session made by requests naming topics by id, Fetch v13+, got one by name,
  or the other way round), any other top-level error, an answer that
  names a partition the request did not ask for, a failed request (broken
  connection, timeout, undecodable answer) or one never answered (cancelled):
  the next request is full with epoch 0 and the old session id, which makes
  the broker drop the old session and create a new one (no session leaks in
  its cache). A new handler closes a session an earlier one left the same
  way (``close=``).

After a reset nothing is lost nor repeated: the answer that caused it is
dropped whole and the next (full) request names every desired partition at
the caller's positions.

Partitions are keyed here by topic name; the request names them by the ids
the caller gives for the topics it fetches (``ids``, Fetch v13+:
:mod:`gengroup.io.fetch`), and the session keeps the id each of its topics
was added under (as Java's ``FetchSessionHandler`` does): a topic that
leaves the request is forgotten by that id (the caller need not know it
any more), and a topic whose id changed under the session (a topic created
again, before the consumer took its id) is forgotten under its old id and
added under its new one in the same request, so the broker's session never
holds the old id's partitions once the caller names the new id.

Nothing here touches a socket or a clock; :mod:`gengroup.io.fetch` sends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, NamedTuple
from uuid import UUID

from kio.schema.errors import ErrorCode

from .._types import TopicPartition, show_partitions

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "FetchPlan",
    "FetchSession",
    "PartitionParams",
    "next_epoch",
]

#: The epoch of a full request asking for a new session.
INITIAL_EPOCH: Final = 0
#: The epoch of a sessionless full request (or one closing a session).
FINAL_EPOCH: Final = -1
_INT32_MAX: Final = (1 << 31) - 1
_SESSION_ID_NOT_FOUND: Final = int(ErrorCode.fetch_session_id_not_found)
_INVALID_EPOCH: Final = int(ErrorCode.invalid_fetch_session_epoch)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error code {code}"


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: -1 stays -1, ``INT32_MAX`` wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


class PartitionParams(NamedTuple):
    """What a Fetch asks for one partition; a change of any sends it again.

    Attributes:
        offset: the fetch offset.
        max_bytes: the partition's ``partition_max_bytes``.
        leader_epoch: the current leader epoch (-1: not checked).
    """

    offset: int
    max_bytes: int
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchPlan:
    """One request of a session: what goes into the Fetch.

    Attributes:
        session_id: the request's ``session_id`` (0: none).
        epoch: the request's ``session_epoch``.
        send: the partitions to name in ``topics``, with their parameters.
        forgotten: the partitions to name in ``forgotten_topics_data``.
        desired: every partition the request fetches (in the session after it).
        ids: the id of each desired topic the caller named (v13+).
        forgotten_ids: the id each forgotten topic was added under (v13+).
    """

    session_id: int
    epoch: int
    send: Mapping[TopicPartition, PartitionParams]
    forgotten: tuple[TopicPartition, ...]
    desired: Mapping[TopicPartition, PartitionParams]
    ids: Mapping[str, UUID] = field(default_factory=dict)
    forgotten_ids: Mapping[str, UUID] = field(default_factory=dict)

    @property
    def full(self) -> bool:
        """Whether the request names every desired partition (epoch 0 or -1)."""
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSession:
    """The client side of one fetch session: plans requests, reads answers.

    Use: ``plan = session.plan(desired)``, send a Fetch built from ``plan``,
    then exactly one of ``session.answered(...)`` (an answer came) or
    ``session.failed()`` (no usable answer). A plan made while the previous
    one is unanswered counts that one as failed.

    Args:
        enabled: False sends sessionless full requests (epoch -1) only.
        close: the id of a session nobody uses any more (0: none): the first
            request names it with epoch 0, so the broker drops it as it
            creates the new one.
    """

    __slots__ = (
        "_cached",
        "_cached_ids",
        "_enabled",
        "_epoch",
        "_pending",
        "_session_id",
        "last_answer_used",
        "last_plan",
        "reset_reason",
        "resets",
    )

    def __init__(self, enabled: bool = True, close: int = 0) -> None:
        self._enabled = enabled
        self._session_id = close if enabled else 0
        self._epoch = INITIAL_EPOCH if enabled else FINAL_EPOCH
        #: What the broker's session holds, as of the last answer read.
        self._cached: dict[TopicPartition, PartitionParams] = {}
        #: The id each of its topics was added under (v13+), as of the last answer read.
        self._cached_ids: dict[str, UUID] = {}
        self._pending: FetchPlan | None = None
        #: Times an established session was dropped (errors and failures).
        self.resets = 0
        #: Why the session was last dropped or reset ("" before that).
        self.reset_reason = ""
        #: The newest plan, and whether its answer was read and is to be used.
        self.last_plan: FetchPlan | None = None
        self.last_answer_used = False

    @property
    def session_id(self) -> int:
        """The current session id (0: none)."""
        return self._session_id

    @property
    def epoch(self) -> int:
        """The epoch the next request carries."""
        return self._epoch

    @property
    def partitions(self) -> Mapping[TopicPartition, PartitionParams]:
        """The partitions the broker's session holds, as of the last answer read."""
        return self._cached

    @property
    def established(self) -> bool:
        """Whether the next request is incremental."""
        return self._session_id != 0 and self._epoch > 0

    def plan(
        self,
        desired: Mapping[TopicPartition, PartitionParams],
        ids: Mapping[str, UUID] | None = None,
    ) -> FetchPlan:
        """The next request, fetching exactly ``desired``, its topics named by
        ``ids`` (v13+; a topic left out has no id)."""
        if self._pending is not None:
            self.failed()
        wanted = dict(desired)
        found = ids or {}
        named = {tp.topic: found[tp.topic] for tp in wanted if tp.topic in found}
        if not self.established:
            plan = FetchPlan(self._session_id, self._epoch, wanted, (), wanted, named)
        else:
            cached, was = self._cached, self._cached_ids
            moved = {t for t, old in was.items() if named.get(t, old) != old}
            send = {tp: p for tp, p in wanted.items() if tp.topic in moved or cached.get(tp) != p}
            forgotten = tuple(tp for tp in cached if tp not in wanted or tp.topic in moved)
            gone = {tp.topic: was[tp.topic] for tp in forgotten if tp.topic in was}
            plan = FetchPlan(self._session_id, self._epoch, send, forgotten, wanted, named, gone)
        self._pending = self.last_plan = plan
        self.last_answer_used = False
        return plan

    def answered(
        self, error_code: int, session_id: int, partitions: Iterable[TopicPartition]
    ) -> str | None:
        """Read the answer to the pending plan: its top-level error code, its
        session id, and the partitions it answers for.

        Returns:
            None if the answer is to be used; otherwise why the session was
            dropped (the answer's partition data must then be dropped too,
            and the caller raises a top-level error other than the session
            ones as before).
        """
        plan, self._pending = self._pending, None
        if plan is None:
            return self._reset("an answer came to no request")
        reason = self._read(plan, error_code, session_id, partitions)
        self.last_answer_used = reason is None
        return reason

    def _read(
        self,
        plan: FetchPlan,
        error_code: int,
        session_id: int,
        partitions: Iterable[TopicPartition],
    ) -> str | None:
        if error_code:
            reason = self._reset(_error_name(error_code))
            if error_code == _SESSION_ID_NOT_FOUND:
                self._session_id = 0
            return reason
        if not self._enabled:
            return None
        stray = [tp for tp in partitions if tp not in plan.desired]
        if stray:
            shown = show_partitions(stray[:3])
            return self._reset(f"answer for partitions not asked for: {shown}")
        if plan.full:
            # 0: the broker declined; the next request asks again.
            self._session_id = session_id
            self._epoch = 1 if session_id else INITIAL_EPOCH
            self._cached = dict(plan.desired) if session_id else {}
            self._cached_ids = dict(plan.ids) if session_id else {}
            return None
        if session_id == 0:  # the broker closed the session; the data is good
            self._session_id, self._epoch, self._cached = 0, INITIAL_EPOCH, {}
            self._cached_ids = {}
            return None
        if session_id != plan.session_id:
            return self._reset(f"answer for session {session_id}, not {plan.session_id}")
        self._cached = dict(plan.desired)
        self._cached_ids = dict(plan.ids)
        self._epoch = next_epoch(self._epoch)
        return None

    def failed(self) -> None:
        """The pending request got no usable answer: the next request is full."""
        self._pending = None
        self._reset("request failed")

    def _reset(self, reason: str) -> str:
        self.reset_reason = reason
        if self.established:
            self.resets += 1
        self._cached, self._cached_ids = {}, {}
        if self._enabled:
            self._epoch = INITIAL_EPOCH
        return reason
