"""A retained partition is served while another partition's revocation runs.

Under both cooperative protocols the generation that revokes a partition
cancels the partition's tasks and waits for them (a worker's shielded flush
may take seconds) before it is handed out. The partitions it retains are
handed to it before that wait: their workers go on receiving batches from
its prefetcher, and their marks and commits go under its id meanwhile.
"""

from __future__ import annotations

import anyio
import anyio.abc
import pytest
import trio.testing

from gengroup import Generation, GenerationIdentity, TaskStuckError, TopicPartition
from gengroup.protocol.records import NewRecord

from .helpers import all_partitions, wait_until
from .test_span_commits import cluster_for, member

FLUSH = 4.0


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_retained_partitions_get_batches_while_a_revoked_worker_flushes(
    protocol: str, autojump_clock: trio.testing.MockClock
) -> None:
    """Member a owns four partitions; b joins, so a revokes two, whose workers flush
    for FLUSH seconds (shielded). A record produced to every partition meanwhile
    reaches a's retained workers before the flush ends; a retained worker's
    ``commit()`` on the generation it started in returns meanwhile, under the
    revoking generation's id, and the revocation's commit holds the retained
    partitions' marks too, never past what was processed."""
    every = set(all_partitions("t", 4))
    flushing: dict[TopicPartition, float] = {}
    processed: dict[TopicPartition, list[tuple[float, int]]] = {tp: [] for tp in every}
    commits: dict[TopicPartition, tuple[float, GenerationIdentity]] = {}
    handed: list[Generation] = []
    newcomer: list[Generation] = []
    joined = anyio.Event()

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        try:
            async for batch in gen.fetch(tp):
                processed[tp].append((anyio.current_time(), batch.next_offset))
                gen.mark(tp, batch.next_offset)
                if flushing and tp not in flushing and tp not in commits:
                    await gen.commit()  # during the revocation: under the revoking generation
                    holder = gen._span(tp)
                    assert holder is not None
                    commits[tp] = (anyio.current_time(), holder.gen.identity)
        finally:
            if joined.is_set():
                flushing[tp] = anyio.current_time()
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(FLUSH)  # flush this partition's state

    async def run(name: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with member(cluster, protocol, name) as group:
            task_status.started()
            async for gen in group:
                (handed if name == "a" else newcomer).append(gen)
                if name == "a":
                    for tp in gen.added:
                        gen.start_soon(worker, gen, tp, name=f"a {tp}", partition=tp)

    async with cluster_for(protocol) as cluster, anyio.create_task_group() as tg:
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"x", (), 0)] * 5, partition=p)
        await tg.start(run, "a")
        await wait_until(lambda: all(processed[tp] for tp in every), "a's first batches", 60)
        joined.set()
        await tg.start(run, "b")
        await wait_until(lambda: bool(flushing), "a revoked worker's flush", 120)
        flush_ends = min(flushing.values()) + FLUSH
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"y", (), 0)] * 3, partition=p)
        retained = every - set(flushing)
        assert len(retained) == 2

        def served() -> bool:
            return all(processed[tp][-1][1] == 8 for tp in retained) and commits.keys() == retained

        await wait_until(served, "the retained partitions' records", 60)
        assert anyio.current_time() < flush_ends
        await wait_until(lambda: any(g.revoked for g in handed), "the revoking generation", 60)
        tg.cancel_scope.cancel()
    (revoking,) = [g for g in handed if g.revoked]
    assert set(revoking.retained) == retained and set(revoking.revoked) == every - retained
    for tp in retained:
        # The worker's commit went under the revoking generation, before the flush ended.
        at, identity = commits[tp]
        assert at < flush_ends and identity == revoking.identity
        # Committed under it, all that was processed and no further.
        assert revoking.committed[tp] == 8 == processed[tp][-1][1]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_retained_partitions_task_returning_during_the_revocation_gives_it_up(
    protocol: str, autojump_clock: trio.testing.MockClock
) -> None:
    """A retained partition's task returns while another partition is being revoked:
    as any span task that exits, it gives its partition up and ends the generation
    (the revoking one, not yet handed out), so the partition is assigned again and a
    fresh worker processes it; it is never left owned without a worker."""
    every = set(all_partitions("t", 4))
    flushing: set[TopicPartition] = set()
    returned: list[TopicPartition] = []
    processed: dict[tuple[str, TopicPartition], int] = {}
    joined = anyio.Event()

    async def worker(name: str, gen: Generation, tp: TopicPartition) -> None:
        try:
            async for batch in gen.fetch(tp):
                processed[(name, tp)] = batch.next_offset
                gen.mark(tp, batch.next_offset)
        finally:
            if name == "a" and joined.is_set():
                flushing.add(tp)
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(FLUSH)

    async def quitter(tp: TopicPartition) -> None:
        """Returns (once, in a retained partition) while a revoked worker flushes."""
        await wait_until(lambda: bool(flushing), "a flush", 3600)  # (revoked ones: cancelled)
        if returned:
            await anyio.sleep_forever()
        returned.append(tp)

    async def run(name: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with member(cluster, protocol, name) as group:
            task_status.started()
            async for gen in group:
                for tp in gen.added:
                    gen.start_soon(worker, name, gen, tp, name=f"{name} {tp}", partition=tp)
                    if name == "a" and not joined.is_set():
                        gen.start_soon(quitter, tp, name=f"quitter {tp}", partition=tp)

    async with cluster_for(protocol) as cluster, anyio.create_task_group() as tg:
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"x", (), 0)] * 5, partition=p)
        await tg.start(run, "a")
        await wait_until(lambda: len(processed) == 4, "a's first batches", 60)
        joined.set()
        await tg.start(run, "b")
        await wait_until(lambda: bool(returned), "a retained partition's task returning", 120)
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"y", (), 0)] * 3, partition=p)

        def all_processed() -> bool:
            done = {tp for (_, tp), offset in processed.items() if offset == 8}
            return done == every

        await wait_until(all_processed, "every partition's new records", 120)
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_revoked_stuck_task_is_reported_on_time_when_the_revocation_is_interrupted(
    protocol: str, autojump_clock: trio.testing.MockClock
) -> None:
    """A revoked partition's worker ignores its cancellation; halfway through its
    rebalance_timeout a retained partition's task returns, which ends the revoking
    generation. The stuck worker keeps the deadline of its cancellation:
    TaskStuckError comes exactly rebalance_timeout after it, saying that the
    revocation cancelled it, not the generation's end."""
    timeouts: dict[str, float] = {}
    cancelled_at: dict[TopicPartition, float] = {}
    processed: dict[TopicPartition, int] = {}
    failed: list[tuple[float, BaseException]] = []
    joined = anyio.Event()
    quit_ = anyio.Event()

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        try:
            async for batch in gen.fetch(tp):
                processed[tp] = batch.next_offset
                gen.mark(tp, batch.next_offset)
        finally:
            if joined.is_set() and not cancelled_at:
                cancelled_at[tp] = anyio.current_time()
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(1000.0)  # ignores its cancellation

    async def quitter() -> None:
        await quit_.wait()

    async def run(name: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with member(cluster, protocol, name) as group:
            timeouts[name] = group.config.rebalance_timeout
            task_status.started()
            try:
                async for gen in group:
                    if name == "a":
                        for tp in gen.added:
                            gen.start_soon(worker, gen, tp, name=f"a {tp}", partition=tp)
                            gen.start_soon(quitter, name=f"quitter {tp}", partition=tp)
            except TaskStuckError as exc:
                failed.append((anyio.current_time(), exc))

    async with cluster_for(protocol) as cluster, anyio.create_task_group() as tg:
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"x", (), 0)] * 5, partition=p)
        await tg.start(run, "a")
        await wait_until(lambda: len(processed) == 4, "a's first batches", 60)
        joined.set()
        await tg.start(run, "b")
        await wait_until(lambda: bool(cancelled_at), "a revoked worker stuck", 120)
        timeout = timeouts["a"]
        await anyio.sleep(timeout / 2)
        quit_.set()  # the retained partitions' quitters return: the revoking generation ends
        await wait_until(lambda: bool(failed), "a's TaskStuckError", 600)
        tg.cancel_scope.cancel()
    ((at, err),) = failed
    ((stuck, cancelled),) = cancelled_at.items()
    assert at - cancelled == timeout
    message = str(err)
    assert f"'a {stuck}', cancelled {timeout} s ago (generation" in message
    assert "revoked its partition" in message
