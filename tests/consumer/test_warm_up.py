"""A new member gets ready for its first generation while JoinGroup waits.

It opens the fetch connections to the leaders of its topics and the
coordinator's connection, and loads the schemas of the requests a generation
sends, before the coordinator answers JoinGroup, so the partitions it is
given are fetched without a connection set-up or an import first. On the
embedded broker, in virtual time, with JoinGroup answered late (as when the
other members have yet to notice the rebalance).
"""

from __future__ import annotations

from types import SimpleNamespace

import anyio.lowlevel
import pytest
import trio
import trio.testing

from gengroup import ConsumerGroup
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay, Intercepted
from gengroup.consumer.prefetch import FIRST_FETCH_CHANNELS
from gengroup.io import request
from gengroup.protocol.versions import ApiKey

from .helpers import EMBEDDED_SETTINGS

JOIN_DELAY = 5.0


async def test_the_connections_are_open_and_schemas_loaded_before_join_group_is_answered(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[float] = []  # when each of the member's connections said hello
    at_sync: list[int] = []  # connections opened when SyncGroup came, just after the join
    loaded: set[ApiKey] = set()  # the APIs whose schemas were loaded
    loaded_at_sync: list[set[ApiKey]] = []  # ... when SyncGroup came
    real_load = request.response_module

    def load(key: ApiKey, version: int) -> object:
        loaded.add(key)
        return real_load(key, version)

    monkeypatch.setattr(request, "response_module", load)

    def hello(call: Intercepted) -> None:
        opened.append(trio.current_time())

    def late_join(call: Intercepted) -> Delay | None:
        if not call.request.member_id:
            return None  # the first JoinGroup, answered MEMBER_ID_REQUIRED
        return Delay(JOIN_DELAY)

    def sync(call: Intercepted) -> None:
        at_sync.append(len(opened))
        loaded_at_sync.append(set(loaded))

    async with FakeCluster(topics={"t": 3}, initial_rebalance_delay_ms=0) as cluster:
        cluster.control(ApiKey.API_VERSIONS, hello)
        cluster.control(ApiKey.JOIN_GROUP, late_join)
        cluster.control(ApiKey.SYNC_GROUP, sync)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            gen = await group.next()
            assert len(gen.assignments) == 3
    # The bootstrap connection (metadata, coordinator lookup), the group's own
    # (JoinGroup), every fetch connection to the topic's one leader, and the
    # coordinator's (OffsetFetch, Heartbeat, OffsetCommit), opened while
    # JoinGroup waited. Without the warm-up, 2.
    assert at_sync == [3 + len(FIRST_FETCH_CHANNELS)], (at_sync, opened)
    assert max(opened[: at_sync[0]]) < JOIN_DELAY, opened
    # What the generation sends once formed, loaded before (kio imports a
    # schema on first use, a few milliseconds each).
    want = {ApiKey.OFFSET_FETCH, ApiKey.FETCH, ApiKey.HEARTBEAT, ApiKey.OFFSET_COMMIT}
    assert want <= loaded_at_sync[0], loaded_at_sync


async def test_the_schemas_load_one_module_at_a_time_between_other_tasks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An answer that arrives while the warm-up loads schemas (SyncGroup's,
    # which the first heartbeat counts from) is read after one import at most:
    # every module loaded is followed by a checkpoint.
    events: list[str] = []
    monkeypatch.setattr(request, "request_module", lambda key, _: events.append(f"{key!r} req"))
    monkeypatch.setattr(request, "response_module", lambda key, _: events.append(f"{key!r} resp"))
    real_checkpoint = anyio.lowlevel.checkpoint

    async def checkpoint() -> None:
        events.append("checkpoint")
        await real_checkpoint()

    monkeypatch.setattr(anyio.lowlevel, "checkpoint", checkpoint)
    connection = SimpleNamespace(versions={ApiKey.SYNC_GROUP: 5, ApiKey.FETCH: 17})
    keys = [ApiKey.SYNC_GROUP, ApiKey.FETCH, ApiKey.LEAVE_GROUP]  # no LeaveGroup version
    await request.preload(connection, keys)  # type: ignore[arg-type]
    assert events == [
        f"{key!r} {side}" if step == "load" else "checkpoint"
        for key in keys[:2]
        for side in ("req", "resp")
        for step in ("load", "checkpoint")
    ]
