"""group_protocol="consumer" (KIP-848) where the broker does not speak it, and its settings.

The embedded broker serves the classic group protocol only: it does not
advertise ConsumerGroupHeartbeat, so a member asking for the consumer
protocol gets a typed error saying so, naming ``group_protocol``.
"""

from __future__ import annotations

import anyio
import pytest
import trio
import trio.testing

from gengroup import ConfigError, ConsumerGroup, GengroupError
from gengroup._errors import GroupProtocolUnsupported, UnsupportedVersion
from gengroup.broker import FakeCluster
from gengroup.protocol.versions import CONSUMER_PROTOCOL_VERSIONS, ApiKey, negotiate


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_a_broker_without_the_consumer_protocol_gives_a_clear_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
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
