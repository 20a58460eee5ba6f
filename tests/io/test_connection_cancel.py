"""Cancelling a caller while its connection is still negotiating never hangs."""

from __future__ import annotations

import anyio
import pytest
import trio
import trio.testing

from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay
from gengroup.io.cluster import Cluster
from gengroup.protocol.versions import ApiKey


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_cancel_during_version_negotiation_closes_the_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}) as broker:
        broker.control(ApiKey.API_VERSIONS, lambda req: Delay(60.0))
        with anyio.fail_after(5):  # virtual seconds: a hang guard, not a timing claim
            async with Cluster(broker.bootstrap) as cluster:
                with anyio.move_on_after(1.0) as scope:
                    await cluster.refresh_metadata(["t"])
                assert scope.cancelled_caught
        broker.clear_controls()
        async with Cluster(broker.bootstrap) as cluster:
            topics = await cluster.refresh_metadata(["t"])
            assert topics["t"].error_code == 0
