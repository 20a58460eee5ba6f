"""On real Kafka: a member's committed offset passes transaction markers and aborted transactions.

A transactional producer (librdkafka) writes a committed transaction, then an
aborted one, while a member runs the documented worker (mark
``batch.next_offset`` of each batch). The log then ends with the aborted
records and their marker: the fetch position moves past them with no batch
handed out. The member's mark, its ``gen.lag()``, its committed offset and the
group's lag reach the end of the log, as with the Java consumer,
confluent-kafka and aiokafka; they used to stay behind it for good (6 offsets
under read_committed, the last marker under read_uncommitted).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gengroup import Admin, ConsumerGroup, Generation, TopicPartition
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from .helpers import FAST, create_topic, wait_until

pytestmark = pytest.mark.kafka


def _transaction(producer: Any, topic: str, name: str, commit: bool) -> None:
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"{name}-{i}".encode(), partition=0)
    producer.flush(30)  # the records reach the log before the marker
    (producer.commit_transaction if commit else producer.abort_transaction)(30)


@pytest.mark.parametrize(
    ("isolation", "expected"),
    [
        ("read_committed", [f"c-{i}" for i in range(5)]),
        ("read_uncommitted", [f"{n}-{i}" for n in "ca" for i in range(5)]),
    ],
)
async def test_a_member_commits_past_markers_and_aborted_transactions(
    kafka: KafkaBroker, isolation: str, expected: list[str]
) -> None:
    import confluent_kafka

    topic, group_id = make_unique_name("txmarks"), make_unique_name("g")
    tp = TopicPartition(topic, 0)
    await create_topic(kafka.bootstrap, topic, 1)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": kafka.bootstrap, "transactional.id": make_unique_name("tx")}
    )
    await anyio.to_thread.run_sync(producer.init_transactions, 30)
    seen: list[str] = []

    async def work(gen: Generation) -> None:
        async for batch in gen.fetch(tp):
            seen.extend(r.value.decode() for r in batch if r.value is not None)
            gen.mark(tp, batch.next_offset)

    with anyio.fail_after(90):
        async with ConsumerGroup(
            group_id, [topic], kafka.bootstrap, isolation_level=isolation, **FAST
        ) as group:
            gen = await group.next()
            gen.start_soon(work, gen)
            await anyio.to_thread.run_sync(_transaction, producer, topic, "c", True)
            await anyio.to_thread.run_sync(_transaction, producer, topic, "a", False)
            # 5 records, a marker, 5 records, a marker. The transaction
            # coordinator writes a marker after its EndTxn answered: wait for it.
            async with Admin(kafka.bootstrap) as admin:
                while (end := (await admin.list_offsets([tp], "latest"))[tp]) < 12:
                    await anyio.sleep(0.05)
            assert end == 12
            await wait_until(lambda: gen.marks == {tp: end}, "the mark at the end", 30)
            assert (gen.lag(), gen.position(tp)) == ({tp: 0}, end)
            await gen.commit()
            await group.aclose()
    assert seen == expected
    async with Admin(kafka.bootstrap) as admin:
        lag = (await admin.group_lag(group_id))[tp]
    assert (lag.committed, lag.end, lag.lag) == (end, end, 0)
