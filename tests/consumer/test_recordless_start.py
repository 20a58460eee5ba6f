"""A generation that starts right before offsets holding no record commits past them.

The group committed offset C; the offsets from C to the end of the log hold
no record to hand out (a transaction's commit marker written after the
commit, an aborted transaction written while the group was down). A new
generation hands nothing out there, so no mark of the worker reaches them:
the committed offset, ``gen.lag()`` and the group's lag used to stay at C
for good. The offset the partition started from counts as marked once its
worker asks for a batch: the range is passed, committed like a mark with
the metadata committed with C.
"""

from __future__ import annotations

import anyio
import anyio.abc
import pytest
import trio
import trio.testing

from gengroup import (
    Admin,
    Balancer,
    ConsumerGroup,
    CooperativeStickyBalancer,
    Generation,
    TopicPartition,
)
from gengroup.broker import FakeCluster
from gengroup.protocol.versions import ApiKey

from ..embedded import append_commit_marker
from .cooperative import group_on
from .helpers import EMBEDDED_SETTINGS, wait_until
from .test_recordless_offsets import END, fetch_answer

TP = TopicPartition("t", 0)
#: Commits only at the generation's end and when asked.
AT_THE_END = {**EMBEDDED_SETTINGS, "commit_interval": 0.0}


async def _commit(cluster: FakeCluster, offset: int, note: str) -> None:
    """A member of group g commits ``offset`` of t[0] with ``note``, then leaves."""
    async with ConsumerGroup("g", ["t"], cluster.bootstrap, **AT_THE_END) as group:
        gen = await group.next()
        await gen.commit({TP: offset}, metadata={TP: note})


async def _committed(cluster: FakeCluster) -> tuple[dict[TopicPartition, int], dict[str, str]]:
    """What the next member of group g finds committed for t[0]: offsets, metadata."""
    async with ConsumerGroup("g", ["t"], cluster.bootstrap, **AT_THE_END) as group:
        gen = await group.next()
        return dict(gen.committed), {str(tp): m for tp, m in gen.committed_metadata.items()}


async def _consume(gen: Generation, seen: list[int]) -> None:
    async for batch in gen.fetch(TP):
        seen.extend(r.offset for r in batch)
        gen.mark(TP, batch.next_offset)


async def test_a_group_that_committed_right_before_a_commit_marker_commits_past_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Committed at 3 with metadata, then a transaction's commit marker at 3 (the
    log ends at 4): the restarted member hands nothing out, and the periodic
    commit takes the committed offset to 4, the metadata kept; its lag and
    the group's are 0. It used to stay at 3, lag 1, for good."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.produce("t", [b"a", b"b", b"c"])
        await _commit(cluster, 3, "app-note")
        append_commit_marker(cluster, TP)
        seen: list[int] = []
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            gen = await group.next()
            gen.start_soon(_consume, gen, seen)
            await wait_until(lambda: cluster.committed_offsets("g") == {TP: 4}, "4 committed", 30)
            assert (seen, gen.marks, gen.lag(), gen.position(TP)) == ([], {}, {TP: 0}, 4)
            assert gen.committed_metadata == {TP: "app-note"}
        async with Admin(cluster.bootstrap) as admin:
            lag = (await admin.group_lag("g"))[TP]
        assert (lag.committed, lag.end, lag.lag) == (4, 4, 0)
        assert await _committed(cluster) == ({TP: 4}, {"t[0]": "app-note"})


async def test_an_aborted_transaction_at_the_end_is_committed_past_when_the_generation_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Committed at 4; 4-6 are an aborted transaction and 7 its marker (the log
    of test_recordless_offsets.py). Under read_committed and commit_interval=0
    nothing is committed while the generation lives (its lag is 0 already),
    and the generation-end commit takes the committed offset to 8, the
    metadata kept."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.control(ApiKey.FETCH, fetch_answer)
        await _commit(cluster, 4, "app-note")
        seen: list[int] = []
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **AT_THE_END) as group:
            gen = await group.next()
            gen.start_soon(_consume, gen, seen)
            await wait_until(lambda: gen.lag() == {TP: 0}, "lag 0", 30)
            await trio.sleep(5)
            assert (seen, gen.position(TP)) == ([], END)
            assert cluster.committed_offsets("g") == {TP: 4}
        assert cluster.committed_offsets("g") == {TP: END}
        assert await _committed(cluster) == ({TP: END}, {"t[0]": "app-note"})


@pytest.mark.parametrize("worker", ["never asks", "seeks before asking", "marks past it"])
async def test_the_start_mark_waits_for_the_worker_and_yields_to_its_own_moves(
    autojump_clock: trio.testing.MockClock, worker: str
) -> None:
    """A worker that never asks for a batch commits nothing (an application
    that commits by itself settles its committed offset first); one that seeks
    before asking moved the position: nothing either (a lake sink seeking back
    to re-land files it deleted). A mark of the worker past the range wins (a
    mark's commit carries no metadata)."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.produce("t", [b"a", b"b", b"c"])
        await _commit(cluster, 3, "app-note")
        append_commit_marker(cluster, TP)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **AT_THE_END) as group:
            gen = await group.next()
            await wait_until(lambda: gen.lag() == {TP: 1}, "the end fetched", 30)
            if worker == "seeks before asking":
                gen.seek(TP, 3)
            if worker != "never asks":
                gen.start_soon(_consume, gen, [])
            if worker == "marks past it":
                gen.mark(TP, 4)
            await trio.sleep(5)
            assert gen.lag() == {TP: 1 if worker != "marks past it" else 0}
        expected = ({TP: 3}, {"t[0]": "app-note"}) if worker != "marks past it" else ({TP: 4}, {})
        assert await _committed(cluster) == expected


async def test_a_partition_started_from_start_offset_commits_nothing_for_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No committed offset: the member starts where start_offset says (0, a
    commit marker). gengroup commits nothing for a position it only reset to;
    the group has no committed offset until the worker marks."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        append_commit_marker(cluster, TP)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **AT_THE_END) as group:
            gen = await group.next()
            gen.start_soon(_consume, gen, [])
            await wait_until(lambda: gen.position(TP) == 1, "the end fetched", 30)
            await trio.sleep(5)
            assert (gen.marks, gen.lag()) == ({}, {TP: 1})
        assert cluster.committed_offsets("g") == {}


async def test_a_span_tasks_commit_of_its_marks_keeps_the_start_mark_of_the_holder(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Member a's span workers commit 3 on both partitions explicitly, and
    mark less (2: an application whose own commits run ahead of its marks).
    b joins and a retains one partition, whose new generation starts from
    the committed 3. A commit marker lands at 3: the holder's start mark
    passes it (the mark 2 does not reach it). The span task's ``commit()``
    on the generation it started in (ended) is a commit of the marks in the
    holder: it used to be sent as explicit offsets (2, nothing due) and drop
    the start mark, so the committed offset stayed at 3 for good; now it
    carries the start mark, and the holder keeps it."""
    started: dict[TopicPartition, Generation] = {}
    current: dict[str, Generation] = {}

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        started[tp] = gen
        async for batch in gen.fetch(tp):
            gen.mark(tp, batch.next_offset - 1)
            await gen.commit({tp: batch.next_offset})

    async def run(name: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        balancers: list[Balancer] = [CooperativeStickyBalancer()]
        async with group_on(cluster, name, balancers, commit_interval=3600.0) as group:
            task_status.started()
            async for gen in group:
                current[name] = gen
                for tp in gen.added:
                    gen.start_soon(worker, gen, tp, name=f"{name} {tp}", partition=tp)

    both = {TP: 3, TopicPartition("t", 1): 3}
    async with (
        FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster,
        anyio.create_task_group() as tg,
    ):
        for p in range(2):
            cluster.produce("t", [b"a", b"b", b"c"], partition=p)
        await tg.start(run, "a")
        await wait_until(lambda: cluster.committed_offsets("g") == both, "3 committed", 60)
        await tg.start(run, "b")

        def settled() -> bool:
            return "b" in current and all(len(current[n].assignments) == 1 for n in "ab")

        await wait_until(settled, "a partition each", 120)
        holder = current["a"]
        (kept,) = holder.retained
        assert started[kept].ended and (holder.marks, holder.position(kept)) == ({kept: 2}, 3)
        append_commit_marker(cluster, kept)
        await wait_until(lambda: holder.lag() == {kept: 0}, "the marker passed", 60)
        await started[kept].commit()  # the span task commits its marks
        assert (holder.lag(), cluster.committed_offsets("g")[kept]) == ({kept: 0}, 4)
        await holder.commit()
        assert cluster.committed_offsets("g")[kept] == 4
        tg.cancel_scope.cancel()
