"""A rebalance waits for no round trip it can do without.

From a member's JoinGroup to its first Fetch of the new generation, the
requests on the rebalance's path are JoinGroup, SyncGroup and OffsetFetch: the
leader assigns from metadata refreshed while its JoinGroup waited (not from a
Metadata request sent once JoinGroup answered, which every follower's
SyncGroup waited for), and the prefetcher starts from the leaders the
metadata cache names (not from a Metadata request sent once the generation
formed). On the embedded broker, in virtual time, with JoinGroup answered
late as when the other members have yet to notice the rebalance.
"""

from __future__ import annotations

import trio
import trio.testing

from gengroup import RangeBalancer
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay, Intercepted
from gengroup.protocol.versions import ApiKey

from .cooperative import SpanLedger
from .helpers import all_partitions, wait_until

JOIN_WAIT = 2.0  # a JoinGroup with a member id is answered this late


async def test_join_to_first_fetch_has_no_metadata_round_trip(
    autojump_clock: trio.testing.MockClock,
) -> None:
    every = all_partitions("t", 4)
    ledger = SpanLedger()
    sent: dict[str, list[tuple[float, ApiKey]]] = {"m1": [], "m2": []}

    def record(call: Intercepted) -> None:
        if call.client_id in sent:
            sent[call.client_id].append((trio.current_time(), ApiKey(call.api_key)))

    def late_join(call: Intercepted) -> Delay | None:
        record(call)
        if call.request.member_id:
            return Delay(JOIN_WAIT)
        return None

    async with FakeCluster(topics={"t": 4}, initial_rebalance_delay_ms=0) as cluster:
        for key in (ApiKey.METADATA, ApiKey.SYNC_GROUP, ApiKey.OFFSET_FETCH, ApiKey.FETCH):
            cluster.control(key, record)
        cluster.control(ApiKey.JOIN_GROUP, late_join)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ledger.join, cluster, "m1", [RangeBalancer()])
            await wait_until(lambda: ledger.stable({"m1"}, every), "m1 alone", 60)
            sent["m1"].clear()
            nursery.start_soon(ledger.join, cluster, "m2", [RangeBalancer()])
            await wait_until(lambda: ledger.stable({"m1", "m2"}, every), "two members", 60)
            assert ledger.current()["m1"].is_leader
            await trio.sleep(1.0)  # the first Fetch of each
            nursery.cancel_scope.cancel()

    for name, requests in sent.items():
        # From the last JoinGroup to the first Fetch after it.
        start = max(i for i, (_, key) in enumerate(requests) if key is ApiKey.JOIN_GROUP)
        joined_at = requests[start][0]
        path: list[tuple[float, ApiKey]] = []
        for t, key in requests[start:]:
            path.append((t, key))
            if key is ApiKey.FETCH:
                break
        assert [key for _, key in path if key is not ApiKey.METADATA] == [
            ApiKey.JOIN_GROUP,
            ApiKey.SYNC_GROUP,
            ApiKey.OFFSET_FETCH,
            ApiKey.FETCH,
        ], (name, path)
        # At most the refresh beside JoinGroup, sent with it (it arrives while
        # JoinGroup waits, not once it answered).
        assert [t for t, key in path if key is ApiKey.METADATA] in ([], [joined_at]), (name, path)
