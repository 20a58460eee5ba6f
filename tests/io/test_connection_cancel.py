"""Cancelling a caller while its connection is still negotiating never hangs."""

from __future__ import annotations

import anyio
import trio
import trio.testing

from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay
from gengroup.io.cluster import Cluster
from gengroup.io.connection import BrokerConnection
from gengroup.protocol.versions import ApiKey


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


class CancelsItsRequester(BrokerConnection):
    """Cancels the scope of the task that asked for it right after negotiating."""

    requester: anyio.CancelScope

    async def _negotiate(self) -> None:
        await super()._negotiate()
        self.requester.cancel()


async def test_requester_cancelled_as_the_connection_becomes_ready_does_not_hang(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """trio keeps a started task with its cancelled start() caller instead of the
    target task group; the connection must then close itself, or the caller
    waits forever for its shielded reader."""
    async with FakeCluster(topics={"t": 1}) as broker:
        host, port = broker.address(0)
        with anyio.fail_after(30):  # a hang guard in virtual time
            async with anyio.create_task_group() as owner:
                conn = CancelsItsRequester(host, port)
                with anyio.CancelScope() as requester:
                    conn.requester = requester
                    await owner.start(conn.serve)
                assert requester.cancelled_caught
                assert not conn.is_usable
                await conn.aclose()
