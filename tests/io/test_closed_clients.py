"""A client used after it was closed fails at once, with a typed error.

On the embedded broker in virtual time (trio's MockClock): an error that
came only after retrying until a timeout would show as virtual time passed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from gengroup import Admin, Cluster, ConsumerGroup, GengroupError, GroupClosed, Producer
from gengroup._errors import ConnectionClosed
from gengroup._types import TopicPartition
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Fail
from gengroup.io.retry import Backoff, ClientClosed, retry
from gengroup.protocol.versions import ApiKey

TP = TopicPartition("t", 0)

#: Every operation of an Admin, called with arguments that would succeed.
ADMIN_CALLS: dict[str, Callable[[Admin], Awaitable[Any]]] = {
    "create_topics": lambda a: a.create_topics({"u": 1}),
    "delete_topics": lambda a: a.delete_topics(["t"]),
    "create_partitions": lambda a: a.create_partitions("t", 2),
    "list_offsets": lambda a: a.list_offsets([TP], "latest"),
    "delete_records": lambda a: a.delete_records({TP: 0}),
    "list_groups": lambda a: a.list_groups(),
    "describe_groups": lambda a: a.describe_groups(["g"]),
    "delete_groups": lambda a: a.delete_groups(["g"]),
    "fetch_offsets": lambda a: a.fetch_offsets("g"),
    "group_lag": lambda a: a.group_lag("g"),
    "reset_offsets": lambda a: a.reset_offsets("g", [TP], to="earliest"),
    "delete_offsets": lambda a: a.delete_offsets("g", [TP]),
}


async def _fails_at_once(call: Awaitable[Any]) -> ConnectionClosed:
    t0 = trio.current_time()
    with pytest.raises(ConnectionClosed, match="closed") as caught:
        await call
    assert trio.current_time() == t0  # no retry, no backoff
    return caught.value


@pytest.mark.parametrize("name", sorted(ADMIN_CALLS))
async def test_an_admin_used_after_its_async_with_fails_at_once(
    autojump_clock: trio.testing.MockClock, name: str
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap) as admin:
            await admin.fetch_offsets("g")  # it works while open
        error = await _fails_at_once(ADMIN_CALLS[name](admin))
        assert "Admin" in str(error)


async def test_clients_on_a_shared_cluster_that_was_closed_fail_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with Cluster(cluster.bootstrap) as shared:
            admin = Admin(shared)
            await admin.fetch_offsets("g")
        await _fails_at_once(admin.fetch_offsets("g"))
        await _fails_at_once(admin.create_topics({"u": 1}))
        async with Producer(shared) as producer:
            await _fails_at_once(producer.send("t", b"x"))


async def test_a_consumer_group_is_not_used_again_after_it_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        group = ConsumerGroup("g", ["t"], cluster.bootstrap)
        async with group:
            await group.next()
        t0 = trio.current_time()
        with pytest.raises(GroupClosed):
            await group.next()
        with pytest.raises(GengroupError, match="entered only once"):
            async with group:
                pass
        assert trio.current_time() == t0


async def test_a_client_left_unentered_or_entered_again_is_a_gengroup_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``ConsumerGroup.__aexit__`` without ``__aenter__`` tripped an assert; an
    Admin and a Cluster left unentered said nothing, and were entered twice."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        makers: dict[str, Callable[[], Any]] = {
            "ConsumerGroup": lambda: ConsumerGroup("g", ["t"], cluster.bootstrap),
            "Producer": lambda: Producer(cluster.bootstrap),
            "Admin": lambda: Admin(cluster.bootstrap),
            "Cluster": lambda: Cluster(cluster.bootstrap),
        }
        for make in makers.values():
            with pytest.raises(GengroupError, match=r"was not entered \(async with\)"):
                await make().__aexit__(None, None, None)
            client = make()
            async with client:
                with pytest.raises(GengroupError, match="entered only once"):
                    async with client:
                        pass
            await client.__aexit__(None, None, None)  # left already: nothing more
            with pytest.raises(GengroupError, match="entered only once"):
                async with client:
                    pass
        unentered = Cluster(cluster.bootstrap)
        await unentered.aclose()
        with pytest.raises(GengroupError, match=r"not after aclose\(\)"):
            async with unentered:
                pass
    with pytest.raises(RuntimeError, match="FakeCluster is not running"):
        await FakeCluster().__aexit__(None, None, None)


async def test_retry_never_retries_a_closed_client(autojump_clock: trio.testing.MockClock) -> None:
    """Whatever the caller's predicate says: nothing reopens a closed client."""
    attempts: list[float] = []

    async def attempt() -> None:
        attempts.append(trio.current_time())
        raise ClientClosed("the Cluster is closed")

    with pytest.raises(ClientClosed):
        await retry("x", attempt, timeout=30.0, backoff=Backoff(0.1), retriable=lambda exc: True)
    assert len(attempts) == 1


async def test_records_waiting_for_a_leader_fail_at_once_when_the_shared_cluster_closes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Records whose partition has no leader known kept retrying after the
    Cluster the Producer was given was closed, and failed with RequestTimedOut
    at their delivery timeout; they fail with ClientClosed once the producer's
    metadata refresh finds it closed, each sender with its own copy."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with Cluster(cluster.bootstrap) as shared, Producer(shared) as producer:
            await producer.send("t", b"warm-up")
            cluster.control(ApiKey.METADATA, lambda call: Fail(5))  # LEADER_NOT_AVAILABLE
            cluster.control(ApiKey.PRODUCE, lambda call: Fail(6), once=True)  # NOT_LEADER
            errors: list[BaseException] = []

            async def send(value: bytes) -> None:
                try:
                    await producer.send("t", value, partition=0)
                except ConnectionClosed as exc:
                    errors.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send, b"a")
                nursery.start_soon(send, b"b")
                await trio.sleep(5)  # retrying, waiting for a leader
                assert errors == []
                closed_at = trio.current_time()
                await shared.aclose()
            assert trio.current_time() - closed_at < 5  # not delivery_timeout (120 s)
            assert [type(e) for e in errors] == [ClientClosed, ClientClosed]
            assert errors[0] is not errors[1]
