"""A revoked partition's task that raises while it is being revoked ends the group at once.

Under both cooperative protocols the generation that revokes a partition
first cancels and awaits the partition's tasks. An exception one of them
raises (a flush in ``finally`` that fails) comes out of ``async for`` as
itself, as a generation-scoped task's does: the revoking generation is not
handed out, and the member does not go on consuming its other partitions.
An outage during a revocation ends the group with the outage's error, not
with a TaskStuckError naming no task.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.abc
import pytest
import trio.testing

from gengroup import (
    ClusterUnreachable,
    ConsumerGroup,
    CooperativeStickyBalancer,
    Generation,
    TopicPartition,
)
from gengroup.broker import FakeCluster
from gengroup.broker.state import BrokerSettings
from gengroup.protocol.records import NewRecord

from .helpers import EMBEDDED_SETTINGS, wait_until
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


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_an_outage_during_a_revocation_ends_the_group_with_its_own_error(
    protocol: str, autojump_clock: trio.testing.MockClock
) -> None:
    """The only broker stops while a revocation runs, and its commit of the revoked
    partitions would retry for request_timeout, far longer than rebalance_timeout:
    no task is stuck (the workers' flush takes 1 s), so the group ends with the
    outage's ClusterUnreachable, within unreachable_timeout and one attempt's
    timeout of the stop (docs/guarantees.md, section 9), not TaskStuckError."""
    overrides: dict[str, Any] = {
        "rebalance_timeout": 5.0,
        "request_timeout": 30.0,
        "unreachable_timeout": 20.0,
    }
    settings = {**EMBEDDED_SETTINGS, **overrides}  # session_timeout=10
    if protocol == "classic":
        settings["balancers"] = [CooperativeStickyBalancer()]
    else:
        settings["group_protocol"] = "consumer"
    broker = BrokerSettings(
        group_initial_rebalance_delay_ms=0,
        group_consumer_heartbeat_interval_ms=1000,
        group_consumer_session_timeout_ms=10000,
    )
    revoking = anyio.Event()
    flushing: list[TopicPartition] = []
    outcome: dict[str, BaseException] = {}

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        try:
            async for batch in gen.fetch(tp):
                gen.mark(tp, batch.next_offset)
        finally:
            if revoking.is_set():
                flushing.append(tp)
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(1)  # a short flush, far below rebalance_timeout

    async def run(name: str) -> None:
        try:
            async with ConsumerGroup(
                "g", ["t"], cluster.bootstrap, client_id=name, **settings
            ) as g:
                async for gen in g:
                    for tp in gen.added:
                        gen.start_soon(worker, gen, tp, partition=tp)
        except Exception as exc:
            outcome[name] = exc

    async with (
        FakeCluster(topics={"t": 4}, settings=broker) as cluster,
        anyio.create_task_group() as tg,
    ):
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"x", (), 0)] * 5, partition=p)
        tg.start_soon(run, "a")
        await anyio.sleep(2)
        revoking.set()
        tg.start_soon(run, "b")
        await wait_until(lambda: bool(flushing), "a revoked worker's flush", 60)
        await anyio.sleep(0.5)
        stopped_at = anyio.current_time()
        await cluster.stop_broker(0)
        await wait_until(lambda: "a" in outcome, "a's error", 300)
        failed_after = anyio.current_time() - stopped_at
        tg.cancel_scope.cancel()
    error = outcome["a"]
    assert isinstance(error, ClusterUnreachable), repr(error)
    assert failed_after <= overrides["unreachable_timeout"] + 10.0
