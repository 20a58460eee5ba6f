"""Every API of the embedded broker, in every advertised version, over a real socket."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import trio
import trio.testing

from gengroup import _java
from gengroup.broker import FakeCluster
from gengroup.broker.apis import SUPPORTED_VERSIONS
from gengroup.broker.state import coordinator_partition
from gengroup.io.cluster import Cluster
from gengroup.protocol.records import decode_batches
from gengroup.protocol.versions import CLIENT_VERSIONS, ApiKey

from .. import embedded as rq
from . import batch, connect


def versions(key: ApiKey) -> list[int]:
    lo, hi = SUPPORTED_VERSIONS[key]
    return list(range(lo, hi + 1))


def test_advertised_versions_cover_the_client_table() -> None:
    for key, (lo, hi) in CLIENT_VERSIONS.items():
        blo, bhi = SUPPORTED_VERSIONS[key]
        assert blo <= lo and hi <= bhi, key
    # Fetch by topic id is served up to v16 (leader hints; v17 adds nothing a
    # consumer sends); other topic-ID-only versions are not advertised
    # (OffsetCommit v10 is served: its conformance test)
    assert SUPPORTED_VERSIONS[ApiKey.FETCH][1] == 16
    assert SUPPORTED_VERSIONS[ApiKey.PRODUCE][1] < 13
    assert SUPPORTED_VERSIONS[ApiKey.OFFSET_FETCH][1] < 10


def test_java_string_hash_and_partition_for() -> None:
    assert _java.string_hash("") == 0
    assert _java.string_hash("g") == 103
    assert _java.string_hash("hello") == 99162322
    assert _java.string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert coordinator_partition("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0
    assert coordinator_partition("hello", 50) == 99162322 % 50
    assert _java.string_hash("Aa") == _java.string_hash("BB") == 2112
    # a negative hash (32-bit overflow): abs() is taken before the modulo
    assert _java.string_hash("Hello World") == -862545276
    assert coordinator_partition("Hello World", 50) == 862545276 % 50
    assert _java.string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # UTF-16 surrogate pair


async def test_api_versions_every_version(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster() as cluster, connect(cluster) as conn:
        for v in versions(ApiKey.API_VERSIONS):
            resp = await conn.request(rq.api_versions(v))
            assert resp.error_code == 0
            got = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
            assert got == {int(k): r for k, r in SUPPORTED_VERSIONS.items()}
        # the connection negotiated from the table
        assert conn.versions[ApiKey.FETCH] == 16
        assert not cluster.errors


async def test_metadata_every_version_and_auto_create(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=3, topics={"t": 3}) as cluster, connect(cluster) as conn:
        for v in versions(ApiKey.METADATA):
            resp = await conn.request(rq.metadata(v, ["t"]))
            assert [b.node_id for b in resp.brokers] == [0, 1, 2], v
            (topic,) = resp.topics
            assert (topic.error_code, topic.name) == (0, "t")
            assert [p.leader_id for p in topic.partitions] == [0, 1, 2]
            if v >= 10:
                assert topic.topic_id == cluster.state.topics.by_name["t"].topic_id
            # auto-creation: the creating request sees LEADER_NOT_AVAILABLE
            name = f"auto-{v}"
            first = await conn.request(rq.metadata(v, [name]))
            assert first.topics[0].error_code == 5
            second = await conn.request(rq.metadata(v, [name]))
            assert second.topics[0].error_code == 0
            assert len(second.topics[0].partitions) == 1
            all_topics = await conn.request(rq.metadata(v, None))
            assert {t.name for t in all_topics.topics} >= {"t", name}
        # v4+: the request can forbid auto-creation
        resp = await conn.request(rq.metadata(12, ["nope"], auto=False))
        assert resp.topics[0].error_code == 3
        resp = await conn.request(rq.metadata(12, ["bad name!"]))
        assert resp.topics[0].error_code == 17
        assert not cluster.errors


@pytest.mark.parametrize("v", [10, 11])
async def test_metadata_before_v12_refuses_a_topic_without_a_name_or_with_an_id(
    autojump_clock: trio.testing.MockClock, v: int
) -> None:
    """Before v12 a response's topic name is not nullable, and topic ids are not
    served: Kafka answers INVALID_REQUEST for each topic, named "" where the
    request gave no name (the broker failed to encode its answer)."""
    mod = rq.request_module(ApiKey.METADATA, v)
    t_id = uuid.UUID(int=7)
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as conn:
        for topics in [(None, t_id), ("t", t_id), (None, rq.NIL)]:
            name, topic_id = topics
            req = rq.build(
                mod.MetadataRequest,
                topics=(rq.build(mod.MetadataRequestTopic, name=name, topic_id=topic_id),),
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
            resp = await conn.request(req)
            (topic,) = resp.topics
            assert (topic.error_code, topic.name) == (42, name or ""), topics
        assert not cluster.errors, cluster.errors[:1]


async def test_auto_create_can_be_disabled(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(auto_create_topics=False) as cluster, connect(cluster) as conn:
        resp = await conn.request(rq.metadata(1, ["nope"]))
        assert resp.topics[0].error_code == 3
        assert "nope" not in cluster.state.topics


async def test_produce_fetch_list_offsets_every_version(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as conn:
        expected: list[bytes] = []
        for v in versions(ApiKey.PRODUCE):
            value = f"v{v}".encode()
            resp = await conn.request(rq.produce(v, "t", 0, batch(value, value)))
            part = resp.responses[0].partition_responses[0]
            assert part.error_code == 0, v
            assert part.base_offset == len(expected)
            expected += [value, value]
        ids = {"t": cluster.state.topics.by_name["t"].topic_id}
        for v in versions(ApiKey.FETCH):
            resp = await conn.request(rq.fetch(v, "t", 0, 0, topic_ids=ids))
            part = resp.responses[0].partitions[0]
            assert part.error_code == 0
            assert part.high_watermark == len(expected)
            values = [r.value for b in decode_batches(part.records) for r in b.records]
            assert values == expected, v
            # mid-batch offsets return the whole batch holding them
            resp = await conn.request(rq.fetch(v, "t", 0, 3, topic_ids=ids))
            first = decode_batches(resp.responses[0].partitions[0].records)[0]
            assert first.base_offset == 2
        for v in versions(ApiKey.LIST_OFFSETS):
            latest = await conn.request(rq.list_offsets(v, "t", 0, -1))
            earliest = await conn.request(rq.list_offsets(v, "t", 0, -2))
            by_time = await conn.request(rq.list_offsets(v, "t", 0, 1_000))
            assert latest.topics[0].partitions[0].offset == len(expected)
            assert earliest.topics[0].partitions[0].offset == 0
            assert by_time.topics[0].partitions[0].offset == 0
            assert by_time.topics[0].partitions[0].timestamp == 1_000
        resp = await conn.request(rq.list_offsets(7, "t", 0, -3))
        assert resp.topics[0].partitions[0].offset == 0
        assert not cluster.errors


async def test_produce_and_fetch_errors(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(brokers=2, topics={"t": 2}) as cluster, connect(cluster) as conn:
        # partition 1 is led by broker 1
        resp = await conn.request(rq.produce(9, "t", 1, batch(b"x")))
        assert resp.responses[0].partition_responses[0].error_code == 6
        resp = await conn.request(rq.produce(9, "nope", 0, batch(b"x")))
        assert resp.responses[0].partition_responses[0].error_code == 3
        resp = await conn.request(rq.produce(9, "t", 5, batch(b"x")))
        assert resp.responses[0].partition_responses[0].error_code == 3
        corrupt = bytearray(batch(b"x"))
        corrupt[-1] ^= 0xFF
        resp = await conn.request(rq.produce(9, "t", 0, bytes(corrupt)))
        assert resp.responses[0].partition_responses[0].error_code == 2
        resp = await conn.request(rq.produce(9, "t", 0, batch(b"x") + batch(b"y")))
        assert resp.responses[0].partition_responses[0].error_code == 87
        resp = await conn.request(rq.produce(9, "t", 0, batch(b"x"), acks=2))
        assert resp.responses[0].partition_responses[0].error_code == 21
        resp = await conn.request(rq.fetch(12, "t", 1, 0))
        assert resp.responses[0].partitions[0].error_code == 6
        resp = await conn.request(rq.fetch(12, "t", 0, 5))
        assert resp.responses[0].partitions[0].error_code == 1
        resp = await conn.request(rq.fetch(12, "t", 0, 0, leader_epoch=3))
        assert resp.responses[0].partitions[0].error_code == 75
        resp = await conn.request(rq.fetch(12, "t", 0, 0, session_id=42, session_epoch=1))
        assert (resp.error_code, resp.session_id, resp.responses) == (70, 0, ())
        resp = await conn.request(rq.list_offsets(7, "t", 1, -1))
        assert resp.topics[0].partitions[0].error_code == 6
        assert cluster.high_watermark("t", 0) == 0
        assert not cluster.errors


async def test_produce_acks_zero_sends_nothing(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as conn:
        await conn.request(rq.produce(9, "t", 0, batch(b"x"), acks=0), expect_response=False)
        resp = await conn.request(rq.metadata(9, ["t"]))  # answered: the stream is in sync
        assert resp.topics[0].error_code == 0
        assert cluster.high_watermark("t") == 1


async def test_fetch_size_limits(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(topics={"t": 2}) as cluster, connect(cluster) as conn:
        for _ in range(3):
            cluster.produce("t", [b"x" * 1000], partition=0)
            cluster.produce("t", [b"y" * 1000], partition=1)
        resp = await conn.request(
            rq.fetch(12, "t", 0, 0, max_bytes=10, extra_partitions=[("t", 1, 0)])
        )
        p0, p1 = resp.responses[0].partitions
        assert len(decode_batches(p0.records)) == 1  # KIP-74: at least one batch
        assert p1.records == b""  # the response is full
        resp = await conn.request(rq.fetch(12, "t", 0, 0, partition_max_bytes=2500))
        assert len(decode_batches(resp.responses[0].partitions[0].records)) == 2


async def test_topic_admin_every_version(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(brokers=2) as cluster, connect(cluster) as conn:
        for v in versions(ApiKey.CREATE_TOPICS):
            resp = await conn.request(rq.create_topics(v, (f"c{v}", 3), rf=2))
            (result,) = resp.topics
            assert result.error_code == 0, v
            if v >= 5:
                assert (result.num_partitions, result.replication_factor) == (3, 2)
            if v >= 7:
                assert result.topic_id == cluster.state.topics.by_name[f"c{v}"].topic_id
            resp = await conn.request(rq.create_topics(v, (f"c{v}", 3)))
            assert resp.topics[0].error_code == 36
        resp = await conn.request(rq.create_topics(7, ("x", 1), rf=3))
        assert resp.topics[0].error_code == 38
        resp = await conn.request(rq.create_topics(7, ("x", 1), validate_only=True))
        assert resp.topics[0].error_code == 0
        assert "x" not in cluster.state.topics
        resp = await conn.request(
            rq.create_topics(7, ("lat", 1), configs={"message.timestamp.type": "LogAppendTime"})
        )
        assert resp.topics[0].error_code == 0
        for v in versions(ApiKey.CREATE_PARTITIONS):
            resp = await conn.request(rq.create_partitions(v, "c2", 4 + v))
            assert resp.results[0].error_code == 0, v
            assert len(cluster.state.topics.by_name["c2"].partitions) == 4 + v
        resp = await conn.request(rq.create_partitions(3, "c2", 1))
        assert resp.results[0].error_code == 37
        for v in versions(ApiKey.DELETE_TOPICS):
            name = f"c{v + 1}"
            resp = await conn.request(rq.delete_topics(v, name))
            assert resp.responses[0].error_code == 0, v
            assert name not in cluster.state.topics
            resp = await conn.request(rq.delete_topics(v, name))
            assert resp.responses[0].error_code == 3
        assert not cluster.errors


async def test_log_append_time_topic(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(epoch_ms=1_700_000_000_000) as cluster, connect(cluster) as conn:
        cluster.create_topic("lat", configs={"message.timestamp.type": "LogAppendTime"})
        await trio.sleep(2.5)
        resp = await conn.request(rq.produce(9, "lat", 0, batch(b"a", ts=5)))
        part = resp.responses[0].partition_responses[0]
        assert part.log_append_time.timestamp() * 1000 == 1_700_000_002_500
        (record,) = cluster.records("lat")
        assert record.timestamp == 1_700_000_002_500


async def _join_sync(conn: Any, v_join: int, v_sync: int, group: str) -> tuple[str, int]:
    resp = await conn.request(rq.join_group(v_join, group))
    member = resp.member_id
    if v_join >= 4:
        assert resp.error_code == 79  # MEMBER_ID_REQUIRED
        resp = await conn.request(rq.join_group(v_join, group, member))
    assert resp.error_code == 0
    assert resp.leader == member
    assert resp.member_id == member
    assert [m.member_id for m in resp.members] == [member]
    assert resp.protocol_name == "range"
    sync = await conn.request(
        rq.sync_group(v_sync, group, resp.generation_id, member, [(member, b"assigned")])
    )
    assert sync.error_code == 0
    assert sync.assignment == b"assigned"
    return member, resp.generation_id


@pytest.mark.parametrize("v", range(10))
async def test_group_flow_every_version(v: int, autojump_clock: trio.testing.MockClock) -> None:
    """JoinGroup vN with the matching versions of the other group APIs."""

    def pick(key: ApiKey) -> int:
        lo, hi = SUPPORTED_VERSIONS[key]
        return max(lo, min(hi, v))

    group = f"group-{v}"
    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        async with connect(cluster) as conn:
            start = trio.current_time()
            fc = await conn.request(rq.find_coordinator(pick(ApiKey.FIND_COORDINATOR), group))
            entry = fc.coordinators[0] if pick(ApiKey.FIND_COORDINATOR) >= 4 else fc
            assert (entry.error_code, entry.node_id) == (0, 0)
            member, generation = await _join_sync(conn, v, pick(ApiKey.SYNC_GROUP), group)
            hb = await conn.request(rq.heartbeat(pick(ApiKey.HEARTBEAT), group, generation, member))
            assert hb.error_code == 0
            commit = await conn.request(
                rq.offset_commit(
                    pick(ApiKey.OFFSET_COMMIT),
                    group,
                    generation,
                    member,
                    [("t", 0, 10), ("t", 1, 20), ("gone", 0, 1)],
                )
            )
            codes = {
                (t.name, p.partition_index): p.error_code
                for t in commit.topics
                for p in t.partitions
            }
            assert codes == {("t", 0): 0, ("t", 1): 0, ("gone", 0): 3}
            fv = pick(ApiKey.OFFSET_FETCH)
            offsets = await conn.request(rq.offset_fetch(fv, group, [("t", 0), ("t", 1), ("t", 9)]))
            topics = offsets.groups[0].topics if fv >= 8 else offsets.topics
            got = {
                (t.name, p.partition_index): (p.committed_offset, p.metadata)
                for t in topics
                for p in t.partitions
            }
            assert got == {("t", 0): (10, "m"), ("t", 1): (20, "m"), ("t", 9): (-1, "")}
            if fv >= 2:
                everything = await conn.request(rq.offset_fetch(fv, group, None))
                topics = everything.groups[0].topics if fv >= 8 else everything.topics
                assert {p.partition_index for t in topics for p in t.partitions} == {0, 1}
            desc = await conn.request(rq.describe_groups(pick(ApiKey.DESCRIBE_GROUPS), group))
            (described,) = desc.groups
            assert (described.error_code, described.group_state) == (0, "Stable")
            assert [m.member_id for m in described.members] == [member]
            assert described.members[0].client_id == "embedded-test"
            assert described.members[0].client_host == "/127.0.0.1"
            listed = await conn.request(rq.list_groups(pick(ApiKey.LIST_GROUPS)))
            assert [g.group_id for g in listed.groups] == [group]
            leave = await conn.request(rq.leave_group(pick(ApiKey.LEAVE_GROUP), group, member))
            assert leave.error_code == 0
            assert cluster.describe_group(group).group_state == "Empty"
            deleted = await conn.request(rq.delete_groups(pick(ApiKey.DELETE_GROUPS), group))
            assert deleted.results[0].error_code == 0
            assert cluster.describe_group(group).group_state == "Dead"
            assert trio.current_time() == start  # nothing waited
        assert not cluster.errors


async def test_rebalance_with_two_members(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=3000) as cluster:
        async with connect(cluster) as a, connect(cluster) as b:
            start = trio.current_time()
            first = await a.request(rq.join_group(9, "g"))
            member_a = first.member_id
            second = await b.request(rq.join_group(9, "g"))
            member_b = second.member_id
            results: dict[str, Any] = {}

            async def join(conn: Any, member: str) -> None:
                results[member] = await conn.request(rq.join_group(9, "g", member))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(join, a, member_a)
                nursery.start_soon(join, b, member_b)
            # Both parked for the initial rebalance delay, in virtual time: 3 s, then
            # extended once by 3 s because a second member arrived meanwhile
            # (Kafka's InitialDelayedJoin), then complete.
            assert trio.current_time() - start == pytest.approx(6.0)
            ra, rb = results[member_a], results[member_b]
            assert ra.generation_id == rb.generation_id == 1
            assert ra.leader == rb.leader
            leader, follower = (a, b) if ra.leader == member_a else (b, a)
            leader_id, follower_id = (
                (member_a, member_b) if ra.leader == member_a else (member_b, member_a)
            )
            assert len(results[leader_id].members) == 2
            assert results[follower_id].members == ()

            async def sync(conn: Any, member: str, assignments: Any) -> None:
                results[member] = await conn.request(rq.sync_group(5, "g", 1, member, assignments))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(sync, follower, follower_id, [])  # parked until the leader syncs
                await trio.sleep(1)
                plan = [(leader_id, b"L"), (follower_id, b"F")]
                nursery.start_soon(sync, leader, leader_id, plan)
            assert results[leader_id].assignment == b"L"
            assert results[follower_id].assignment == b"F"
            a, member_a = leader, leader_id
            # the follower stops heartbeating: its session (10 s) expires, a rebalance starts
            await trio.sleep(5)
            assert (await a.request(rq.heartbeat(4, "g", 1, member_a))).error_code == 0
            await trio.sleep(6)
            hb = await a.request(rq.heartbeat(4, "g", 1, member_a))
            assert hb.error_code == 27  # REBALANCE_IN_PROGRESS
            assert cluster.describe_group("g").group_state == "PreparingRebalance"
        assert not cluster.errors


async def test_group_requests_to_the_wrong_broker(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(brokers=3, offsets_topic_num_partitions=3) as cluster:
        group = "group-x"
        owner = coordinator_partition(group, 3)
        assert cluster.coordinator_of(group) == owner
        other = (owner + 1) % 3
        async with connect(cluster, other) as conn:
            fc = await conn.request(rq.find_coordinator(4, group))
            assert fc.coordinators[0].node_id == owner
            assert fc.coordinators[0].port == cluster.address(owner)[1]
            resp = await conn.request(rq.join_group(9, group))
            assert resp.error_code == 16  # NOT_COORDINATOR
            resp = await conn.request(rq.heartbeat(4, group, 1, "m"))
            assert resp.error_code == 16
            resp = await conn.request(rq.offset_fetch(8, group, None))
            assert resp.groups[0].error_code == 16
            resp = await conn.request(rq.offset_fetch(7, group, None))
            assert resp.error_code == 16
            resp = await conn.request(rq.describe_groups(5, group))
            assert resp.groups[0].error_code == 16
            resp = await conn.request(rq.find_coordinator(4, group, key_type=1))
            assert resp.coordinators[0].error_code == 42
            cluster.move_coordinator(group, other)
            resp = await conn.request(rq.join_group(9, group))
            assert resp.error_code == 79
        assert not cluster.errors


async def test_gengroup_cluster_client_against_three_brokers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        FakeCluster(brokers=3, topics={"payments": 6}) as cluster,
        Cluster(cluster.bootstrap) as client,
    ):
        topics = await client.refresh_metadata(["payments"])
        leaders = sorted(p.leader for p in topics["payments"].partitions.values())
        assert leaders == [0, 0, 1, 1, 2, 2]
        node = await client.find_coordinator("billing")
        assert node == cluster.coordinator_of("billing")
        assert len(cluster.bootstrap.split(",")) == 3
