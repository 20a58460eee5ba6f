"""Partition logs of the embedded broker (sans-IO, in memory).

Theory of operation:

A :class:`PartitionLog` is an append-only list of record batches kept exactly
as a producer sent them, each as a :class:`StoredBatch` ``(base_offset,
last_offset, data, max_timestamp)``, plus two numbers: the log start offset
(where the retained log begins) and the high watermark. There is no
replication -- every replica of a partition is this one object -- so the high
watermark, the log end offset and the last stable offset are the same number:
the offset the next appended record will get.

Appending (:meth:`PartitionLog.append`) validates the batch the way Kafka's
``LogValidator`` does for a client append -- exactly one magic-2 batch, CRC-32C
over ``attributes`` .. end, an offset range consistent with the record count,
consecutive record offsets, no control batch -- by decoding it with
:mod:`gengroup.protocol.records`. It then re-stamps the fields a broker owns:
``baseOffset`` and ``partitionLeaderEpoch`` (both outside the CRC, so the CRC is
untouched) and, for topics with ``message.timestamp.type=LogAppendTime``, the
timestamp-type attribute bit and ``maxTimestamp`` (under the CRC, which is then
recomputed). Nothing else in the producer's bytes changes, so a fetch returns
them byte for byte, compressed batches included.

Reading (:meth:`PartitionLog.read`) finds the batch holding the requested
offset by bisection over the batches' last offsets and returns whole batches
from that one on (a consumer skips the records before its position, as with
Kafka). It honours a byte limit, except that ``min_one`` lets the first batch
through whatever its size, which is KIP-74's rule for the first partition of a
fetch response. Offset lookups by timestamp (:meth:`PartitionLog.offset_for`)
scan batch max-timestamps and decode only the one batch that holds the answer.

The cluster's topic metadata lives here too, also sans-IO: :class:`Topics`
creates and deletes topics with Kafka's validation (legal names, collisions
between ``.`` and ``_``, partition counts, replication factors, replica
assignments), places replicas round-robin over the brokers so that partition
leaders spread over the cluster, and re-elects leaders when brokers go down or
come back (first online replica; leader epoch bumped on every change; -1, an
offline partition, when no replica is up). Since one log serves every replica
of a partition, all replicas are always in sync.

Time never comes from a clock here: the caller passes ``now_ms`` (epoch
milliseconds) when the log needs it (log-append time).
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple
from uuid import UUID

from crc32c import crc32c

from .._errors import CorruptRecordError, ProtocolError
from .._types import topic_name_error
from ..protocol.records import decode_batches
from .producer_state import INVALID_RECORD, ProducerStates, SequenceError, producer_fields
from .topic_configs import topic_config_error

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendResult",
    "LogError",
    "Partition",
    "PartitionLog",
    "StoredBatch",
    "Topic",
    "Topics",
    "topic_name_error",
    "validate_batch",
]

#: ListOffsets special timestamps (Kafka's ``ListOffsetsRequest`` constants).
LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2
MAX_TIMESTAMP: Final = -3
EARLIEST_LOCAL_TIMESTAMP: Final = -4
LATEST_TIERED_TIMESTAMP: Final = -5

# Kafka error codes used here (kio's ErrorCode values).
_CORRUPT_MESSAGE: Final = 2
_MESSAGE_TOO_LARGE: Final = 10
_INVALID_RECORD: Final = 87
_OFFSET_OUT_OF_RANGE: Final = 1

_HEADER_SIZE: Final = 61
_LOG_OVERHEAD: Final = 12
#: Kafka's default ``message.max.bytes``: 1 MiB and a batch's log overhead.
DEFAULT_MAX_MESSAGE_BYTES: Final = 1024 * 1024 + _LOG_OVERHEAD
_CRC_START: Final = 21
_MAGIC_OFFSET: Final = 16
_ATTRIBUTES_OFFSET: Final = 21
_LAST_OFFSET_DELTA_OFFSET: Final = 23
_MAX_TIMESTAMP_OFFSET: Final = 35
_RECORDS_COUNT_OFFSET: Final = 57
_ATTR_TIMESTAMP_TYPE: Final = 0x08
_ATTR_CONTROL: Final = 0x20
_PREFIX: Final = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_U32: Final = struct.Struct(">I")
_I64: Final = struct.Struct(">q")


class LogError(Exception):
    """An append or read was refused; ``code`` is the Kafka error code to answer.

    Attributes:
        code: the Kafka error code (e.g. 2 CORRUPT_MESSAGE, 87 INVALID_RECORD,
            1 OFFSET_OUT_OF_RANGE, 10 MESSAGE_TOO_LARGE).
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """One batch as stored: its offsets, bytes and max timestamp.

    Attributes:
        base_offset: offset of the batch's first record.
        last_offset: offset of its last record.
        data: the batch's bytes as served to consumers.
        max_timestamp: the batch's ``maxTimestamp`` (epoch ms).
        leader_epoch: the leader epoch stamped on append.
    """

    base_offset: int
    last_offset: int
    data: bytes
    max_timestamp: int
    leader_epoch: int


class AppendResult(NamedTuple):
    """What a successful append tells the producer.

    Attributes:
        base_offset: the offset given to the batch's first record.
        log_append_time: the append time (epoch ms) for log-append-time
            topics, else -1.
        log_start_offset: the log start offset after the append.
    """

    base_offset: int
    log_append_time: int
    log_start_offset: int


def validate_batch(data: bytes, *, max_message_bytes: int, full: bool = True) -> tuple[int, int]:
    """Validate a produced partition payload the way Kafka validates a client append.

    Args:
        data: the ``records`` bytes of one partition of a Produce request.
        max_message_bytes: the largest batch accepted (Kafka's ``max.message.bytes``).
        full: decode every record (decompressing if needed) to check the
            batch's inner structure; with False only the header and the CRC
            are checked, which is much cheaper for benchmarks.

    Returns:
        ``(record_count, max_timestamp)`` of the one batch.

    Raises:
        LogError: with INVALID_RECORD (not exactly one well-formed magic-2
            batch, inconsistent offsets or counts, a control batch),
            CORRUPT_MESSAGE (CRC mismatch) or MESSAGE_TOO_LARGE.
        SequenceError: with INVALID_RECORD, for a batch with a producer id
            and a negative base sequence.
    """
    size = len(data)
    if size < _HEADER_SIZE:
        raise LogError(_INVALID_RECORD, "a produce request must carry exactly one record batch")
    _, batch_length, _ = _PREFIX.unpack_from(data, 0)
    if data[_MAGIC_OFFSET] != 2:
        raise LogError(_INVALID_RECORD, f"record batch magic {data[_MAGIC_OFFSET]} is not 2")
    if batch_length + _LOG_OVERHEAD != size:
        if batch_length + _LOG_OVERHEAD < size:
            raise LogError(_INVALID_RECORD, "a produce request must carry exactly one batch")
        raise LogError(_INVALID_RECORD, "record batch is truncated (premature end of data)")
    if size > max_message_bytes:
        raise LogError(
            _MESSAGE_TOO_LARGE, f"record batch of {size} bytes exceeds {max_message_bytes}"
        )
    (crc,) = _U32.unpack_from(data, 17)
    if crc32c(memoryview(data)[_CRC_START:]) != crc:
        raise LogError(_CORRUPT_MESSAGE, "record batch failed its CRC check")
    if not full:
        (attributes,) = _I16.unpack_from(data, _ATTRIBUTES_OFFSET)
        (last_delta,) = _I32.unpack_from(data, _LAST_OFFSET_DELTA_OFFSET)
        (header_count,) = _I32.unpack_from(data, _RECORDS_COUNT_OFFSET)
        (max_ts,) = _I64.unpack_from(data, _MAX_TIMESTAMP_OFFSET)
        if attributes & _ATTR_CONTROL:
            raise LogError(_INVALID_RECORD, "clients may not write control batches")
        if header_count <= 0 or last_delta + 1 != header_count:
            raise LogError(_INVALID_RECORD, "inconsistent batch offset range and record count")
        producer_id, _, base_sequence = producer_fields(data)
        _check_sequence(producer_id, base_sequence)
        return header_count, max_ts
    try:
        batches = decode_batches(data, verify_crc=False)
    except (CorruptRecordError, ProtocolError) as exc:
        raise LogError(_INVALID_RECORD, f"invalid record batch: {exc}") from exc
    if len(batches) != 1:
        raise LogError(_INVALID_RECORD, "a produce request must carry exactly one batch")
    batch = batches[0]
    if batch.is_control:
        raise LogError(_INVALID_RECORD, "clients may not write control batches")
    count = len(batch.records)
    if count <= 0 or batch.last_offset_delta + 1 != count:
        raise LogError(_INVALID_RECORD, "inconsistent batch offset range and record count")
    base = batch.base_offset
    for index, record in enumerate(batch.records):
        if record.offset != base + index:
            raise LogError(_INVALID_RECORD, "record offsets in the batch are not consecutive")
    _check_sequence(batch.producer_id, batch.base_sequence)
    return count, batch.max_timestamp


def _check_sequence(producer_id: int, base_sequence: int) -> None:
    """Refuse an idempotent batch with a negative base sequence.

    Raised as a :class:`~gengroup.broker.producer_state.SequenceError`, since
    Kafka answers it as it answers a refused sequence: INVALID_RECORD with no
    error message and the log start offset.
    """
    if producer_id >= 0 and base_sequence < 0:
        raise SequenceError(
            INVALID_RECORD,
            f"invalid sequence number {base_sequence} in a batch of producer {producer_id}",
        )


class PartitionLog:
    """One partition's log: batches in memory, log start offset, high watermark.

    Args:
        log_start_offset: the first offset of the log (normally 0).

    Attributes:
        producers: the state of the idempotent producers that appended here
            (:mod:`gengroup.broker.producer_state`).
    """

    def __init__(self, log_start_offset: int = 0) -> None:
        self.producers = ProducerStates()
        self.batches: list[StoredBatch] = []
        self._last_offsets: list[int] = []
        self.log_start_offset = log_start_offset
        self.high_watermark = log_start_offset
        self.size_bytes = 0

    def __repr__(self) -> str:
        return (
            f"<PartitionLog start={self.log_start_offset} hw={self.high_watermark} "
            f"batches={len(self.batches)}>"
        )

    @property
    def log_end_offset(self) -> int:
        """The offset the next record will get (equal to the high watermark here)."""
        return self.high_watermark

    def append(
        self,
        data: bytes,
        *,
        now_ms: int,
        leader_epoch: int = 0,
        log_append_time: bool = False,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        validate_records: bool = True,
    ) -> AppendResult:
        """Validate one produced batch and append it.

        A batch with a producer id is checked against the producer's state
        first: a retry of one of the producer's last five batches is answered
        with that batch's offsets and not appended again.

        Args:
            data: the producer's batch bytes (exactly one batch).
            now_ms: current time in epoch milliseconds (for log-append time).
            leader_epoch: the partition leader epoch to stamp on the batch.
            log_append_time: stamp the batch with log-append time.
            max_message_bytes: the largest batch accepted.
            validate_records: decode every record to validate the batch (see
                :func:`validate_batch`).

        Returns:
            The assigned base offset, the append time (or -1) and the log start offset.

        Raises:
            LogError: the batch was refused (see :func:`validate_batch`).
            SequenceError: the batch's producer fields were refused: a
                negative base sequence (:func:`validate_batch`) or what
                :meth:`~gengroup.broker.producer_state.ProducerStates.check`
                refuses.
        """
        data = bytes(data)
        count, max_timestamp = validate_batch(
            data, max_message_bytes=max_message_bytes, full=validate_records
        )
        producer_id, producer_epoch, base_sequence = producer_fields(data)
        if producer_id >= 0:
            known = self.producers.duplicate(producer_id, producer_epoch, base_sequence, count)
            if known is not None:
                return AppendResult(known.first_offset, known.timestamp, self.log_start_offset)
            self.producers.check(producer_id, producer_epoch, base_sequence)
        base = self.high_watermark
        buf = bytearray(data)
        _I64.pack_into(buf, 0, base)
        _I32.pack_into(buf, 12, leader_epoch)
        append_time = -1
        if log_append_time:
            append_time = now_ms
            max_timestamp = now_ms
            (attributes,) = _I16.unpack_from(buf, _ATTRIBUTES_OFFSET)
            _I16.pack_into(buf, _ATTRIBUTES_OFFSET, attributes | _ATTR_TIMESTAMP_TYPE)
            _I64.pack_into(buf, _MAX_TIMESTAMP_OFFSET, now_ms)
            _U32.pack_into(buf, 17, crc32c(memoryview(buf)[_CRC_START:]))
        last = base + count - 1
        self.batches.append(StoredBatch(base, last, bytes(buf), max_timestamp, leader_epoch))
        self._last_offsets.append(last)
        self.high_watermark = last + 1
        self.size_bytes += len(buf)
        if producer_id >= 0:
            self.producers.record(
                producer_id, producer_epoch, base_sequence, base, last, max_timestamp
            )
        return AppendResult(base, append_time, self.log_start_offset)

    def _index_of(self, offset: int) -> int:
        """Index of the first batch whose last offset is >= ``offset``."""
        return bisect.bisect_left(self._last_offsets, offset)

    def read(self, offset: int, max_bytes: int, *, min_one: bool) -> list[bytes]:
        """Whole batches from the one holding ``offset`` on, within ``max_bytes``.

        Args:
            offset: the fetch position.
            max_bytes: byte budget for the returned batches.
            min_one: return the first batch even if it alone exceeds ``max_bytes``.

        Returns:
            The batches' bytes, in offset order (empty at the high watermark).

        Raises:
            LogError: OFFSET_OUT_OF_RANGE if ``offset`` is below the log start
                offset or above the high watermark.
        """
        if offset < self.log_start_offset or offset > self.high_watermark:
            raise LogError(
                _OFFSET_OUT_OF_RANGE,
                f"offset {offset} outside [{self.log_start_offset}, {self.high_watermark}]",
            )
        out: list[bytes] = []
        used = 0
        for index in range(self._index_of(offset), len(self.batches)):
            data = self.batches[index].data
            if used + len(data) > max_bytes and not (min_one and not out):
                break
            out.append(data)
            used += len(data)
        return out

    def bytes_from(self, offset: int, limit: int | None = None) -> int:
        """How many bytes the log holds from the batch holding ``offset`` on.

        Args:
            offset: the fetch position.
            limit: count no further than this (None: the whole log after ``offset``).
        """
        if offset < self.log_start_offset or offset >= self.high_watermark:
            return 0
        total = 0
        for index in range(self._index_of(offset), len(self.batches)):
            if limit is not None and total >= limit:
                return limit
            total += len(self.batches[index].data)
        return total if limit is None else min(total, limit)

    def epoch_at(self, offset: int, current_epoch: int) -> int:
        """The leader epoch of the batch holding ``offset`` (``current_epoch`` past the end)."""
        index = self._index_of(offset)
        if index >= len(self.batches) or self.batches[index].base_offset > offset:
            return current_epoch
        return self.batches[index].leader_epoch

    def offset_for(self, timestamp: int) -> tuple[int, int]:
        """ListOffsets: resolve a timestamp (or a special value) to ``(offset, timestamp)``.

        Args:
            timestamp: epoch ms, or one of :data:`LATEST_TIMESTAMP`,
                :data:`EARLIEST_TIMESTAMP`, :data:`MAX_TIMESTAMP`,
                :data:`EARLIEST_LOCAL_TIMESTAMP`, :data:`LATEST_TIERED_TIMESTAMP`.

        Returns:
            ``(offset, timestamp)``; ``(-1, -1)`` when no record qualifies.
        """
        if timestamp == LATEST_TIMESTAMP:
            return self.high_watermark, -1
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return self.log_start_offset, -1
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return -1, -1  # no tiered storage
        live = [b for b in self.batches if b.last_offset >= self.log_start_offset]
        if timestamp == MAX_TIMESTAMP:
            if not live:
                return -1, -1
            best = max(b.max_timestamp for b in live)
            batch = next(b for b in live if b.max_timestamp == best)
            for record in decode_batches(batch.data, verify_crc=False)[0].records:
                if record.offset >= self.log_start_offset and record.timestamp == best:
                    return record.offset, record.timestamp
            return batch.base_offset, best  # pragma: no cover - max_timestamp is a record's
        for batch in live:
            if batch.max_timestamp < timestamp:
                continue
            for record in decode_batches(batch.data, verify_crc=False)[0].records:
                if record.offset >= self.log_start_offset and record.timestamp >= timestamp:
                    return record.offset, record.timestamp
        return -1, -1

    def delete_records(self, before: int) -> int:
        """Advance the log start offset to ``before`` (DeleteRecords semantics).

        Whole batches entirely below the new start offset are dropped.

        Args:
            before: the new log start offset; ``-1`` means the high watermark.

        Returns:
            The new log start offset.

        Raises:
            LogError: OFFSET_OUT_OF_RANGE if ``before`` is above the high watermark.
        """
        if before == -1:
            before = self.high_watermark
        if before > self.high_watermark or before < 0:
            raise LogError(_OFFSET_OUT_OF_RANGE, f"offset {before} is beyond the high watermark")
        if before <= self.log_start_offset:
            return self.log_start_offset
        self.log_start_offset = before
        drop = bisect.bisect_left(self._last_offsets, before)
        for batch in self.batches[:drop]:
            self.size_bytes -= len(batch.data)
        del self.batches[:drop]
        del self._last_offsets[:drop]
        return before


# --------------------------------------------------------------------------- topics

_TOPIC_ALREADY_EXISTS: Final = 36
_INVALID_PARTITIONS: Final = 37
_INVALID_REPLICATION_FACTOR: Final = 38
_INVALID_REPLICA_ASSIGNMENT: Final = 39
_INVALID_CONFIG: Final = 40
_INVALID_REQUEST: Final = 42
_INVALID_TOPIC: Final = 17
_UNKNOWN_TOPIC_OR_PARTITION: Final = 3


@dataclass(eq=False)
class Partition:
    """One partition: its log, replica placement and leadership.

    There is one log per partition however many replicas it has: every replica
    is always in sync, so the ISR is the set of online replicas.

    Attributes:
        index: the partition index.
        log: the partition's log.
        replicas: the replica broker ids, preferred leader first.
        leader: the leader's node id, -1 while no replica is online.
        leader_epoch: bumped on every leadership change.
    """

    index: int
    log: PartitionLog
    replicas: list[int]
    leader: int
    leader_epoch: int = 0


@dataclass(eq=False)
class Topic:
    """A topic and its partitions.

    Attributes:
        name: the topic name.
        topic_id: its UUID (Metadata v10+, CreateTopics v7+).
        partitions: its partitions, by index.
        configs: topic configs set at creation, valid for Kafka
            (:mod:`gengroup.broker.topic_configs`; ``message.timestamp.type``
            and ``max.message.bytes`` are honoured, ``cleanup.policy`` by
            DeleteRecords; others are stored only).
        internal: True for ``__consumer_offsets``.
    """

    name: str
    topic_id: UUID
    partitions: list[Partition]
    configs: dict[str, str]
    internal: bool = False

    @property
    def replication_factor(self) -> int:
        """The number of replicas of partition 0."""
        return len(self.partitions[0].replicas) if self.partitions else 0

    @property
    def log_append_time(self) -> bool:
        """Whether appends are stamped with log-append time."""
        return self.configs.get("message.timestamp.type", "").strip() == "LogAppendTime"

    def max_message_bytes(self, default: int) -> int:
        """The topic's ``max.message.bytes``, or ``default``."""
        value = self.configs.get("max.message.bytes")
        return default if value is None else int(value)


class Topics:
    """The cluster's topics: creation, deletion, placement and leader election (sans-IO).

    Args:
        uuid_factory: makes topic ids (inject a seeded one for determinism).
    """

    def __init__(self, uuid_factory: Callable[[], UUID]) -> None:
        self._uuid = uuid_factory
        self.by_name: dict[str, Topic] = {}
        self.by_id: dict[UUID, Topic] = {}
        self._next_start = 0

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def get(self, name: str) -> Topic | None:
        """The topic called ``name``, or ``None``."""
        return self.by_name.get(name)

    def partition(self, name: str, index: int) -> Partition | None:
        """Partition ``index`` of topic ``name``, or ``None`` if either does not exist."""
        topic = self.by_name.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def _place(
        self, first: int, count: int, replication_factor: int, brokers: Sequence[int]
    ) -> list[list[int]]:
        """Round-robin replica placement (Kafka's rack-unaware assignment, simplified)."""
        n = len(brokers)
        start = self._next_start
        return [
            [brokers[(start + p + r) % n] for r in range(replication_factor)]
            for p in range(first, first + count)
        ]

    @staticmethod
    def _check_assignments(
        assignments: Sequence[Sequence[int]], known: Sequence[int], expected_rf: int | None
    ) -> None:
        for replicas in assignments:
            if not replicas or len(set(replicas)) != len(replicas):
                raise LogError(
                    _INVALID_REPLICA_ASSIGNMENT, "replica lists must be non-empty and distinct"
                )
            if expected_rf is not None and len(replicas) != expected_rf:
                raise LogError(
                    _INVALID_REPLICA_ASSIGNMENT, "every partition needs the same replication factor"
                )
            unknown = [b for b in replicas if b not in known]
            if unknown:
                raise LogError(_INVALID_REPLICA_ASSIGNMENT, f"unknown broker ids {unknown}")

    def create(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        *,
        brokers: Sequence[int],
        online: Collection[int],
        configs: Mapping[str, str | None] | None = None,
        assignments: Sequence[Sequence[int]] | None = None,
        internal: bool = False,
        validate_only: bool = False,
    ) -> Topic:
        """Create a topic (Kafka's CreateTopics checks, in Kafka's order).

        Args:
            name: the topic name.
            num_partitions: partition count (ignored when ``assignments`` is given).
            replication_factor: replicas per partition (ignored with ``assignments``).
            brokers: every broker id of the cluster, sorted.
            online: the ids of the brokers that are up.
            configs: topic configs (checked as Kafka checks them, see
                :mod:`gengroup.broker.topic_configs`; a ``None`` value is refused).
            assignments: explicit replica lists, one per partition.
            internal: mark the topic internal.
            validate_only: check everything but create nothing.

        Returns:
            The new topic (a detached one if ``validate_only``).

        Raises:
            LogError: INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS,
                INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
                INVALID_REPLICA_ASSIGNMENT or INVALID_CONFIG.
        """
        reason = topic_name_error(name)
        if reason is not None:
            raise LogError(_INVALID_TOPIC, reason)
        if name in self.by_name:
            raise LogError(_TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        folded = name.replace(".", "_")
        for other in self.by_name:
            if other.replace(".", "_") == folded:
                raise LogError(_INVALID_TOPIC, f"topic {name!r} collides with existing {other!r}")
        problem = topic_config_error(configs or {})
        if problem is not None:
            raise LogError(_INVALID_CONFIG, problem)
        stored = {k: v for k, v in (configs or {}).items() if v is not None}
        if assignments:
            self._check_assignments(assignments, brokers, len(assignments[0]))
            placement = [list(r) for r in assignments]
        else:
            if num_partitions <= 0:
                raise LogError(_INVALID_PARTITIONS, "number of partitions must be larger than 0")
            if replication_factor <= 0:
                raise LogError(
                    _INVALID_REPLICATION_FACTOR, "replication factor must be larger than 0"
                )
            live = [b for b in brokers if b in online]
            if replication_factor > len(live):
                raise LogError(
                    _INVALID_REPLICATION_FACTOR,
                    f"replication factor {replication_factor} is larger than the "
                    f"{len(live)} available brokers",
                )
            placement = self._place(0, num_partitions, replication_factor, live)
        partitions = [
            Partition(i, PartitionLog(), replicas, _first_online(replicas, online))
            for i, replicas in enumerate(placement)
        ]
        topic = Topic(name, self._uuid(), partitions, stored, internal)
        if not validate_only:
            self._next_start += 1
            self.by_name[name] = topic
            self.by_id[topic.topic_id] = topic
        return topic

    def delete(self, name: str) -> Topic:
        """Delete topic ``name``.

        Raises:
            LogError: UNKNOWN_TOPIC_OR_PARTITION, or INVALID_TOPIC_EXCEPTION for
                an internal topic.
        """
        topic = self.by_name.get(name)
        if topic is None:
            raise LogError(_UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        if topic.internal:
            raise LogError(_INVALID_TOPIC, f"internal topic {name!r} cannot be deleted")
        del self.by_name[name]
        del self.by_id[topic.topic_id]
        return topic

    def add_partitions(
        self,
        name: str,
        count: int,
        *,
        brokers: Sequence[int],
        online: Collection[int],
        assignments: Sequence[Sequence[int]] | None = None,
        validate_only: bool = False,
    ) -> Topic:
        """Grow topic ``name`` to ``count`` partitions (CreatePartitions).

        Raises:
            LogError: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS,
                INVALID_REPLICA_ASSIGNMENT or INVALID_REPLICATION_FACTOR.
        """
        topic = self.by_name.get(name)
        if topic is None:
            raise LogError(_UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        current = len(topic.partitions)
        if count < current:
            raise LogError(
                _INVALID_PARTITIONS, f"topic has {current} partitions; it cannot shrink to {count}"
            )
        if count == current:
            raise LogError(_INVALID_PARTITIONS, f"topic already has {current} partitions")
        added = count - current
        rf = topic.replication_factor
        if assignments is not None:
            if len(assignments) != added:
                raise LogError(
                    _INVALID_REPLICA_ASSIGNMENT,
                    f"{len(assignments)} assignments given for {added} new partitions",
                )
            self._check_assignments(assignments, brokers, rf)
            placement = [list(r) for r in assignments]
        else:
            live = [b for b in brokers if b in online]
            if rf > len(live):
                raise LogError(
                    _INVALID_REPLICATION_FACTOR,
                    f"replication factor {rf} is larger than the {len(live)} available brokers",
                )
            placement = self._place(current, added, rf, live)
        if not validate_only:
            for i, replicas in enumerate(placement, start=current):
                topic.partitions.append(
                    Partition(i, PartitionLog(), replicas, _first_online(replicas, online))
                )
        return topic

    def elect_leaders(self, online: Collection[int]) -> bool:
        """Re-elect leaders after brokers went down or came back.

        A partition whose leader is offline moves to its first online replica
        (or to -1 if none is online); an offline partition gets a leader as
        soon as one of its replicas is back. Leadership never moves back to a
        preferred replica on its own. Every change bumps the leader epoch.

        Returns:
            True if any leadership changed.
        """
        changed = False
        for topic in self.by_name.values():
            for part in topic.partitions:
                if part.leader in online:
                    continue
                leader = _first_online(part.replicas, online)
                if leader != part.leader:
                    part.leader = leader
                    part.leader_epoch += 1
                    changed = True
        return changed

    def led_by(self, broker_id: int) -> list[Partition]:
        """The partitions ``broker_id`` leads, over every topic."""
        return [
            part
            for topic in self.by_name.values()
            for part in topic.partitions
            if part.leader == broker_id
        ]

    def move_leader(self, name: str, index: int, broker_id: int) -> Partition:
        """Make ``broker_id`` the leader of a partition, adding it as a replica if needed.

        Raises:
            LogError: UNKNOWN_TOPIC_OR_PARTITION.
        """
        part = self.partition(name, index)
        if part is None:
            raise LogError(_UNKNOWN_TOPIC_OR_PARTITION, f"{name}[{index}] does not exist")
        if broker_id not in part.replicas:
            part.replicas.append(broker_id)
        if part.leader != broker_id:
            part.leader = broker_id
            part.leader_epoch += 1
        return part


def _first_online(replicas: Sequence[int], online: Collection[int]) -> int:
    return next((b for b in replicas if b in online), -1)
