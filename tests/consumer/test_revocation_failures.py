"""A revoked partition's task that raises while it is being revoked ends the group at once.

Under both cooperative protocols the generation that revokes a partition
first cancels and awaits the partition's tasks. An exception one of them
raises (a flush in ``finally`` that fails) comes out of ``async for`` as
itself, as a generation-scoped task's does: the revoking generation is not
handed out, and the member does not go on consuming its other partitions.
"""

from __future__ import annotations

import anyio
import anyio.abc
import pytest
import trio.testing

from gengroup import Generation, TopicPartition
from gengroup.protocol.records import NewRecord

from .helpers import wait_until
from .test_span_commits import cluster_for, member


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_revoked_partitions_exception_comes_out_at_once(
    protocol: str, autojump_clock: trio.testing.MockClock
) -> None:
    raised_at: list[float] = []
    handed_out: list[Generation] = []
    newcomer: list[Generation] = []

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        try:
            async for batch in gen.fetch(tp):
                gen.mark(tp, batch.next_offset)
        finally:
            # Only a revocation ends a worker before the group fails.
            if not raised_at:
                raised_at.append(anyio.current_time())
                raise ValueError(f"flush of {tp} failed while revoking")

    def marked() -> bool:
        return bool(handed_out[0].marks)

    async def run_newcomer(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with member(cluster, protocol, "b") as group:
            task_status.started()
            async for gen in group:
                newcomer.append(gen)

    async with cluster_for(protocol) as cluster:
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"x", (), 0)] * 10, partition=p)
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(120), pytest.raises(ValueError, match="while revoking"):
                async with member(cluster, protocol, "a") as group:
                    async for gen in group:
                        handed_out.append(gen)
                        for tp in gen.added:
                            gen.start_soon(worker, gen, tp, partition=tp)
                        if len(handed_out) == 1:
                            await wait_until(marked, "a's first marks", 60)
                            await tg.start(run_newcomer)
            failed_at = anyio.current_time()
            tg.cancel_scope.cancel()
    assert raised_at, "no revoked task raised"
    # At once: not after a heartbeat interval, nor whenever something else ends the generation.
    assert failed_at - raised_at[0] < 0.2
    # The generation that revoked the partitions was not handed out.
    assert not any(g.revoked for g in handed_out)
