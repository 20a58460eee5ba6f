"""The idempotent producer's state: its producer id and epoch, each partition's sequences (sans-IO).

Theory of operation:

With ``idempotence=True`` every batch carries the producer id and epoch the
broker gave the producer (InitProducerId) and the sequence number of its first
record; the broker keeps, per partition and producer, the sequences it
wrote, so a batch sent again after a lost answer is recognised and not
written twice (the answer reports where it was written the first time).

The producer keeps at most one batch in flight per partition, which keeps the
sequences simple. A partition's batch takes its ``base_sequence`` from the
partition's ``next_sequence`` when it is first drained (:meth:`Sequencer.assign`)
and keeps it, with its producer id and epoch, across retries: a retry of a
batch the broker may have written must be recognised as the same batch. The
partition's ``next_sequence`` advances when the batch succeeds
(:meth:`Sequencer.acknowledged`); a batch split after MESSAGE_TOO_LARGE was not
written, and its records take fresh sequences when drained again. Sequences
wrap at ``2**31 - 1`` as Kafka's do.

When a partition's sequence state becomes uncertain, the producer does what
the Java producer does for an idempotent (non-transactional) producer since
KIP-360: it bumps its epoch, locally, without asking the broker (a broker
accepts a higher epoch of a producer id, starting at sequence 0), and every
partition starts its sequences again at 0 under the new epoch with its next
new batch, once nothing of it is in flight. That happens when the broker
answers UNKNOWN_PRODUCER_ID (it lost the producer's state, e.g. the records
were deleted by retention) or OUT_OF_ORDER_SEQUENCE_NUMBER (a gap: the broker
lost records it had acknowledged): the batch is then sent again under the new
epoch from sequence 0 (:meth:`Sequencer.restart`), until its delivery timeout
as for any retriable error. It also happens when a batch that was sent fails
without an answer that says it was written -- its delivery timeout passed
while in flight or while waiting for a retry, or a non-retriable error
(:meth:`Sequencer.failed`): the broker may or may not hold its sequences, and
a later batch could otherwise be refused forever as out of order. Other
partitions' batches in flight or waiting for a retry keep the epoch they were
sent with. Once the epoch reaches ``2**15 - 1`` the producer asks for a new
producer id instead, as Java does.

DUPLICATE_SEQUENCE_NUMBER resolves a batch as written (with no offset: the
broker no longer knows where), as a success does.

Asking for a producer id (``_producer_metadata.py``) reports here: each
attempt's start (:meth:`Sequencer.attempt`), each failure
(:meth:`Sequencer.init_failed`), the id got (:meth:`Sequencer.set_id`). A
record whose delivery timeout passes while it waits for the id fails with
:meth:`Sequencer.waited_error`: ``RequestTimedOut`` saying so, the last
InitProducerId failure (or the attempt still unanswered) as its cause.
Failing to get an id for a second or more is logged once as a WARNING, an id
got after failures once at INFO. A refusal that is not retried
(CLUSTER_AUTHORIZATION_FAILED ...) fails the records waiting and is kept:
until a not-before time, growing with backoff and jitter at each refusal in
a row (:func:`~gengroup.io.retry.backoff_delay` of ``retry_backoff``), later
sends fail with it without asking again (:meth:`Sequencer.refused`).
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any, Final

from ._errors import BrokerError, RequestTimedOut, error_for_code
from ._producer_queue import Batch
from ._types import TopicPartition
from .io.retry import backoff_delay
from .protocol.framing import build

__all__ = [
    "DUPLICATE_SEQUENCE",
    "MAX_EPOCH",
    "RESTART_CODES",
    "Sequencer",
    "add_sequence",
    "init_producer_id_request",
]

log = logging.getLogger("gengroup")

#: Sequences are int32 and wrap to 0 after ``2**31 - 1``.
_SEQUENCE_MODULUS: Final = 2**31
#: Past this epoch (Java's ``Short.MAX_VALUE``) a new producer id is needed.
MAX_EPOCH: Final = 2**15 - 1
#: OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID: bump the epoch, send again from 0.
RESTART_CODES: Final = frozenset({45, 59})
#: DUPLICATE_SEQUENCE_NUMBER: the batch was written already.
DUPLICATE_SEQUENCE: Final = 46
#: The ``transaction_timeout`` of a producer without transactions.
_NO_TIMEOUT: Final = datetime.timedelta(milliseconds=-1)
#: Seconds of failing to get a producer id before a WARNING says so.
_WARN_AFTER: Final = 1.0

#: The least time (seconds) between two INFO lines of epoch bumps (each
#: record expiring in a long outage bumps the epoch: the others are DEBUG).
_BUMPS_EVERY: Final = 300.0


def add_sequence(sequence: int, count: int) -> int:
    """``sequence`` advanced by ``count`` records, wrapping after ``2**31 - 1`` as Kafka's."""
    return (sequence + count) % _SEQUENCE_MODULUS


def init_producer_id_request(mod: Any) -> Any:
    """The InitProducerId request of an idempotent, non-transactional producer
    (``mod``: the negotiated version's kio module): a fresh producer id."""
    return build(
        mod.InitProducerIdRequest,
        transactional_id=None,
        transaction_timeout=_NO_TIMEOUT,
        producer_id=-1,
        producer_epoch=-1,
    )


@dataclass(slots=True)
class _Partition:
    """The sequences of one partition, counted under one producer id and epoch."""

    producer_id: int
    epoch: int
    next_sequence: int = 0


class Sequencer:
    """The producer id and epoch, and each partition's next sequence.

    Plain state: the producer asks for a producer id while :attr:`needs_id`,
    gives it to :meth:`set_id`, and reports each batch's fate.
    """

    def __init__(self, retry_backoff: float = 0.1) -> None:
        #: The producer id (-1: none yet, or a new one is needed).
        self.producer_id = -1
        #: The epoch of :attr:`producer_id`.
        self.epoch = -1
        #: The last InitProducerId failure while none succeeded since (a
        #: record that waited for an id and expired has it as its cause).
        self.last_error: BaseException | None = None
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._bump = False
        self._bumped_said: float | None = None  # the last INFO line of a bump
        self._bumps_unsaid = 0  # bumps at DEBUG since
        self._backoff = retry_backoff
        self._asked_at: float | None = None  # the attempt under way started then
        self._failing_since: float | None = None  # the first attempt of the failures
        self._failures = 0  # InitProducerId failures since the last id
        self._warned = False  # a WARNING said the failures went on
        self._logged = False  # an ERROR said a refusal fails the records
        self._refusal: BaseException | None = None  # a refusal not retried, kept
        self._not_before = 0.0  # ... failing the sends until then
        self._refusals = 0  # refusals in a row: the backoff's attempt

    @property
    def needs_id(self) -> bool:
        """Whether batches must wait for an InitProducerId answer."""
        return self.producer_id < 0

    def attempt(self, now: float) -> None:
        """An InitProducerId attempt starts at ``now`` (its answer may never come)."""
        self._asked_at = now
        if self._failing_since is None:
            self._failing_since = now

    def set_id(self, producer_id: int, epoch: int) -> None:
        """A producer id from InitProducerId: every partition starts again at sequence 0."""
        if self._failures:
            log.info(
                "idempotent producer: producer id %d, epoch %d, got after %d failed "
                "InitProducerId attempt(s)",
                producer_id,
                epoch,
                self._failures,
            )
        else:
            log.info("idempotent producer: producer id %d, epoch %d", producer_id, epoch)
        self.producer_id, self.epoch = producer_id, epoch
        self.last_error = self._refusal = self._asked_at = self._failing_since = None
        self._failures = self._refusals = 0
        self._warned = self._logged = self._bump = False

    def init_failed(self, error: BaseException, *, final: bool, now: float) -> None:
        """InitProducerId failed with ``error`` at ``now`` (kept as :attr:`last_error`).

        ``final``: it is not retried: it is kept, failing the sends until a
        backoff has passed (:meth:`refused`), and logged (once, until an id is
        given). A retried failure is logged once the failures have lasted
        :data:`_WARN_AFTER` seconds.
        """
        self.last_error = error
        self._asked_at = None
        self._failures += 1
        if final:
            self._refusal = error
            self._not_before = now + backoff_delay(self._refusals, self._backoff)
            self._refusals += 1
            if not self._logged:
                self._logged = True
                log.error(
                    "idempotent producer: no producer id, the records waiting fail, and "
                    "so do sends for a backoff (idempotence=False sends without one): %s",
                    error,
                )
            return
        since = now if self._failing_since is None else self._failing_since
        if not self._warned and now - since >= _WARN_AFTER:
            self._warned = True
            log.warning(
                "idempotent producer: no producer id after %.1f s, %d failed InitProducerId "
                "attempt(s); retrying, the records wait (until their delivery_timeout): "
                "%s: %s",
                now - since,
                self._failures,
                type(error).__name__,
                error,
            )

    def refused(self, now: float) -> BaseException | None:
        """The refusal that is not retried, while sends fail with it without asking again."""
        return self._refusal if now < self._not_before else None

    def waited_error(self, expired: RequestTimedOut, now: float) -> RequestTimedOut:
        """The error of records whose delivery timeout passed (``expired``, their
        plain error): if they wait for a producer id, saying so, the last
        InitProducerId failure (or the attempt still unanswered at ``now``)
        as its cause."""
        if not self.needs_id:
            return expired
        cause = self.last_error
        if cause is None and self._asked_at is not None:
            cause = RequestTimedOut(
                f"InitProducerId: no answer within {round(now - self._asked_at, 3):g} s"
            )
        if cause is None:
            cause = expired.__cause__
        said = f"{expired}: waited for a producer id"
        if cause is not None:
            said += f" (InitProducerId; last error: {type(cause).__name__}: {cause})"
        error = RequestTimedOut(said)
        error.__cause__ = cause
        return error

    @staticmethod
    def init_error(code: int) -> BrokerError:
        """The typed error of an InitProducerId answer's error ``code``."""
        said = "InitProducerId"
        if code == 31:  # CLUSTER_AUTHORIZATION_FAILED
            said += (
                ": the producer is not authorized to do idempotent sends (it needs "
                "WRITE on a topic or IDEMPOTENT_WRITE on the cluster, or idempotence=False)"
            )
        return error_for_code(code, said)

    def bump_if_wanted(self, now: float) -> None:
        """Bump the epoch if a partition's sequences became uncertain since
        the last call (a new producer id is needed once the epoch is exhausted).

        Called before each drain (``now``): the partitions then restart at
        sequence 0 with their next batch (:meth:`assign`). A bump is an INFO
        line at most every :data:`_BUMPS_EVERY` seconds, else DEBUG.
        """
        if not self._bump or self.needs_id:
            return
        self._bump = False
        if self.epoch >= MAX_EPOCH:
            log.info(
                "idempotent producer: epoch %d exhausted, asking for a new producer id", self.epoch
            )
            self.producer_id = self.epoch = -1
            return
        self.epoch += 1
        said, unsaid = self._bumped_said, self._bumps_unsaid
        quiet = said is not None and now - said < _BUMPS_EVERY
        self._bumps_unsaid = unsaid + 1 if quiet else 0
        if not quiet:
            self._bumped_said = now
        log.log(
            logging.DEBUG if quiet else logging.INFO,
            "idempotent producer: epoch bumped to %d (producer id %d); sequences restart at 0%s",
            self.epoch,
            self.producer_id,
            f" ({unsaid} bump(s) at DEBUG since the last such line)"
            if unsaid and not quiet
            else "",
        )

    def assign(self, batch: Batch) -> None:
        """Give ``batch`` the producer id, epoch and base sequence to send it with.

        Called when the batch is drained, with nothing else of its partition
        in flight. A batch sent before keeps what it was sent with (unless
        :meth:`restart` cleared it): its retry must be recognised as the same
        batch. A partition whose sequences count under an older producer id or
        epoch starts again at 0 under the current one.
        """
        if batch.base_sequence >= 0:
            return
        state = self._partitions.get(batch.tp)
        if state is None or (state.producer_id, state.epoch) != (self.producer_id, self.epoch):
            state = self._partitions[batch.tp] = _Partition(self.producer_id, self.epoch)
        batch.producer_id = self.producer_id
        batch.producer_epoch = self.epoch
        batch.base_sequence = state.next_sequence
        batch.encoded = None

    def acknowledged(self, batch: Batch) -> None:
        """The broker wrote ``batch`` (or had written it: a duplicate): its
        partition's next batch follows it."""
        state = self._partitions.get(batch.tp)
        if batch.base_sequence < 0 or state is None:
            return
        if (state.producer_id, state.epoch) == (batch.producer_id, batch.producer_epoch):
            state.next_sequence = add_sequence(batch.base_sequence, len(batch.records))

    def restart(self, batch: Batch) -> None:
        """The broker does not know the batch's producer (UNKNOWN_PRODUCER_ID) or
        found a gap before it (OUT_OF_ORDER_SEQUENCE_NUMBER): bump the epoch,
        and send the batch again under the new one, from sequence 0."""
        self.failed(batch)
        batch.base_sequence = batch.producer_id = batch.producer_epoch = -1
        batch.encoded = None

    def failed(self, batch: Batch) -> None:
        """``batch`` failed without an answer saying it was written: if it was
        sent, the broker may hold its sequences or not, so the epoch is bumped
        (unless that happened since it was sent: its partition restarts anyway)."""
        if batch.base_sequence < 0:
            return
        state = self._partitions.get(batch.tp)
        sent_with = (batch.producer_id, batch.producer_epoch)
        if state is not None and (state.producer_id, state.epoch) == sent_with:
            # Its sequences count under an epoch given up: the partition's next
            # batch starts at 0 under the new one.
            del self._partitions[batch.tp]
        if sent_with == (self.producer_id, self.epoch):
            self._bump = True
