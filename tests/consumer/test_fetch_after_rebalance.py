"""A new generation's first Fetch does not queue behind the ended one's long poll.

A generation that ends while its prefetcher's Fetch waits on the broker (a
long poll over partitions without new data) leaves that request in flight
until the broker answers it, up to ``fetch_max_wait``; the broker answers a
connection's requests in order. Here m1 owns a quiet partition and m2 a
busy one; m2 leaves, and m1's next generation gets m2's partition. Records
produced to it once that generation formed are processed long before m1's
old long poll over the quiet partition could have ended (``fetch_max_wait``
is 20 s here): the new generation fetches on connections with no answer
still to come. On Apache Kafka and on the embedded broker.
"""

from __future__ import annotations

import anyio
import pytest

from gengroup import ConsumerGroup, Generation, Producer, RangeBalancer, TopicPartition
from gengroup.broker import BrokerSettings
from gengroup.producer import ProducerRecord
from gengroup.testing.pytest_plugin import make_unique_name

from .helpers import FAST, broker_under_test, create_topic, wait_until

LONG_POLL = 20.0  # fetch_max_wait: how long m1's old long poll over the quiet partition lasts
GUARD = 10.0  # well within LONG_POLL: the records must come before it could have ended


@pytest.mark.parametrize("which", [pytest.param("kafka", marks=pytest.mark.kafka), "embedded"])
async def test_the_next_generation_does_not_wait_for_the_ended_ones_long_poll(
    request: pytest.FixtureRequest, which: str
) -> None:
    settings = BrokerSettings(group_initial_rebalance_delay_ms=0)
    async with broker_under_test(request, which, settings) as bootstrap:
        topic, group_id = make_unique_name("quiet"), make_unique_name("g")
        await create_topic(bootstrap, topic, 2)
        quiet, busy = TopicPartition(topic, 0), TopicPartition(topic, 1)

        async def produce(ids: range) -> None:
            """Records to the busy partition only: one on the quiet one would end the long poll."""
            async with Producer(bootstrap) as producer:
                records = [ProducerRecord(f"id-{i}".encode(), partition=1) for i in ids]
                await producer.send_many(topic, records)

        owned: dict[str, set[TopicPartition]] = {}
        processed: list[tuple[str, TopicPartition, bytes]] = []

        async def worker(name: str, gen: Generation, tp: TopicPartition) -> None:
            async for batch in gen.fetch(tp):
                processed.extend((name, tp, r.value or b"") for r in batch.records)
                gen.mark(tp, batch.next_offset)

        async def member(name: str) -> None:
            settings = {**FAST, "fetch_max_wait": LONG_POLL, "request_timeout": 2 * LONG_POLL}
            async with ConsumerGroup(
                group_id,
                [topic],
                bootstrap,
                client_id=name,
                balancers=[RangeBalancer()],
                start_offset="earliest",
                **settings,
            ) as group:
                async for gen in group:
                    owned[name] = set(gen.assignments)
                    for tp in gen.assignments:
                        gen.start_soon(worker, name, gen, tp)

        async with anyio.create_task_group() as tg:
            tg.start_soon(member, "m1")
            await wait_until(lambda: owned.get("m1") == {quiet, busy}, "m1 alone", 60)
            m2 = anyio.CancelScope()
            tg.start_soon(_until, m2, member, "m2")
            await wait_until(
                lambda: owned.get("m1") == {quiet} and owned.get("m2") == {busy}, "a split", 60
            )
            # m2 consumes its partition; m1's long poll over the quiet one waits.
            await produce(range(1))
            await wait_until(lambda: processed, "the first record", 60)
            await anyio.sleep(1.0)
            m2.cancel()  # m2 leaves
            await wait_until(lambda: owned.get("m1") == {quiet, busy}, "m1 alone again", 60)
            before = len(processed)
            await produce(range(1, 21))
            with anyio.fail_after(GUARD):  # a hang guard: the old long poll lasts LONG_POLL
                while len({v for _, _, v in processed[before:]}) < 20:
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
        assert {(name, tp) for name, tp, _ in processed} == {("m2", busy), ("m1", busy)}


async def _until(scope: anyio.CancelScope, run: object, *args: object) -> None:
    """``run(*args)`` until ``scope`` is cancelled."""
    with scope:
        await run(*args)  # type: ignore[operator]
