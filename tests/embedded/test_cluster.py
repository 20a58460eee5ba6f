"""The FakeCluster / EmbeddedBroker test helpers themselves."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from gengroup._errors import KafkaConnectionError, UnknownTopicOrPartition
from gengroup._types import TopicPartition
from gengroup.broker import BrokerSettings, EmbeddedBroker, FakeCluster, LogError
from gengroup.broker.faults import Drop
from gengroup.io.cluster import Cluster
from gengroup.producer import Producer
from gengroup.protocol.records import Compression, NewRecord
from gengroup.protocol.versions import ApiKey

from . import connect, fetch, metadata, offset_commit


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_embedded_broker_on_a_chosen_port(autojump_clock: trio.testing.MockClock) -> None:
    port = free_port()
    async with EmbeddedBroker(topics={"t": 2}, port=port, seed=1) as broker:
        assert broker.port == port
        assert broker.bootstrap == f"127.0.0.1:{port}"
        async with Cluster(broker.bootstrap) as client:
            topics = await client.refresh_metadata(["t"])
            assert len(topics["t"].partitions) == 2


async def test_seeded_clusters_are_reproducible(autojump_clock: trio.testing.MockClock) -> None:
    ids = []
    for _ in range(2):
        async with FakeCluster(topics={"a": 1, "b": 1}, seed=42) as cluster:
            ids.append(
                (
                    cluster.state.cluster_id,
                    cluster.state.topics.by_name["a"].topic_id,
                    cluster.state.topics.by_name["b"].topic_id,
                )
            )
    assert ids[0] == ids[1]
    assert len(ids[0][0]) == 22


async def test_produce_helper_records_and_topic_changes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics=[("t", 1)], epoch_ms=1_000_000) as cluster:
        assert cluster.produce("t", [b"a", None, (b"k", b"v")]) == 0
        assert (
            cluster.produce(
                "t",
                [NewRecord(b"k2", b"v2", [("h", b"1")], 5)],
                compression=Compression.GZIP,
            )
            == 3
        )
        records = cluster.records("t")
        assert [(r.offset, r.key, r.value) for r in records] == [
            (0, None, b"a"),
            (1, None, None),
            (2, b"k", b"v"),
            (3, b"k2", b"v2"),
        ]
        assert records[0].timestamp == 1_000_000
        assert records[3].headers == (("h", b"1"),)
        assert cluster.high_watermark("t") == 4
        with pytest.raises(LogError):
            cluster.produce("nope", [b"x"])
        cluster.create_partitions("t", 3)
        async with connect(cluster) as conn:
            resp = await conn.request(metadata(12, ["t"]))
            assert len(resp.topics[0].partitions) == 3
            cluster.delete_topic("t")
            resp = await conn.request(fetch(12, "t", 0, 0))
            assert resp.responses[0].partitions[0].error_code == 3


async def test_committed_offsets_helper(autojump_clock: trio.testing.MockClock) -> None:
    async with FakeCluster(topics={"t": 2}) as cluster, connect(cluster) as conn:
        assert cluster.committed_offsets("g") == {}
        resp = await conn.request(offset_commit(8, "g", -1, "", [("t", 0, 5), ("t", 1, 7)]))
        assert all(p.error_code == 0 for t in resp.topics for p in t.partitions)
        assert cluster.committed_offsets("g") == {
            TopicPartition("t", 0): 5,
            TopicPartition("t", 1): 7,
        }
        assert cluster.describe_group("g").group_state == "Empty"


async def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        FakeCluster(brokers=0)
    with pytest.raises(ValueError):
        FakeCluster(brokers=2, ports=[1])


@pytest.mark.parametrize("broker_allows", [True, False])
async def test_embedded_broker_auto_creates_for_the_producer_only_when_allowed(
    broker_allows: bool,
) -> None:
    settings = BrokerSettings(auto_create_topics=broker_allows)
    async with (
        FakeCluster(settings=settings) as cluster,
        Producer(cluster.bootstrap, max_block=1.0) as producer,
    ):
        if broker_allows:
            assert (await producer.send("auto", b"x")).offset == 0
            assert cluster.high_watermark("auto") == 1
        else:
            with pytest.raises(UnknownTopicOrPartition):
                await producer.send("auto", b"x")


async def test_a_producer_told_no_metadata_says_no_broker_answered_not_that_the_topic_is_missing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A broker that accepts the Metadata request and never answers it: after
    ``max_block`` the send fails with a KafkaConnectionError saying so (it
    used to be UnknownTopicOrPartition, for a topic that exists)."""
    async with FakeCluster(topics={"payments": 1}) as cluster:
        async with Producer(cluster.bootstrap, max_block=3.0) as producer:
            cluster.control(ApiKey.METADATA, lambda call: Drop())
            started = trio.current_time()
            with pytest.raises(KafkaConnectionError, match="no broker answered") as caught:
                await producer.send("payments", b"x")
            assert not isinstance(caught.value, UnknownTopicOrPartition)
            # What it waited on: the broker it asked, connected, not answering.
            assert f"{cluster.bootstrap}: connected, 1 request(s) unanswered" in str(caught.value)
            assert trio.current_time() - started == pytest.approx(3.0, abs=0.5)
