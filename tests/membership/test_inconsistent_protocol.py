"""INCONSISTENT_GROUP_PROTOCOL says what this member offered and what the group runs
(a classic group's protocol, or the consumer group protocol, KIP-848).

On the embedded broker, in virtual time: a raw member holds the group with a
protocol gengroup does not offer. (The same against a librdkafka member on
real Kafka is in tests/consumer/test_interop_confluent_group.py.)
"""

from __future__ import annotations

import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode

from gengroup import ConsumerGroup
from gengroup._errors import InconsistentGroupProtocol
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Fail
from gengroup.protocol.consumer_protocol import Subscription, encode_subscription
from gengroup.protocol.versions import ApiKey

from .. import embedded as rq

SETTINGS = {"session_timeout": 10.0, "heartbeat_interval": 1.0, "join_backoff": 0.5}


async def _hold_group(cluster: FakeCluster, protocol: str) -> None:
    """A raw member alone in group "g", offering only ``protocol``, synced."""
    metadata = encode_subscription(Subscription(topics=("t",)))
    async with rq.connect(cluster) as conn:
        join = await conn.request(rq.join_group(9, "g", protocols=((protocol, metadata),)))
        assert join.error_code == ErrorCode.member_id_required
        member = join.member_id
        join = await conn.request(rq.join_group(9, "g", member, protocols=((protocol, metadata),)))
        assert join.error_code == 0
        sync = await conn.request(
            rq.sync_group(5, "g", join.generation_id, member, protocol=protocol)
        )
        assert sync.error_code == 0


@pytest.mark.parametrize("describe_works", [True, False])
async def test_inconsistent_protocol_names_both_sides(
    autojump_clock: trio.testing.MockClock, describe_works: bool
) -> None:
    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        await _hold_group(cluster, "cooperative-sticky")
        if not describe_works:
            cluster.control(
                ApiKey.DESCRIBE_GROUPS, lambda req: Fail(ErrorCode.group_authorization_failed)
            )
        with pytest.raises(InconsistentGroupProtocol) as raised:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
                await group.next()
    said = str(raised.value)
    assert "offered protocol type 'consumer' with the balancers [range, roundrobin]" in said
    if describe_works:
        assert "the group runs the protocol 'cooperative-sticky'" in said
        assert "embedded-test@" in said
    else:
        assert "the group runs another protocol (DescribeGroups could not tell which)" in said


@pytest.mark.parametrize("consumer_describe_works", [True, False])
async def test_a_classic_member_is_told_the_group_uses_the_consumer_protocol(
    autojump_clock: trio.testing.MockClock, consumer_describe_works: bool
) -> None:
    """DescribeGroups answers a group of the consumer protocol (KIP-848) as Dead:
    ConsumerGroupDescribe names it for what it is; if it cannot, Dead is not
    stated as a fact."""
    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        if not consumer_describe_works:
            cluster.control(
                ApiKey.CONSUMER_GROUP_DESCRIBE,
                lambda req: Fail(ErrorCode.group_authorization_failed),
            )
        held = ConsumerGroup("g", ["t"], cluster.bootstrap, group_protocol="consumer", **SETTINGS)
        async with held:
            await held.next()
            with pytest.raises(InconsistentGroupProtocol) as raised:
                async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
                    await group.next()
    said = str(raised.value)
    assert "offered protocol type 'consumer' with the balancers [range, roundrobin]" in said
    assert "Dead and names none" not in said
    if consumer_describe_works:
        assert "the group uses the consumer group protocol (KIP-848)" in said
        assert 'set group_protocol="consumer" to join it' in said
        assert "(1 member: gengroup@" in said
    else:
        assert "it answered 'Dead', as it does for a group of the consumer group protocol" in said
        assert "ConsumerGroupDescribe could not tell whether" in said
