"""Idempotent producers' state per partition (sans-IO), as Kafka's log keeps it.

Theory of operation:

A batch written with a producer id (``producerId >= 0``) carries the
producer's epoch and the sequence number of its first record; record ``i``
has sequence ``baseSequence + i``, wrapping from 2**31-1 to 0. Each partition
keeps, per producer id, an :class:`ProducerEntry`: the producer's epoch and
the metadata of its last :data:`BATCHES_TO_RETAIN` batches (first and last
sequence, first and last offset, max timestamp), like Kafka's
``ProducerStateEntry``. An append is checked against it in Kafka's order
(``UnifiedLog.analyzeAndValidateProducerState`` and ``ProducerAppendInfo``):

1. A batch of the entry's epoch whose sequence range equals a cached batch's
   is a retry: it is answered with that batch's offsets and not appended
   (:meth:`ProducerStates.duplicate`).
2. An epoch below the entry's is INVALID_PRODUCER_EPOCH (what Kafka answers a
   client since 2.7, not PRODUCER_FENCED).
3. A new epoch must start at sequence 0, unless the partition never saw the
   producer (no entry, or an entry without epoch): Kafka accepts any
   sequence from a producer it does not know (its state may have been
   deleted with the records), so there is no UNKNOWN_PRODUCER_ID.
4. Within the epoch the first sequence must follow the last one
   (OUT_OF_ORDER_SEQUENCE_NUMBER otherwise).

State survives DeleteRecords (Kafka keeps producers whose records were
deleted) and leader changes; it goes with the partition when its topic is
deleted. A broker coming back from a restart rebuilds it
(:meth:`ProducerStates.reload`) as Kafka does from its producer snapshot,
which holds only each producer's last batch and leaves out the producers
expired by ``producer.id.expiration.ms``: a producer expires when its last
batch's max timestamp is that old (not after being idle that long).
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Final, NamedTuple

__all__ = [
    "BATCHES_TO_RETAIN",
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "MAX_SEQUENCE",
    "BatchMetadata",
    "ProducerEntry",
    "ProducerStates",
    "SequenceError",
    "increment_sequence",
    "producer_fields",
]

#: Batches remembered per producer and partition (Kafka's ``NUM_BATCHES_TO_RETAIN``).
BATCHES_TO_RETAIN: Final = 5
#: The largest sequence number; the next one is 0.
MAX_SEQUENCE: Final = 2**31 - 1
NO_EPOCH: Final = -1
#: Kafka's default ``producer.id.expiration.ms``: one day.
DEFAULT_PRODUCER_ID_EXPIRATION_MS: Final = 24 * 60 * 60 * 1000

# Kafka error codes (kio's ErrorCode values).
OUT_OF_ORDER_SEQUENCE_NUMBER: Final = 45
INVALID_PRODUCER_EPOCH: Final = 47
INVALID_RECORD: Final = 87

_PRODUCER: Final = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence
_PRODUCER_OFFSET: Final = 43


def producer_fields(data: bytes) -> tuple[int, int, int]:
    """``(producer_id, producer_epoch, base_sequence)`` from a batch header."""
    pid, epoch, seq = _PRODUCER.unpack_from(data, _PRODUCER_OFFSET)
    return int(pid), int(epoch), int(seq)


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment``, wrapping past :data:`MAX_SEQUENCE` to 0."""
    if sequence > MAX_SEQUENCE - increment:
        return increment - (MAX_SEQUENCE - sequence) - 1
    return sequence + increment


class SequenceError(Exception):
    """A batch refused for its producer fields; ``code`` is the Kafka error to answer.

    Kafka answers these without an error message and with the partition's log
    start offset.

    Attributes:
        code: OUT_OF_ORDER_SEQUENCE_NUMBER (45), INVALID_PRODUCER_EPOCH (47),
            or INVALID_RECORD (87) for an idempotent batch with a negative
            base sequence.
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class BatchMetadata(NamedTuple):
    """What a partition remembers of one appended batch of a producer.

    Attributes:
        first_seq: the sequence of its first record.
        last_seq: the sequence of its last record.
        first_offset: the offset of its first record.
        last_offset: the offset of its last record.
        timestamp: its max timestamp as stored (the append time on
            log-append-time topics).
    """

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(eq=False)
class ProducerEntry:
    """One producer's state in one partition.

    Attributes:
        epoch: the last epoch appended (-1 before any).
        batches: the last :data:`BATCHES_TO_RETAIN` batches of that epoch, oldest first.
    """

    epoch: int = NO_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))

    @property
    def last_seq(self) -> int:
        """The sequence of the last record appended in this epoch (-1 if none)."""
        return self.batches[-1].last_seq if self.batches else -1


class ProducerStates:
    """The idempotent producers of one partition, by producer id."""

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def duplicate(self, pid: int, epoch: int, first_seq: int, count: int) -> BatchMetadata | None:
        """The cached batch a retried batch duplicates, or ``None``.

        Args:
            pid: the batch's producer id.
            epoch: its producer epoch.
            first_seq: its base sequence.
            count: how many records it holds (its last offset delta + 1).
        """
        entry = self.entries.get(pid)
        if entry is None or entry.epoch != epoch:
            return None
        last_seq = increment_sequence(first_seq, count - 1)
        for meta in entry.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def check(self, pid: int, epoch: int, first_seq: int) -> None:
        """Check a batch that is no duplicate against the producer's state.

        Raises:
            SequenceError: INVALID_PRODUCER_EPOCH for an epoch below the
                current one; OUT_OF_ORDER_SEQUENCE_NUMBER for a new epoch not
                starting at 0 or a sequence that does not follow the last.
        """
        entry = self.entries.get(pid)
        current = NO_EPOCH if entry is None else entry.epoch
        if epoch < current:
            raise SequenceError(
                INVALID_PRODUCER_EPOCH,
                f"epoch {epoch} of producer {pid} is smaller than the last seen epoch {current}",
            )
        if entry is None or current == NO_EPOCH:
            return  # a producer the partition does not know: any sequence
        if epoch != current:
            if first_seq != 0:
                raise SequenceError(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"new epoch {epoch} of producer {pid} starts at sequence {first_seq}, not 0",
                )
            return
        last = entry.last_seq
        if not (first_seq == last + 1 or (first_seq == 0 and last == MAX_SEQUENCE)):
            raise SequenceError(
                OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"out of order sequence {first_seq} of producer {pid} "
                f"(last appended sequence {last})",
            )

    def record(
        self,
        pid: int,
        epoch: int,
        first_seq: int,
        first_offset: int,
        last_offset: int,
        timestamp: int,
    ) -> None:
        """Remember an appended batch (a new epoch forgets the older epoch's batches)."""
        entry = self.entries.setdefault(pid, ProducerEntry())
        if entry.epoch != epoch:
            entry.epoch = epoch
            entry.batches.clear()
        last_seq = increment_sequence(first_seq, last_offset - first_offset)
        entry.batches.append(
            BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp)
        )

    def reload(self, now_ms: int, expiration_ms: int) -> None:
        """Rebuild the state as a restarted Kafka broker does from its snapshot.

        Kafka's producer snapshot keeps only each producer's last batch, so
        after a restart a retry of an older one of the last five batches is
        no duplicate any more; and it skips the producers whose last batch's
        max timestamp is ``expiration_ms`` or more before ``now_ms``
        (``ProducerStateManager.isProducerExpired``).

        Args:
            now_ms: the current wall-clock time in epoch milliseconds.
            expiration_ms: ``producer.id.expiration.ms``.
        """
        for pid, entry in list(self.entries.items()):
            if not entry.batches or now_ms - entry.batches[-1].timestamp >= expiration_ms:
                del self.entries[pid]
                continue
            last = entry.batches[-1]
            entry.batches.clear()
            entry.batches.append(last)
