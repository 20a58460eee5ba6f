"""The idempotent producer (``idempotence=True``) against a broker.

The scenarios take the broker as a parameter (:data:`BROKERS`) and run against
the real Apache Kafka broker and the embedded one alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import anyio
import pytest

from gengroup import Admin
from gengroup._errors import ConfigError, RequestTimedOut
from gengroup.broker import FakeCluster
from gengroup.io.connection import open_connection
from gengroup.producer import Producer, ProducerConfig
from gengroup.protocol.records import RecordBatch, decode_batches
from gengroup.testing.pytest_plugin import make_unique_name

from . import embedded as rq
from .cut_proxy import CutProxy

#: The brokers the scenarios run against.
BROKERS = [pytest.param("kafka", marks=pytest.mark.kafka), "embedded"]

OpenBroker = Callable[[], AbstractAsyncContextManager[str]]


@pytest.fixture(params=BROKERS)
def broker(request: pytest.FixtureRequest) -> OpenBroker:
    """Opens the broker a scenario runs against, giving its bootstrap address."""

    @asynccontextmanager
    async def kafka() -> AsyncIterator[str]:
        yield request.getfixturevalue("kafka").bootstrap

    @asynccontextmanager
    async def embedded() -> AsyncIterator[str]:
        async with FakeCluster() as cluster:
            yield cluster.bootstrap

    return kafka if request.param == "kafka" else embedded


@asynccontextmanager
async def proxied(broker: OpenBroker) -> AsyncIterator[tuple[str, str, CutProxy]]:
    """A new one-partition topic, the broker's address and a :class:`CutProxy` in front of it."""
    topic = make_unique_name("idempotence")
    async with broker() as bootstrap, anyio.create_task_group() as tg:
        async with Admin(bootstrap) as admin:
            await admin.create_topics({topic: 1})
        proxy = CutProxy(bootstrap)
        await tg.start(proxy.run)
        yield topic, bootstrap, proxy
        tg.cancel_scope.cancel()


async def batches(bootstrap: str, topic: str) -> list[RecordBatch]:
    """Every record batch of the topic's partition 0, fetched from the broker itself."""
    host, port = bootstrap.rsplit(":", 1)
    async with open_connection(host, int(port), client_id="idempotence-test") as conn:
        resp = await conn.request(rq.fetch(12, topic, 0, 0))
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0, part
    return decode_batches(part.records)


def values(found: list[RecordBatch]) -> list[bytes | None]:
    return [record.value for batch in found for record in batch.records]


@pytest.mark.parametrize("idempotence", [True, False], ids=["idempotent", "not-idempotent"])
async def test_a_produce_whose_answer_is_lost_is_retried_and_written_once(
    broker: OpenBroker, idempotence: bool
) -> None:
    """The broker writes a batch and its answer is lost (the connection is cut):
    the retry is written again without idempotence, and recognised with it."""
    async with proxied(broker) as (topic, bootstrap, proxy):
        first = [b"r%d" % i for i in range(5)]
        async with Producer(
            proxy.bootstrap, idempotence=idempotence, linger=0.05, retry_backoff=0.05
        ) as producer:
            proxy.lose_produce_answers = 1
            metas = await producer.send_many(topic, first)
            later = [await producer.send(topic, b"s%d" % i) for i in range(3)]
        assert proxy.lost == 1
        found = values(await batches(bootstrap, topic))
        if idempotence:
            assert found == [*first, b"s0", b"s1", b"s2"]
            assert [m.offset for m in metas] == [0, 1, 2, 3, 4]  # the first write's
            assert [m.offset for m in later] == [5, 6, 7]
        else:
            assert found == [*first, *first, b"s0", b"s1", b"s2"]


async def test_batches_carry_the_producer_id_epoch_and_sequences(broker: OpenBroker) -> None:
    async with proxied(broker) as (topic, bootstrap, _):
        async with Producer(bootstrap, idempotence=True, linger=0.05) as producer:
            for count in (2, 3, 1):
                await producer.send_many(topic, [b"v"] * count)
        async with Producer(bootstrap, linger=0.05) as default:
            await default.send(topic, b"default")
        async with Producer(bootstrap, idempotence=False, linger=0.05) as plain:
            await plain.send(topic, b"plain")
        async with Producer(bootstrap, acks=1, linger=0.05) as leader_only:
            await leader_only.send(topic, b"acks=1")
        found = await batches(bootstrap, topic)
        producer_id = found[0].producer_id
        assert producer_id >= 0
        ids = [(b.producer_id, b.producer_epoch, b.base_sequence) for b in found]
        assert ids[:3] == [(producer_id, 0, 0), (producer_id, 0, 2), (producer_id, 0, 5)]
        # The default (acks "all") asks for a producer id of its own.
        assert ids[3][0] >= 0 and ids[3][0] != producer_id and ids[3][1:] == (0, 0)
        assert ids[4:] == [(-1, -1, -1), (-1, -1, -1)]  # not idempotent


async def test_a_batch_expiring_in_flight_bumps_the_epoch_and_later_sends_succeed(
    broker: OpenBroker,
) -> None:
    """Its sequences are uncertain (the broker wrote it; nobody knows): the
    epoch is bumped, and the next batch starts at sequence 0 under it."""
    async with proxied(broker) as (topic, bootstrap, proxy):
        async with Producer(
            proxy.bootstrap, idempotence=True, linger=0.01, delivery_timeout=2.0
        ) as producer:
            await producer.send(topic, b"a")
            proxy.lose_produce_answers = 1
            proxy.hold = True  # the answer never comes, until released: then the cut
            with pytest.raises(RequestTimedOut, match="still unanswered"):
                await producer.send_many(topic, [b"b1", b"b2"])
            proxy.release.set()
            meta = await producer.send(topic, b"c")
        assert meta.offset == 3
        # "c" went once, under the bumped epoch: not refused as out of order first.
        assert proxy.produce_requests == 3
        found = await batches(bootstrap, topic)
        assert values(found) == [b"a", b"b1", b"b2", b"c"]
        producer_id = found[0].producer_id
        assert [(b.producer_id, b.producer_epoch, b.base_sequence) for b in found] == [
            (producer_id, 0, 0),
            (producer_id, 0, 1),
            (producer_id, 1, 0),
        ]


@pytest.mark.parametrize("acks", [0, 1])
def test_idempotence_needs_acks_all(acks: int) -> None:
    with pytest.raises(ConfigError, match=r"idempotence=True needs acks='all'"):
        ProducerConfig(idempotence=True, acks=acks)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="idempotence must be True or False"):
        ProducerConfig(idempotence=1)  # type: ignore[arg-type]
    assert ProducerConfig(idempotence=True, acks="all").acks == -1
    assert ProducerConfig(idempotence=False, acks=acks).acks == acks
    # Left unset, it follows acks, as Java's enable.idempotence does.
    assert ProducerConfig().idempotent and ProducerConfig(acks="all").idempotent
    assert not ProducerConfig(acks=acks).idempotent
    assert not ProducerConfig(idempotence=False).idempotent
