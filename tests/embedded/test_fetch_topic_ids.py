"""Fetch v13-v16 on the embedded broker: topics named by id, and the leader
hints of v16 (KIP-951), as Kafka answers them; and the client's choice of
version (by id when every topic's id is known, else v12 by name).

Against Apache Kafka, ``tests/conformance/test_fetch_session_conformance.py``
(scenario ``session_by_topic_id``) compares a session by id, a topic forgotten
by id, an unknown topic id and FETCH_SESSION_TOPIC_ID_ERROR, and
``tests/test_leader_hints_kafka.py`` the v16 leader hints; the re-created
topic and the client's choices here are checked on the embedded broker only.
"""

from __future__ import annotations

import logging
import uuid

import pytest
import trio.testing

from gengroup._types import TopicPartition
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Intercepted
from gengroup.io.cluster import Cluster
from gengroup.io.fetch import fetch_once
from gengroup.protocol.fetch_session import FetchSession
from gengroup.protocol.records import NewRecord, decode_batches
from gengroup.protocol.versions import ApiKey

from . import batch, connect, fetch, produce

UNKNOWN_TOPIC_ID = 100
NOT_LEADER = 6
FETCH_SESSION_TOPIC_ID_ERROR = 106


def _values(part: object) -> list[bytes | None]:
    return [r.value for b in decode_batches(part.records) for r in b.records]  # type: ignore[attr-defined]


async def test_a_fetch_by_topic_id_reads_the_topic_of_that_id_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """v13-v16 name the topic by id, and the answer too; the id of a topic
    deleted and created again under the same name is UNKNOWN_TOPIC_ID, never
    the new topic's log."""
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as conn:
        old = cluster.state.topics.by_name["t"].topic_id
        await conn.request(produce(9, "t", 0, batch(b"old")))
        for v in range(13, 17):
            resp = await conn.request(fetch(v, "t", 0, 0, topic_ids={"t": old}))
            (topic,) = resp.responses
            assert topic.topic_id == old
            (part,) = topic.partitions
            assert (int(part.error_code), _values(part)) == (0, [b"old"]), v
        cluster.delete_topic("t")
        cluster.create_topic("t", 1)
        await conn.request(produce(9, "t", 0, batch(b"new0", b"new1")))
        new = cluster.state.topics.by_name["t"].topic_id
        assert new != old
        for v in range(13, 17):
            resp = await conn.request(fetch(v, "t", 0, 1, topic_ids={"t": old}))
            ((part,),) = (t.partitions for t in resp.responses)
            assert int(part.error_code) == UNKNOWN_TOPIC_ID, v
            assert (part.high_watermark, part.log_start_offset, part.records) == (-1, -1, b"")
            resp = await conn.request(fetch(v, "t", 0, 0, topic_ids={"t": new}))
            ((part,),) = (t.partitions for t in resp.responses)
            assert _values(part) == [b"new0", b"new1"]
        assert not cluster.errors


async def test_a_session_refuses_requests_of_the_other_kind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A session made by v12 (by name) refuses an incremental v13+ request, and
    one made by id a v12 one: FETCH_SESSION_TOPIC_ID_ERROR, as Kafka's FetchManager."""
    async with FakeCluster(topics={"t": 1}) as cluster, connect(cluster) as conn:
        ids = {"t": cluster.state.topics.by_name["t"].topic_id}
        for first, then in ((12, 16), (16, 12), (13, 12)):
            resp = await conn.request(fetch(first, "t", 0, 0, session_epoch=0, topic_ids=ids))
            session = int(resp.session_id)
            assert session and int(resp.error_code) == 0
            again = await conn.request(
                fetch(then, "t", 0, 0, session_id=session, session_epoch=1, topic_ids=ids)
            )
            assert int(again.error_code) == FETCH_SESSION_TOPIC_ID_ERROR, (first, then)
            assert (int(again.session_id), again.responses) == (0, ())
            same = await conn.request(
                fetch(first, "t", 0, 0, session_id=session, session_epoch=1, topic_ids=ids)
            )
            assert int(same.error_code) == 0  # the session is kept
        assert not cluster.errors


async def test_a_fetch_refused_by_a_former_leader_names_the_new_one_from_v16(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=2) as cluster:
        cluster.create_topic("t", 1, replication_factor=2)
        cluster.move_partition_leader("t", 0, 1)
        ids = {"t": cluster.state.topics.by_name["t"].topic_id}
        epoch = cluster.state.topics.partition("t", 0).leader_epoch  # type: ignore[union-attr]
        async with connect(cluster, 0) as conn:
            for v in (12, 15, 16):
                resp = await conn.request(fetch(v, "t", 0, 0, topic_ids=ids))
                ((part,),) = (t.partitions for t in resp.responses)
                assert int(part.error_code) == NOT_LEADER
                hint = (int(part.current_leader.leader_id), int(part.current_leader.leader_epoch))
                if v < 16:
                    assert hint == (-1, -1)
                    assert getattr(resp, "node_endpoints", ()) == ()
                    continue
                assert hint == (1, epoch)
                (node,) = resp.node_endpoints
                assert (int(node.node_id), node.host, int(node.port)) == (1, *cluster.address(1))
            # A fenced epoch names the leader too.
            resp = await conn.request(fetch(16, "t", 0, 0, leader_epoch=epoch - 1, topic_ids=ids))
            ((part,),) = (t.partitions for t in resp.responses)
            assert int(part.error_code) == 74  # FENCED_LEADER_EPOCH
            assert int(part.current_leader.leader_id) == 1
        assert not cluster.errors


async def test_the_client_fetches_by_id_and_by_name_only_without_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With the topic's id in the metadata cache the Fetch is v16 by id; a
    topic the cache has no id for goes by name, as v12 (that request only);
    the answer is the topic's either way."""
    async with FakeCluster(topics={"t": 1}) as cluster:
        cluster.produce("t", [NewRecord(None, b"a", (), 0)])
        sent: list[tuple[int, object]] = []

        def note(call: Intercepted) -> None:
            (topic,) = call.request.topics
            sent.append((call.api_version, getattr(topic, "topic_id", None) or topic.topic))

        cluster.control(ApiKey.FETCH, note)
        tp = TopicPartition("t", 0)
        async with Cluster(cluster.bootstrap) as client:
            await client.refresh_metadata(["t"])
            topic_id = client.topics["t"].topic_id
            assert topic_id is not None
            by_id = await fetch_once(client, 0, {tp: 0}, max_wait=0)
            by_name = await fetch_once(client, 0, {tp: 0}, max_wait=0, topic_ids={})
            unknown = await fetch_once(
                client, 0, {tp: 0}, max_wait=0, topic_ids={"t": uuid.uuid4()}
            )
        assert sent == [(16, topic_id), (12, "t"), (16, unknown_id(sent))]
        assert [r.value for r in by_id[tp].records] == [b"a"]
        assert [r.value for r in by_name[tp].records] == [b"a"]
        assert unknown[tp].error is not None and unknown[tp].error.code == UNKNOWN_TOPIC_ID  # type: ignore[attr-defined]
        assert not cluster.errors


def unknown_id(sent: list[tuple[int, object]]) -> object:
    """The id the last request named (made up by the test)."""
    return sent[-1][1]


async def test_a_session_refusing_a_request_by_name_is_started_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A fetch session made by id, then a request by name (a topic's id unknown):
    the broker refuses it FETCH_SESSION_TOPIC_ID_ERROR; the answer is dropped,
    the session's next request is full and fetches."""
    async with FakeCluster(topics={"t": 1}) as cluster:
        cluster.produce("t", [NewRecord(None, b"a", (), 0)])
        tp = TopicPartition("t", 0)
        session = FetchSession()
        async with Cluster(cluster.bootstrap) as client:
            await client.refresh_metadata(["t"])
            first = await fetch_once(client, 0, {tp: 0}, max_wait=0, session=session)
            assert [r.value for r in first[tp].records] == [b"a"] and session.established
            refused = await fetch_once(
                client, 0, {tp: 1}, max_wait=0, session=session, topic_ids={}
            )
            assert refused == {}
            assert session.reset_reason == "FETCH_SESSION_TOPIC_ID_ERROR"
            assert not session.established
            again = await fetch_once(client, 0, {tp: 0}, max_wait=0, session=session, topic_ids={})
            assert [r.value for r in again[tp].records] == [b"a"]
        assert not cluster.errors


def _spy(cluster: FakeCluster) -> list[tuple[int, int, list[object], list[object]]]:
    """Each Fetch's version, session epoch, topics and forgotten topics (ids from v13)."""
    seen: list[tuple[int, int, list[object], list[object]]] = []

    def spy(call: Intercepted) -> None:
        req = call.request
        seen.append(
            (
                call.api_version,
                int(req.session_epoch),
                [getattr(t, "topic_id", None) or t.topic for t in req.topics],
                [getattr(t, "topic_id", None) or t.topic for t in req.forgotten_topics_data],
            )
        )

    cluster.control(ApiKey.FETCH, spy)
    return seen


async def test_a_topic_leaving_a_session_is_forgotten_by_its_id(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The caller names only the ids of the topics it fetches now (as the
    prefetcher does); a topic that leaves the request (its buffer is full) is
    forgotten by the id the session added it under, in a request by id, which
    the broker's session takes: no FETCH_SESSION_TOPIC_ID_ERROR, no reset."""
    a, b = TopicPartition("a", 0), TopicPartition("b", 0)
    async with FakeCluster(topics={"a": 1, "b": 1}) as cluster:
        seen = _spy(cluster)
        session = FetchSession()
        async with Cluster(cluster.bootstrap) as client:
            await client.refresh_metadata(["a", "b"])
            ids = {n: t.topic_id for n, t in client.topics.items() if t.topic_id is not None}
            await fetch_once(client, 0, {a: 0, b: 0}, max_wait=0, session=session, topic_ids=ids)
            assert session.established
            b_only = {"b": ids["b"]}
            for _ in range(2):
                await fetch_once(client, 0, {b: 0}, max_wait=0, session=session, topic_ids=b_only)
            assert (session.resets, session.reset_reason) == (0, "")
            assert set(session.partitions) == {b}
        assert not cluster.errors
    assert [v for v, *_ in seen] == [16, 16, 16]
    assert seen[1][1:] == (1, [], [ids["a"]])
    assert seen[2][1:] == (2, [], [])


async def test_a_topic_id_changing_in_a_session_forgets_the_old_id_and_adds_the_new(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A session made under a topic's old id (the topic created again before
    the caller took the new id from a refresh): the next request forgets the
    old id's partition and adds the new one's, in the same request, so the
    broker answers for the new topic at once, without a dropped answer nor a
    reset (and no log names a topic by its id)."""
    caplog.set_level(logging.DEBUG, logger="gengroup")
    tp = TopicPartition("t", 0)
    async with FakeCluster(topics={"t": 1}) as cluster:
        seen = _spy(cluster)
        session = FetchSession()
        async with Cluster(cluster.bootstrap) as client:
            await client.refresh_metadata(["t"])
            old = client.topics["t"].topic_id
            assert old is not None
            cluster.delete_topic("t")
            cluster.create_topic("t", 1)
            cluster.produce("t", [NewRecord(None, b"new-0", (), 0)])
            new = cluster.state.topics.by_name["t"].topic_id
            first = await fetch_once(
                client, 0, {tp: 0}, max_wait=0, session=session, topic_ids={"t": old}
            )
            assert first[tp].error is not None and first[tp].error.code == UNKNOWN_TOPIC_ID
            assert session.established
            second = await fetch_once(
                client, 0, {tp: 0}, max_wait=0, session=session, topic_ids={"t": new}
            )
            assert [r.value for r in second[tp].records] == [b"new-0"]
            assert (session.resets, session.reset_reason) == (0, "")
        assert not cluster.errors
    assert seen[1][1:] == (1, [new], [old])
    assert not [r for r in caplog.records if str(old) in r.getMessage()]
