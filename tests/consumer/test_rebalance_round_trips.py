"""A rebalance waits for no round trip it can do without.

From a member's JoinGroup to its first Fetch of the new generation, the
requests on the rebalance's path are JoinGroup, then SyncGroup with the
OffsetFetch of every partition the member may be assigned sent beside it:
the leader assigns from metadata refreshed while its JoinGroup waited (not
from a Metadata request sent once JoinGroup answered, which every follower's
SyncGroup waited for), the committed offsets arrive while SyncGroup waits for
the leader's (not in a round trip after it), and the prefetcher starts from
the leaders the metadata cache names (not from a Metadata request sent once
the generation formed). On the embedded broker, in virtual time, with
JoinGroup answered late as when the other members have yet to notice the
rebalance, and the leader's SyncGroup late as when it takes time to assign.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

from gengroup import Generation, RangeBalancer, TopicPartition
from gengroup._types import GenerationIdentity
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay, Intercepted
from gengroup.consumer import forming
from gengroup.consumer.commits import CommitCodes
from gengroup.consumer.generation import RebalanceTimings
from gengroup.protocol.versions import ApiKey

from .cooperative import SpanLedger
from .helpers import TaskSteps, all_partitions, unstarted_prefetcher, wait_until
from .test_span_commits import Recorder

JOIN_WAIT = 2.0  # a JoinGroup with a member id is answered this late
SYNC_WAIT = 0.5  # the leader's SyncGroup (after a JoinGroup that waited) arrives this late

Path = list[tuple[float, ApiKey]]


async def rebalance_paths() -> dict[str, Path]:
    """m2 joins m1 (the leader): each member's requests from its last JoinGroup
    to its first Fetch after it."""
    every = all_partitions("t", 4)
    ledger = SpanLedger()
    sent: dict[str, Path] = {"m1": [], "m2": []}

    def record(call: Intercepted) -> None:
        if call.client_id in sent:
            sent[call.client_id].append((trio.current_time(), ApiKey(call.api_key)))

    def late_join(call: Intercepted) -> Delay | None:
        record(call)
        return Delay(JOIN_WAIT) if call.request.member_id else None

    def late_leader(call: Intercepted) -> Delay | None:
        record(call)
        return Delay(SYNC_WAIT) if call.request.assignments and len(sent["m2"]) else None

    async with FakeCluster(topics={"t": 4}, initial_rebalance_delay_ms=0) as cluster:
        for key in (ApiKey.METADATA, ApiKey.OFFSET_FETCH, ApiKey.FETCH):
            cluster.control(key, record)
        cluster.control(ApiKey.JOIN_GROUP, late_join)
        cluster.control(ApiKey.SYNC_GROUP, late_leader)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ledger.join, cluster, "m1", [RangeBalancer()])
            await wait_until(lambda: ledger.stable({"m1"}, every), "m1 alone", 60)
            sent["m1"].clear()
            nursery.start_soon(ledger.join, cluster, "m2", [RangeBalancer()])
            await wait_until(lambda: ledger.stable({"m1", "m2"}, every), "two members", 60)
            assert ledger.current()["m1"].is_leader
            await trio.sleep(1.0)  # the first Fetch of each
            nursery.cancel_scope.cancel()

    paths: dict[str, Path] = {}
    for name, requests in sent.items():
        start = max(i for i, (_, key) in enumerate(requests) if key is ApiKey.JOIN_GROUP)
        path: Path = []
        for t, key in requests[start:]:
            path.append((t, key))
            if key is ApiKey.FETCH:
                break
        # At most the refresh beside JoinGroup, sent with it (it arrives while
        # JoinGroup waits, not once it answered).
        joined_at = path[0][0]
        assert [t for t, key in path if key is ApiKey.METADATA] in ([], [joined_at]), (name, path)
        paths[name] = [(t, key) for t, key in path if key is not ApiKey.METADATA]
    return paths


async def test_join_to_first_fetch_has_no_round_trip_but_join_and_sync(
    autojump_clock: trio.testing.MockClock,
) -> None:
    for name, path in (await rebalance_paths()).items():
        keys = [key for _, key in path]
        assert keys[0] is ApiKey.JOIN_GROUP and keys[-1] is ApiKey.FETCH, (name, path)
        assert sorted(keys[1:-1]) == sorted([ApiKey.SYNC_GROUP, ApiKey.OFFSET_FETCH]), (name, path)
        at = {key: t for t, key in path}
        # The OffsetFetch went with SyncGroup; the Fetch waited for SyncGroup's answer.
        assert at[ApiKey.OFFSET_FETCH] == at[ApiKey.SYNC_GROUP], (name, path)
        assert at[ApiKey.FETCH] >= at[ApiKey.SYNC_GROUP] + SYNC_WAIT, (name, path)


async def test_past_the_limit_the_offsets_are_fetched_once_sync_group_answered(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(forming, "OFFSETS_BESIDE_SYNC_LIMIT", 3)  # the topic has 4
    for name, path in (await rebalance_paths()).items():
        keys = [key for _, key in path]
        assert keys == [ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.OFFSET_FETCH, ApiKey.FETCH]
        at = {key: t for t, key in path}
        assert at[ApiKey.OFFSET_FETCH] >= at[ApiKey.SYNC_GROUP] + SYNC_WAIT, (name, path)


def _generation(tp: TopicPartition, committer: object) -> Generation:
    """A generation of ``tp`` alone, committing through ``committer``."""
    return Generation(
        identity=GenerationIdentity("g", 1, "m", None, 1),
        is_leader=False,
        protocol="range",
        assignments={tp: 0},
        timings=RebalanceTimings(),
        _committer=committer,  # type: ignore[arg-type]
        _prefetcher=unstarted_prefetcher({tp: 0}),
    )


async def test_a_commit_finding_its_lock_free_is_sent_without_a_task_switch() -> None:
    # The final commit's first pass is sent the moment the heartbeat hears
    # of the rebalance; a task switch before it let every task the end
    # cancelled (fetches, workers) run its way out first.
    tp = TopicPartition("t", 0)
    steps = TaskSteps()
    sent_at: list[int] = []

    class Committer(Recorder):
        async def commit_offsets(self, *args: Any, **kwargs: Any) -> CommitCodes:
            sent_at.append(steps.steps)
            return await super().commit_offsets(*args, **kwargs)

    gen = _generation(tp, Committer())
    gen.mark(tp, 5)
    trio.lowlevel.add_instrument(steps)
    try:
        before = steps.steps
        await gen._commit(None, None, forwarded=False)
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert sent_at == [before]
    assert gen.committed == {tp: 5}


async def test_a_commit_with_nothing_to_send_is_still_a_schedule_point() -> None:
    """The commit lock gives no schedule point when free; a commit with
    nothing due must pass one itself, or a loop of them (``while True: await
    gen.commit()``) would hold the event loop, beats and fetches included."""
    tp = TopicPartition("t", 0)

    class Committer:
        async def commit_offsets(self, *args: object) -> CommitCodes:
            raise AssertionError("nothing is due: nothing is sent")

    gen = _generation(tp, Committer())
    others = 0

    async def other() -> None:
        nonlocal others
        while True:
            others += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        for _ in range(100):
            await gen._commit(None, None, forwarded=False)
        nursery.cancel_scope.cancel()
    assert others >= 50, others
