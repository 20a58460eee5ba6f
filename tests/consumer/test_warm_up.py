"""A new member gets ready for its first generation while JoinGroup waits.

It opens the fetch connection to the leaders of its topics before the
coordinator answers JoinGroup, so the partitions it is given are fetched
without a connection set-up first. On the embedded broker, in virtual time,
with JoinGroup answered late (as when the other members have yet to notice
the rebalance).
"""

from __future__ import annotations

import trio
import trio.testing

from gengroup import ConsumerGroup
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay, Intercepted
from gengroup.consumer.prefetch import FETCH_CHANNELS
from gengroup.protocol.versions import ApiKey

from .helpers import EMBEDDED_SETTINGS

JOIN_DELAY = 5.0


async def test_the_fetch_connections_are_open_before_join_group_is_answered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    opened: list[float] = []  # when each of the member's connections said hello
    at_sync: list[int] = []  # connections opened when SyncGroup came, just after the join

    def hello(call: Intercepted) -> None:
        opened.append(trio.current_time())

    def late_join(call: Intercepted) -> Delay | None:
        if not call.request.member_id:
            return None  # the first JoinGroup, answered MEMBER_ID_REQUIRED
        return Delay(JOIN_DELAY)

    def sync(call: Intercepted) -> None:
        at_sync.append(len(opened))

    async with FakeCluster(topics={"t": 3}, initial_rebalance_delay_ms=0) as cluster:
        cluster.control(ApiKey.API_VERSIONS, hello)
        cluster.control(ApiKey.JOIN_GROUP, late_join)
        cluster.control(ApiKey.SYNC_GROUP, sync)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            gen = await group.next()
            assert len(gen.assignments) == 3
    # The bootstrap connection (metadata, coordinator lookup), the group's own
    # (JoinGroup), and every fetch connection to the topic's one leader,
    # opened while JoinGroup waited. Without the warm-up, 2.
    assert at_sync == [2 + len(FETCH_CHANNELS)], (at_sync, opened)
    assert max(opened[: at_sync[0]]) < JOIN_DELAY, opened
