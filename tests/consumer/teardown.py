"""A scenario run on both brokers: a teardown longer than the session keeps the member."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from gengroup import ConsumerGroup, Generation, TopicPartition

from .helpers import wait_until


async def long_teardown_keeps_the_session(
    bootstrap: str,
    group_id: str,
    topic: str,
    settings: Mapping[str, Any],
    committed: Callable[[TopicPartition], Awaitable[int | None]],
    *,
    cancelled: bool,
) -> None:
    """A task that takes longer than ``session_timeout`` to return after its
    generation ended (a flush on its way out) does not get its member
    evicted: the member beats until every task returned, as the Java
    consumer's heartbeat thread goes on during its revocation callback. The
    coordinator waits for the member (up to ``rebalance_timeout``), its
    final commit is accepted, and no other member gets its partitions while
    the task still runs.

    Member "a" owns both partitions of ``topic`` (which holds records); its
    generation ends because "b" joins (a rebalance) or, with ``cancelled``,
    because the application cancels it.
    """
    flush = settings["session_timeout"] + 3.0
    assert flush < settings["rebalance_timeout"] - 1.0
    tp = TopicPartition(topic, 0)
    returned: list[float] = []
    formed_b: list[tuple[float, Generation]] = []

    async def member_b(ready: anyio.Event) -> None:
        async with ConsumerGroup(group_id, [topic], bootstrap, client_id="b", **settings) as b:
            ready.set()
            async for gen in b:
                formed_b.append((anyio.current_time(), gen))

    async with anyio.create_task_group() as tg:
        async with ConsumerGroup(group_id, [topic], bootstrap, client_id="a", **settings) as a:
            gen_a = await a.next()
            assert set(gen_a.assignments) == {tp, TopicPartition(topic, 1)}

            async def flushes_on_the_way_out() -> None:
                try:
                    await anyio.sleep_forever()
                finally:
                    with anyio.CancelScope(shield=True):
                        await anyio.sleep(flush)
                        gen_a.mark(tp, 6)
                        returned.append(anyio.current_time())

            gen_a.start_soon(flushes_on_the_way_out, name="flush")
            await anyio.sleep(2.5 * settings["heartbeat_interval"])
            if cancelled:
                gen_a.cancel("the application asks for a new generation")
            else:
                ready = anyio.Event()
                tg.start_soon(member_b, ready)
                await ready.wait()
            next_a = await a.next()
            assert returned, "the generation ended only once its task returned"
            assert next_a.member_id == gen_a.member_id, "still a member after the teardown"
            if not cancelled:
                await wait_until(lambda: bool(formed_b), "b's first generation", timeout=60)
        assert await committed(tp) == 6, "the final commit was accepted"
        if not cancelled:
            at, first_b = formed_b[0]
            assert at >= returned[0], "no other member got a partition before the task returned"
            assert len(first_b.assignments) == 1
        tg.cancel_scope.cancel()
