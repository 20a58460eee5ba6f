"""Generation semantics against the real Apache Kafka broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import anyio
import pytest

from gengroup import (
    Admin,
    ConsumerGroup,
    Generation,
    GenerationEnded,
    IllegalGeneration,
    Producer as Producer_,
    TaskStuckError,
    TopicPartition,
)
from gengroup._errors import error_for_code
from gengroup._types import GenerationIdentity
from gengroup.producer import ProducerRecord as ProducerRecord_
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from .helpers import FAST, Ledger, all_partitions, create_topic, produce_ids
from .teardown import long_teardown_keeps_the_session

pytestmark = pytest.mark.kafka

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


async def test_vanished_member_is_evicted_after_session_timeout(kafka: KafkaBroker) -> None:
    topic, group_id = make_unique_name("evict"), make_unique_name("g")
    await create_topic(kafka.bootstrap, topic, 4)
    session = 3.0
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.consumer.member_process",
            kafka.bootstrap,
            group_id,
            topic,
            str(session),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            await _survivor_takes_over(kafka, proc, group_id, topic, session)
        finally:
            if proc.poll() is None:
                proc.kill()


async def _survivor_takes_over(
    kafka: KafkaBroker, proc: subprocess.Popen[str], group_id: str, topic: str, session: float
) -> None:
    assert proc.stdout is not None
    line = await anyio.to_thread.run_sync(proc.stdout.readline)
    assert line.startswith("generation "), line
    ledger = Ledger()
    async with (
        ConsumerGroup(group_id, [topic], kafka.bootstrap, client_id="survivor", **FAST) as group,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(ledger.member, "survivor", group)
        # Both members share the 4 partitions.
        await ledger.wait_for(
            lambda: len(ledger.assigned("survivor")) == 2,
            "the survivor to get half the partitions",
        )
        killed_at = anyio.current_time()
        proc.send_signal(signal.SIGKILL)
        await anyio.to_thread.run_sync(proc.wait)
        # No LeaveGroup was sent: only the session timeout moves the partitions.
        await ledger.wait_for(
            lambda: ledger.assigned("survivor") == all_partitions(topic, 4),
            "the survivor to own all 4 partitions",
            timeout=30,
        )
        elapsed = anyio.current_time() - killed_at
        tg.cancel_scope.cancel()
    assert elapsed >= session * 0.5, f"partitions moved after {elapsed:.2f} s, before eviction"


async def test_commit_from_ended_generation_is_refused_locally_and_old_ids_by_the_broker(
    kafka: KafkaBroker,
) -> None:
    topic, group_id = make_unique_name("commit"), make_unique_name("g")
    await create_topic(kafka.bootstrap, topic, 2)
    await produce_ids(kafka.bootstrap, topic, range(10))
    tp = TopicPartition(topic, 0)
    async with ConsumerGroup(group_id, [topic], kafka.bootstrap, **FAST) as group:
        first = await group.next()
        first.mark(tp, 3)
        await first.commit()
        first.cancel("test: force a new generation")
        second = await group.next()
        assert second.id >= first.id
        assert first.ended
        with pytest.raises(GenerationEnded):
            await first.commit({tp: 5})
        with pytest.raises(GenerationEnded):
            first.start_soon(anyio.sleep, 1)
        with pytest.raises(GenerationEnded):
            first.mark(tp, 6)
        # A second member forces a real new generation id; then send the old
        # id on purpose: the broker refuses it, typed.
        async with ConsumerGroup(group_id, [topic], kafka.bootstrap, **FAST) as other:
            async with anyio.create_task_group() as tg:
                gens: list[Generation] = []

                async def follow() -> None:
                    async for g in other:
                        gens.append(g)

                tg.start_soon(follow)
                third = await group.next()
                assert third.id > first.id
                stale = GenerationIdentity(group_id, first.id, third.member_id, None)
                codes = await group._client.commit_offsets(stale, {tp: 1})
                assert isinstance(error_for_code(codes[tp]), IllegalGeneration)
                tg.cancel_scope.cancel()
        async with Admin(kafka.bootstrap) as admin:
            committed = await admin.fetch_offsets(group_id)
        assert committed[tp] == 3, "the refused commit must not move the offset"


async def test_new_partitions_and_new_topics_lead_to_a_generation_including_them(
    kafka: KafkaBroker,
) -> None:
    t1, t2, group_id = make_unique_name("grow"), make_unique_name("late"), make_unique_name("g")
    await create_topic(kafka.bootstrap, t1, 2)
    ledger = Ledger()
    async with ConsumerGroup(group_id, [t1, t2], kafka.bootstrap, **FAST) as group:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ledger.member, "m", group)
            await ledger.wait_for(
                lambda: ledger.assigned("m") == all_partitions(t1, 2),
                "the first generation",
            )
            async with Admin(kafka.bootstrap) as admin:
                await admin.create_partitions(t1, 5)
            await ledger.wait_for(
                lambda: ledger.assigned("m") == all_partitions(t1, 5),
                "a generation with the added partitions",
            )
            await create_topic(kafka.bootstrap, t2, 3)
            await ledger.wait_for(
                lambda: ledger.assigned("m") == all_partitions(t1, 5) | all_partitions(t2, 3),
                "a generation with the topic created after the join",
            )
            tg.cancel_scope.cancel()


class Boom(Exception):
    pass


async def test_user_task_exception_surfaces_from_the_iteration(kafka: KafkaBroker) -> None:
    topic, group_id = make_unique_name("boom"), make_unique_name("g")
    await create_topic(kafka.bootstrap, topic, 1)

    async def explode(gen: Generation) -> None:
        await anyio.sleep(0.1)
        raise Boom("worker failed")

    with anyio.fail_after(60):
        async with ConsumerGroup(group_id, [topic], kafka.bootstrap, **FAST) as group:
            with pytest.raises(Boom, match="worker failed"):
                async for gen in group:
                    gen.start_soon(explode, gen)


async def test_task_ignoring_cancellation_is_reported_after_the_deadline(
    kafka: KafkaBroker,
) -> None:
    topic, group_id = make_unique_name("stuck"), make_unique_name("g")
    await create_topic(kafka.bootstrap, topic, 1)
    settings = dict(FAST, rebalance_timeout=2.0)
    release = anyio.Event()

    async def stubborn() -> None:
        # Stuck until the report came, however late a loaded machine makes it
        # (the teardown deadline to the millisecond is checked in virtual
        # time, on the embedded broker).
        with anyio.CancelScope(shield=True):
            await release.wait()

    try:
        with anyio.fail_after(60):
            async with ConsumerGroup(group_id, [topic], kafka.bootstrap, **settings) as group:
                gen = await group.next()
                gen.start_soon(stubborn, name="stubborn-task")
                await anyio.sleep(0.2)
                t0 = anyio.current_time()
                gen.cancel("test")
                with pytest.raises(TaskStuckError) as info:
                    await group.next()
                waited = anyio.current_time() - t0
    finally:
        release.set()
    assert "stubborn-task" in str(info.value)
    assert "in stubborn" in str(info.value), "the report says where the task is suspended"
    assert waited >= 1.5  # not before the deadline


def _transactional_produce(bootstrap: str, topic: str) -> None:
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": make_unique_name("tx")}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"aborted-{i}".encode(), partition=0)
    producer.flush(30)  # the aborted records must reach the log before the marker
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"committed-{i}".encode(), partition=0)
    producer.commit_transaction(30)
    producer.flush(30)


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
async def test_read_committed_filters_aborted_transactions(
    kafka: KafkaBroker, isolation: str
) -> None:
    topic, group_id = make_unique_name("tx"), make_unique_name("g")
    await create_topic(kafka.bootstrap, topic, 1)
    await anyio.to_thread.run_sync(_transactional_produce, kafka.bootstrap, topic)
    seen: list[bytes] = []
    with anyio.fail_after(60):
        async with ConsumerGroup(
            group_id,
            [topic],
            kafka.bootstrap,
            isolation_level=isolation,
            **FAST,  # type: ignore[arg-type]
        ) as group:
            gen = await group.next()
            async for batch in gen.fetch(TopicPartition(topic, 0)):
                seen.extend(r.value or b"" for r in batch.records)
                if any(v.startswith(b"committed-4") for v in seen):
                    break
    committed = [f"committed-{i}".encode() for i in range(5)]
    aborted = [f"aborted-{i}".encode() for i in range(5)]
    if isolation == "read_committed":
        assert seen == committed
    else:
        assert seen == aborted + committed


async def _commit_far_ahead(bootstrap: str, group_id: str, topic: str) -> None:
    with anyio.fail_after(60):
        await _commit_far_ahead_unguarded(bootstrap, group_id, topic)


async def _commit_far_ahead_unguarded(bootstrap: str, group_id: str, topic: str) -> None:
    async with ConsumerGroup(group_id, [topic], bootstrap, **FAST) as group:
        gen = await group.next()
        await gen.commit({TopicPartition(topic, 0): 1_000_000})


async def test_offset_out_of_range_follows_start_offset(kafka: KafkaBroker) -> None:
    topic, group_id = make_unique_name("oor"), make_unique_name("g")
    await create_topic(kafka.bootstrap, topic, 1)
    await produce_ids(kafka.bootstrap, topic, range(5))
    await _commit_far_ahead(kafka.bootstrap, group_id, topic)
    with anyio.fail_after(60):
        async with ConsumerGroup(
            group_id, [topic], kafka.bootstrap, start_offset="earliest", **FAST
        ) as group:
            gen = await group.next()
            tp = TopicPartition(topic, 0)
            assert gen.assignments[tp] == 1_000_000
            batch = await gen.fetch(tp).__anext__()
            assert batch.records[0].offset == 0


async def test_offset_out_of_range_raises_with_start_offset_error(kafka: KafkaBroker) -> None:
    from gengroup import OffsetOutOfRange

    topic, group_id = make_unique_name("oor"), make_unique_name("g")
    await create_topic(kafka.bootstrap, topic, 1)
    await produce_ids(kafka.bootstrap, topic, range(5))
    await _commit_far_ahead(kafka.bootstrap, group_id, topic)

    async def read(gen: Generation, tp: TopicPartition) -> None:
        async for _ in gen.fetch(tp):
            pass

    with anyio.fail_after(60):
        async with ConsumerGroup(
            group_id, [topic], kafka.bootstrap, start_offset="error", **FAST
        ) as group:
            with pytest.raises(OffsetOutOfRange):
                async for gen in group:
                    for tp in gen.assignments:
                        gen.start_soon(read, gen, tp)


async def test_slow_worker_bounds_its_partition_buffer(kafka: KafkaBroker) -> None:
    topic, group_id = make_unique_name("slow"), make_unique_name("g")
    await create_topic(kafka.bootstrap, topic, 1)
    async with Producer_(kafka.bootstrap) as producer:
        await producer.send_many(topic, [ProducerRecord_(value=b"x" * 1000) for _ in range(2000)])
    limit = 16 * 1024
    tp = TopicPartition(topic, 0)
    peak = 0
    handled = 0
    with anyio.fail_after(120):
        async with ConsumerGroup(
            group_id, [topic], kafka.bootstrap, fetch_buffer_bytes=limit, **FAST
        ) as group:
            gen = await group.next()
            part = gen._prefetcher._parts[tp]
            async for batch in gen.fetch(tp):
                handled += len(batch.records)
                peak = max(peak, part.buffered)
                await anyio.sleep(0.01)  # a slow worker
                if handled >= 2000:
                    break
    # At most one fetch beyond the bound is ever buffered (a fetch is only
    # sent while the buffer is below it, and asks for at most the bound).
    assert peak <= 2 * limit + 64 * 1024, peak
    assert handled >= 2000


@pytest.mark.parametrize("cancelled", [False, True], ids=["rebalance", "cancelled"])
async def test_a_member_beats_while_its_tasks_return_so_a_long_teardown_keeps_its_session(
    kafka: KafkaBroker, cancelled: bool
) -> None:
    topic, group_id = make_unique_name("teardown"), make_unique_name("g")
    await create_topic(kafka.bootstrap, topic, 2)
    await produce_ids(kafka.bootstrap, topic, range(20))

    async def committed(tp: TopicPartition) -> int | None:
        async with Admin(kafka.bootstrap) as admin:
            return (await admin.fetch_offsets(group_id, [tp])).get(tp)

    settings = dict(FAST, rebalance_timeout=15.0)
    with anyio.fail_after(90):
        await long_teardown_keeps_the_session(
            kafka.bootstrap, group_id, topic, settings, committed, cancelled=cancelled
        )
