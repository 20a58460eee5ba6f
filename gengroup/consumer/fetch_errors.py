"""The prefetcher's Fetch errors: what it does about each, backed off, counted and logged.

Theory of operation:

A Fetch fails in two ways, and :class:`FetchErrors` holds the state of both
for one prefetcher (:mod:`gengroup.consumer.prefetch`):

* *The whole request*: a broken connection, an undecodable answer, or a
  top-level error code. :func:`request_action` says what the broker loop
  does, from the client's error table (:mod:`gengroup._error_table`): stale
  leadership (a broken connection and an undecodable answer count as such)
  looks the broker's partitions' leaders up again; a transient code
  (REQUEST_TIMED_OUT and the others Kafka marks retriable) and
  UNKNOWN_SERVER_ERROR, which Kafka's ``KafkaApis`` answers for any
  unexpected exception while it handles a Fetch, are fetched again, as the
  Java consumer does (the answer already dropped the connection's fetch
  session: its next request is full); only the rest (authorization ...)
  fails the prefetcher, and with it the generation. Either retry waits the
  broker's :class:`~gengroup.io.retry.Backoff` first (:meth:`broker_failed`),
  which grows while the broker keeps failing and starts again once it answers
  (:meth:`broker_ok`).
* *One partition of an answer*: its error code. :func:`partition_action`
  says what happens: the same, per partition (stale leadership, a transient
  code, UNKNOWN_SERVER_ERROR: fetched again; OFFSET_OUT_OF_RANGE resets the
  position per ``start_offset``, or with ``"error"`` goes to the partition's
  worker, as the non-retriable codes do), except that
  CORRUPT_MESSAGE -- the broker found its own log damaged at the position
  asked for -- goes to the worker as the
  :class:`~gengroup.CorruptRecordError` that :func:`corrupt_message` makes
  (the Java consumer raises it from ``poll``; fetching it again only reads
  the same damaged segment). A partition fetched again waits its own
  backoff first (:meth:`partition_failed` says how long), growing while
  its errors last and starting again with its next good answer
  (:meth:`partition_ok`); the other partitions of the broker are fetched
  meanwhile.

Every failed request and every partition error is counted in the member's
``fetch_errors``. Each change of state is logged once, at INFO on the
``gengroup`` logger: a broker's first failure, and its first good answer
after; a partition's first error of a code, and its first good answer
after. A Fetch answer's partitions are told together, one line per code
(:meth:`flush`), so a leadership move of many partitions is a line, not one
per partition.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Final, Literal

from kio.schema.errors import ErrorCode

from .._error_table import Outcome, outcome_for
from .._errors import (
    BrokerError,
    CorruptRecordError,
    KafkaConnectionError,
    OffsetOutOfRange,
    ProtocolError,
)
from .._types import TopicPartition
from ..io.retry import Backoff
from .metrics import GroupMetrics

__all__ = [
    "FetchErrors",
    "PartitionAction",
    "corrupt_message",
    "partition_action",
    "request_action",
]

log = logging.getLogger("gengroup")

_CORRUPT_MESSAGE: Final = int(ErrorCode.corrupt_message)
_ID_REFUSALS: Final = frozenset(
    {int(ErrorCode.unknown_topic_id), int(ErrorCode.inconsistent_topic_id)}
)

#: What the prefetcher does about an error: look the leader up again
#: (``"refresh_metadata"``), fetch again after a backoff (``"retry"``), reset
#: the position per ``start_offset`` (``"reset"``, partitions only), or fail
#: (the request: the generation ends; a partition: its worker raises).
PartitionAction = Literal["refresh_metadata", "retry", "reset", "fail"]


def _broker_action(exc: BaseException) -> PartitionAction:
    """The error table's action for a broker's error code, as the prefetcher takes it:
    UNKNOWN_SERVER_ERROR, whose member outcome is a retry, is retried."""
    if isinstance(exc, BrokerError):
        action = exc.action
        if action in ("refresh_metadata", "retry"):
            return action
        if outcome_for(exc.code) is Outcome.RETRY:
            return "retry"
    return "fail"


def request_action(exc: BaseException) -> PartitionAction:
    """What a broker loop does about its Fetch request failing with ``exc``.

    A broken connection or an undecodable answer counts as stale leadership
    (look the leader up again); a broker error follows the error table, with
    UNKNOWN_SERVER_ERROR retried; anything else fails.
    """
    if isinstance(exc, KafkaConnectionError | ProtocolError):
        return "refresh_metadata"
    return _broker_action(exc)


def partition_action(error: BaseException, start_offset: str) -> PartitionAction:
    """What the prefetcher does about one partition's ``error`` in a Fetch answer.

    Args:
        error: the partition's error: a broker's code, or damage its batches showed.
        start_offset: ``GroupConfig.start_offset`` (``"error"``: an offset out of
            range goes to the worker, else the position is reset).
    """
    if isinstance(error, OffsetOutOfRange):
        return "fail" if start_offset == "error" else "reset"
    if isinstance(error, BrokerError) and error.code == _CORRUPT_MESSAGE:
        return "fail"
    return _broker_action(error)


def id_refused(error: BaseException) -> bool:
    """Whether a partition's ``error`` refuses the topic id the Fetch named it by
    (UNKNOWN_TOPIC_ID, INCONSISTENT_TOPIC_ID): the topic may have been created again."""
    return isinstance(error, BrokerError) and error.code in _ID_REFUSALS


def corrupt_message(tp: TopicPartition, offset: int, error: BaseException) -> BaseException:
    """The error a partition's worker gets for ``error``: a broker's CORRUPT_MESSAGE
    becomes a :class:`~gengroup.CorruptRecordError` naming the partition and the
    offset (the broker's error is its cause); any other error is itself."""
    if not isinstance(error, BrokerError) or error.code != _CORRUPT_MESSAGE:
        return error
    damaged = CorruptRecordError(
        f"Fetch {tp}: the broker found its log damaged at offset {offset} ({error.name})"
    )
    damaged.__cause__ = error
    return damaged


class FetchErrors:
    """The failures of one prefetcher's Fetch requests and partitions: backoffs, counts, logs.

    Args:
        group_id: the group, for log lines.
        retry_backoff: the cluster's first backoff, in seconds.
        metrics: the member's counters (``fetch_errors``).
    """

    def __init__(self, group_id: str, retry_backoff: float, metrics: GroupMetrics) -> None:
        self._group_id = group_id
        self._base = retry_backoff
        self._metrics = metrics
        # One backoff per broker, kept across the loop restarts that a failed
        # fetch causes, so a broker that stays down is retried less and less
        # often; dropped by the broker's next good answer. The failing set
        # lets each broker's failure and recovery be logged once.
        self._brokers: dict[int, Backoff] = {}
        self._failing_brokers: set[int] = set()
        #: Each partition with errors: its backoff, and the codes logged since
        #: its last good answer (two errors taking turns are a line each, once).
        self._partitions: dict[TopicPartition, tuple[Backoff, frozenset[int]]] = {}
        #: What the current answer changed, told by :meth:`flush`.
        self._failed: dict[tuple[int, str], list[TopicPartition]] = defaultdict(list)
        self._recovered: list[TopicPartition] = []

    def broker_failed(self, node: int, exc: BaseException) -> Backoff:
        """A Fetch to ``node`` failed with ``exc`` (to be retried): count it, log
        the broker's first failure, and return its backoff to sleep."""
        self._metrics.fetch_errors += 1
        if node not in self._failing_brokers:
            self._failing_brokers.add(node)
            log.info("group %s: fetch from broker %d failed: %s", self._group_id, node, exc)
        return self._brokers.setdefault(node, Backoff(self._base))

    def broker_ok(self, node: int) -> None:
        """``node`` answered a Fetch: its backoff starts again; log its recovery."""
        if node in self._failing_brokers:
            self._failing_brokers.discard(node)
            log.info("group %s: fetching from broker %d again", self._group_id, node)
        self._brokers.pop(node, None)

    def partition_failed(self, node: int, tp: TopicPartition, error: BaseException) -> float:
        """An answer from ``node`` gave ``tp`` ``error``, to be fetched again:
        count it. Returns the seconds the partition waits before that."""
        self._metrics.fetch_errors += 1
        code = error.code if isinstance(error, BrokerError) else -1
        backoff, logged = self._partitions.get(tp, (Backoff(self._base), frozenset()))
        if code not in logged:
            what = f"{error.name} ({code})" if isinstance(error, BrokerError) else str(error)
            self._failed[node, what].append(tp)
        self._partitions[tp] = (backoff, logged | {code})
        return backoff.next_delay()

    def partition_stopped(self, tp: TopicPartition) -> None:
        """An answer gave ``tp`` an error it is not fetched again for (its
        position was reset, or its worker gets the error): count it; what it
        failed with before is forgotten."""
        self._metrics.fetch_errors += 1
        self._partitions.pop(tp, None)

    def partition_ok(self, tp: TopicPartition) -> None:
        """An answer gave ``tp`` no error: its backoff starts again; its
        recovery is told (if it had errors)."""
        if self._partitions.pop(tp, None) is not None:
            self._recovered.append(tp)

    def flush(self, node: int) -> None:
        """Log what the answer from ``node`` just read changed: one line per
        error code for the partitions newly failing, one for those fetching again."""
        for key in [key for key in self._failed if key[0] == node]:
            log.info(
                "group %s: Fetch from broker %d: %s for %s; retrying after a backoff",
                self._group_id,
                node,
                key[1],
                ", ".join(map(str, self._failed.pop(key))),
            )
        if self._recovered:
            log.info(
                "group %s: fetching %s again",
                self._group_id,
                ", ".join(map(str, self._recovered)),
            )
            self._recovered.clear()
