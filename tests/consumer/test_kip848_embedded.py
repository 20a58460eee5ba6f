"""group_protocol="consumer" (KIP-848) on the embedded broker.

The client's KIP-848 scenarios of ``test_kip848_kafka.py`` run here against
the embedded broker's consumer group coordinator, with the same short timings
(heartbeat interval 500 ms, session timeout 6 s). The scenarios with members
in other processes (killed, frozen) need real time, so those tests run the
broker on the real clock; the others use trio's ``MockClock``. A broker
configured without the consumer protocol does not advertise
ConsumerGroupHeartbeat, so a member asking for it gets a typed error naming
``group_protocol``.
"""

from __future__ import annotations

import dataclasses
import re
import types
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import trio
import trio.testing

from gengroup import ConfigError, ConsumerGroup, GengroupError, TopicPartition
from gengroup._errors import GroupProtocolUnsupported, UnsupportedVersion
from gengroup.broker import FakeCluster, apis
from gengroup.broker.state import BrokerSettings
from gengroup.protocol.versions import CONSUMER_PROTOCOL_VERSIONS, ApiKey, negotiate

from . import test_kip848_kafka as scenarios
from .kip848 import EMBEDDED_SETTINGS

#: The embedded broker with the timings of ``kip848.BROKER_PROPERTIES``.
KIP848_SETTINGS = EMBEDDED_SETTINGS


@asynccontextmanager
async def kip848_cluster() -> AsyncIterator[Any]:
    """An embedded cluster (3 brokers) shaped like the ``kip848_kafka`` fixture."""
    async with FakeCluster(brokers=3, settings=KIP848_SETTINGS) as cluster:
        yield types.SimpleNamespace(bootstrap=cluster.bootstrap, cluster=cluster)
        assert not cluster.state.errors, cluster.state.errors


async def test_one_then_three_then_two_members(autojump_clock: trio.testing.MockClock) -> None:
    """Every partition has one owner at every instant; every record is processed;
    commits are accepted and never move backwards (the scenario of the Kafka test)."""
    async with kip848_cluster() as broker:
        await scenarios.one_then_three_then_two(broker.bootstrap)


def test_one_then_three_then_two_members_asyncio() -> None:
    """The same under asyncio, on the real clock."""

    async def scenario() -> None:
        async with kip848_cluster() as broker:
            await scenarios.one_then_three_then_two(broker.bootstrap)

    anyio.run(scenario, backend="asyncio")


async def test_a_killed_member_is_fenced_after_the_session_timeout() -> None:
    """A member process killed (SIGKILL): only the broker's session timeout moves
    its partitions to the survivor."""
    async with kip848_cluster() as broker:
        killed = scenarios.test_a_killed_member_is_fenced_and_its_partitions_move_after_the_session_timeout  # noqa: E501
        await killed(broker)


@pytest.mark.parametrize("scope", ["generation", "partition"])
async def test_a_frozen_member_is_fenced_and_rejoins_with_epoch_0(scope: str) -> None:
    """A member process frozen past its session (SIGSTOP) processes nothing after
    waking (its tasks are generation- or partition-scoped), rejoins, and the
    partitions are shared again."""
    async with kip848_cluster() as broker:
        await scenarios.test_a_frozen_member_is_fenced_and_rejoins_with_epoch_0(broker, scope)


async def test_a_static_member_keeps_its_partitions_across_a_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Leaving with epoch -2 keeps a static member's partitions; a twin with the
    same group_instance_id is refused (UNRELEASED_INSTANCE_ID)."""
    async with kip848_cluster() as broker:
        await scenarios.test_a_static_member_keeps_its_partitions_across_a_restart(broker)


async def test_a_broker_without_the_consumer_protocol_gives_a_clear_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    classic_only = BrokerSettings(
        group_initial_rebalance_delay_ms=0, group_coordinator_rebalance_protocols=("classic",)
    )
    async with FakeCluster(topics={"t": 2}, settings=classic_only) as cluster:
        group = ConsumerGroup("g", ["t"], cluster.bootstrap, group_protocol="consumer")
        with anyio.fail_after(60):
            async with group:
                with pytest.raises(GroupProtocolUnsupported) as raised:
                    async for _ in group:
                        pytest.fail("a generation formed without the consumer protocol")
    message = str(raised.value)
    assert "group_protocol='consumer'" in message
    assert "ConsumerGroupHeartbeat" in message
    assert "group_protocol='classic'" in message
    assert isinstance(raised.value, UnsupportedVersion)
    assert isinstance(raised.value, GengroupError)


async def test_the_classic_protocol_still_works_there(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster,
        ConsumerGroup("g", ["t"], cluster.bootstrap, group_protocol="classic") as group,
    ):
        async for gen in group:
            assert len(gen.assignments) == 2
            break


def test_consumer_group_heartbeat_is_negotiated_apart_from_the_classic_table() -> None:
    assert ApiKey.CONSUMER_GROUP_HEARTBEAT in CONSUMER_PROTOCOL_VERSIONS
    chosen = negotiate(
        {int(ApiKey.CONSUMER_GROUP_HEARTBEAT): (0, 1), int(ApiKey.METADATA): (0, 12)}
    )
    assert chosen[ApiKey.CONSUMER_GROUP_HEARTBEAT] == 1
    assert ApiKey.CONSUMER_GROUP_HEARTBEAT not in negotiate({int(ApiKey.METADATA): (0, 12)})


@pytest.mark.parametrize(
    ("settings", "names"),
    [
        ({"group_protocol": "cooperative"}, "group_protocol"),
        ({"group_protocol": "consumer", "group_remote_assignor": ""}, "group_remote_assignor"),
        ({"group_remote_assignor": "uniform"}, "group_protocol='consumer'"),
    ],
)
def test_the_settings_are_checked(settings: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        ConsumerGroup("g", ["t"], "127.0.0.1:9092", **settings)  # type: ignore[arg-type]


def test_the_settings_default_to_the_classic_protocol() -> None:
    group = ConsumerGroup("g", ["t"], "127.0.0.1:9092")
    assert group.config.group_protocol == "classic"
    assert group.config.group_remote_assignor is None
    kip848 = ConsumerGroup(
        "g", ["t"], "127.0.0.1:9092", group_protocol="consumer", group_remote_assignor="range"
    )
    assert kip848.config.group_remote_assignor == "range"
    assert len(kip848.member_id) == 22  # made by the member, as the Java client does


async def test_a_pattern_on_a_broker_speaking_only_v0_is_told_what_it_needs(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka 3.7 to 3.9 with early access serve ConsumerGroupHeartbeat v0, without
    regular expressions: the error says that patterns need Kafka 4.0, not that
    the broker lacks the protocol (it speaks it: a list of topics works)."""
    spec = apis.SPECS[ApiKey.CONSUMER_GROUP_HEARTBEAT]
    monkeypatch.setitem(
        apis._specs, ApiKey.CONSUMER_GROUP_HEARTBEAT, dataclasses.replace(spec, max_version=0)
    )
    async with FakeCluster(topics={"orders": 1}, settings=KIP848_SETTINGS) as cluster:
        async with ConsumerGroup(
            "g", ["orders"], cluster.bootstrap, group_protocol="consumer"
        ) as group:
            with anyio.fail_after(60):
                async for gen in group:
                    assert set(gen.assignments) == {TopicPartition("orders", 0)}
                    break
        with pytest.raises(GroupProtocolUnsupported) as caught:
            async with ConsumerGroup(
                "g2", re.compile(r"orders.*"), cluster.bootstrap, group_protocol="consumer"
            ) as group:
                with anyio.fail_after(60):
                    async for _ in group:
                        pass
    text = str(caught.value)
    assert "with a topic pattern" in text and "Apache Kafka 4.0" in text
    assert "speaks only v0" in text and "does not" not in text


async def test_a_pattern_subscription_is_resolved_by_the_broker(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The heartbeat carries the regular expression; the coordinator matches whole
    topic names (internal topics never) and assigns what matches."""
    async with FakeCluster(
        topics={"orders": 2, "orders-eu": 1, "other": 3}, settings=KIP848_SETTINGS
    ) as cluster:
        async with ConsumerGroup(
            "g", re.compile(r"orders.*"), cluster.bootstrap, group_protocol="consumer"
        ) as group:
            with anyio.fail_after(60):
                async for gen in group:
                    assert {(tp.topic, tp.partition) for tp in gen.assignments} == {
                        ("orders", 0),
                        ("orders", 1),
                        ("orders-eu", 0),
                    }
                    break
        assert not cluster.state.errors
