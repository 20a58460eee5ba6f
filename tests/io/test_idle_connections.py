"""The client closes the connections it leaves idle (``connections_max_idle``).

A broker closes a connection idle for its ``connections.max.idle.ms`` (600 s
by default); a request written on it just as it does fails with a broken
connection and is sent again, with a WARNING. The client closes its idle
connections first (540 s by default, as the Java client), so that the broker
never does. A connection with a request in flight is never idle. Embedded
broker, virtual time.
"""

from __future__ import annotations

import logging

import anyio
import pytest
import trio
import trio.testing

from gengroup import ConsumerGroup, TopicPartition
from gengroup.broker import BrokerSettings, FakeCluster
from gengroup.broker.faults import Delay
from gengroup.io.cluster import Cluster
from gengroup.io.connection import BrokerConnection
from gengroup.io.fetch import fetch_once
from gengroup.io.idle import LOOK_AGAIN, IdleReaper
from gengroup.protocol.fetch_session import FetchSession
from gengroup.protocol.versions import ApiKey
from tests.consumer.helpers import EMBEDDED_SETTINGS, Ledger
from tests.consumer.test_group_embedded import produce


def pooled(client: Cluster) -> BrokerConnection:
    """The client's one pooled connection."""
    [conn] = client._conns.values()
    return conn


async def test_an_idle_connection_is_closed_before_the_broker_closes_it(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gengroup")
    caplog.set_level(logging.DEBUG, logger="gengroup.cluster")
    broker = BrokerSettings(connections_max_idle=600.0)  # Kafka's default
    async with FakeCluster(topics={"t": 1}, settings=broker) as cluster:
        async with Cluster(cluster.bootstrap) as client:  # 540 s by default
            await client.refresh_metadata(["t"])
            answered = trio.current_time()
            conn = pooled(client)
            await conn.wait_closed()
            assert trio.current_time() - answered == pytest.approx(540.0)
            assert client.idle.closed == 1
            assert not client._conns  # out of the pool
            [closed] = [r for r in caplog.records if "idle for" in r.getMessage()]
            assert closed.levelno == logging.DEBUG
            assert closed.getMessage() == (
                f"{conn}, default connection: closed, idle for 540.0 s (connections_max_idle=540 s)"
            )
            # The next request opens a new connection, as after any close.
            topics = await client.refresh_metadata(["t"])
            assert topics["t"].error_code == 0
            assert pooled(client) is not conn and pooled(client).is_usable
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_connection_with_a_request_in_flight_is_never_idle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}) as cluster:
        async with Cluster(
            cluster.bootstrap, connections_max_idle=10.0, request_timeout=100.0
        ) as client:
            await client.refresh_metadata(["t"])
            conn = pooled(client)
            # The broker holds a request for longer than the limit: the
            # connection stays, and is idle from the answer on.
            cluster.control(ApiKey.METADATA, lambda call: Delay(25.0), once=True)
            sent = trio.current_time()
            await client.refresh_metadata(["t"])
            assert trio.current_time() - sent == pytest.approx(25.0)
            assert pooled(client) is conn and conn.is_usable
            answered = trio.current_time()
            with anyio.fail_after(11.0):
                await conn.wait_closed()
            assert trio.current_time() - answered == pytest.approx(10.0)

            # A request whose caller stopped waiting is in flight still.
            await client.refresh_metadata(["t"])
            conn = pooled(client)
            cluster.control(ApiKey.METADATA, lambda call: Delay(25.0), once=True)
            sent = trio.current_time()
            with anyio.move_on_after(1.0):
                await client.refresh_metadata(["t"])
            await anyio.sleep(30.0)
            assert conn.is_usable  # answered at 25 s, idle since
            await conn.wait_closed()
            assert trio.current_time() - sent == pytest.approx(35.0)
            assert client.idle.closed == 2


async def test_none_keeps_idle_connections_open(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(topics={"t": 1}) as cluster:
        async with Cluster(cluster.bootstrap, connections_max_idle=None) as client:
            await client.refresh_metadata(["t"])
            conn = pooled(client)
            await anyio.sleep(10_000.0)
            assert conn.is_usable and pooled(client) is conn
            assert client.idle.closed == 0


async def test_a_fetch_session_goes_on_over_the_next_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A fetch session is the broker's by its id, whichever connection names
    it: the request after an idle close is incremental, on the new connection."""
    tp = TopicPartition("t", 0)
    async with FakeCluster(topics={"t": 1}) as cluster:
        cluster.produce("t", [b"a"])
        async with Cluster(cluster.bootstrap, connections_max_idle=10.0) as client:
            await client.refresh_metadata(["t"])
            session = FetchSession()
            first = await fetch_once(client, 0, {tp: 0}, session=session)
            assert first[tp].next_offset == 1 and session.established
            old = client._conns[0, "fetch"]
            await old.wait_closed()
            cluster.produce("t", [b"b"])
            second = await fetch_once(client, 0, {tp: 1}, session=session)
            assert client._conns[0, "fetch"] is not old
            plan = session.last_plan
            assert plan is not None and not plan.full  # incremental
            assert session.resets == 0 and session.established
            assert second[tp].next_offset == 2


async def test_a_group_without_records_keeps_working_past_the_idle_limit(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Heartbeats keep the connection of JoinGroup and SyncGroup busy, and
    long polls theirs: the next rebalance finds its connection open. The
    coordinator's other connection (commits), with nothing to commit, goes
    idle and is closed."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    caplog.set_level(logging.DEBUG, logger="gengroup.cluster")
    limit = 30.0
    broker = BrokerSettings(connections_max_idle=limit + 10.0, group_initial_rebalance_delay_ms=0)
    settings = dict(EMBEDDED_SETTINGS, connections_max_idle=limit)
    ledger = Ledger()
    async with FakeCluster(topics={"t": 2}, settings=broker) as cluster:
        async with anyio.create_task_group() as tg:
            first = ConsumerGroup("g", ["t"], cluster.bootstrap, **settings)
            async with first:
                tg.start_soon(ledger.member, "a", first)
                await ledger.wait_for(lambda: len(ledger.formed) == 1, "the first generation")
                formed = trio.current_time()
                await anyio.sleep(5 * limit)  # no records
                closed = [r.getMessage() for r in caplog.records if "idle for" in r.getMessage()]
                assert first.cluster.idle.closed == len(closed)
                assert any("default connection: closed, idle for 30.0 s" in m for m in closed)
                assert not any("group connection" in m for m in closed)  # heartbeats
                (joined,) = [c for (_, ch), c in first.cluster._conns.items() if ch == "group"]
                assert len(ledger.formed) == 1  # the same generation all along
                generation = ledger.formed[0][2]
                assert not generation.ended
                assert trio.current_time() - formed >= 5 * limit
                produce(cluster, "t", 2, 3)
                await ledger.wait_for(lambda: len(ledger.processed) == 6, "the records")
                # A rebalance: JoinGroup and SyncGroup on the same connection.
                second = ConsumerGroup("g", ["t"], cluster.bootstrap, **settings)
                async with second:
                    tg.start_soon(ledger.member, "b", second)
                    await ledger.wait_for(
                        lambda: (
                            {name for _, name, g in ledger.formed if g.id > generation.id}
                            == {"a", "b"}
                        ),
                        "the second generation",
                    )
                    assert [c for (_, ch), c in first.cluster._conns.items() if ch == "group"] == [
                        joined
                    ]
                    produce(cluster, "t", 2, 3, start=3)
                    await ledger.wait_for(lambda: len(ledger.processed) == 12, "more records")
                    tg.cancel_scope.cancel()
    assert not ledger.overlaps
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_tiny_limit_does_not_make_the_reaper_spin(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A limit of a nanosecond (any positive value is accepted) closes idle
    connections, but the reaper looks at the pool at most every LOOK_AGAIN,
    however busy the connections are: 100 looks in a virtual second, not a
    loop that never sleeps."""
    looks = 0
    reap = IdleReaper.reap

    async def counted(self: IdleReaper, limit: float) -> float:
        nonlocal looks
        looks += 1
        if looks > 10_000:
            raise AssertionError("the reaper spins")
        return await reap(self, limit)

    monkeypatch.setattr(IdleReaper, "reap", counted)
    async with FakeCluster(topics={"t": 1}) as cluster:
        async with Cluster(
            cluster.bootstrap, connections_max_idle=1e-9, request_timeout=100.0
        ) as client:
            await client.refresh_metadata(["t"])
            cluster.control(ApiKey.METADATA, lambda call: Delay(1.0), once=True)
            start, before = trio.current_time(), looks
            await client.refresh_metadata(["t"])  # a request in flight for a second
            assert trio.current_time() - start == pytest.approx(1.0)
            assert looks - before <= 1.0 / LOOK_AGAIN + 2, looks - before
            await anyio.sleep(1.0)
            assert client.idle.closed >= 1
