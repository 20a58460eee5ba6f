"""Reaching the cluster through its bootstrap addresses, one of which hangs.

Every service lists the same brokers in the same order. Tried strictly in
that order, a first broker that accepts connections and never answers (a
long GC pause, a network black hole) held every new client for
``connect_timeout``: a producer's first send failed after ``max_block``
although the other brokers answer. The addresses are tried in random order
(as the Java client and librdkafka do), and an attempt that hangs does not
hold up the next one for more than ``CONNECT_STAGGER`` (0.5 s). Virtual time.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from gengroup import Admin, Cluster, KafkaConnectionError, Producer, TopicPartition
from gengroup.broker import FakeCluster, Intercepted
from gengroup.broker.faults import Drop
from gengroup.protocol.versions import ApiKey


def hang(cluster: FakeCluster, broker_id: int) -> None:
    """The broker accepts connections and never answers on them."""
    cluster.control(None, lambda call: Drop(), broker_id=broker_id)


async def test_a_hung_first_bootstrap_address_does_not_fail_a_new_producer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=3) as cluster:
        cluster.create_topic("t", 1, replication_factor=3)
        cluster.move_partition_leader("t", 0, 1)  # the hung broker leads nothing
        hang(cluster, 0)
        for _ in range(5):  # whatever order the addresses are tried in
            started = trio.current_time()
            async with Producer(cluster.bootstrap, max_block=10.0) as producer:
                await producer.send("t", b"x")
            # At most one stagger (0.5 s) lost to the hung broker, not connect_timeout.
            assert trio.current_time() - started < 1.0
        assert cluster.high_watermark("t") == 5


async def test_the_bootstrap_addresses_are_tried_in_random_order() -> None:
    """Real time: the brokers answer at once, so each round's first address is
    the one the first ApiVersions went to."""
    asked: list[int] = []

    def note(call: Intercepted) -> None:
        asked.append(call.broker_id)

    firsts: set[int] = set()
    async with FakeCluster(brokers=3) as cluster:
        cluster.control(ApiKey.API_VERSIONS, note)
        for _ in range(20):
            asked.clear()
            async with Cluster(cluster.bootstrap) as client:
                await client.refresh_metadata([])
            firsts.add(asked[0])
    # In list order, broker 0 would be first every time.
    assert len(firsts) > 1, firsts


async def test_a_producer_that_gets_no_metadata_names_each_address_and_its_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(brokers=3) as cluster:
        cluster.create_topic("t", 1)
        for broker in cluster.node_ids:
            hang(cluster, broker)
        async with Producer(cluster.bootstrap, max_block=3.0) as producer:
            with pytest.raises(KafkaConnectionError) as caught:
                await producer.send("t", b"x")
    said = str(caught.value)
    assert "no broker answered" in said
    for address in cluster.bootstrap.split(","):
        assert f"{address}: connected, no answer to ApiVersions for" in said, said


async def test_an_admin_call_cut_by_its_timeout_names_what_it_waited_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A broker that accepts connections and never answers, and a timeout
    shorter than ``connect_timeout``: the TimeoutError said "no attempt was
    answered", naming no address nor step."""
    async with FakeCluster(topics={"t": 1}) as cluster:
        hang(cluster, 0)
        address = cluster.bootstrap
        async with Admin(address, timeout=3) as admin:
            calls = {
                "metadata": lambda: admin.metadata(["t"]),
                "ConsumerGroupDescribe 'g'": lambda: admin.describe_groups(["g"]),
                "OffsetFetch 'g'": lambda: admin.fetch_offsets("g"),
                "ListOffsets": lambda: admin.list_offsets([TopicPartition("t", 0)], "latest"),
                "CreateTopics": lambda: admin.create_topics({"n": 1}),
            }
            for what, call in calls.items():
                with pytest.raises(TimeoutError) as caught:
                    await call()
                assert str(caught.value) == (
                    f"{what} did not complete within 3 s (no attempt was answered; "
                    f"waiting on {address}: connected, no answer to ApiVersions for 3.0 s)"
                ), what
        # Connected and set up, then a request unanswered: its API is named.
        cluster.clear_controls()
        async with Admin(address, timeout=3) as admin:
            await admin.metadata(["t"])
            cluster.control(ApiKey.METADATA, lambda call: Drop())
            with pytest.raises(TimeoutError) as caught:
                await admin.metadata(["t"])
            assert f"waiting on {address}: connected, 1 request(s) unanswered (the first: " in (
                str(caught.value)
            )
            assert str(caught.value).endswith("(the first: Metadata))"), caught.value
