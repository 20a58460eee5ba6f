"""A subscribed topic deleted (and created again) while the group consumes it, on
the embedded broker in virtual time: its marks are dropped, not committed onto
the new topic, and the commit of the other partitions is not held up."""

from __future__ import annotations

import contextlib
import logging
from collections import Counter

import anyio
import pytest
import trio.testing

from gengroup import (
    Admin,
    ConsumerGroup,
    CooperativeStickyBalancer,
    Generation,
    GenerationEnded,
    TopicDeleted,
    TopicPartition,
)
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay, Fail, Intercepted
from gengroup.protocol.records import NewRecord
from gengroup.protocol.versions import ApiKey

from .helpers import (
    EMBEDDED_SETTINGS,
    Ledger,
    consume_and_mark,
    embedded_broker_settings,
    span_workers,
    wait_until,
)

#: Marks stay pending (no periodic commit), so the final commit carries them.
SETTINGS = {**EMBEDDED_SETTINGS, "commit_interval": 60.0, "partition_watch_interval": 2.0}


def produce(cluster: FakeCluster, topic: str, prefix: str, count: int, partition: int = 0) -> None:
    records = [NewRecord(None, f"{prefix}-{i}".encode(), (), 0) for i in range(count)]
    cluster.produce(topic, records, partition=partition)


async def test_a_topic_deleted_and_created_again_is_read_from_its_start(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The final commit must not store the old topic's offset on the new one:
    the next generation would skip the new topic's first records."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    tp = TopicPartition("t", 0)
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        ledger = Ledger()
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
            async with anyio.create_task_group() as tg:
                tg.start_soon(ledger.member, "m", group)
                produce(cluster, "t", "old", 10)
                await ledger.wait_for(lambda: ledger.last_marks.get(tp) == 10, "old records")
                cluster.delete_topic("t")
                first = ledger.generations["m"][0]
                await ledger.wait_for(lambda: first.ending, "the generation's end")
                await anyio.sleep(3.0)  # what would retry the refused commit meanwhile
                cluster.create_topic("t", 1)
                produce(cluster, "t", "new", 20)
                await ledger.wait_for(
                    lambda: all(ledger.processed[f"new-{i}".encode()] for i in range(20)),
                    "every record of the new topic",
                )
                tg.cancel_scope.cancel()
    dropped = [r.getMessage() for r in caplog.records if "dropped, not committed" in r.message]
    assert dropped and "topic(s) t " in dropped[0] and "partitions t[0]" in dropped[0]
    assert not [r for r in caplog.records if "final commit failed" in r.message]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_deleted_topic_holds_up_neither_the_rebalance_nor_the_other_commits(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, protocol: str
) -> None:
    """Two members on "keep" and "gone"; "gone" is deleted with marks pending:
    "keep" flows again within seconds, its offsets committed, and no commit is
    said to have failed."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    keep = [TopicPartition("keep", p) for p in range(2)]
    settings = {**SETTINGS, "group_protocol": protocol}
    topics = {"keep": 2, "gone": 2}
    async with FakeCluster(topics=topics, settings=embedded_broker_settings()) as cluster:
        ledger = Ledger()

        async def member(name: str) -> None:
            async with ConsumerGroup(
                "g", ["keep", "gone"], cluster.bootstrap, client_id=name, **settings
            ) as group:
                await ledger.member(name, group)

        async with anyio.create_task_group() as tg:
            tg.start_soon(member, "a")
            tg.start_soon(member, "b")
            await ledger.wait_for(lambda: len(ledger.current()) == 2, "both members")
            for p in range(2):
                produce(cluster, "keep", f"old{p}", 10, p)
                produce(cluster, "gone", f"gone{p}", 10, p)
            await ledger.wait_for(lambda: len(ledger.processed) == 40, "every record")
            cluster.delete_topic("gone")
            deleted_at = anyio.current_time()
            await ledger.wait_for(
                lambda: (
                    len(ledger.current()) == 2
                    and all(
                        tp.topic == "keep"
                        for g in ledger.current().values()
                        for tp in g.assignments
                    )
                ),
                "generations without the deleted topic",
            )
            assert anyio.current_time() - deleted_at < 6.0
            assert {tp: o for tp, o in cluster.committed_offsets("g").items()} == dict.fromkeys(
                keep, 10
            )
            for p in range(2):
                produce(cluster, "keep", f"new{p}", 5, p)
            await ledger.wait_for(lambda: len(ledger.processed) == 50, "the new records")
            assert anyio.current_time() - deleted_at < 8.0
            tg.cancel_scope.cancel()
    assert not [r for r in caplog.records if "commit" in r.message and "failed" in r.message]
    dropped = [r.getMessage() for r in caplog.records if "dropped, not committed" in r.message]
    assert dropped and all("topic(s) gone " in m for m in dropped)


async def test_the_embedded_broker_deletes_a_deleted_topics_committed_offsets(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """As Kafka does: a topic created again under the name starts uncommitted."""
    async with FakeCluster(topics={"t": 1, "u": 1}, initial_rebalance_delay_ms=0) as cluster:
        for topic in ("t", "u"):
            produce(cluster, topic, topic, 4)
        tps = [TopicPartition("t", 0), TopicPartition("u", 0)]
        async with Admin(cluster.bootstrap) as admin:
            await admin.reset_offsets("g", tps, offset=3)
            assert await admin.fetch_offsets("g") == dict.fromkeys(tps, 3)
            await admin.delete_topics(["t"])
            assert await admin.fetch_offsets("g") == {tps[1]: 3}
        cluster.delete_topic("u")
        assert cluster.committed_offsets("g") == {}


async def test_a_live_topic_refused_as_unknown_is_retried_not_dropped(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A coordinator whose metadata lags (a topic just created) answers
    UNKNOWN_TOPIC_OR_PARTITION for a topic that exists: the metadata says it
    does, with the id the generation knows, so the commit is retried and stored."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    tp = TopicPartition("t", 0)
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:
            gen = await group.next()
            lagging_until = trio.current_time() + 3.0

            def lagging(call: Intercepted) -> Fail | None:
                return Fail(3) if trio.current_time() < lagging_until else None

            refused = cluster.control(ApiKey.OFFSET_COMMIT, lagging)
            gen.mark(tp, 7)
            await gen.commit()
            assert refused.handled >= 2
            assert cluster.committed_offsets("g")[tp] == 7
            assert trio.current_time() >= lagging_until
    assert not [r for r in caplog.records if "dropped" in r.message]


async def test_a_live_topic_unknown_to_one_metadata_answer_is_committed_by_the_next_generation(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The coordinator and one Metadata answer both lag (UNKNOWN_TOPIC_OR_PARTITION
    for a live topic): the marks are left out of that commit, and the generation
    ends, so that the drop does not outlast it: its final commit looks again and
    stores them, and the next generation starts there and commits the topic."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    tp = TopicPartition("t", 0)
    settings = {**EMBEDDED_SETTINGS, "commit_interval": 3600.0}
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            gen = await group.next()
            answered: list[int] = []

            def lagging_once(call: Intercepted) -> Fail | None:
                if call.api_key in answered:
                    return None
                answered.append(call.api_key)
                return Fail(3)

            cluster.control(ApiKey.OFFSET_COMMIT, lagging_once)
            cluster.control(ApiKey.METADATA, lagging_once)
            gen.mark(tp, 7)
            await gen.commit()
            assert gen.ending and "deleted or re-created" in (gen.end_reason or "")
            assert cluster.committed_offsets("g") == {}
            await gen.wait_ended()
            assert cluster.committed_offsets("g") == {tp: 7}  # by the final commit
            gen = await group.next()
            assert gen.assignments[tp] == 7  # records 0..6 are not handed out again
            gen.mark(tp, 9)
            await gen.commit()
            assert cluster.committed_offsets("g") == {tp: 9}
            assert not gen.ending and gen.commit_error is None
    dropped = [r for r in caplog.records if "dropped, not committed" in r.message]
    assert len(dropped) == 1


async def test_explicit_offsets_of_a_deleted_topic_raise_topic_deleted(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """gen.commit(offsets) stores the live partitions, then names the dropped ones."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    tp, keep = TopicPartition("t", 0), TopicPartition("k", 0)
    settings = {**EMBEDDED_SETTINGS, "commit_interval": 3600.0, "partition_watch_interval": 3600.0}
    async with FakeCluster(topics={"t": 1, "k": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t", "k"], cluster.bootstrap, **settings) as group:
            gen = await group.next()
            await gen.commit({tp: 3, keep: 3})
            cluster.delete_topic("t")
            with pytest.raises(TopicDeleted, match=r"t\[0\] were not stored") as caught:
                await gen.commit({tp: 5, keep: 5}, metadata={tp: "file", keep: "file"})
            assert caught.value.partitions == {tp}
            assert cluster.committed_offsets("g") == {keep: 5}
            assert gen.committed == {tp: 3, keep: 5}
            assert gen.ending


async def test_marks_left_out_are_said_once_per_generation(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A deleted topic's marks left out of a commit, then out of the ending
    generation's final commit: one WARNING, not one per commit."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    tp, keep = TopicPartition("t", 0), TopicPartition("k", 0)
    settings = {**EMBEDDED_SETTINGS, "commit_interval": 3600.0, "partition_watch_interval": 3600.0}
    async with FakeCluster(topics={"t": 1, "k": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t", "k"], cluster.bootstrap, **settings) as group:
            gen = await group.next()
            cluster.delete_topic("t")
            gen.mark(tp, 5)
            gen.mark(keep, 5)
            await gen.commit()
            assert gen.ending and cluster.committed_offsets("g") == {keep: 5}
            gen.mark(tp, 6)
            await gen.wait_ended()  # its final commit leaves t[0] out again
    dropped = [r for r in caplog.records if "dropped, not committed" in r.getMessage()]
    assert len(dropped) == 1, dropped


async def test_a_commit_cancelled_while_it_looks_a_refused_topic_up_keeps_what_was_stored(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The coordinator stored one partition and refused another as unknown; the
    commit is cancelled while the metadata lookup that follows is unanswered:
    the stored offset is recorded all the same (the commit recorded nothing)."""
    tp, keep = TopicPartition("t", 0), TopicPartition("k", 0)
    settings = {**EMBEDDED_SETTINGS, "commit_interval": 3600.0, "partition_watch_interval": 3600.0}
    async with FakeCluster(topics={"t": 1, "k": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t", "k"], cluster.bootstrap, **settings) as group:
            gen = await group.next()
            await gen.commit({tp: 3, keep: 3})
            cluster.delete_topic("t")
            cluster.control(ApiKey.METADATA, lambda call: Delay(10.0))
            with anyio.move_on_after(1.0) as scope:
                await gen.commit({tp: 5, keep: 5})
            assert scope.cancelled_caught
            assert cluster.committed_offsets("g") == {keep: 5}
            assert gen.committed == {tp: 3, keep: 5}


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_partition_being_revoked_does_not_commit_its_old_offset_onto_a_recreated_topic(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, protocol: str
) -> None:
    """Cooperative rebalance: "a"'s task on t[0] is being revoked (still running
    in its shielded cleanup) while t is deleted and created again. The commit made
    as the revocation ends carries t[0]'s mark of the old topic (10) under a
    generation without t in its assignments, so only the topic id t[0]'s span was
    opened with shows the topic is another one: the old offset must not be stored
    on the new t, and t[0]'s next owner "b" reads all of the new t from 0."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    tp = TopicPartition("t", 0)
    settings = {**SETTINGS, "group_protocol": protocol, "partition_watch_interval": 60.0}
    if protocol == "classic":
        settings["balancers"] = [CooperativeStickyBalancer()]
    async with FakeCluster(topics={"t": 1, "k": 1}, settings=embedded_broker_settings()) as cluster:
        produce(cluster, "t", "old", 10)
        processed: Counter[bytes] = Counter()
        marks: dict[tuple[str, TopicPartition], int] = {}
        owners: list[tuple[str, Generation]] = []
        revoking, recreated = anyio.Event(), anyio.Event()

        async def worker(name: str, gen: Generation, part: TopicPartition) -> None:
            owners.append((name, gen))
            try:
                async for batch in consume_and_mark(gen, part, processed):
                    marks[name, part] = batch.next_offset
            finally:
                if (name, part) == ("a", tp):
                    with anyio.CancelScope(shield=True):
                        revoking.set()
                        await recreated.wait()

        async def member(name: str, topics: list[str]) -> None:
            async with ConsumerGroup(
                "g", topics, cluster.bootstrap, client_id=name, **settings
            ) as group:
                async for gen in group:
                    for part in sorted(gen.added):
                        gen.start_soon(worker, name, gen, part, partition=part)

        async with anyio.create_task_group() as tg:
            tg.start_soon(member, "a", ["t", "k"])
            await wait_until(lambda: marks.get(("a", tp)) == 10, "a reading the old t", 60.0)
            tg.start_soon(member, "b", ["t"])  # b can only take t[0] from a
            with anyio.fail_after(60.0):
                await revoking.wait()
            cluster.delete_topic("t")
            cluster.create_topic("t", 1)
            assert tp not in cluster.committed_offsets("g")
            produce(cluster, "t", "new", 20)
            recreated.set()
            await wait_until(lambda: marks.get(("b", tp)) == 20, "b reading the new t", 60.0)
            assert cluster.committed_offsets("g").get(tp) is None
            b_gen = next(gen for name, gen in owners if name == "b")
            assert b_gen.assignments[tp] == 0
            assert all(processed[f"new-{i}".encode()] == 1 for i in range(20))
            with contextlib.suppress(GenerationEnded):
                await b_gen.commit()
            # b's generation formed with metadata that still had the old t's id
            # (a follower does not wait for a metadata refresh; the consumer
            # protocol's coordinator assigned t[0] before t was created again),
            # and its commits name the topic by that id (OffsetCommit v10): the
            # coordinator refuses it, the generation ends, and the next one reads
            # the new t again and commits it. Records read twice, none skipped.
            # (Under the consumer protocol the generation may have ended before
            # that commit: its first Fetch, by the old id, was answered
            # UNKNOWN_TOPIC_ID, and the metadata refresh that asked for showed
            # the assignment's topic id changed.)
            await wait_until(
                lambda: cluster.committed_offsets("g").get(tp) == 20, "t[0] committed", 120.0
            )
            tg.cancel_scope.cancel()
    # The mark is said dropped when the revocation's commit still had it to
    # send: whether an earlier commit stored it first (the revoking generation
    # then knows it stored, and sends nothing) is a race of the rebalance.
    dropped = [r.getMessage() for r in caplog.records if "dropped, not committed" in r.message]
    assert all("topic(s) t created again" in m for m in dropped), dropped


@pytest.mark.parametrize("protocol", ["eager", "cooperative", "consumer"])
async def test_a_topic_deleted_and_created_again_between_two_heartbeats_is_read_from_its_start(
    autojump_clock: trio.testing.MockClock, protocol: str
) -> None:
    """Deleted and created again at once, with as many partitions: the
    subscription's names and partition counts are as before, only the topic id
    differs. A partition-scoped worker of the old topic must not go on at its
    old position on the new one (it would skip the new topic's first records):
    its partition is given up and taken again, read from the new topic's start.
    Under KIP-848 the coordinator must see a new subscription too (Kafka bumps
    the group epoch when a subscribed topic's id changes)."""
    settings: dict[str, object] = {**SETTINGS}
    if protocol == "consumer":
        settings["group_protocol"] = "consumer"
    elif protocol == "cooperative":
        settings["balancers"] = [CooperativeStickyBalancer()]
    processed: Counter[bytes] = Counter()

    async with FakeCluster(topics={"t": 2}, settings=embedded_broker_settings()) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            async with anyio.create_task_group() as tg:
                tg.start_soon(span_workers, group, processed)
                for p in range(2):
                    produce(cluster, "t", f"old{p}", 10, p)
                await wait_until(lambda: len(processed) == 20, "the old records", 60.0)
                cluster.delete_topic("t")
                cluster.create_topic("t", 2)
                for p in range(2):
                    produce(cluster, "t", f"new{p}", 20, p)
                new = [f"new{p}-{i}".encode() for p in range(2) for i in range(20)]
                await wait_until(
                    lambda: all(processed[r] for r in new), "every record of the new topic", 60.0
                )
                tg.cancel_scope.cancel()


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
async def test_a_follower_does_not_commit_its_old_position_on_a_topic_created_again(
    autojump_clock: trio.testing.MockClock, protocol: str
) -> None:
    """Two classic members; the topic is deleted and created again at once.
    Only the leader's watcher looks the topics up: the follower learns of the
    rebalance at a heartbeat, with metadata that still has the old topic's id,
    and its fetches by name went on at the old position on the new topic. Its
    commits name the topic by the id its offsets were read under (OffsetCommit
    v10), which the coordinator refuses: the new topic's first records are
    read (by name, the old position was stored on the new topic and they were
    skipped)."""
    settings: dict[str, object] = {**SETTINGS, "partition_watch_interval": 1.0}
    if protocol == "cooperative":
        settings["balancers"] = [CooperativeStickyBalancer()]
    processed: Counter[bytes] = Counter()

    async with FakeCluster(topics={"t": 4}, settings=embedded_broker_settings()) as cluster:
        async with anyio.create_task_group() as tg:

            async def member(name: str) -> None:
                async with ConsumerGroup(
                    "g", ["t"], cluster.bootstrap, client_id=name, **settings
                ) as group:
                    await span_workers(group, processed)

            tg.start_soon(member, "leader")
            await anyio.sleep(1.0)
            tg.start_soon(member, "follower")
            for p in range(4):
                produce(cluster, "t", f"old{p}", 10, p)
            await wait_until(lambda: len(processed) == 40, "the old records", 60.0)
            await anyio.sleep(5.0)  # both members settled, the old topic read
            cluster.delete_topic("t")
            cluster.create_topic("t", 4)
            for p in range(4):
                produce(cluster, "t", f"new{p}", 20, p)
            new = [f"new{p}-{i}".encode() for p in range(4) for i in range(20)]
            await wait_until(
                lambda: all(processed[r] for r in new), "every record of the new topic", 60.0
            )
            tg.cancel_scope.cancel()
