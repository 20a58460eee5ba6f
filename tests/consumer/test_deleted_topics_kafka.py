"""A subscribed topic deleted (then created again) on real Apache Kafka 4.3.1: its
marks are dropped, not retried, so the other topic's partitions flow again at
once, and the topic created again is read from its first record."""

from __future__ import annotations

import logging
from collections import Counter

import anyio
import pytest

from gengroup import (
    Admin,
    ConsumerGroup,
    CooperativeStickyBalancer,
    TopicAlreadyExists,
)
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from .helpers import FAST, Ledger, create_topic, produce_ids, span_workers, wait_until

pytestmark = pytest.mark.kafka


async def test_a_deleted_topic_does_not_hold_the_group_up_and_comes_back_from_its_start(
    kafka: KafkaBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gengroup")
    keep, gone, group_id = make_unique_name("keep"), make_unique_name("gone"), make_unique_name("g")
    await create_topic(kafka.bootstrap, keep, 2)
    await create_topic(kafka.bootstrap, gone, 1)
    settings = {**FAST, "commit_interval": 60.0, "partition_watch_interval": 1.0}
    ledger = Ledger()
    async with ConsumerGroup(group_id, [keep, gone], kafka.bootstrap, **settings) as group:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ledger.member, "m", group)
            await produce_ids(kafka.bootstrap, keep, range(0, 20))
            await produce_ids(kafka.bootstrap, gone, range(100, 120))
            await ledger.wait_for(lambda: len(ledger.processed) == 40, "every record")
            async with Admin(kafka.bootstrap) as admin:
                await admin.delete_topics([gone])
            deleted_at = anyio.current_time()
            await ledger.wait_for(
                lambda: (
                    bool(ledger.current())
                    and all(tp.topic == keep for tp in ledger.current()["m"].assignments)
                ),
                "a generation without the deleted topic",
            )
            assert anyio.current_time() - deleted_at < 15.0  # the refusal held it 30 s
            async with Admin(kafka.bootstrap) as admin:
                committed = await admin.fetch_offsets(group_id)
            assert {tp.topic for tp in committed} == {keep}
            assert sum(committed.values()) == 20
            await create_topic(kafka.bootstrap, gone, 1)
            await produce_ids(kafka.bootstrap, gone, range(200, 230))
            await ledger.wait_for(
                lambda: all(ledger.processed[b"id-%d" % i] for i in range(200, 230)),
                "every record of the topic created again",
            )
            tg.cancel_scope.cancel()
    assert not [r for r in caplog.records if "commit" in r.message and "failed" in r.message]


@pytest.mark.parametrize("protocol", ["cooperative", "consumer"])
async def test_a_partition_worker_of_a_topic_created_again_starts_on_the_new_topic(
    kafka: KafkaBroker, protocol: str
) -> None:
    """Partition-scoped workers kept across generations (cooperative-sticky,
    KIP-848): a topic deleted and created again as soon as Kafka allows, with
    as many partitions, is read from its first record. Kafka takes a moment to
    delete a topic, so the group mostly sees it gone before it comes back;
    the embedded broker's test of this scenario
    (``test_deleted_topics.py::test_a_topic_deleted_and_created_again_between_two_heartbeats_is_read_from_its_start``)
    brings it back at once, where only its topic id tells."""
    topic, group_id = make_unique_name("again"), make_unique_name("g")
    await create_topic(kafka.bootstrap, topic, 2)
    settings: dict[str, object] = {**FAST, "commit_interval": 60.0}
    if protocol == "consumer":
        settings = {"group_protocol": "consumer", "commit_interval": 60.0, "fetch_max_wait": 0.2}
    else:
        settings["balancers"] = [CooperativeStickyBalancer()]
    processed: Counter[bytes] = Counter()

    async with ConsumerGroup(group_id, [topic], kafka.bootstrap, **settings) as group:
        async with anyio.create_task_group() as tg:
            tg.start_soon(span_workers, group, processed)
            await produce_ids(kafka.bootstrap, topic, range(0, 10))
            await wait_until(lambda: len(processed) == 10, "the old records", 60.0)
            async with Admin(kafka.bootstrap) as admin:
                await admin.delete_topics([topic])
                with anyio.fail_after(30.0):
                    while True:  # Kafka may still be deleting it
                        try:
                            await admin.create_topics({topic: 2})
                            break
                        except TopicAlreadyExists:
                            await anyio.sleep(0.1)
            await produce_ids(kafka.bootstrap, topic, range(100, 160))
            await wait_until(
                lambda: all(processed[b"id-%d" % i] for i in range(100, 160)),
                "every record of the topic created again",
                90.0,
            )
            tg.cancel_scope.cancel()
