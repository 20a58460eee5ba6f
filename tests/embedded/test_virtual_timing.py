"""The coordinator's timers fire at the exact virtual millisecond, through the server.

trio's MockClock drives the embedded broker: the initial delayed join and its
extension, session expiry and the rebalance timeout are asserted exactly.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from gengroup.broker import FakeCluster

from . import connect, heartbeat, join_group, sync_group


async def new_member(conn: Any, group: str, **kw: Any) -> str:
    first = await conn.request(join_group(9, group, **kw))
    assert first.error_code == 79  # MEMBER_ID_REQUIRED
    return str(first.member_id)


async def test_initial_delay_without_newcomers_completes_at_exactly_the_delay(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=3000) as cluster:
        async with connect(cluster) as conn:
            member = await new_member(conn, "g")
            t0 = trio.current_time()
            resp = await conn.request(join_group(9, "g", member, rebalance_ms=10_000))
            assert resp.error_code == 0 and resp.generation_id == 1
            assert trio.current_time() - t0 == pytest.approx(3.000, abs=1e-6)


async def test_initial_delay_extension_steps_then_stops_at_the_rebalance_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Delay 3000, rebalance timeout 10000: newcomers at 1 s, 4 s and 7 s push the
    completion to 6 s, 9 s, then 10 s (the remaining budget), never further."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=3000) as cluster:
        async with connect(cluster) as a, connect(cluster) as b, connect(cluster) as c:
            async with connect(cluster) as d:
                ids = [await new_member(x, "g") for x in (a, b, c, d)]
                t0 = trio.current_time()
                done: dict[int, float] = {}

                async def join(conn: Any, member: str, index: int, at: float) -> None:
                    await trio.sleep_until(t0 + at)
                    resp = await conn.request(join_group(9, "g", member, rebalance_ms=10_000))
                    assert resp.error_code == 0
                    done[index] = trio.current_time() - t0

                async with trio.open_nursery() as nursery:
                    for index, (conn, at) in enumerate(((a, 0.0), (b, 1.0), (c, 4.0), (d, 7.0))):
                        nursery.start_soon(join, conn, ids[index], index, at)
                assert len(done) == 4
                for elapsed in done.values():
                    assert elapsed == pytest.approx(10.0, abs=1e-6)


async def test_session_expiry_at_the_exact_millisecond(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with connect(cluster) as a:
            ma = await new_member(a, "g", session_ms=6_000)
            joined = await a.request(join_group(9, "g", ma, session_ms=6_000))
            await a.request(sync_group(5, "g", joined.generation_id, ma, [(ma, b"")]))
            synced = trio.current_time()
            await trio.sleep_until(synced + 5.999)
            assert cluster.describe_group("g").group_state == "Stable"
            await trio.sleep_until(synced + 6.000)
            # The silent member was removed at 6.000 s: nobody is left.
            assert cluster.describe_group("g").group_state == "Empty"
        assert not cluster.errors


async def stable_pair(cluster: FakeCluster, a: Any, b: Any) -> tuple[str, str, int]:
    """a leads generation 1 alone, b joins, a rejoins: both in a Stable generation 2."""
    kw = {"session_ms": 30_000, "rebalance_ms": 8_000}
    ma = await new_member(a, "g", **kw)
    first = await a.request(join_group(9, "g", ma, **kw))
    await a.request(sync_group(5, "g", first.generation_id, ma, [(ma, b"")]))
    mb = await new_member(b, "g", **kw)
    joined: dict[str, Any] = {}

    async def join(conn: Any, member: str) -> None:
        joined[member] = await conn.request(join_group(9, "g", member, **kw))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(join, b, mb)
        await trio.sleep(1.0)
        hb = await a.request(heartbeat(4, "g", first.generation_id, ma))
        assert hb.error_code == 27  # REBALANCE_IN_PROGRESS: a learns of b
        nursery.start_soon(join, a, ma)
    generation = joined[ma].generation_id
    plan = [(ma, b""), (mb, b"")]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(b.request, sync_group(5, "g", generation, mb, []))
        nursery.start_soon(a.request, sync_group(5, "g", generation, ma, plan))
    assert cluster.describe_group("g").group_state == "Stable"
    return ma, mb, generation


async def test_rebalance_timeout_removes_a_member_that_does_not_rejoin(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with connect(cluster) as a, connect(cluster) as b:
            ma, mb, generation = await stable_pair(cluster, a, b)
            t0 = trio.current_time()
            async with trio.open_nursery() as nursery:

                async def heartbeats_without_rejoining() -> None:
                    while True:
                        await trio.sleep(1.0)
                        await a.request(heartbeat(4, "g", generation, ma))

                nursery.start_soon(heartbeats_without_rejoining)
                # Changed metadata: a known member's rejoin starts a rebalance
                # (with unchanged metadata it would get its generation back).
                resp = await b.request(
                    join_group(
                        9,
                        "g",
                        mb,
                        session_ms=30_000,
                        rebalance_ms=8_000,
                        protocols=(("range", b"changed"),),
                    )
                )
                nursery.cancel_scope.cancel()
            # The join waited exactly the rebalance timeout (8 s) for a, then
            # completed without it.
            assert trio.current_time() - t0 == pytest.approx(8.000, abs=1e-6)
            assert resp.error_code == 0
            assert resp.generation_id == generation + 1
            assert [m.member_id for m in resp.members] == [mb]
            assert (await a.request(heartbeat(4, "g", generation, ma))).error_code == 25
        assert not cluster.errors
