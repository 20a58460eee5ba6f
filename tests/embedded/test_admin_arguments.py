"""The admin client's arguments and deadlines, on the embedded broker in virtual time."""

from __future__ import annotations

import re

import numpy
import pytest
import trio
import trio.testing

from gengroup import Admin, Producer, TopicPartition
from gengroup._errors import ConfigError, UnknownTopicOrPartition
from gengroup.admin import NewTopic
from gengroup.broker import Delay, FakeCluster
from gengroup.protocol.versions import ApiKey


async def test_one_name_where_a_list_belongs_is_refused_and_deletes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A string is iterable: ``delete_topics("orders")`` deleted ``o`` and ``s``."""
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            await admin.create_topics({"orders": 1, "o": 1, "s": 1})
            with pytest.raises(TypeError, match=re.escape("not one name: ['orders']")):
                await admin.delete_topics("orders")
            for call in (admin.describe_groups, admin.delete_groups):
                with pytest.raises(TypeError, match="not one name"):
                    await call("gx")
            with pytest.raises(TypeError, match="names"):
                await admin.delete_topics(["orders", 5])  # type: ignore[list-item]
            md = await admin.cluster.refresh_metadata(["orders", "o", "s"])
            assert all(md[t].error_code == 0 for t in ("orders", "o", "s"))


async def test_a_topic_name_where_partitions_belong_is_a_type_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``reset_offsets("g", "t")`` and its kind raised AttributeError ('str'
    object has no attribute 'topic'), from inside the argument check."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            calls = {
                "reset_offsets": lambda tps: admin.reset_offsets("g", tps, to="earliest"),
                "fetch_offsets": lambda tps: admin.fetch_offsets("g", tps),
                "delete_offsets": lambda tps: admin.delete_offsets("g", tps),
                "list_offsets": lambda tps: admin.list_offsets(tps, "latest"),
            }
            for name, call in calls.items():
                for one in ("t", b"t"):
                    with pytest.raises(
                        TypeError,
                        match=re.escape(f"{name} takes a list of TopicPartition, not a topic name"),
                    ):
                        await call(one)
                for item in ("t", ("t", 0), 0):
                    with pytest.raises(
                        TypeError,
                        match=re.escape(f"{name} takes TopicPartition objects, got {item!r}"),
                    ):
                        await call([TopicPartition("t", 0), item])
            assert await admin.fetch_offsets("g") == {}  # nothing was committed


async def test_one_item_or_no_collection_where_a_collection_belongs_is_a_type_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``delete_records("t")`` raised AttributeError ('str' object has no
    attribute 'items'); a bare TopicPartition, iterated, was its topic and
    index; an int was "'int' object is not iterable", naming nothing."""
    t0 = TopicPartition("t", 0)
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            async with Producer(admin.cluster) as producer:
                await producer.send("t", b"x", partition=0)
            for given in ("t", b"t", t0, [t0], 5):
                with pytest.raises(
                    TypeError,
                    match=re.escape(
                        f"delete_records takes a mapping of TopicPartition to offset, got {given!r}"
                    ),
                ):
                    await admin.delete_records(given)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="delete_records takes TopicPartition objects"):
                await admin.delete_records({"t": 1})  # type: ignore[dict-item]
            assert await admin.list_offsets([t0], "earliest") == {t0: 0}  # nothing deleted
            calls = {
                "list_offsets": (lambda x: admin.list_offsets(x, "latest"), "TopicPartition"),
                "fetch_offsets": (lambda x: admin.fetch_offsets("g", x), "TopicPartition"),
                "delete_offsets": (lambda x: admin.delete_offsets("g", x), "TopicPartition"),
                "reset_offsets": (
                    lambda x: admin.reset_offsets("g", x, offset=0),
                    "TopicPartition",
                ),
                "metadata": (admin.metadata, "names"),
                "delete_topics": (admin.delete_topics, "names"),
                "describe_groups": (admin.describe_groups, "names"),
                "delete_groups": (admin.delete_groups, "names"),
                "group_lag": (lambda x: admin.group_lag("g", x), "names"),
            }
            for name, (call, items) in calls.items():
                for given in (t0, 5):
                    with pytest.raises(
                        TypeError, match=re.escape(f"{name} takes a list of {items}, got {given!r}")
                    ):
                        await call(given)
            expected = "create_topics takes {name: partitions} or NewTopic objects, got "
            for given in (NewTopic("n", 1), t0, 5):
                with pytest.raises(TypeError, match=re.escape(f"{expected}{given!r}")):
                    await admin.create_topics(given)  # type: ignore[arg-type]
            assert "t" in await admin.metadata(["t"])  # nothing was deleted
            assert (await admin.metadata(["n"]))["n"].error_code == 3  # nor created


async def test_topics_to_create_are_checked_before_any_is_created(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            with pytest.raises(TypeError, match="partitions must be an int, got '3'"):
                await admin.create_topics({"ok": 1, "ps": "3"})  # type: ignore[dict-item]
            with pytest.raises(TypeError, match=r"partitions must be an int, got 2\.7"):
                await admin.create_topics({"pf": 2.7})  # type: ignore[dict-item]
            with pytest.raises(ValueError, match="'dup' is given twice"):
                await admin.create_topics([NewTopic("dup", 1), NewTopic("dup", 2)])
            with pytest.raises(TypeError, match="create_topics takes"):
                await admin.create_topics("orders")  # type: ignore[arg-type]
            md = await admin.cluster.refresh_metadata(["ok", "dup"])
            assert all(md[t].error_code == 3 for t in ("ok", "dup"))  # none was created
            await admin.create_topics({"np": numpy.int64(2)})  # an integer type, not an int
            assert admin.cluster.partition_count("np") == 2


async def test_a_group_operation_of_several_requests_keeps_one_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Each step took a fresh timeout: 3 steps of 1.5 s under a 2 s timeout took 6 s."""
    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap, timeout=2.0) as admin:
            for key in (ApiKey.LIST_OFFSETS, ApiKey.DESCRIBE_GROUPS, ApiKey.OFFSET_COMMIT):
                cluster.control(key, lambda call: Delay(1.5))
            started = trio.current_time()
            with pytest.raises(TimeoutError) as caught:
                await admin.reset_offsets("g", [TopicPartition("t", 0)], offset=0)
            assert trio.current_time() - started <= 2.0 + 0.01
            # The deadline is said as given, not as the float left of it.
            assert re.search(r"within \d+(\.\d{1,3})? s", str(caught.value)), caught.value
            started = trio.current_time()
            with pytest.raises(TimeoutError):
                await admin.group_lag("g", ["t"])
            assert trio.current_time() - started <= 2.0 + 0.01


async def test_a_partition_the_topic_does_not_have_is_unknown_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """It looked like an outage: LEADER_NOT_AVAILABLE retried for the whole timeout."""
    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap, timeout=5.0) as admin:
            async with Producer(admin.cluster) as producer:
                await producer.send("t", b"x", partition=1)
            started = trio.current_time()
            with pytest.raises(UnknownTopicOrPartition, match=r"t\[9\]: topic 't' has 2"):
                await admin.reset_offsets("g", [TopicPartition("t", 9)], offset=0)
            with pytest.raises(UnknownTopicOrPartition, match="has 2 partitions"):
                await admin.list_offsets([TopicPartition("t", 2)], "latest")
            assert trio.current_time() - started < 1.0
            # The partitions it has are answered as before.
            assert await admin.list_offsets([TopicPartition("t", 1)], "latest") == {
                TopicPartition("t", 1): 1
            }


async def test_numbers_the_wire_cannot_carry_are_refused_naming_the_argument(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Out-of-range numbers reached the encoder: struct.error, or an ExceptionGroup
    from inside list_offsets; each is a ValueError naming the argument, before any
    request."""
    big = TopicPartition("t", 2**31)
    t0 = TopicPartition("t", 0)
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            cases = {
                "partitions": lambda: admin.create_topics({"big": 2**31}),
                "replication_factor": lambda: admin.create_topics([NewTopic("x", 1, 2**15)]),
                "total_count": lambda: admin.create_partitions("t", 2**31),
                "offset spec": lambda: admin.list_offsets([t0], 2**63),
                "list_offsets: the partition index": lambda: admin.list_offsets([big], "latest"),
                "spec must": lambda: admin.reset_offsets("g", [t0], to=2**63, dry_run=True),
                "offset must": lambda: admin.reset_offsets("g", [t0], offset=2**63),
                "t[0]: the offset to delete": lambda: admin.delete_records({t0: 2**63}),
                "fetch_offsets: the partition index": lambda: admin.fetch_offsets("g", [big]),
                "delete_offsets: the partition index": lambda: admin.delete_offsets("g", [big]),
            }
            for named, call in cases.items():
                with pytest.raises(ValueError, match=re.escape(named)) as caught:
                    await call()
                assert type(caught.value) is ValueError, named
            # The connection is fine: the next call works.
            assert await admin.list_offsets([t0], "latest") == {t0: 0}


async def test_a_per_call_timeout_is_checked_as_the_admins_and_every_call_takes_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A negative timeout read as a cluster problem ("did not complete within
    -30 s"); list_groups, delete_groups and delete_offsets took none."""
    t0 = TopicPartition("t", 0)
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            calls = [
                lambda t: admin.list_offsets([t0], "latest", timeout=t),
                lambda t: admin.fetch_offsets("g", timeout=t),
                lambda t: admin.reset_offsets("g", [t0], offset=0, timeout=t),
                lambda t: admin.group_lag("g", timeout=t),
                lambda t: admin.create_topics({"n": 1}, timeout=t),
                lambda t: admin.list_groups(timeout=t),
                lambda t: admin.delete_groups(["g"], timeout=t),
                lambda t: admin.delete_offsets("g", [t0], timeout=t),
            ]
            for call in calls:
                for bad in (-30, 0, float("nan"), float("inf")):
                    with pytest.raises(ConfigError, match="timeout must be a positive finite"):
                        await call(bad)
            assert await admin.list_groups(timeout=5) == []
            await admin.reset_offsets("g", [t0], offset=0, timeout=5)
            await admin.delete_offsets("g", [t0], timeout=5)
            await admin.delete_groups(["g"], timeout=5)
