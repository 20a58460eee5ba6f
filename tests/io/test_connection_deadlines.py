"""A request's timeout holds whether or not its caller still waits for it."""

from __future__ import annotations

import logging

import anyio
import pytest
import trio
import trio.testing

from gengroup._errors import RequestTimedOut
from gengroup.broker import Delay, Drop, FakeCluster
from gengroup.io.cluster import Cluster
from gengroup.protocol.versions import ApiKey

from ..embedded import connect, metadata


async def test_a_request_whose_caller_gave_up_fails_its_connection_at_its_deadline(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A hung broker leaves the request of a caller that stopped waiting (an
    admin call's deadline, a heartbeat's own bound) in flight; the connection
    fails when that request's timeout passes, as if its caller still waited,
    instead of staying open for every later request to queue on."""
    caplog.set_level(logging.INFO, logger="gengroup.connection")
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster, request_timeout=5) as conn:
        cluster.control(ApiKey.METADATA, lambda call: Drop(), once=True)
        start = trio.current_time()
        with anyio.move_on_after(1) as scope:
            await conn.request(metadata(12, ["t"]))
        assert scope.cancelled_caught
        assert conn.is_usable  # its deadline has not passed yet
        with anyio.fail_after(10):
            await conn.wait_closed()
        assert trio.current_time() - start == pytest.approx(5)
        assert not conn.is_usable
        with pytest.raises(
            RequestTimedOut, match=r"node=-1 .*no response to MetadataRequest within 5"
        ):
            await conn.request(metadata(12, ["t"]))
        said = [r.getMessage() for r in caplog.records if r.name == "gengroup.connection"]
        assert len(said) == 1
        assert "no response to MetadataRequest within 5" in said[0]
        assert "closing the connection" in said[0]


async def test_a_request_queued_behind_an_abandoned_one_fails_at_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Kafka answers a connection's requests in order: a request sent after one
    that never gets answered fails when the first one's timeout passes, not
    its own (later) one."""
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster, request_timeout=5) as conn:
        cluster.control(ApiKey.METADATA, lambda call: Drop(), once=True)
        start = trio.current_time()
        with anyio.move_on_after(1):
            await conn.request(metadata(12, ["t"]))
        with pytest.raises(RequestTimedOut, match="no response to MetadataRequest within 5"):
            await conn.request(metadata(12, ["t"]), timeout=60)
        assert trio.current_time() - start == pytest.approx(5)


async def test_an_abandoned_request_is_timed_by_its_own_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A request the broker is asked to hold (a long poll) gets its own
    timeout, longer than ``request_timeout``, whether or not its caller
    waits: its late answer is dropped and the connection stays open."""
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster, request_timeout=5) as conn:
        cluster.control(ApiKey.METADATA, lambda call: Delay(20.0), once=True)
        with anyio.move_on_after(1):
            await conn.request(metadata(12, ["t"]), timeout=25)
        await anyio.sleep(29)  # past request_timeout and past the answer
        assert conn.is_usable
        resp = await conn.request(metadata(12, ["t"]))
        assert resp.topics[0].error_code == 0


async def test_requests_to_any_broker_avoid_one_that_left_a_request_unanswered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A broker that timed a request out (hung) is silent until it answers
    again: metadata and coordinator lookups go to another broker, even past
    an idle connection to the silent one, instead of queueing on it."""
    async with (
        FakeCluster(brokers=3, topics={"t": 1}) as broker,
        Cluster(broker.bootstrap.split(",")[0], request_timeout=5) as cluster,
    ):
        await cluster.refresh_metadata(["t"])  # on the bootstrap connection to broker 0
        await cluster.call(0, ApiKey.METADATA, lambda mod: metadata(12, ["t"]))
        broker.control(None, lambda call: Drop(), broker_id=0)
        with pytest.raises(RequestTimedOut, match="no response to MetadataRequest within 5"):
            await cluster.refresh_metadata(["t"])
        started = trio.current_time()
        with anyio.fail_after(30):
            topics = await cluster.refresh_metadata(["t"])
        assert topics["t"].error_code == 0
        assert trio.current_time() - started < 1.0


async def test_a_silent_broker_is_tried_only_once_every_other_one_failed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Broker 0 hangs and is silent; brokers 1 and 2 are healthy but take 2 s
    to set a connection up (TLS and SASL over a slow link): the next request
    to any broker waits for them rather than take broker 0's idle pooled
    connection, which would win any race at once and leave the request
    unanswered for its whole timeout."""
    async with (
        FakeCluster(brokers=3, topics={"t": 1}) as broker,
        Cluster(broker.bootstrap.split(",")[0], request_timeout=5) as cluster,
    ):
        await cluster.refresh_metadata(["t"])  # the bootstrap connection to broker 0
        await cluster.call(0, ApiKey.METADATA, lambda mod: metadata(12, ["t"]))  # by node id
        broker.control(None, lambda call: Drop(), broker_id=0)
        for b in (1, 2):
            broker.control(ApiKey.API_VERSIONS, lambda call: Delay(2.0), broker_id=b)
        with pytest.raises(RequestTimedOut):
            await cluster.refresh_metadata(["t"])  # broker 0 is silent from here
        conn = await cluster.any_connection()
        assert conn.node_id != 0 and (conn.host, conn.port) != cluster._address(0)
        started = trio.current_time()
        with anyio.fail_after(30):  # a hang guard in virtual time
            topics = await cluster.refresh_metadata(["t"])
        assert topics["t"].error_code == 0
        assert trio.current_time() - started < 5.0
