"""Fault injection (kfake's ControlKey), cut connections and broker restarts."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode

from gengroup._errors import BrokenConnection, RequestTimedOut
from gengroup.admin import Admin
from gengroup.broker import (
    Delay,
    Disconnect,
    Drop,
    Fail,
    FakeCluster,
    Intercepted,
    LogError,
    Respond,
)
from gengroup.protocol.framing import build, response_module
from gengroup.protocol.versions import ApiKey

from . import (
    batch,
    connect,
    fetch,
    find_coordinator,
    heartbeat,
    join_group,
    metadata,
    ms,
    produce,
    raw_roundtrip,
    sync_group,
)


async def _member(conn: Any, group: str) -> tuple[str, int]:
    resp = await conn.request(join_group(9, group))
    resp = await conn.request(join_group(9, group, resp.member_id))
    await conn.request(sync_group(5, group, resp.generation_id, resp.member_id, []))
    return resp.member_id, resp.generation_id


async def test_injected_error_is_seen_once(autojump_clock: trio.testing.MockClock) -> None:
    async with (
        FakeCluster(initial_rebalance_delay_ms=0) as cluster,
        connect(cluster) as conn,
    ):
        member, generation = await _member(conn, "g")
        seen: list[Intercepted] = []

        def handler(call: Intercepted) -> Fail:
            seen.append(call)
            return Fail(27)

        control = cluster.control(ApiKey.HEARTBEAT, handler, once=True)
        assert (await conn.request(heartbeat(4, "g", generation, member))).error_code == 27
        assert (await conn.request(heartbeat(4, "g", generation, member))).error_code == 0
        assert not control.active
        assert control.handled == 1
        (call,) = seen
        assert (call.api_key, call.api_version, call.broker_id) == (12, 4, 0)
        assert call.client_id == "embedded-test"
        assert call.request.member_id == member


@pytest.mark.parametrize("answer", [Fail, Drop, 27, True, Delay(1.0, then=Fail)])  # type: ignore[arg-type]
async def test_a_handler_answering_no_action_is_an_error_not_a_pass(
    autojump_clock: trio.testing.MockClock, answer: Any
) -> None:
    """The class ``Fail`` instead of ``Fail(27)`` (or an error code) was counted as
    handled and the request served as if nothing were injected: a fault test then
    passed for the wrong reason."""
    async with (
        FakeCluster(initial_rebalance_delay_ms=0) as cluster,
        connect(cluster) as conn,
    ):
        member, generation = await _member(conn, "g")
        control = cluster.control(ApiKey.HEARTBEAT, lambda call: answer, once=True)
        resp = await conn.request(heartbeat(4, "g", generation, member))
        assert resp.error_code == ErrorCode.unknown_server_error
        assert control.active and control.handled == 0
        assert any("return an action instance" in str(e) for e in cluster.errors)
        with pytest.raises(TypeError, match="handler is a function"):
            cluster.control(ApiKey.HEARTBEAT, Fail(27))  # type: ignore[arg-type]


async def test_starting_errors_come_out_as_themselves_before_anything_listens(
    autojump_clock: trio.testing.MockClock,
) -> None:
    for topics, match in [({"bad/name": 1}, "outside"), ({"t": 0}, "at least 1")]:
        with pytest.raises(LogError, match=match):
            FakeCluster(topics=topics)
    with pytest.raises(RuntimeError, match="not running"):
        _ = FakeCluster().bootstrap
    async with FakeCluster() as taken:
        port = int(taken.bootstrap.rsplit(":", 1)[1])
        failed = FakeCluster(ports=[port])
        with pytest.raises(OSError, match="in use"):  # not an ExceptionGroup of it
            async with failed:
                pass
        with pytest.raises(RuntimeError, match="not running"):
            _ = failed.bootstrap


async def test_the_blocks_exception_comes_out_as_itself(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Not wrapped by the servers' task group: `except SystemExit` around the
    # cluster catches it, and sys.exit(3) in a program using one exits with 3.
    for raised in (SystemExit(3), KeyboardInterrupt(), ValueError("the body's")):
        caught: BaseException | None = None
        try:
            async with FakeCluster():
                raise raised
        except type(raised) as exc:
            caught = exc
        assert caught is raised


async def test_persistent_control_with_a_predicate(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(topics={"t": 1, "u": 1}) as cluster, connect(cluster) as conn:

        def only_u(call: Intercepted) -> Fail | None:
            names = [t.name for t in call.request.topic_data]
            return Fail(19, "not enough replicas") if names == ["u"] else None

        control = cluster.control(ApiKey.PRODUCE, only_u)
        for _ in range(3):
            resp = await conn.request(produce(9, "u", 0, batch(b"x")))
            part = resp.responses[0].partition_responses[0]
            assert (part.error_code, part.error_message) == (19, "not enough replicas")
            resp = await conn.request(produce(9, "t", 0, batch(b"x")))
            assert resp.responses[0].partition_responses[0].error_code == 0
        assert control.handled == 3
        control.remove()
        resp = await conn.request(produce(9, "u", 0, batch(b"x")))
        assert resp.responses[0].partition_responses[0].error_code == 0
        assert (cluster.high_watermark("t"), cluster.high_watermark("u")) == (3, 1)


async def test_fail_uses_the_top_level_error_where_kafka_does(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as conn:
        cluster.control(ApiKey.FETCH, lambda call: Fail(7), once=True)
        resp = await conn.request(fetch(12, "t", 0, 0))
        assert (resp.error_code, resp.responses) == (7, ())
        cluster.control(ApiKey.FETCH, lambda call: Fail(6), once=True)
        resp = await conn.request(fetch(6, "t", 0, 0))
        assert resp.responses[0].partitions[0].error_code == 6
        cluster.control(ApiKey.FIND_COORDINATOR, lambda call: Fail(15), once=True)
        resp = await conn.request(find_coordinator(4, "g"))
        assert resp.coordinators[0].error_code == 15


async def test_dropped_request_times_the_client_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}) as cluster:
        async with connect(cluster, request_timeout=5) as conn:
            cluster.control(ApiKey.METADATA, lambda call: Drop(), once=True)
            start = trio.current_time()
            with pytest.raises(RequestTimedOut):
                await conn.request(metadata(12, ["t"]))
            assert trio.current_time() - start == pytest.approx(5)
        # a fresh connection is served normally
        async with connect(cluster) as conn:
            assert (await conn.request(metadata(12, ["t"]))).topics[0].error_code == 0


async def test_delay_and_then(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as conn:
        cluster.control(ApiKey.METADATA, lambda call: Delay(2.0), once=True)
        start = trio.current_time()
        assert (await conn.request(metadata(12, ["t"]))).topics[0].error_code == 0
        assert trio.current_time() - start == pytest.approx(2.0)
        cluster.control(ApiKey.METADATA, lambda call: Delay(1.0, then=Fail(5)), once=True)
        resp = await conn.request(metadata(12, ["t"]))
        assert resp.topics[0].error_code == 5
        assert trio.current_time() - start == pytest.approx(3.0)


async def test_respond_and_disconnect(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster() as cluster:
        mod = response_module(ApiKey.HEARTBEAT, 4)
        custom = build(mod.HeartbeatResponse, throttle_time=ms(0), error_code=ErrorCode(25))
        cluster.control(ApiKey.HEARTBEAT, lambda call: Respond(custom), once=True)
        async with connect(cluster) as conn:
            assert (await conn.request(heartbeat(4, "g", 1, "m"))).error_code == 25
            cluster.control(None, lambda call: Disconnect(), once=True, broker_id=0)
            with pytest.raises(BrokenConnection):
                await conn.request(metadata(12, None))


async def test_broker_filter(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(brokers=2) as cluster:
        cluster.control(ApiKey.METADATA, lambda call: Fail(41), broker_id=1)
        async with connect(cluster, 0) as c0, connect(cluster, 1) as c1:
            assert (await c0.request(metadata(13, None))).error_code == 0
            assert (await c1.request(metadata(13, None))).error_code == 41
        cluster.clear_controls()
        async with connect(cluster, 1) as c1:
            assert (await c1.request(metadata(13, None))).error_code == 0


async def test_cut_connections(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(brokers=2, topics={"t": 1}) as cluster:
        async with connect(cluster, 0) as a, connect(cluster, 0) as b, connect(cluster, 1) as c:
            assert cluster.cut_connections(0) == 2
            for conn in (a, b):
                with pytest.raises(BrokenConnection):
                    await conn.request(metadata(12, ["t"]))
            assert (await c.request(metadata(12, ["t"]))).topics[0].error_code == 0
        async with connect(cluster, 0) as again:  # the listener still accepts
            assert (await again.request(metadata(12, ["t"]))).topics[0].error_code == 0


async def test_cut_connection_while_a_long_poll_is_parked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as conn:

        async def poll() -> None:
            with pytest.raises(BrokenConnection):
                await conn.request(fetch(12, "t", 0, 0, max_wait=60_000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            await trio.sleep(1)
            assert cluster.cut_connections() == 1
        assert not cluster.errors


async def test_restart_broker_keeps_state_and_port(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(brokers=2, topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        cluster.produce("t", [b"a", b"b"], partition=1)  # led by broker 1
        port = cluster.address(1)[1]
        async with connect(cluster, 1) as conn:
            stopping = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: cluster.restart_broker(1, downtime=10))
                await trio.sleep(1)
                with pytest.raises(BrokenConnection):
                    await conn.request(metadata(12, ["t"]))
                with pytest.raises(OSError):
                    await anyio.connect_tcp("127.0.0.1", port)
                async with connect(cluster, 0) as other:
                    resp = await other.request(metadata(12, ["t"]))
                    assert [b.node_id for b in resp.brokers] == [0]
                    p1 = resp.topics[0].partitions[1]
                    assert (p1.leader_id, p1.error_code) == (-1, 5)  # offline
                    assert tuple(p1.offline_replicas) == (1,)
            assert trio.current_time() - stopping == pytest.approx(10)
        assert cluster.address(1)[1] == port
        async with connect(cluster, 1) as conn:
            resp = await conn.request(metadata(12, ["t"]))
            p1 = resp.topics[0].partitions[1]
            assert (p1.leader_id, p1.leader_epoch, p1.error_code) == (1, 2, 0)
            resp = await conn.request(fetch(12, "t", 1, 0))
            assert resp.responses[0].partitions[0].high_watermark == 2
        assert not cluster.errors


async def test_coordinator_fails_over_while_its_broker_is_down(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=3, offsets_topic_num_partitions=3) as cluster:
        group = "g"  # hash 103 -> partition 1 -> broker 1
        assert cluster.coordinator_of(group) == 1
        await cluster.stop_broker(1)
        assert cluster.coordinator_of(group) == 2  # next replica of __consumer_offsets-1
        async with connect(cluster, 0) as conn:
            resp = await conn.request(find_coordinator(4, group))
            assert resp.coordinators[0].node_id == 2
        await cluster.start_broker(1)
        assert cluster.coordinator_of(group) == 2  # no automatic fail-back


async def test_move_coordinator_answers_parked_joins_not_coordinator(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=2, offsets_topic_num_partitions=2) as cluster:
        group = "g"  # 103 % 2 -> broker 1
        assert cluster.coordinator_of(group) == 1
        async with connect(cluster, 1) as conn:
            resp = await conn.request(join_group(9, group))
            member = resp.member_id

            async def parked() -> None:
                # the initial rebalance delay (3 s) parks the join
                resp = await conn.request(join_group(9, group, member))
                assert resp.error_code == 16
                assert trio.current_time() == pytest.approx(start + 1)

            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(parked)
                await trio.sleep(1)
                cluster.move_coordinator(group, 0)
            resp = await conn.request(heartbeat(4, group, 0, member))
            assert resp.error_code == 16
        async with connect(cluster, 0) as conn:
            resp = await conn.request(join_group(9, group, member))
            assert resp.error_code == 0  # the group state moved with it
        assert not cluster.errors


async def test_a_dropped_request_stalls_its_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Kafka answers in order: nothing after a request that never completes is answered."""
    async with FakeCluster(topics={"t": 1}) as cluster:
        cluster.control(ApiKey.HEARTBEAT, lambda call: Drop(), once=True)
        stream = cluster.connect_memory()
        async with stream:
            with trio.move_on_after(60) as scope:
                await raw_roundtrip(stream, heartbeat(4, "g", 1, "m"), cid=1)
            assert scope.cancelled_caught
            with trio.move_on_after(60) as scope:
                await raw_roundtrip(stream, metadata(12, ["t"]), cid=2)
            assert scope.cancelled_caught
        # other connections are unaffected
        stream = cluster.connect_memory()
        async with stream:
            resp = await raw_roundtrip(stream, metadata(12, ["t"]), cid=3)
            assert resp.topics[0].error_code == 0
        assert not cluster.errors


async def test_a_cluster_is_entered_once(autojump_clock: trio.testing.MockClock) -> None:
    cluster = FakeCluster()
    async with cluster:
        pass
    with pytest.raises(RuntimeError):
        async with cluster:
            pass  # pragma: no cover


async def test_admin_lists_groups_across_a_broker_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """ListGroups retries until the admin's timeout, as every admin call does:
    a broker down for 2 s is waited for (its metadata lookup used to give up at
    once with ClusterUnreachable), and one that stays down longer than the
    timeout fails the call at the timeout."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap, timeout=10) as admin:
            assert await admin.list_groups() == []
            for downtime, listed in ((2.0, True), (30.0, False)):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda d=downtime: cluster.restart_broker(0, downtime=d))
                    await anyio.sleep(0.05)
                    started = anyio.current_time()
                    if listed:
                        assert await admin.list_groups() == []
                        assert anyio.current_time() - started >= 1.9
                    else:
                        with pytest.raises(TimeoutError):
                            await admin.list_groups()
                        assert anyio.current_time() - started == pytest.approx(10, abs=1)
