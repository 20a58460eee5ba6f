"""The idempotent producer state of a partition, sans-IO, and its use by the log."""

from __future__ import annotations

import pytest

from gengroup.broker.log import PartitionLog
from gengroup.broker.producer_state import (
    BATCHES_TO_RETAIN,
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    MAX_SEQUENCE,
    ProducerStates,
    SequenceError,
    increment_sequence,
)
from gengroup.protocol.records import encode_batch

OUT_OF_ORDER = 45
INVALID_EPOCH = 47


def _batch(pid: int, epoch: int, seq: int, count: int = 2, ts: int = 1_000) -> bytes:
    return encode_batch(
        [(None, b"v%d" % i, (), ts) for i in range(count)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def test_increment_sequence_wraps_after_the_largest() -> None:
    assert increment_sequence(5, 3) == 8
    assert increment_sequence(MAX_SEQUENCE, 1) == 0
    assert increment_sequence(MAX_SEQUENCE - 1, 2) == 0
    assert increment_sequence(MAX_SEQUENCE - 1, 4) == 2


def test_unknown_producer_may_start_anywhere_then_must_follow() -> None:
    states = ProducerStates()
    states.check(7, 3, 41)  # unknown: accepted
    states.record(7, 3, 41, 0, 1, 1_000)
    states.check(7, 3, 43)
    with pytest.raises(SequenceError) as info:
        states.check(7, 3, 44)
    assert info.value.code == OUT_OF_ORDER
    assert "44" in str(info.value) and "42" in str(info.value)


def test_epochs() -> None:
    states = ProducerStates()
    states.record(1, 2, 0, 0, 1, 1_000)
    with pytest.raises(SequenceError) as info:
        states.check(1, 1, 2)
    assert info.value.code == INVALID_EPOCH
    with pytest.raises(SequenceError) as info:
        states.check(1, 3, 2)
    assert info.value.code == OUT_OF_ORDER
    states.check(1, 3, 0)
    states.record(1, 3, 0, 2, 3, 1_000)
    # The new epoch forgot the old one's batches.
    assert states.duplicate(1, 2, 0, 2) is None
    assert states.duplicate(1, 3, 0, 2) is not None


def test_only_the_last_five_batches_are_duplicates() -> None:
    states = ProducerStates()
    for n in range(BATCHES_TO_RETAIN + 1):
        states.record(1, 0, 2 * n, 2 * n, 2 * n + 1, 1_000 + n)
    assert states.duplicate(1, 0, 0, 2) is None
    found = states.duplicate(1, 0, 2, 2)
    assert found is not None and (found.first_offset, found.timestamp) == (2, 1_001)
    assert states.duplicate(1, 0, 2, 3) is None  # another range is no duplicate


def test_log_answers_a_retry_with_its_first_offsets_and_appends_nothing() -> None:
    log = PartitionLog()
    assert log.append(_batch(4, 0, 0), now_ms=5).base_offset == 0
    assert log.append(_batch(4, 0, 2), now_ms=5).base_offset == 2
    again = log.append(_batch(4, 0, 0, ts=2_000), now_ms=9)
    assert (again.base_offset, again.log_append_time, again.log_start_offset) == (0, 1_000, 0)
    assert log.high_watermark == 4 and len(log.batches) == 2
    with pytest.raises(SequenceError):
        log.append(_batch(4, 0, 7), now_ms=5)
    assert log.high_watermark == 4


def test_log_keeps_producer_state_across_delete_records() -> None:
    log = PartitionLog()
    log.append(_batch(4, 0, 0), now_ms=5)
    log.delete_records(-1)
    again = log.append(_batch(4, 0, 0), now_ms=5)
    assert (again.base_offset, again.log_start_offset) == (0, 2)
    with pytest.raises(SequenceError):
        log.append(_batch(4, 0, 5), now_ms=5)


def test_log_append_time_topic_retry_gets_the_first_append_time() -> None:
    log = PartitionLog()
    first = log.append(_batch(4, 0, 0), now_ms=5_000, log_append_time=True)
    again = log.append(_batch(4, 0, 0), now_ms=9_000, log_append_time=True)
    assert first.log_append_time == again.log_append_time == 5_000


@pytest.mark.parametrize("full", [True, False])
def test_negative_sequence_with_a_producer_id_is_an_invalid_record(full: bool) -> None:
    log = PartitionLog()
    # A SequenceError: answered as Kafka answers it, with no message.
    with pytest.raises(SequenceError) as info:
        log.append(_batch(4, 0, -1), now_ms=5, validate_records=full)
    assert info.value.code == 87


def test_reload_keeps_only_each_producers_last_batch() -> None:
    log = PartitionLog()
    for seq in (0, 2, 4):
        log.append(_batch(4, 0, seq, ts=10_000), now_ms=10_000)
    log.append(_batch(5, 3, 7, ts=20_000), now_ms=20_000)
    log.producers.reload(30_000, DEFAULT_PRODUCER_ID_EXPIRATION_MS)
    assert [len(e.batches) for e in log.producers.entries.values()] == [1, 1]
    assert log.append(_batch(4, 0, 4), now_ms=30_000).base_offset == 4  # the last: duplicate
    with pytest.raises(SequenceError) as info:
        log.append(_batch(4, 0, 2), now_ms=30_000)  # an older one: out of order
    assert info.value.code == OUT_OF_ORDER
    assert log.producers.entries[5].epoch == 3
    assert log.producers.entries[5].last_seq == 8


def test_reload_drops_producers_whose_last_timestamp_is_expired() -> None:
    # Kafka's isProducerExpired: now - lastTimestamp >= producer.id.expiration.ms,
    # by the last batch's max timestamp, not by when it was appended.
    log = PartitionLog()
    log.append(_batch(1, 0, 0, ts=1_000), now_ms=50_000)
    log.append(_batch(2, 0, 0, ts=1_001), now_ms=50_000)
    log.producers.reload(1_000 + 60_000, 60_000)
    assert list(log.producers.entries) == [2]
    log.append(_batch(1, 0, 6), now_ms=70_000)  # unknown again: any sequence
    assert log.high_watermark == 6
