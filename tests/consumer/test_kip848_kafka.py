"""group_protocol="consumer" (KIP-848) on real Apache Kafka 4.3.1.

The tests run on a broker of their own with short consumer-group timings
(the ``kip848_kafka`` fixture, ``tests/consumer/kip848.py``).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import anyio
import pytest

from gengroup import ConsumerGroup
from gengroup._errors import GroupProtocolUnsupported, UnreleasedInstanceId
from gengroup.testing.kafka import KafkaBroker, kafka_broker
from gengroup.testing.pytest_plugin import make_unique_name

from .helpers import (
    FAST,
    Ledger,
    Lines,
    Members,
    all_partitions,
    assert_processed_once,
    create_topic,
    produce_ids,
    start_group_run,
    watch_commits,
)
from .kip848 import KIP848

pytestmark = pytest.mark.kafka
log = logging.getLogger("gengroup.tests")


async def test_one_then_three_then_two_members(kip848_kafka: KafkaBroker) -> None:
    """Every partition has one owner at every instant; every record is processed;
    commits are accepted and never move backwards."""
    await one_then_three_then_two(kip848_kafka.bootstrap)


def test_one_then_three_then_two_members_asyncio(kip848_kafka: KafkaBroker) -> None:
    """The same under asyncio."""
    anyio.run(one_then_three_then_two, kip848_kafka.bootstrap, backend="asyncio")


async def one_then_three_then_two(bootstrap: str) -> None:
    run = await start_group_run(bootstrap, "kip848", 6, 600, KIP848)
    ledger, members, topic, every = run.ledger, run.members, run.topic, run.every
    committed_history = run.committed

    def stable(names: set[str]) -> bool:
        """Each of ``names`` runs a generation; they cover every partition, evenly."""
        return ledger.stable(names, every, same_generation=False)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_commits, bootstrap, run.group_id, committed_history)
        await tg.start(members.run, "m1")
        await ledger.wait_for(lambda: stable({"m1"}), "m1 to own every partition")
        await ledger.wait_for(
            lambda: set(ledger.processed) >= {f"id-{i}".encode() for i in range(600)},
            "the first records processed",
        )
        await tg.start(members.run, "m2")
        await tg.start(members.run, "m3")
        await produce_ids(bootstrap, topic, range(600, 1200))
        await ledger.wait_for(lambda: stable({"m1", "m2", "m3"}), "3 members to share them")
        await produce_ids(bootstrap, topic, range(1200, 1800))
        # Each member has processed (and marked) some of these before m2 goes,
        # so that every member has commits of its own to show below.
        await ledger.wait_for(
            lambda: set(ledger.processed) >= {f"id-{i}".encode() for i in range(1800)},
            "the records produced for three members",
        )
        members.stop("m2")  # m2 closes: it leaves with epoch -1
        await ledger.wait_for(lambda: stable({"m1", "m3"}), "2 members to share them")
        await produce_ids(bootstrap, topic, range(1800, 2400))
        expected = {f"id-{i}".encode() for i in range(2400)}
        await ledger.wait_for(lambda: set(ledger.processed) >= expected, "every record processed")
        tg.cancel_scope.cancel()

    assert_processed_once(ledger, expected, committed_history)
    assert {tp for tp, seq in committed_history.items() if seq} == every
    for name, gens in ledger.generations.items():
        assert all(g.commit_error is None for g in gens), name
        assert sum(g.commits_ok for g in gens) > 0, name
        ids = [g.id for g in gens]
        assert ids == sorted(ids) and ids[0] > 0, (name, ids)
    log.info("kip848 timings: %s", {n: list(g.history) for n, g in members.groups.items()})


#: A member in its own process (``python -c MEMBER BOOTSTRAP GROUP TOPIC SCOPE``),
#: to kill or freeze: prints ``generation ID P,P,...`` per generation, ``batch P
#: NEXT`` per batch handed out and ``ended REASON`` when a generation ended. Its
#: workers are the generation's tasks (SCOPE ``generation``) or the partitions'
#: (``partition``: started for ``gen.added`` with ``partition=tp``).
MEMBER = """
import sys
import anyio
from gengroup import ConsumerGroup


async def worker(gen, tp):
    async for batch in gen.fetch(tp):
        print(f"batch {tp.partition} {batch.next_offset}", flush=True)
        gen.mark(tp, batch.next_offset)


async def main(bootstrap, group_id, topic, scope):
    async with ConsumerGroup(
        group_id, [topic], bootstrap, group_protocol="consumer", session_timeout=6.0,
        rebalance_timeout=10.0, fetch_max_wait=0.1, commit_interval=0.3,
        fetch_buffer_bytes=None, partition_buffer_bytes=256, client_id="doomed",
    ) as group:
        async for gen in group:
            parts = ",".join(str(tp.partition) for tp in sorted(gen.assignments))
            print(f"generation {gen.id} {parts}", flush=True)
            if scope == "partition":
                for tp in gen.added:
                    gen.start_soon(worker, gen, tp, partition=tp)
            else:
                for tp in gen.assignments:
                    gen.start_soon(worker, gen, tp)
            await gen.wait_ending()
            print(f"ended {gen.end_reason}", flush=True)


anyio.run(main, *sys.argv[1:5])
"""


@contextmanager
def member_process(
    bootstrap: str, group_id: str, topic: str, scope: str = "generation"
) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", MEMBER, bootstrap, group_id, topic, scope],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


@asynccontextmanager
async def survivor(
    ledger: Ledger, bootstrap: str, group_id: str, topic: str, what: str
) -> AsyncIterator[None]:
    """Member "survivor" runs, in ``ledger``, while the block runs: entered once it
    owns 2 partitions (``what``: that wait's description)."""
    async with (
        ConsumerGroup(group_id, [topic], bootstrap, client_id="survivor", **KIP848) as group,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(ledger.member, "survivor", group)
        await ledger.wait_for(lambda: len(ledger.assigned("survivor")) == 2, what)
        yield
        tg.cancel_scope.cancel()


async def test_a_killed_member_is_fenced_and_its_partitions_move_after_the_session_timeout(
    kip848_kafka: KafkaBroker,
) -> None:
    bootstrap = kip848_kafka.bootstrap
    topic, group_id = make_unique_name("kip848-kill"), make_unique_name("g")
    await create_topic(bootstrap, topic, 4)
    every = all_partitions(topic, 4)
    ledger = Ledger()
    with member_process(bootstrap, group_id, topic) as proc:
        lines = Lines(proc)
        await lines.wait_for("generation")
        async with survivor(ledger, bootstrap, group_id, topic, "the survivor to get half"):
            killed_at = anyio.current_time()
            proc.send_signal(signal.SIGKILL)
            # Nothing left the group: only the broker's session timeout moves them.
            await ledger.wait_for(
                lambda: ledger.assigned("survivor") == every, "the survivor to own all 4"
            )
            elapsed = anyio.current_time() - killed_at
            await produce_ids(bootstrap, topic, range(100))
            expected = {f"id-{i}".encode() for i in range(100)}
            await ledger.wait_for(lambda: set(ledger.processed) >= expected, "the new records")
    assert elapsed >= 3.0, f"partitions moved {elapsed:.2f} s after the kill, before its session"
    assert not ledger.overlaps, ledger.overlaps


@pytest.mark.parametrize("scope", ["generation", "partition"])
async def test_a_frozen_member_is_fenced_and_rejoins_with_epoch_0(
    kip848_kafka: KafkaBroker, scope: str
) -> None:
    """Frozen past the session timeout (SIGSTOP), the member processes nothing after
    waking: its generation ends (its partitions' tasks too, when they are
    partition-scoped), then it rejoins and the partitions are shared again."""
    bootstrap = kip848_kafka.bootstrap
    topic, group_id = make_unique_name("kip848-frozen"), make_unique_name("g")
    await create_topic(bootstrap, topic, 2)
    ledger = Ledger()
    with member_process(bootstrap, group_id, topic, scope) as proc:
        lines = Lines(proc)
        first = await lines.wait_for("generation")
        await produce_ids(bootstrap, topic, range(50))
        # Frozen only once every record was handed out and printed: a worker
        # caught between taking a batch and printing it would print after
        # waking a batch it took before the freeze.
        await lines.wait_for_records(50)
        proc.send_signal(signal.SIGSTOP)
        async with survivor(ledger, bootstrap, group_id, topic, "the survivor to own both"):
            await produce_ids(bootstrap, topic, range(50, 250))
            woken = time.monotonic()
            proc.send_signal(signal.SIGCONT)
            after = await lines.wait_for("ended", since=woken)
            again = await lines.wait_for("generation", since=woken)
            await ledger.wait_for(
                lambda: len(ledger.assigned("survivor")) == 1, "the partitions shared again"
            )
    assert not [line for line in after if line.startswith("batch")], after
    reason = after[-1]
    assert "fenced" in reason or "local lease expired" in reason, reason
    assert int(again[-1].split()[1]) > int(first[-1].split()[1]), (first, again)


async def test_a_static_member_keeps_its_partitions_across_a_restart(
    kip848_kafka: KafkaBroker,
) -> None:
    """Leaving with epoch -2 keeps a static member's partitions for it; a second
    member with the same group_instance_id meanwhile is refused."""
    bootstrap = kip848_kafka.bootstrap
    topic, group_id = make_unique_name("kip848-static"), make_unique_name("g")
    await create_topic(bootstrap, topic, 4)
    ledger = Ledger()

    static = Members(ledger, group_id, topic, bootstrap, {**KIP848, "group_instance_id": "s1"})

    async with anyio.create_task_group() as tg:
        async with ConsumerGroup(group_id, [topic], bootstrap, client_id="other", **KIP848) as o:
            tg.start_soon(ledger.member, "other", o)
            with anyio.CancelScope() as first:
                async with anyio.create_task_group() as inner:
                    await inner.start(static.run, "first")
                    # Both settled (each member's last generation has its
                    # half), so that the other member's generation compared
                    # below is its final one.
                    await ledger.wait_for(
                        lambda: len(ledger.assigned("first")) == len(ledger.assigned("other")) == 2,
                        "each member's half",
                    )
                    kept = ledger.assigned("first")
                    others = ledger.generations["other"][-1]
                    with pytest.raises(UnreleasedInstanceId, match="group_instance_id='s1'"):
                        async with ConsumerGroup(
                            group_id, [topic], bootstrap, group_instance_id="s1", **KIP848
                        ) as twin:
                            async for _ in twin:
                                pytest.fail("a second member with the instance id s1 joined")
                    first.cancel()
            # Left with epoch -2: its partitions wait for it; the other member keeps its own.
            await tg.start(static.run, "second")
            await ledger.wait_for(
                lambda: ledger.assigned("second") == kept, "the restarted member's partitions"
            )
            assert ledger.generations["other"][-1] is others
            tg.cancel_scope.cancel()
    assert not ledger.overlaps, ledger.overlaps


async def test_a_kafka_broker_without_the_consumer_protocol_gives_a_clear_error() -> None:
    """Apache Kafka with only the classic protocol enabled: a typed error naming
    group_protocol, and the classic protocol still works."""
    async with kafka_broker(properties={"group.coordinator.rebalance.protocols": "classic"}) as b:
        topic = make_unique_name("kip848-off")
        await create_topic(b.bootstrap, topic, 2)
        with pytest.raises(GroupProtocolUnsupported, match="group_protocol='consumer'"):
            async with ConsumerGroup(make_unique_name("g"), [topic], b.bootstrap, **KIP848) as g:
                async for _ in g:
                    pytest.fail("a generation formed without the consumer protocol")
        async with ConsumerGroup(make_unique_name("g"), [topic], b.bootstrap, **FAST) as g:
            async for gen in g:
                assert len(gen.assignments) == 2
                break
