"""The idempotent producer's sequence and epoch state machine (sans-IO)."""

from __future__ import annotations

import logging

import pytest

from gengroup._errors import ClusterAuthorizationFailed, RequestTimedOut, RetriableBrokerError
from gengroup._producer_idempotence import (
    MAX_EPOCH,
    Sequencer,
    add_sequence,
    init_producer_id_request,
)
from gengroup._producer_queue import Batch, Pending
from gengroup._types import TopicPartition
from gengroup.protocol.framing import encode_request, request_module
from gengroup.protocol.versions import PRODUCER_ID_VERSIONS, ApiKey

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)


def batch(tp: TopicPartition, count: int) -> Batch:
    return Batch(tp, [Pending(None, b"v", (), 0, 1, 0.0) for _ in range(count)])


def sent(seq: Sequencer, tp: TopicPartition, count: int) -> Batch:
    """A new batch of ``count`` records, drained (sequenced) as the sender does."""
    b = batch(tp, count)
    seq.bump_if_wanted(0.0)
    seq.assign(b)
    return b


def identity(b: Batch) -> tuple[int, int, int]:
    return b.producer_id, b.producer_epoch, b.base_sequence


def started(producer_id: int = 7, epoch: int = 0) -> Sequencer:
    seq = Sequencer()
    assert seq.needs_id
    seq.set_id(producer_id, epoch)
    assert not seq.needs_id
    return seq


def test_sequences_wrap_after_the_largest_int32_as_kafkas() -> None:
    assert add_sequence(0, 5) == 5
    assert add_sequence(2**31 - 1, 1) == 0
    assert add_sequence(2**31 - 3, 5) == 2


def test_a_batch_keeps_its_sequence_across_retries_and_the_next_follows_it() -> None:
    seq = started()
    first = sent(seq, A, 3)
    assert identity(first) == (7, 0, 0)
    seq.assign(first)  # a retry: the same identity, as the broker must recognise it
    assert identity(first) == (7, 0, 0)
    seq.acknowledged(first)
    second = sent(seq, A, 2)
    assert identity(second) == (7, 0, 3)
    other = sent(seq, B, 4)  # each partition counts its own
    assert identity(other) == (7, 0, 0)


def test_next_sequence_advances_only_on_success() -> None:
    """A batch not acknowledged (split after MESSAGE_TOO_LARGE: not written)
    leaves its sequences to the records drained again."""
    seq = started()
    seq.acknowledged(sent(seq, A, 2))
    too_large = sent(seq, A, 4)
    assert too_large.base_sequence == 2
    half = sent(seq, A, 2)  # the first half of the split records
    assert half.base_sequence == 2
    seq.acknowledged(half)
    assert sent(seq, A, 2).base_sequence == 4


def test_sequences_near_the_wrap_continue_from_zero() -> None:
    seq = started()
    b = sent(seq, A, 1)
    b.base_sequence = 2**31 - 2  # as if that many records were sent before
    seq.acknowledged(b)
    wrapping = sent(seq, A, 3)
    assert wrapping.base_sequence == 2**31 - 1
    seq.acknowledged(wrapping)
    assert sent(seq, A, 1).base_sequence == 2


def test_restart_bumps_the_epoch_and_sends_the_batch_again_from_zero() -> None:
    """UNKNOWN_PRODUCER_ID / OUT_OF_ORDER_SEQUENCE_NUMBER on A: the epoch is
    bumped; A's batch goes again under it from 0; B's batch waiting for a
    retry keeps what it was sent with; B's next new batch restarts at 0."""
    seq = started()
    seq.acknowledged(sent(seq, A, 5))
    seq.acknowledged(sent(seq, B, 5))
    failing = sent(seq, A, 2)
    retrying = sent(seq, B, 3)
    assert identity(failing) == (7, 0, 5) and identity(retrying) == (7, 0, 5)
    seq.restart(failing)
    assert identity(failing) == (-1, -1, -1) and failing.encoded is None
    seq.bump_if_wanted(0.0)
    assert seq.epoch == 1
    seq.assign(failing)
    assert identity(failing) == (7, 1, 0)
    seq.assign(retrying)
    assert identity(retrying) == (7, 0, 5)
    seq.acknowledged(retrying)
    seq.acknowledged(failing)
    assert identity(sent(seq, B, 1)) == (7, 1, 0)
    assert identity(sent(seq, A, 1)) == (7, 1, 2)


def test_a_sent_batch_that_failed_bumps_the_epoch_once() -> None:
    """A batch expired in flight: the epoch is bumped; its late answer (a
    failure too) bumps nothing more, and a late success does not resurrect
    the old epoch's sequences."""
    seq = started()
    seq.acknowledged(sent(seq, A, 4))
    expired = sent(seq, A, 2)
    seq.failed(expired)
    seq.bump_if_wanted(0.0)
    assert seq.epoch == 1
    seq.failed(expired)  # its late answer
    seq.acknowledged(expired)
    seq.bump_if_wanted(0.0)
    assert seq.epoch == 1
    assert identity(sent(seq, A, 1)) == (7, 1, 0)


def test_a_batch_never_sequenced_fails_without_a_bump() -> None:
    seq = started()
    seq.failed(batch(A, 3))  # expired while queued: never sent
    seq.bump_if_wanted(0.0)
    assert seq.epoch == 0


def test_an_exhausted_epoch_asks_for_a_new_producer_id() -> None:
    seq = started(epoch=MAX_EPOCH)
    seq.failed(sent(seq, A, 1))
    seq.bump_if_wanted(0.0)
    assert seq.needs_id
    b = batch(A, 1)
    seq.set_id(8, 0)
    seq.assign(b)
    assert identity(b) == (8, 0, 0)


def test_a_new_producer_id_restarts_every_partition() -> None:
    seq = started()
    seq.acknowledged(sent(seq, A, 3))
    seq.set_id(9, 0)
    assert identity(sent(seq, A, 1)) == (9, 0, 0)


def test_a_final_init_failure_is_logged_once_until_an_id_is_given(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="gengroup")
    seq = Sequencer()
    seq.attempt(0.0)
    retried = seq.init_error(51)  # CONCURRENT_TRANSACTIONS: retriable
    assert isinstance(retried, RetriableBrokerError)
    seq.init_failed(retried, final=False, now=0.0)
    assert seq.last_error is retried and not caplog.records
    error = seq.init_error(31)
    assert isinstance(error, ClusterAuthorizationFailed)
    assert "IDEMPOTENT_WRITE" in str(error) and "idempotence=False" in str(error)
    seq.init_failed(error, final=True, now=0.0)
    seq.init_failed(error, final=True, now=0.0)
    assert len(caplog.records) == 1 and "CLUSTER_AUTHORIZATION_FAILED" in caplog.text
    seq.set_id(1, 0)
    assert seq.last_error is None
    seq.init_failed(error, final=True, now=0.0)
    assert len(caplog.records) == 2


def test_a_final_init_failure_is_kept_for_a_backoff_growing_with_each_in_a_row() -> None:
    seq = Sequencer(retry_backoff=0.1)
    error = seq.init_error(31)
    now = 10.0
    for base in (0.1, 0.2, 0.4, 0.8, 1.0, 1.0):
        seq.attempt(now)
        seq.init_failed(error, final=True, now=now)
        assert seq.refused(now + base * 0.8 - 1e-9) is error
        assert seq.refused(now + base * 1.2 + 1e-9) is None
        now += 5
    seq.set_id(3, 0)
    seq.producer_id = seq.epoch = -1  # (a new id is needed again)
    seq.init_failed(error, final=True, now=now)
    assert seq.refused(now + 0.08 - 1e-9) is error and seq.refused(now + 0.12 + 1e-9) is None


def test_retried_init_failures_are_a_warning_once_they_last_a_second(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gengroup")
    seq = Sequencer()
    retried = seq.init_error(51)
    for now in (0.0, 0.3, 0.7):
        seq.attempt(now)
        seq.init_failed(retried, final=False, now=now + 0.1)
    assert not caplog.records
    for now in (1.0, 1.5):
        seq.attempt(now)
        seq.init_failed(retried, final=False, now=now + 0.1)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "after 1.1 s, 4 failed InitProducerId attempt(s)" in caplog.text
    seq.set_id(7, 0)
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO]
    assert "got after 5 failed InitProducerId attempt(s)" in caplog.records[-1].getMessage()
    seq.producer_id = seq.epoch = -1  # failing again: a new run of failures
    seq.attempt(10.0)
    seq.init_failed(retried, final=False, now=11.0)
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO, logging.WARNING]


def test_records_expiring_while_waiting_for_an_id_say_so_with_its_last_error() -> None:
    seq = Sequencer()
    expired = RequestTimedOut("t[0]: 1 record(s) not delivered within delivery_timeout=5 s")
    seq.attempt(1.0)
    unanswered = seq.waited_error(expired, 4.5)
    assert "waited for a producer id" in str(unanswered)
    assert isinstance(unanswered.__cause__, RequestTimedOut)
    assert "InitProducerId: no answer within 3.5 s" in str(unanswered.__cause__)
    refused = seq.init_error(15)
    seq.init_failed(refused, final=False, now=4.6)
    assert seq.waited_error(expired, 5.0).__cause__ is refused
    seq.set_id(1, 0)
    assert seq.waited_error(expired, 6.0) is expired  # not waiting for an id


@pytest.mark.parametrize("version", range(2, PRODUCER_ID_VERSIONS[ApiKey.INIT_PRODUCER_ID][1] + 1))
def test_the_init_producer_id_request_encodes_in_every_version(version: int) -> None:
    request = init_producer_id_request(request_module(ApiKey.INIT_PRODUCER_ID, version))
    assert request.transactional_id is None
    assert request.transaction_timeout.total_seconds() == -0.001
    assert encode_request(request, correlation_id=1, client_id="c")
