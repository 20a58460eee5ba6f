"""The idempotent producer's reactions, against the embedded broker with injected answers.

The embedded broker stores idempotent batches but does not answer
InitProducerId yet: these tests answer it from the client's side
(:func:`answering_init`), and inject the broker's Produce errors with its
fault controls, under trio's MockClock.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing

from gengroup._errors import ClusterAuthorizationFailed, RequestTimedOut, RetriableBrokerError
from gengroup.broker import Fail, FakeCluster, Intercepted
from gengroup.io.cluster import Cluster
from gengroup.producer import Producer
from gengroup.protocol.records import decode_batches
from gengroup.protocol.versions import ApiKey


@contextmanager
def answering_init(cluster: Cluster, answers: list[tuple[int, int, int]]) -> Iterator[list[float]]:
    """Answer the InitProducerId requests sent through ``cluster`` with
    ``(error_code, producer_id, epoch)`` from ``answers`` (the last one
    repeats); yields the times they were asked at."""
    asked: list[float] = []
    real = cluster.call

    async def call(node: int | None, key: ApiKey, make: Any, **kwargs: Any) -> Any:
        if key != ApiKey.INIT_PRODUCER_ID:
            return await real(node, key, make, **kwargs)
        asked.append(trio.current_time())
        await trio.sleep(0.001)
        code, producer_id, epoch = answers.pop(0) if len(answers) > 1 else answers[0]
        return SimpleNamespace(error_code=code, producer_id=producer_id, producer_epoch=epoch)

    cluster.call = call  # type: ignore[method-assign]
    try:
        yield asked
    finally:
        del cluster.call


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
    fails the send with the typed error; a later send asks again."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    async with FakeCluster(topics={"t": 1}) as fake, Cluster(fake.bootstrap) as cluster:
        seen = produced(fake)
        answers = [(14, -1, -1), (14, -1, -1), (31, -1, -1)]
        with answering_init(cluster, answers) as asked:
            async with Producer(cluster, idempotence=True, retry_backoff=0.1) as producer:
                with pytest.raises(ClusterAuthorizationFailed, match="IDEMPOTENT_WRITE"):
                    await producer.send("t", b"a")
                assert len(asked) == 3 and asked[1] - asked[0] >= 0.08  # backed off
                with pytest.raises(ClusterAuthorizationFailed):
                    await producer.send("t", b"b")
                assert len(asked) == 4
                answers[:] = [(0, 5, 0)]
                meta = await producer.send("t", b"c")
        assert meta.offset == 0
        assert seen == [(5, 0, 0, 1)]
        assert [r.value for r in fake.records("t")] == [b"c"]
        refused = [r for r in caplog.records if "no producer id" in r.getMessage()]
        assert len(refused) == 1, caplog.text


async def test_records_waiting_for_a_producer_id_expire_with_its_error_as_cause(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}) as fake, Cluster(fake.bootstrap) as cluster:
        with answering_init(cluster, [(51, -1, -1)]):  # CONCURRENT_TRANSACTIONS: retriable
            async with Producer(cluster, idempotence=True, delivery_timeout=3) as producer:
                started = trio.current_time()
                with pytest.raises(RequestTimedOut) as caught:
                    await producer.send("t", b"a")
                assert trio.current_time() - started == pytest.approx(3, abs=0.01)
        assert isinstance(caught.value.__cause__, RequestTimedOut)
        assert isinstance(caught.value.__cause__.__cause__, RetriableBrokerError)
        assert fake.high_watermark("t") == 0


@pytest.mark.parametrize("code", [59, 45], ids=["UNKNOWN_PRODUCER_ID", "OUT_OF_ORDER_SEQUENCE"])
async def test_a_lost_producer_state_bumps_the_epoch_and_sends_the_batch_again_from_zero(
    autojump_clock: trio.testing.MockClock, code: int
) -> None:
    async with FakeCluster(topics={"t": 1}) as fake, Cluster(fake.bootstrap) as cluster:
        seen = produced(fake)
        with answering_init(cluster, [(0, 5, 0)]):
            async with Producer(cluster, idempotence=True) as producer:
                await producer.send_many("t", [b"a", b"b"])
                fake.control(ApiKey.PRODUCE, lambda call: Fail(code), once=True)
                meta = await producer.send("t", b"c")
                later = await producer.send("t", b"d")
        assert (meta.offset, later.offset) == (2, 3)
        assert seen == [(5, 0, 0, 2), (5, 0, 2, 1), (5, 1, 0, 1), (5, 1, 1, 1)]
        assert [r.value for r in fake.records("t")] == [b"a", b"b", b"c", b"d"]


async def test_a_duplicate_sequence_resolves_the_batch_as_written(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}) as fake, Cluster(fake.bootstrap) as cluster:
        seen = produced(fake)
        with answering_init(cluster, [(0, 5, 0)]):
            async with Producer(cluster, idempotence=True) as producer:
                fake.control(ApiKey.PRODUCE, lambda call: Fail(46), once=True)
                meta = await producer.send_many("t", [b"a", b"b"])
                later = await producer.send("t", b"c")
        assert [m.offset for m in meta] == [-1, -1]  # written before: where is unknown
        assert later.offset == 0  # (the embedded broker did not write the "duplicate")
        assert seen == [(5, 0, 0, 2), (5, 0, 2, 1)]
