"""The consumer's Fetch by topic id and its leader hints, on the embedded broker
in virtual time.

* A topic deleted and created again under the same name while a generation
  consumes it is never read at the old topic's positions: the prefetcher
  names the topic by the id its positions belong to, which the new topic
  does not have.
* A leader that moves is followed at once on the hint of the old leader's
  refusal (Fetch v16, KIP-951), without waiting for the Metadata answer
  (held back here); brokers naming each other do not make a loop without
  backoff.
"""

from __future__ import annotations

import datetime
import logging
from collections import Counter

import anyio
import pytest
import trio.testing
from kio.schema.errors import ErrorCode

from gengroup import ConsumerGroup, Generation, TopicPartition
from gengroup.broker import Delay, FakeCluster, Intercepted, Respond
from gengroup.protocol.framing import build, response_module
from gengroup.protocol.records import NewRecord
from gengroup.protocol.versions import ApiKey

from ..embedded import fetch_topic
from .helpers import EMBEDDED_SETTINGS, wait_until

TP = TopicPartition("t", 0)


def produce(cluster: FakeCluster, prefix: str, count: int) -> None:
    cluster.produce("t", [NewRecord(None, f"{prefix}-{i}".encode(), (), 0) for i in range(count)])


async def hand_values(group: ConsumerGroup, handed: list[bytes]) -> None:
    """The group's member: a worker per added partition, its records' values into ``handed``."""

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        async for batch in gen.fetch(tp):
            handed.extend(r.value or b"" for r in batch.records)
            gen.mark(tp, batch.next_offset)

    async for gen in group:
        for tp in gen.added:
            gen.start_soon(worker, gen, tp, partition=tp)


async def test_a_topic_created_again_is_not_read_at_the_old_topics_positions(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The generation that read the old topic up to offset 10 does not go on at
    offset 10 of the new topic (which would hand out its records 10.. and skip
    0..9): its Fetch names the old topic's id, which the broker no longer
    knows (and the commit that finds the topic created again ends the
    generation); the next generation reads the new topic from its start.
    (The group watcher looks only every 10 minutes here.)"""
    caplog.set_level(logging.INFO, logger="gengroup")
    settings = {**EMBEDDED_SETTINGS, "partition_watch_interval": 600.0}
    handed: list[tuple[int, bytes]] = []
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:

            async def worker(gen: Generation, tp: TopicPartition) -> None:
                async for batch in gen.fetch(tp):
                    handed.extend(
                        (gen.identity.generation_id, r.value or b"") for r in batch.records
                    )
                    gen.mark(tp, batch.next_offset)

            async def member() -> None:
                async for gen in group:
                    for tp in gen.added:
                        gen.start_soon(worker, gen, tp, partition=tp)

            async with anyio.create_task_group() as tg:
                tg.start_soon(member)
                produce(cluster, "old", 10)
                await wait_until(lambda: len(handed) == 10, "the old records", 60.0)
                first = handed[0][0]
                cluster.delete_topic("t")
                cluster.create_topic("t", 1)
                produce(cluster, "new", 20)
                new = [f"new-{i}".encode() for i in range(20)]
                await wait_until(
                    lambda: [v for _, v in handed if v.startswith(b"new")] == new,
                    "the new topic's records, from its start",
                    60.0,
                )
                tg.cancel_scope.cancel()
    # Not one record of the new topic went to the generation that read the old one.
    assert [v for g, v in handed if g == first] == [f"old-{i}".encode() for i in range(10)]
    assert any("UNKNOWN_TOPIC_ID" in r.getMessage() for r in caplog.records)


async def test_the_consumer_follows_a_leader_hint_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The partition's leader moves from broker 0 to 1, and every Metadata
    answer is held back 60 s: the old leader's refusal names the new one, and
    the next record is read from it at once."""
    processed: Counter[bytes] = Counter()
    async with FakeCluster(brokers=2, initial_rebalance_delay_ms=0) as cluster:
        cluster.create_topic("t", 1, replication_factor=2)
        cluster.move_partition_leader("t", 0, 0)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:

            async def member() -> None:
                async for gen in group:
                    for tp in gen.added:
                        gen.start_soon(work, gen, tp, partition=tp)

            async def work(gen: Generation, tp: TopicPartition) -> None:
                async for batch in gen.fetch(tp):
                    processed.update(r.value or b"" for r in batch.records)
                    gen.mark(tp, batch.next_offset)

            async with anyio.create_task_group() as tg:
                tg.start_soon(member)
                produce(cluster, "before", 1)
                await wait_until(lambda: processed[b"before-0"] == 1, "the first record", 60.0)
                asked: list[float] = []

                def slow_metadata(call: Intercepted) -> Delay:
                    asked.append(anyio.current_time())
                    return Delay(60.0)

                cluster.control(ApiKey.METADATA, slow_metadata)
                cluster.move_partition_leader("t", 0, 1)
                produce(cluster, "after", 1)
                # Well before the held-back Metadata answer (60 s).
                await wait_until(lambda: processed[b"after-0"] == 1, "the record after", 5.0)
                assert asked, "the metadata refresh is still asked for, beside the move"
                assert group.cluster.leader_for(TP) == 1
                cluster.clear_controls()
                tg.cancel_scope.cancel()
    assert not cluster.errors


async def test_brokers_naming_each_other_in_fetch_refusals_back_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two brokers each refusing the Fetch, naming the other with an ever newer
    epoch: only the first retry after a move goes at once, the others wait
    their backoff (a handful of refusals in 3 s, not thousands)."""
    async with FakeCluster(brokers=2, initial_rebalance_delay_ms=0) as cluster:
        cluster.create_topic("t", 1, replication_factor=2)
        cluster.move_partition_leader("t", 0, 0)
        part = cluster.state.topics.partition("t", 0)
        assert part is not None
        refused: list[tuple[int, float]] = []

        def refuse(call: Intercepted) -> Respond:
            refused.append((call.broker_id, anyio.current_time()))
            mod = response_module(ApiKey.FETCH, call.api_version)
            other = 1 - call.broker_id
            answer = build(
                mod.PartitionData,
                partition_index=0,
                error_code=ErrorCode.not_leader_or_follower,
                high_watermark=-1,
                last_stable_offset=-1,
                log_start_offset=-1,
                aborted_transactions=None,
                preferred_read_replica=-1,
                records=None,
                current_leader=mod.LeaderIdAndEpoch(
                    leader_id=other, leader_epoch=part.leader_epoch + len(refused)
                ),
            )
            host, port = cluster.address(other)
            return Respond(
                build(
                    mod.FetchResponse,
                    throttle_time=datetime.timedelta(0),
                    error_code=ErrorCode.none,
                    session_id=0,
                    responses=(
                        build(
                            mod.FetchableTopicResponse,
                            **fetch_topic(call),
                            partitions=(answer,),
                        ),
                    ),
                    node_endpoints=(mod.NodeEndpoint(node_id=other, host=host, port=port),),
                )
            )

        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **EMBEDDED_SETTINGS) as group:

            async def member() -> None:
                async for gen in group:
                    for tp in gen.added:
                        gen.start_soon(idle, gen, tp, partition=tp)

            async def idle(gen: Generation, tp: TopicPartition) -> None:
                async for _ in gen.fetch(tp):
                    pass

            cluster.control(ApiKey.FETCH, refuse)
            async with anyio.create_task_group() as tg:
                tg.start_soon(member)
                await wait_until(lambda: len(refused) >= 2, "two refusals", 60.0)
                start = refused[0][1]
                await anyio.sleep(3.0)
                tg.cancel_scope.cancel()
            cluster.clear_controls()
    within = [(b, t) for b, t in refused if t - start <= 3.0]
    assert [b for b, _ in within[:2]] == [0, 1]  # the first retry went at once, to the other
    assert within[1][1] == start
    assert 2 <= len(within) <= 10, within


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_topic_created_again_ends_the_generation_with_no_watcher(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, protocol: str
) -> None:
    """A generation whose Fetch got good (empty) answers for a topic keeps that
    topic's id; once the topic is deleted and created again, its Fetch is
    refused UNKNOWN_TOPIC_ID. With no partition watcher and no mark to commit,
    nothing else ends the generation: the refresh that refusal asks for shows
    the new id, and the generation ends for it (one WARNING), so the next one
    reads the new topic from its start instead of stalling for ever."""
    caplog.set_level(logging.INFO, logger="gengroup")
    settings = {**EMBEDDED_SETTINGS, "watch_partition_changes": False, "group_protocol": protocol}
    handed: list[bytes] = []
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            async with anyio.create_task_group() as tg:
                tg.start_soon(hand_values, group, handed)
                await anyio.sleep(5.0)  # empty answers: the prefetcher keeps the id
                cluster.delete_topic("t")
                cluster.create_topic("t", 1)
                produce(cluster, "new", 5)
                new = [f"new-{i}".encode() for i in range(5)]
                await wait_until(lambda: handed == new, "the new topic's records", 120.0)
                await anyio.sleep(10.0)  # nothing handed twice
                tg.cancel_scope.cancel()
    assert handed == [f"new-{i}".encode() for i in range(5)]
    warned = [r for r in caplog.records if "created again" in r.getMessage()]
    assert [r.levelno for r in warned] == [logging.WARNING], [r.getMessage() for r in warned]


async def test_a_topic_created_again_ahead_of_the_heartbeat_is_read_from_its_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Under the consumer protocol the prefetcher may end the generation for a
    topic created again before a heartbeat brings the coordinator's new topic
    id: the next generation must not keep the partition at the old topic's
    position (it would read the new topic from there, then again from its
    start once the heartbeat names the new id), but add it and read the new
    topic once, from its start."""
    handed: list[bytes] = []
    settings = {**EMBEDDED_SETTINGS, "group_protocol": "consumer", "commit_interval": 1.0}
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        produce(cluster, "old", 3)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            async with anyio.create_task_group() as tg:
                tg.start_soon(hand_values, group, handed)
                old = [f"old-{i}".encode() for i in range(3)]
                await wait_until(lambda: handed == old, "the old topic's records", 60.0)
                await anyio.sleep(5.0)  # their marks committed, the old id kept
                # The coordinator's answers (the new id among them) come 3 s late.
                cluster.control(ApiKey.CONSUMER_GROUP_HEARTBEAT, lambda call: Delay(3.0))
                cluster.delete_topic("t")
                cluster.create_topic("t", 1)
                produce(cluster, "new", 10)
                new = [f"new-{i}".encode() for i in range(10)]
                await wait_until(lambda: handed[3:] == new, "the new topic's records", 120.0)
                await anyio.sleep(20.0)  # nothing handed twice
                tg.cancel_scope.cancel()
    assert handed == old + new
