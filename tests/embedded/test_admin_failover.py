"""A long-lived admin follows a group whose coordinator hangs (embedded broker, virtual time)."""

from __future__ import annotations

import argparse
import re

import anyio
import anyio.lowlevel
import pytest
import trio
import trio.testing

from gengroup import Admin, TopicPartition
from gengroup.broker import Delay, Drop, FakeCluster
from gengroup.cli import topics as topics_cli
from gengroup.io.cluster import Cluster
from gengroup.protocol.versions import ApiKey

from . import metadata

GROUP = "g"


@pytest.mark.parametrize("timeout", [10.0, 30.0])
async def test_a_call_after_the_hung_coordinator_moved_follows_it(
    autojump_clock: trio.testing.MockClock, timeout: float
) -> None:
    """The coordinator's broker hangs (a GC pause, a network black hole) and the
    group moves to another broker within seconds. The call waiting on the
    hung one fails at the admin's deadline, naming the broker that did not
    answer; the next call looks the coordinator up again and is answered at
    once. It used to queue on the hung connection again, call after call,
    with an admin timeout at or below the request timeout (30 s)."""
    async with FakeCluster(brokers=3, initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap, timeout=timeout) as admin:
            await admin.describe_groups([GROUP])  # warm: the coordinator is known
            hung = cluster.coordinator_of(GROUP)
            moved_to = (hung + 1) % 3
            cluster.control(None, lambda call: Drop(), broker_id=hung)
            host, port = cluster.address(hung)
            async with anyio.create_task_group() as tg:

                async def fence() -> None:
                    await anyio.sleep(3)
                    cluster.move_coordinator(GROUP, moved_to)

                tg.start_soon(fence)
                started = trio.current_time()
                said = f"coordinator node {hung} at {host}:{port} did not answer"
                with pytest.raises(TimeoutError, match=re.escape(said)):
                    await admin.describe_groups([GROUP])
                assert trio.current_time() - started == pytest.approx(timeout)
            started = trio.current_time()
            for _ in range(3):
                described = await admin.describe_groups([GROUP])
                assert described[GROUP].state == "Dead"  # no member ever joined
                assert await admin.fetch_offsets(GROUP) == {}
            assert trio.current_time() - started < 1.0
            assert admin.coordinator(GROUP).node == moved_to


async def test_an_admin_deadline_does_not_fail_a_shared_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An Admin sharing its Cluster with other users (a consumer's commits and
    heartbeats, say) gives up on a healthy coordinator that answers in 2 s
    after its own 1 s: the connection stays open, and another caller's
    request on it, answered in 1.5 s, is answered, not failed with it."""
    async with (
        FakeCluster(brokers=1, topics={"t": 1}) as broker,
        Cluster(broker.bootstrap, request_timeout=30) as cluster,
        Admin(cluster) as admin,
    ):
        await cluster.refresh_metadata(["t"])
        node = broker.coordinator_of(GROUP)
        conn = await cluster.connection(node)
        for key in (ApiKey.CONSUMER_GROUP_DESCRIBE, ApiKey.DESCRIBE_GROUPS):
            broker.control(key, lambda call: Delay(2.0), broker_id=node)
        broker.control(ApiKey.METADATA, lambda call: Delay(1.5), broker_id=node, once=True)
        other: list[object] = []

        async def other_caller() -> None:
            try:
                other.append(
                    await cluster.call(node, ApiKey.METADATA, lambda m: metadata(12, ["t"]))
                )
            except Exception as exc:
                other.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(other_caller)
            await anyio.lowlevel.checkpoint()
            with pytest.raises(TimeoutError):
                await admin.describe_groups([GROUP], timeout=1.0)
        assert not isinstance(other[0], Exception), other[0]
        assert conn.is_usable


async def test_a_caller_that_gives_up_leaves_a_healthy_coordinator_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The caller gives up on an Admin call after 0.5 s for reasons of its own
    (a deadline around it, a task group shutting down, Ctrl-C) while the
    coordinator takes 2 s: the coordinator is neither forgotten nor made
    silent, only the call's own deadline does that."""
    async with FakeCluster(brokers=3, topics={"t": 1}) as broker:
        async with Admin(broker.bootstrap, timeout=60) as admin:
            await admin.describe_groups([GROUP])
            coordinator = admin.coordinator(GROUP)
            node = coordinator.node
            assert node is not None
            broker.control(ApiKey.DESCRIBE_GROUPS, lambda call: Delay(2.0), once=True)
            with anyio.move_on_after(0.5):
                await admin.describe_groups([GROUP])
            assert coordinator.node == node
            assert not admin.cluster._silent


@pytest.mark.parametrize("call", ["list_offsets", "delete_records", "metadata", "topics list"])
async def test_a_fresh_admin_waits_for_a_restarting_broker_within_its_timeout(
    autojump_clock: trio.testing.MockClock, call: str
) -> None:
    """With nothing cached, the first metadata refresh of list_offsets and
    delete_records (and the CLI's bare refreshes) ran outside the retry loop:
    the first refused connection was ClusterUnreachable at once, whatever the
    timeout. They wait for the broker, as the other Admin calls do."""
    tp = TopicPartition("t", 0)
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.produce("t", [b"x"] * 5, partition=0)
        await cluster.stop_broker(0)
        async with Admin(cluster.bootstrap, timeout=10) as admin, anyio.create_task_group() as tg:

            async def back() -> None:
                await anyio.sleep(2.0)
                await cluster.start_broker(0)

            tg.start_soon(back)
            started = trio.current_time()
            if call == "list_offsets":
                assert await admin.list_offsets([tp], "latest") == {tp: 5}
            elif call == "delete_records":
                assert await admin.delete_records({tp: 1}) == {tp: 1}
            elif call == "metadata":
                assert len((await admin.metadata(["t"]))["t"].partitions) == 1
            else:
                listed = await topics_cli._list(admin, argparse.Namespace())
                assert listed == [{"topic": "t", "partitions": 1}]
            assert 2.0 <= trio.current_time() - started < 10.0


async def test_list_offsets_still_times_out_naming_the_unreachable_cluster(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        await cluster.stop_broker(0)
        async with Admin(cluster.bootstrap, timeout=3) as admin:
            started = trio.current_time()
            with pytest.raises(TimeoutError, match=r"within 3 s \(last error: cluster unreachable"):
                await admin.list_offsets([TopicPartition("t", 0)], "latest")
            assert trio.current_time() - started == pytest.approx(3.0, abs=0.01)


async def test_topics_create_with_the_broker_default_reports_the_count_it_got(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``--partitions -1`` (CreateTopics' "broker default") printed -1 for a topic of 1."""
    async with (
        FakeCluster(initial_rebalance_delay_ms=0) as cluster,
        Admin(cluster.bootstrap) as admin,
    ):
        args = argparse.Namespace(
            topic="neg", partitions=-1, replication_factor=-1, topics_action="create"
        )
        assert await topics_cli._create(admin, args) == {"created": "neg", "partitions": 1}
