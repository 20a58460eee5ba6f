"""Incremental reconciliation under the consumer group protocol (KIP-848).

Each test runs on every broker of the ``kip848_bootstrap`` fixture
(``tests/consumer/conftest.py``): retained partitions keep their span tasks
across member epochs, a revoked partition's tasks return and its marks are
committed with the current epoch before the revocation is acknowledged, and
successive generations have distinct identities even when their epochs are
the same.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.abc
import pytest

from gengroup import (
    Admin,
    ConsumerGroup,
    CooperativeStickyBalancer,
    Generation,
    TaskStuckError,
    TopicPartition,
)
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from .cooperative import (
    FirstTaskReturns,
    SpanLedger,
    StubbornTasks,
    revoked_unseen,
    three_four_three,
    wait_until,
)
from .helpers import all_partitions, create_topic, produce_ids
from .kip848 import KIP848, Kip848Broker, running

log = logging.getLogger("gengroup.tests")

PARTITIONS = 12
PER_STEP = 600


async def test_three_four_three_members_keep_retained_workers_running(
    kip848_bootstrap: Kip848Broker,
) -> None:
    """Three members, a fourth joins and leaves: retained partitions' workers start
    once, no partition is owned twice at any instant, every record is processed and
    committed offsets never go backwards; generations are told apart by sequence."""
    await three_four_three_members(kip848_bootstrap)


@pytest.mark.kafka
def test_three_four_three_members_keep_retained_workers_running_asyncio(
    kip848_kafka: KafkaBroker,
) -> None:
    """The same under asyncio, on Apache Kafka."""
    target = Kip848Broker("kafka", running(kip848_kafka.bootstrap))
    anyio.run(three_four_three_members, target, backend="asyncio")


async def three_four_three_members(target: Kip848Broker) -> None:
    async with target.open() as bootstrap:
        topic, group_id = make_unique_name("kip848-inc"), make_unique_name("g")
        await create_topic(bootstrap, topic, PARTITIONS)
        every = all_partitions(topic, PARTITIONS)
        produced: set[bytes] = set()

        def open_group(name: str) -> ConsumerGroup:
            return ConsumerGroup(group_id, [topic], bootstrap, client_id=name, **target.settings)

        async def produce(step: int) -> None:
            ids = range(step * PER_STEP, (step + 1) * PER_STEP)
            await produce_ids(bootstrap, topic, ids)
            produced.update(f"id-{i}".encode() for i in ids)

        async with Admin(bootstrap) as admin:

            async def committed() -> dict[TopicPartition, int]:
                return await admin.fetch_offsets(group_id)

            ledger = await three_four_three(
                open_group,
                every,
                produce,
                committed,
                lambda: produced,
                timeout=target.timeout,
                same_generation=False,
            )
    for name in ("m1", "m2", "m3"):
        gens = ledger.generations[name]
        assert all(g.rebalance_protocol == "cooperative" for g in gens)
        assert any(g.revoked for g in gens) or revoked_unseen(gens), name
        assert any(g.retained for g in gens), name
    for name, gens in ledger.generations.items():
        # Increasing; not always consecutive: a generation that ended before
        # the member's loop took it was never handed out.
        sequences = [g.sequence for g in gens]
        assert sequences[0] >= 1 and sequences == sorted(set(sequences)), (name, sequences)
        assert len({g.identity for g in gens}) == len(gens), name
        assert len({g.label for g in gens}) == len(gens), name
        ids = [g.id for g in gens]
        assert ids == sorted(ids), (name, ids)
        assert all(g.commit_error is None for g in gens), name
    log.info(
        "3-4-3 under KIP-848: %d worker starts for %d partitions; generations %s",
        sum(ledger.starts.values()),
        PARTITIONS,
        {n: [g.label for g in gs] for n, gs in sorted(ledger.generations.items())},
    )


async def test_successive_generations_have_distinct_identities_when_epochs_repeat(
    kip848_bootstrap: Kip848Broker,
) -> None:
    """A member revoking a partition forms its next generation in the epoch it is in
    (the coordinator moves it on only once it acknowledged): two generations with
    one id, told apart by sequence, label and identity. The newcomer gets nothing
    until the partition's task returned."""
    target = kip848_bootstrap
    let_go = anyio.Event()
    ledger: dict[str, list[Generation]] = {"a": [], "b": []}

    async def holding(gen: Generation, tp: TopicPartition) -> None:
        try:
            async for batch in gen.fetch(tp):
                gen.mark(tp, batch.next_offset)
        finally:
            with anyio.CancelScope(shield=True):
                await let_go.wait()  # a slow teardown, shorter than rebalance_timeout

    async def member(name: str, group: ConsumerGroup) -> None:
        async for gen in group:
            ledger[name].append(gen)
            for tp in gen.added:
                gen.start_soon(holding, gen, tp, partition=tp)

    async with target.open() as bootstrap:
        topic, group_id = make_unique_name("kip848-late"), make_unique_name("g")
        await create_topic(bootstrap, topic, 2)
        every = all_partitions(topic, 2)
        async with (
            ConsumerGroup(group_id, [topic], bootstrap, client_id="a", **target.settings) as a,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(member, "a", a)
            await wait_until(
                lambda: bool(ledger["a"]) and set(ledger["a"][-1].assignments) == every,
                "a to own both partitions",
                target.timeout,
            )
            async with ConsumerGroup(
                group_id, [topic], bootstrap, client_id="b", **target.settings
            ) as b:
                tg.start_soon(member, "b", b)
                await wait_until(lambda: bool(ledger["b"]), "b's first generation", target.timeout)
                # a is still revoking (its task holds on): b was given nothing yet.
                assert not ledger["b"][0].assignments
                let_go.set()
                await wait_until(
                    lambda: any(g.assignments for g in ledger["b"]),
                    "b to get its partition",
                    target.timeout,
                )
                tg.cancel_scope.cancel()
    before, revoking = ledger["a"][0], next(g for g in ledger["a"] if g.revoked)
    assert revoking.id == before.id, (before.label, revoking.label)
    assert revoking.sequence == before.sequence + 1
    assert revoking.identity != before.identity and revoking.label != before.label
    first, second = ledger["b"][0], next(g for g in ledger["b"] if g.assignments)
    assert second.sequence > first.sequence and second.id >= first.id
    assert len(second.added) == 1 and not second.retained
    assert revoking.revoked == set(second.added)
    assert revoking.retained == every - second.added
    for gens in ledger.values():
        assert len({g.identity for g in gens}) == len(gens)
        assert [g.sequence for g in gens] == list(range(1, len(gens) + 1))


async def test_a_revoked_partitions_stuck_task_is_reported(
    kip848_bootstrap: Kip848Broker,
) -> None:
    """A task ignoring the cancellation of its revoked partition: TaskStuckError names it."""
    target = kip848_bootstrap
    tasks = StubbornTasks()

    async def newcomer(bootstrap: str, group_id: str, topic: str) -> None:
        async with ConsumerGroup(group_id, [topic], bootstrap, **target.settings) as group:
            async for _gen in group:
                pass

    async with target.open() as bootstrap:
        topic, group_id = make_unique_name("kip848-stuck"), make_unique_name("g")
        await create_topic(bootstrap, topic, 2)
        settings = {**target.settings, "rebalance_timeout": 4.0}
        async with anyio.create_task_group() as tg:
            with pytest.raises(TaskStuckError, match="stubborn") as caught:
                async with ConsumerGroup(group_id, [topic], bootstrap, **settings) as group:
                    await tasks.run(
                        group, lambda: tg.start_soon(newcomer, bootstrap, group_id, topic)
                    )
            tasks.let_go.set()
            tg.cancel_scope.cancel()
    assert "rebalance_timeout=4.0" in str(caught.value)


async def test_commits_after_reconciliation_carry_the_new_epoch(
    kip848_bootstrap: Kip848Broker,
) -> None:
    """Every OffsetCommit of the member is accepted: a revoked partition's last
    one carries the epoch before the revocation was acknowledged, and the
    retained partitions' later ones carry the newer epoch."""
    target = kip848_bootstrap
    sent: list[tuple[int, dict[TopicPartition, int], dict[TopicPartition, int]]] = []
    ledger = SpanLedger()

    def record(group: ConsumerGroup) -> None:
        client = group._client
        commit = client.commit_offsets

        async def recording(
            identity: Any,
            offsets: Mapping[TopicPartition, int],
            metadata: Mapping[TopicPartition, str] | None = None,
            topic_ids: Any = None,
        ) -> dict[TopicPartition, int]:
            results = await commit(identity, offsets, metadata, topic_ids)
            sent.append((identity.generation_id, dict(offsets), dict(results)))
            return results

        client.commit_offsets = recording  # type: ignore[method-assign]

    async with target.open() as bootstrap:
        topic, group_id = make_unique_name("kip848-epoch"), make_unique_name("g")
        await create_topic(bootstrap, topic, 4)
        every = all_partitions(topic, 4)
        await produce_ids(bootstrap, topic, range(400))
        async with (
            ConsumerGroup(group_id, [topic], bootstrap, client_id="a", **target.settings) as a,
            anyio.create_task_group() as tg,
        ):
            record(a)
            tg.start_soon(ledger.member, "a", a)
            await wait_until(
                lambda: ledger.assigned("a") == every and len(ledger.processed) == 400,
                "a to process the first records",
                target.timeout,
            )
            async with ConsumerGroup(
                group_id, [topic], bootstrap, client_id="b", **target.settings
            ) as b:
                tg.start_soon(ledger.member, "b", b)
                await wait_until(
                    lambda: ledger.stable({"a", "b"}, every, same_generation=False),
                    "a and b to share the partitions",
                    target.timeout,
                )
                # The generation that revoked a's partitions formed in the epoch
                # a was in until it acknowledged the revocation.
                revoking = next(g for g in ledger.generations["a"] if g.revoked)
                kept = ledger.assigned("a")
                await produce_ids(bootstrap, topic, range(400, 800))
                await wait_until(
                    lambda: len(ledger.processed) == 800, "the new records", target.timeout
                )
                marks = {tp: ledger.marks[tp] for tp in kept}
                await wait_until(
                    lambda: any(
                        epoch > revoking.id
                        and all(offs.get(tp, -1) >= m for tp, m in marks.items())
                        for epoch, offs in _accepted(sent, kept).items()
                    ),
                    "a's retained marks committed under a newer epoch",
                    target.timeout,
                )
                checked = list(sent)
                tg.cancel_scope.cancel()
    assert revoking.revoked == every - kept
    assert all(not any(codes.values()) for _, _, codes in sent), sent
    gave_up = [epoch for epoch, offs, _ in checked if set(offs) & revoking.revoked]
    # Committed while a owned them (before it acknowledged), never after.
    assert gave_up and all(epoch <= revoking.id for epoch in gave_up), checked
    assert not ledger.overlaps, ledger.overlaps


def _accepted(
    sent: list[tuple[int, dict[TopicPartition, int], dict[TopicPartition, int]]],
    partitions: set[TopicPartition],
) -> dict[int, dict[TopicPartition, int]]:
    """Per epoch, the highest offset of each of ``partitions`` committed under it."""
    by_epoch: dict[int, dict[TopicPartition, int]] = {}
    for epoch, offsets, codes in sent:
        seen = by_epoch.setdefault(epoch, {})
        for tp, off in offsets.items():
            if tp in partitions and not codes.get(tp):
                seen[tp] = max(off, seen.get(tp, -1))
    return by_epoch


async def test_a_partition_task_that_returns_gives_the_partition_up(
    kip848_bootstrap: Kip848Broker,
) -> None:
    """A partition's task returns: its generation ends, and the next one (same
    assignment) has the partition as added, with a fresh task; the other
    partition's task runs on, retained."""
    target = kip848_bootstrap
    probe = FirstTaskReturns()
    async with target.open() as bootstrap:
        topic, group_id = make_unique_name("kip848-return"), make_unique_name("g")
        await create_topic(bootstrap, topic, 2)
        async with ConsumerGroup(group_id, [topic], bootstrap, **target.settings) as group:
            await probe.run(group)
    probe.check(topic)


@pytest.mark.kafka
async def test_a_classic_member_and_a_consumer_protocol_member_share_a_converted_group(
    kip848_kafka: KafkaBroker,
) -> None:
    """A classic (cooperative-sticky) member's group is converted to the consumer
    protocol when a consumer-protocol member joins, and back when it leaves: every
    partition has one owner at every instant, and each member's generations have
    distinct identities whatever their ids."""
    bootstrap = kip848_kafka.bootstrap
    topic, group_id = make_unique_name("kip848-convert"), make_unique_name("g")
    await create_topic(bootstrap, topic, 4)
    every = all_partitions(topic, 4)
    ledger = SpanLedger()
    classic = {
        **{k: v for k, v in KIP848.items() if k != "group_protocol"},
        "balancers": [CooperativeStickyBalancer()],
    }
    async with (
        ConsumerGroup(group_id, [topic], bootstrap, client_id="classic", **classic) as old,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(ledger.member, "classic", old)
        await wait_until(lambda: ledger.assigned("classic") == every, "the classic member", 60)
        await produce_ids(bootstrap, topic, range(200))
        async with ConsumerGroup(group_id, [topic], bootstrap, client_id="new", **KIP848) as new:
            tg.start_soon(ledger.member, "new", new)
            await wait_until(
                lambda: ledger.stable({"classic", "new"}, every, same_generation=False),
                "both members to share",
                60,
            )
            await produce_ids(bootstrap, topic, range(200, 400))
            expected = {f"id-{i}".encode() for i in range(400)}
            await wait_until(lambda: set(ledger.processed) >= expected, "every record", 60)
        await wait_until(lambda: ledger.assigned("classic") == every, "the classic alone", 60)
        tg.cancel_scope.cancel()
    assert not ledger.overlaps, ledger.overlaps
    for name, gens in ledger.generations.items():
        assert len({g.identity for g in gens}) == len(gens), name
        assert [g.sequence for g in gens] == list(range(1, len(gens) + 1)), name
    log.info(
        "converted group: %s", {n: [g.label for g in gs] for n, gs in ledger.generations.items()}
    )
