"""Subscribing by pattern on real Apache Kafka 4.3.1: both group protocols pick a new topic up.

Under the classic protocol the member matches the pattern against the
cluster's metadata; under the consumer protocol (KIP-848) it sends the
pattern in ConsumerGroupHeartbeat's ``subscribed_topic_regex`` and the broker
matches, assigning the new topic's partitions once it refreshed the regex.
"""

from __future__ import annotations

import re

import anyio
import pytest

from gengroup import ConsumerGroup
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from .helpers import FAST, Ledger, all_partitions, create_topic, produce_ids

pytestmark = pytest.mark.kafka


async def pick_up_a_new_topic(bootstrap: str, **settings: object) -> None:
    """One member subscribed to ``<prefix>\\..*``: a matching topic created later is
    assigned to it and its records processed; a topic that does not match is not."""
    prefix = make_unique_name("rx")
    group_id = make_unique_name("g")
    first, second, other = f"{prefix}.first", f"{prefix}.second", f"{prefix}-other"
    await create_topic(bootstrap, first, 2)
    await create_topic(bootstrap, other, 1)
    await produce_ids(bootstrap, first, range(0, 50))
    await produce_ids(bootstrap, other, range(1000, 1010))
    pattern = re.compile(re.escape(prefix) + r"\..*")
    ledger = Ledger()
    async with ConsumerGroup(group_id, pattern, bootstrap, client_id="m", **settings) as group:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ledger.member, "m", group)
            await ledger.wait_for(
                lambda: set(ledger.processed) == {f"id-{i}".encode() for i in range(50)},
                f"the records of {first}",
            )
            assert ledger.assigned("m") == all_partitions(first, 2)
            await create_topic(bootstrap, second, 3)
            await produce_ids(bootstrap, second, range(50, 100))
            await ledger.wait_for(
                lambda: (
                    ledger.assigned("m") == all_partitions(first, 2) | all_partitions(second, 3)
                ),
                f"a generation with {second}",
                timeout=90.0,
            )
            await ledger.wait_for(
                lambda: set(ledger.processed) == {f"id-{i}".encode() for i in range(100)},
                f"the records of {second}",
            )
            tg.cancel_scope.cancel()
    assert max(ledger.processed.values()) == 1
    assert not ledger.overlaps


async def test_classic_pattern_subscription_picks_up_a_new_topic(kafka: KafkaBroker) -> None:
    await pick_up_a_new_topic(kafka.bootstrap, **FAST)


async def test_consumer_protocol_regex_subscription_picks_up_a_new_topic(
    kafka: KafkaBroker,
) -> None:
    """KIP-848: the broker resolves the regex (Kafka's default 5 s heartbeat interval and
    45 s session timeout on the shared broker)."""
    settings = {**FAST, "group_protocol": "consumer", "session_timeout": 45.0}
    await pick_up_a_new_topic(kafka.bootstrap, **settings)
