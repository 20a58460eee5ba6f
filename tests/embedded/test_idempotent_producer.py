"""The idempotent producer's reactions, against the embedded broker with injected answers.

The embedded broker serves InitProducerId (and checks idempotent batches);
these tests fail, hold or drop its InitProducerId and Produce answers with
its fault controls, under trio's MockClock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
import trio
import trio.testing

from gengroup import Cluster
from gengroup._errors import (
    ClusterAuthorizationFailed,
    ConnectionClosed,
    CoordinatorNotAvailable,
    RequestTimedOut,
)
from gengroup.broker import Action, Delay, Drop, Fail, FakeCluster, Intercepted
from gengroup.producer import Producer
from gengroup.protocol.records import decode_batches
from gengroup.protocol.versions import ApiKey


def answering_init(fake: FakeCluster, codes: list[int]) -> list[float]:
    """Answer InitProducerId with the error codes of ``codes`` in turn (the last
    one repeats; 0: the broker answers), while the list has any; returns the
    times each was asked at."""
    asked: list[float] = []

    def answer(call: Intercepted) -> Fail | None:
        asked.append(trio.current_time())
        code = codes.pop(0) if len(codes) > 1 else codes[0]
        return Fail(code) if code else None

    fake.control(ApiKey.INIT_PRODUCER_ID, answer)
    return asked


def produced(fake: FakeCluster) -> list[tuple[int, int, int, int]]:
    """Records the (producer id, epoch, base sequence, records) of every batch Produced."""
    seen: list[tuple[int, int, int, int]] = []

    def look(call: Intercepted) -> None:
        for topic in call.request.topic_data:
            for part in topic.partition_data:
                for b in decode_batches(part.records):
                    seen.append((b.producer_id, b.producer_epoch, b.base_sequence, len(b.records)))

    fake.control(ApiKey.PRODUCE, look)
    return seen


async def test_a_producer_id_refused_fails_the_records_waiting_and_is_logged_once(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Retriable answers are retried with backoff; CLUSTER_AUTHORIZATION_FAILED
    fails the send with the typed error; a send after the refusal's backoff
    asks again."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    async with FakeCluster(topics={"t": 1}) as fake:
        seen = produced(fake)
        codes = [14, 14, 31]  # COORDINATOR_LOAD_IN_PROGRESS twice, then refused
        asked = answering_init(fake, codes)
        async with Producer(fake.bootstrap, idempotence=True, retry_backoff=0.1) as producer:
            with pytest.raises(ClusterAuthorizationFailed, match="IDEMPOTENT_WRITE"):
                await producer.send("t", b"a")
            assert len(asked) == 3 and asked[1] - asked[0] >= 0.08  # backed off
            await trio.sleep(0.2)  # past the refusal's backoff (0.1 s +-20 %)
            with pytest.raises(ClusterAuthorizationFailed):
                await producer.send("t", b"b")
            assert len(asked) == 4
            await trio.sleep(0.3)  # past the second one (0.2 s +-20 %)
            codes[:] = [0]
            meta = await producer.send("t", b"c")
    assert meta.offset == 0
    assert len(asked) == 5
    assert seen == [(0, 0, 0, 1)]
    assert [r.value for r in fake.records("t")] == [b"c"]
    refused = [r for r in caplog.records if "no producer id" in r.getMessage()]
    assert len(refused) == 1, caplog.text


async def test_sends_after_a_refusal_fail_with_it_without_asking_until_a_growing_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A refusal that is not retried is kept: the sends that come before its
    backoff passed fail with it (typed as the refusal) without a request, and
    each refusal in a row backs off longer (jittered)."""
    async with FakeCluster(topics={"t": 1}) as fake:
        asked = answering_init(fake, [31])
        async with Producer(fake.bootstrap, idempotence=True, retry_backoff=0.1) as producer:
            started = trio.current_time()
            for _ in range(50):
                with pytest.raises(ClusterAuthorizationFailed, match="IDEMPOTENT_WRITE"):
                    await producer.send("t", b"a")
            assert trio.current_time() - started < 0.01
            assert len(asked) == 1
            ends = []  # how long after a refusal the next request went out
            for _ in range(5):
                refused = asked[-1]
                while len(asked) == len(ends) + 1:
                    await trio.sleep(0.01)
                    with pytest.raises(ClusterAuthorizationFailed):
                        await producer.send("t", b"a")
                ends.append(asked[-1] - refused)
    for got, base in zip(ends, [0.1, 0.2, 0.4, 0.8, 1.0], strict=True):
        assert base * 0.8 <= got <= base * 1.2 + 0.011, ends
    assert fake.high_watermark("t") == 0


def _slow_refusal(call: Intercepted) -> Action:
    return Delay(1.0, Fail(15))  # COORDINATOR_NOT_AVAILABLE, answered after 1 s


def _never_answered(call: Intercepted) -> Action:
    return Drop()


@pytest.mark.parametrize(
    ("answer", "cause", "said"),
    [
        (_slow_refusal, CoordinatorNotAvailable, "COORDINATOR_NOT_AVAILABLE"),
        (_never_answered, RequestTimedOut, "no response to InitProducerId"),
    ],
    ids=["a slow refusal", "no answer"],
)
async def test_records_waiting_for_a_producer_id_expire_with_its_error_as_cause(
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    answer: Callable[[Intercepted], Action],
    cause: type[Exception],
    said: str,
) -> None:
    """A record whose delivery timeout passes while the producer still has no
    id fails at its deadline with RequestTimedOut saying it waited for a
    producer id, the last InitProducerId error (an attempt that timed out:
    RequestTimedOut naming InitProducerId) as its cause; the failures are
    logged once as a WARNING, the id got afterwards once at INFO."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with FakeCluster(topics={"t": 1}) as fake:
        control = fake.control(ApiKey.INIT_PRODUCER_ID, answer)
        async with Producer(
            fake.bootstrap, idempotence=True, delivery_timeout=5, request_timeout=2
        ) as producer:
            started = trio.current_time()
            with pytest.raises(RequestTimedOut, match="waited for a producer id") as caught:
                await producer.send("t", b"a")
            assert trio.current_time() - started == pytest.approx(5, abs=0.01)
            control.remove()
            meta = await producer.send("t", b"b")
    expired = caught.value.__cause__  # (the error raised is a copy of the record's)
    assert isinstance(expired, RequestTimedOut)
    assert isinstance(expired.__cause__, cause) and said in str(expired.__cause__)
    assert said in str(caught.value)
    assert meta.offset == 0
    assert [r.value for r in fake.records("t")] == [b"b"]
    logged = [
        (r.levelno, r.getMessage()) for r in caplog.records if "producer id" in r.getMessage()
    ]
    assert [level for level, _ in logged] == [logging.WARNING, logging.INFO], logged
    assert said in logged[0][1] and "failed InitProducerId attempt(s)" in logged[1][1]


@pytest.mark.parametrize("code", [59, 45], ids=["UNKNOWN_PRODUCER_ID", "OUT_OF_ORDER_SEQUENCE"])
async def test_a_lost_producer_state_bumps_the_epoch_and_sends_the_batch_again_from_zero(
    autojump_clock: trio.testing.MockClock, code: int
) -> None:
    async with FakeCluster(topics={"t": 1}) as fake:
        seen = produced(fake)
        async with Producer(fake.bootstrap, idempotence=True) as producer:
            await producer.send_many("t", [b"a", b"b"])
            fake.control(ApiKey.PRODUCE, lambda call: Fail(code), once=True)
            meta = await producer.send("t", b"c")
            later = await producer.send("t", b"d")
        assert (meta.offset, later.offset) == (2, 3)
        assert seen == [(0, 0, 0, 2), (0, 0, 2, 1), (0, 1, 0, 1), (0, 1, 1, 1)]
        assert [r.value for r in fake.records("t")] == [b"a", b"b", b"c", b"d"]


async def test_a_duplicate_sequence_resolves_the_batch_as_written(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}) as fake:
        seen = produced(fake)
        async with Producer(fake.bootstrap, idempotence=True) as producer:
            fake.control(ApiKey.PRODUCE, lambda call: Fail(46), once=True)
            meta = await producer.send_many("t", [b"a", b"b"])
            later = await producer.send("t", b"c")
        assert [m.offset for m in meta] == [-1, -1]  # written before: where is unknown
        assert later.offset == 0  # (the embedded broker did not write the "duplicate")
        assert seen == [(0, 0, 0, 2), (0, 0, 2, 1)]


async def test_a_shared_cluster_closed_while_an_id_is_asked_for_is_no_refusal(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The Cluster a producer shares closes while its InitProducerId is
    unanswered: the record waiting fails with ConnectionClosed, and nothing says
    the producer was refused an id (an ERROR said so, suggesting
    idempotence=False)."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    outcome: list[BaseException] = []

    async def send(producer: Producer) -> None:
        try:
            await producer.send("t", b"v")
        except Exception as exc:
            outcome.append(exc)

    async with FakeCluster(topics={"t": 1}) as fake:
        fake.control(ApiKey.INIT_PRODUCER_ID, lambda call: Drop())
        async with Cluster(fake.bootstrap) as shared, Producer(shared) as producer:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send, producer)
                await trio.sleep(1.0)
                await shared.aclose()
    assert len(outcome) == 1 and isinstance(outcome[0], ConnectionClosed), outcome
    assert not [r for r in caplog.records if "no producer id" in r.getMessage()], caplog.records
