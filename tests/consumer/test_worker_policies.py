"""run_workers' error policy: retries, then stop, skip or a dead-letter hook.

Embedded broker, virtual time. Each test produces ten records one per batch,
lets a handler fail on the batch holding offset 3, and checks what was
processed, what was handed on, and what was committed.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import anyio
import pytest
import trio
import trio.testing

from gengroup import ConfigError, ConsumerGroup, FetchedBatch, Generation, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.consumer.workers import run_workers
from gengroup.protocol.records import NewRecord

TP = TopicPartition("t", 0)
SETTINGS = {
    "session_timeout": 10.0,
    "heartbeat_interval": 1.0,
    "commit_interval": 0.5,
    # One record batch per fetch, so each produced record is a batch of its own.
    "partition_buffer_bytes": 1,
    "fetch_max_bytes": 1,
}


class Boom(Exception):
    pass


async def run(fail_times: int, **policy: Any) -> tuple[list[int], dict[TopicPartition, int]]:
    """Run the workers until offset 9 is dealt with; (offsets processed, committed)."""
    processed: list[int] = []
    failures = {"left": fail_times}
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        for i in range(10):  # one batch per record
            cluster.produce("t", [NewRecord(None, str(i).encode(), (), 0)])

        async def handler(gen: Generation, tp: TopicPartition, batch: FetchedBatch) -> None:
            offsets = [r.offset for r in batch.records]
            if 3 in offsets and failures["left"] > 0:
                failures["left"] -= 1
                raise Boom(f"bad batch {offsets}")
            processed.extend(offsets)

        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: run_workers(group, handler, **policy))
                while cluster.committed_offsets("g").get(TP) != 10:
                    await trio.sleep(0.5)
                tg.cancel_scope.cancel()
        return processed, cluster.committed_offsets("g")


async def test_retries_then_success_processes_every_record_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processed, committed = await run(2, retries=2, retry_backoff=0.1)
    assert sorted(processed) == list(range(10))
    assert committed[TP] == 10


async def test_skip_moves_past_the_failing_batch_and_logs_it(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    processed, committed = await run(99, on_error="skip", retries=1, retry_backoff=0.1)
    assert 3 not in processed and sorted(processed) == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert committed[TP] == 10
    skipped = [r for r in caplog.records if r.levelno == logging.ERROR and "skipping" in r.message]
    assert len(skipped) == 1 and skipped[0].exc_info is not None


async def test_a_dead_letter_hook_gets_the_batch_and_the_exception(
    autojump_clock: trio.testing.MockClock,
) -> None:
    dead: list[tuple[TopicPartition, list[int], Exception]] = []

    async def hook(
        gen: Generation, tp: TopicPartition, batch: FetchedBatch, exc: Exception
    ) -> None:
        dead.append((tp, [r.offset for r in batch.records], exc))

    processed, committed = await run(99, on_error=hook)
    assert [(tp, offsets) for tp, offsets, _ in dead] == [(TP, [3])]
    assert isinstance(dead[0][2], Boom)
    assert 3 not in processed and committed[TP] == 10


async def test_stop_raises_the_handlers_exception_and_commits_only_what_was_processed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        for i in range(10):
            cluster.produce("t", [NewRecord(None, str(i).encode(), (), 0)])

        async def handler(gen: Generation, tp: TopicPartition, batch: FetchedBatch) -> None:
            if any(r.offset == 3 for r in batch.records):
                raise Boom("stop here")

        with pytest.raises(Boom, match="stop here"):
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
                await run_workers(group, handler, retries=1, retry_backoff=0.1)
        assert cluster.committed_offsets("g")[TP] == 3


@pytest.mark.parametrize(
    "policy",
    [{"on_error": "ignore"}, {"retries": -1}, {"retries": 1.5}, {"retry_backoff": 0}],
)
async def test_bad_policy_settings_raise_config_error(policy: dict[str, Any]) -> None:
    async def handler(gen: Generation, tp: TopicPartition, batch: FetchedBatch) -> None:
        pass

    group = ConsumerGroup("g", ["t"], "127.0.0.1:1")
    with pytest.raises(ConfigError):
        await run_workers(group, handler, **policy)


@pytest.mark.parametrize("policy", [{"retry_backoff": True}, {"retry_backoff": float("inf")}])
async def test_a_retry_backoff_that_is_a_bool_or_infinite_raises_config_error(
    policy: dict[str, Any],
) -> None:
    async def handler(gen: Generation, tp: TopicPartition, batch: FetchedBatch) -> None:
        pass

    group = ConsumerGroup("g", ["t"], "127.0.0.1:1")
    with pytest.raises(ConfigError, match="retry_backoff"):
        await run_workers(group, handler, **policy)


async def test_a_plain_function_as_handler_or_hook_is_refused_at_the_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Not once a batch came, after its side effects: nothing runs, nothing is fetched."""
    calls: list[str] = []

    def sync_handler(gen: Generation, tp: TopicPartition, batch: FetchedBatch) -> None:
        calls.append("handler")

    async def handler(gen: Generation, tp: TopicPartition, batch: FetchedBatch) -> None:
        raise ValueError("boom")

    def sync_hook(gen: Generation, tp: TopicPartition, batch: FetchedBatch, exc: Exception) -> None:
        calls.append("hook")

    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.produce("t", [NewRecord(None, b"x", (), 0)])
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            with pytest.raises(ConfigError, match="handler must be an async function"):
                await run_workers(group, sync_handler)  # type: ignore[arg-type]
            with pytest.raises(ConfigError, match="on_error must be an async function"):
                await run_workers(group, handler, on_error=sync_hook)  # type: ignore[arg-type]
            with pytest.raises(ConfigError, match="handler must be"):
                await run_workers(group, lambda gen, tp, batch: handler(gen, tp, batch))
    assert calls == []


class _AsyncCallable:
    def __init__(self, seen: list[int]) -> None:
        self.seen = seen

    async def __call__(self, gen: Generation, tp: TopicPartition, batch: FetchedBatch) -> None:
        self.seen.append(batch.next_offset)

    async def method(self, gen: Generation, tp: TopicPartition, batch: FetchedBatch) -> None:
        self.seen.append(batch.next_offset)


async def _tagged(
    seen: list[int], gen: Generation, tp: TopicPartition, batch: FetchedBatch
) -> None:
    seen.append(batch.next_offset)


@pytest.mark.parametrize("form", ["partial", "async __call__", "bound method"])
async def test_handlers_that_return_awaitables_are_accepted(
    autojump_clock: trio.testing.MockClock, form: str
) -> None:
    seen: list[int] = []
    handler: Any = {
        "partial": functools.partial(_tagged, seen),
        "async __call__": _AsyncCallable(seen),
        "bound method": _AsyncCallable(seen).method,
    }[form]
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        for _ in range(3):  # one batch per record
            cluster.produce("t", [NewRecord(None, b"x", (), 0)])
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(run_workers, group, handler, on_error=handler))
                with trio.fail_after(60):
                    while len(seen) < 3:
                        await anyio.sleep(0.1)
                tg.cancel_scope.cancel()
    assert seen == [1, 2, 3]
