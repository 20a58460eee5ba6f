"""A task that ignores cancellation is reported before its partition can move.

Two members on the embedded broker in virtual time (trio's MockClock): the
first holds the only partition with a worker that ignores cancellation (a
shielded sleep, as blocking work in a thread is), the second joins. Nothing
can stop such a worker, so it may go on beside the partition's next owner;
what the group promises is that :class:`TaskStuckError` reaches the first
member no later than the coordinator can hand the partition to the second.

The coordinator's clock for that starts when the rebalance starts (the
second member's JoinGroup), which the first member learns of only at its
next heartbeat, up to a heartbeat interval later; and, since a member sends
no heartbeat while its generation ends, when the first member's session
runs out.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
import trio
import trio.testing

from gengroup import ConsumerGroup, Generation, TaskStuckError, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.protocol.records import NewRecord

from .helpers import EMBEDDED_SETTINGS

TP = TopicPartition("t", 0)


async def _stuck_and_handed_over(
    settings: dict[str, Any], join_after: float
) -> tuple[float, float]:
    """When the stuck member's TaskStuckError came, and when the second member
    got the partition (virtual seconds)."""
    stuck_at: list[float] = []
    handed_at: list[float] = []
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.produce("t", [NewRecord(None, b"x", (), 0) for _ in range(5)])
        started = anyio.Event()

        async def stubborn(gen: Generation) -> None:
            async for _batch in gen.fetch(TP):
                started.set()
                with anyio.CancelScope(shield=True):  # blocking work: not cancellable
                    await anyio.sleep(1000.0)

        handed = anyio.Event()

        async def first() -> None:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
                with pytest.raises(TaskStuckError, match="stubborn"):
                    async for gen in group:
                        gen.start_soon(stubborn, gen, name="stubborn")
                stuck_at.append(trio.current_time())
                # Leaving the group now would hand the partition over at once.
                await handed.wait()

        async def second() -> None:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
                async for gen in group:
                    if TP in gen.assignments:
                        handed_at.append(trio.current_time())
                        handed.set()
                        return

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            await started.wait()
            await anyio.sleep(join_after)
            tg.start_soon(second)
    assert stuck_at and handed_at
    return stuck_at[0], handed_at[0]


@pytest.mark.parametrize("join_after", [0.05, 0.65, 2.35, 2.95])
async def test_a_stuck_task_is_reported_before_the_rebalance_timeout_hands_its_partition_over(
    autojump_clock: trio.testing.MockClock, join_after: float
) -> None:
    """The second member joins at some point between the first's heartbeats; the
    coordinator gives the partition away rebalance_timeout after that."""
    settings = {**EMBEDDED_SETTINGS, "rebalance_timeout": 4.0, "heartbeat_interval": 1.0}
    stuck_at, handed_at = await _stuck_and_handed_over(settings, join_after)
    assert stuck_at < handed_at


async def test_a_stuck_task_is_reported_before_the_session_runs_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With rebalance_timeout above session_timeout the first member, which sends no
    heartbeat while its generation ends, is evicted a session after its last one."""
    settings = {
        **EMBEDDED_SETTINGS,
        "session_timeout": 6.0,
        "rebalance_timeout": 20.0,
        "heartbeat_interval": 1.0,
    }
    stuck_at, handed_at = await _stuck_and_handed_over(settings, 0.5)
    assert stuck_at < handed_at
    assert handed_at < 20.0  # the session, not the rebalance timeout, let the partition go
