"""A subscribed topic deleted (then created again) on real Apache Kafka 4.3.1: its
marks are dropped, not retried, so the other topic's partitions flow again at
once, and the topic created again is read from its first record."""

from __future__ import annotations

import logging

import anyio
import pytest

from gengroup import Admin, ConsumerGroup
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from .helpers import FAST, Ledger, create_topic, produce_ids

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
