"""An unreachable cluster reaches the code iterating the group, typed and bounded.

Nothing listening, a host name that does not resolve, and the only broker
dying while a member consumes: each ends ``async for gen in group`` with
:class:`~gengroup.ClusterUnreachable` naming every address tried and why it
failed, after ``unreachable_timeout`` -- and the logs say so once per change
of state, not once per attempt. ``unreachable_timeout=None`` keeps retrying.
A group coordinator that FindCoordinator cannot find (COORDINATOR_NOT_AVAILABLE)
is bounded alike, with :class:`~gengroup.CoordinatorUnavailable`; one that
moves or loads for a while is ridden out.

The address tests use real sockets and real time (a refused connection and a
failed DNS lookup are immediate); the broker-death test runs the embedded
broker in virtual time, as do the coordinator tests.
"""

from __future__ import annotations

import logging
import pickle
import socket
from collections.abc import Callable

import anyio
import pytest
import trio
import trio.testing

from gengroup import (
    Admin,
    BrokerError,
    Cluster,
    ClusterUnreachable,
    ConsumerGroup,
    CoordinatorUnavailable,
    Generation,
    TopicPartition,
)
from gengroup._errors import is_retriable
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Control, Delay, Disconnect, Drop, Fail, Intercepted
from gengroup.protocol.records import NewRecord
from gengroup.protocol.versions import ApiKey

FAST = {
    "unreachable_timeout": 1.0,
    "join_backoff": 0.05,
    "session_timeout": 6.0,
    "heartbeat_interval": 1.0,
}


def closed_port() -> int:
    """A loopback port with nothing listening (bound once, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def count(caplog: pytest.LogCaptureFixture, level: int, text: str, logger: str = "gengroup") -> int:
    return sum(
        1
        for r in caplog.records
        if r.levelno == level and r.name == logger and text in r.getMessage()
    )


def unreachable_warnings(caplog: pytest.LogCaptureFixture) -> int:
    return count(caplog, logging.WARNING, "cluster unreachable", logger="gengroup.cluster")


async def iterate(group: ConsumerGroup) -> None:
    async for gen in group:
        gen.cancel("not expected to form")


def run_on(backend: str, fn: Callable[[], object]) -> None:
    anyio.run(fn, backend=backend)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_nothing_listening_and_unresolvable_host_raise_cluster_unreachable(
    backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    port = closed_port()
    brokers = [f"127.0.0.1:{port}", "nohost.invalid:9092"]
    caught: list[ClusterUnreachable] = []

    async def main() -> None:
        with anyio.fail_after(30.0):  # a hang guard, not a timing assertion
            try:
                async with ConsumerGroup("g", ["t"], brokers, **FAST) as group:
                    await iterate(group)
            except ClusterUnreachable as exc:
                caught.append(exc)

    caplog.set_level(logging.INFO, logger="gengroup")
    run_on(backend, main)
    [exc] = caught
    assert exc.exhausted
    assert exc.unreachable_for >= FAST["unreachable_timeout"]
    assert exc.causes[f"127.0.0.1:{port}"] == "connection refused"
    assert exc.causes["nohost.invalid:9092"].startswith("DNS lookup failed")
    assert f"127.0.0.1:{port}: connection refused" in str(exc)
    # Many attempts were made, one WARNING said so.
    assert unreachable_warnings(caplog) == 1


async def test_unreachable_timeout_none_keeps_retrying(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gengroup")
    settings = {**FAST, "unreachable_timeout": None}
    with anyio.move_on_after(2.5) as scope:
        async with ConsumerGroup("g", ["t"], [f"127.0.0.1:{closed_port()}"], **settings) as group:
            await iterate(group)
    assert scope.cancelled_caught
    assert unreachable_warnings(caplog) == 1


async def test_the_only_broker_dying_ends_the_group_with_cluster_unreachable(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Defaults throughout: the error comes out once the broker has been gone
    for ``unreachable_timeout``, and each kind of failure is logged once."""
    caplog.set_level(logging.INFO, logger="gengroup")
    tp = TopicPartition("t", 0)
    consumed: list[int] = []
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.produce("t", [NewRecord(None, b"v", (), 0) for _ in range(3)])

        async def worker(gen: Generation) -> None:
            async for batch in gen.fetch(tp):
                consumed.extend(r.offset for r in batch.records)
                gen.mark(tp, batch.next_offset)

        with pytest.raises(ClusterUnreachable) as info:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap) as group:
                async for gen in group:
                    gen.start_soon(worker, gen)
                    if not consumed:
                        while not consumed:
                            await trio.sleep(0.1)
                        died_at = trio.current_time()
                        await cluster.stop_broker(0)
    assert consumed == [0, 1, 2]
    exc = info.value
    assert exc.exhausted and list(exc.causes) == [cluster.bootstrap]
    assert exc.causes[cluster.bootstrap] == "connection refused"
    # Bounded: the session (45 s, the generation ends) plus unreachable_timeout
    # (60 s), with slack for the backoffs in virtual time.
    assert trio.current_time() - died_at < 45.0 + 60.0 + 35.0
    assert unreachable_warnings(caplog) == 1
    assert count(caplog, logging.WARNING, "metadata refresh failed") <= 1
    assert count(caplog, logging.INFO, "fetch from broker 0 failed") <= 1
    assert count(caplog, logging.INFO, "heartbeat failed") == 1
    assert count(caplog, logging.INFO, "partition watch failed") <= 1


async def test_the_broker_stopping_during_a_join_is_not_said_to_require_sasl(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The stopping broker closes the JoinGroup's new connection at once, on its
    first request after ApiVersions, then refuses the next connections: the one
    WARNING names the refusal, and nothing suggests the listener requires SASL
    (a listener that does closes every new connection so; see
    tests/embedded/test_security.py)."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with trio.open_nursery() as nursery:

            def stop(call: Intercepted) -> Disconnect:
                nursery.start_soon(cluster.stop_broker, 0)
                return Disconnect()

            cluster.control(ApiKey.JOIN_GROUP, stop, once=True)
            with trio.fail_after(600.0), pytest.raises(ClusterUnreachable) as info:
                async with ConsumerGroup("g", ["t"], cluster.bootstrap, **FAST) as group:
                    await iterate(group)
    assert info.value.exhausted
    assert info.value.causes == {cluster.bootstrap: "connection refused"}
    assert unreachable_warnings(caplog) == 1
    assert not [r.getMessage() for r in caplog.records if "SASL" in r.getMessage()]


async def test_a_connection_closed_once_on_its_first_request_is_no_outage(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The only broker closes one new connection on its first request after
    ApiVersions (a restart, a reaped connection) and serves the next: the group
    forms, and no WARNING called the cluster unreachable."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.control(ApiKey.JOIN_GROUP, lambda call: Disconnect(), once=True)
        with trio.fail_after(600.0):
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **FAST) as group:
                async for gen in group:
                    assert gen.assignments
                    break
    assert unreachable_warnings(caplog) == 0
    assert not [r.getMessage() for r in caplog.records if "SASL" in r.getMessage()]


async def test_an_admin_timeout_names_the_cause_not_none() -> None:
    """Admin's deadline passes while the coordinator lookup inside it is still
    retrying connections: the error names the refused address, not 'None'."""
    port = closed_port()
    async with Admin(f"127.0.0.1:{port}", timeout=1.0) as admin:
        with pytest.raises(TimeoutError) as info:
            await admin.fetch_offsets("g")
    assert f"127.0.0.1:{port}: connection refused" in str(info.value)
    assert "last error: None" not in str(info.value)


async def test_a_broker_that_never_answers_is_unreachable_from_the_first_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A broker that accepts connections and never answers: each attempt takes
    the connect timeout (10 s), and the outage counts from the first one's
    start, so the group fails once ``unreachable_timeout`` (8 s) has passed,
    at the end of that attempt; it used to count from its end and fail 30 s
    in."""
    async with FakeCluster(topics={"t": 1}) as cluster:
        cluster.control(ApiKey.API_VERSIONS, lambda call: Drop())
        started = trio.current_time()
        with pytest.raises(ClusterUnreachable) as caught:
            async with ConsumerGroup(
                "g", ["t"], cluster.bootstrap, **{**FAST, "unreachable_timeout": 8.0}
            ) as group:
                await iterate(group)
        assert caught.value.exhausted
        assert trio.current_time() - started == pytest.approx(10.0, abs=1.0)
        assert caught.value.unreachable_for == pytest.approx(10.0, abs=1.0)


def coordinator_warnings(caplog: pytest.LogCaptureFixture) -> int:
    """The WARNINGs that the coordinator was unavailable long (the first answer is an INFO)."""
    return count(caplog, logging.WARNING, "not available for", logger="gengroup.cluster")


def coordinator_infos(caplog: pytest.LogCaptureFixture) -> int:
    return count(caplog, logging.INFO, "not available;", logger="gengroup.cluster")


async def until_unavailable(
    api: ApiKey, code: int, protocol: str
) -> tuple[CoordinatorUnavailable, float, Control]:
    """A group (defaults throughout) on an embedded cluster whose ``api``
    answers ``code`` for good: the CoordinatorUnavailable it ends with, how
    long that took, and the refusing control."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        refusing = cluster.control(api, lambda call: Fail(code))
        started = trio.current_time()
        # fail_after: a hang guard in virtual time, not a timing assertion.
        with trio.fail_after(600.0), pytest.raises(CoordinatorUnavailable) as caught:
            async with ConsumerGroup(
                "g", ["t"], cluster.bootstrap, group_protocol=protocol
            ) as group:
                await iterate(group)
        return caught.value, trio.current_time() - started, refusing


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_coordinator_never_available_ends_the_group_with_coordinator_unavailable(
    protocol: str, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """FindCoordinator answering COORDINATOR_NOT_AVAILABLE for good (the offsets
    topic cannot be created) reaches ``async for`` once it has lasted
    ``unreachable_timeout`` (defaults throughout: 60 s), typed, logged once;
    the lookups meanwhile back off. It used to be looked up forever."""
    caplog.set_level(logging.INFO, logger="gengroup")
    exc, waited, lookups = await until_unavailable(ApiKey.FIND_COORDINATOR, 15, protocol)
    assert exc.exhausted and exc.key == "g" and exc.code == 15
    assert isinstance(exc, BrokerError) and not is_retriable(exc)
    assert 60.0 <= exc.unavailable_for <= waited
    # Bounded: unreachable_timeout, then at most the join backoff's cap (30 s).
    assert waited <= 60.0 + 30.0
    # Backed off (capped at 1 s, jittered): not a lookup per millisecond.
    assert 10 < lookups.handled < 2 * waited
    assert (coordinator_infos(caplog), coordinator_warnings(caplog)) == (1, 1)
    copy = pickle.loads(pickle.dumps(exc))
    assert (type(copy), str(copy), copy.key, copy.exhausted) == (
        CoordinatorUnavailable,
        str(exc),
        "g",
        True,
    )


async def test_unreachable_timeout_none_waits_for_a_coordinator(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """With ``unreachable_timeout=None`` the group waits for a coordinator
    however long it takes, saying so once; it forms once one is found."""
    caplog.set_level(logging.DEBUG, logger="gengroup")
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        available_at = trio.current_time() + 300.0

        def unavailable_for_five_minutes(call: Intercepted) -> Fail | None:
            return Fail(15) if trio.current_time() < available_at else None

        cluster.control(ApiKey.FIND_COORDINATOR, unavailable_for_five_minutes)
        async with ConsumerGroup(
            "g", ["t"], cluster.bootstrap, **{**FAST, "unreachable_timeout": None}
        ) as group:
            async for gen in group:
                assert set(gen.assignments) == {TopicPartition("t", 0)}
                break
    assert trio.current_time() >= available_at
    assert (coordinator_infos(caplog), coordinator_warnings(caplog)) == (1, 1)
    # Lookups timed out meanwhile (45 s each); the WARNING said why, once.
    assert count(caplog, logging.DEBUG, "coordinator unreachable") >= 5
    assert count(caplog, logging.INFO, "coordinator unreachable") == 0
    assert count(caplog, logging.INFO, "coordinator of 'g' found", logger="gengroup.cluster") == 1


async def test_a_coordinator_moving_or_loading_is_ridden_out(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """COORDINATOR_NOT_AVAILABLE for less than ``unreachable_timeout`` (the
    coordinator moving), then COORDINATOR_LOAD_IN_PROGRESS from JoinGroup for
    longer than it (a large group loading): the group forms. Only
    FindCoordinator's answers count, and a coordinator found resets them."""
    caplog.set_level(logging.INFO, logger="gengroup")
    settings = {**FAST, "unreachable_timeout": 10.0}
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        moved_at = trio.current_time() + 8.0
        loaded_at = moved_at + 30.0

        def moving(call: Intercepted) -> Fail | None:
            return Fail(15) if trio.current_time() < moved_at else None

        def loading(call: Intercepted) -> Fail | None:
            return Fail(14) if trio.current_time() < loaded_at else None

        cluster.control(ApiKey.FIND_COORDINATOR, moving)
        cluster.control(ApiKey.JOIN_GROUP, loading)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            async for gen in group:
                assert set(gen.assignments) == {TopicPartition("t", 0)}
                break
    assert trio.current_time() >= loaded_at
    # Unavailable for 8 s: said once, as an INFO (a move, not yet a WARNING).
    assert (coordinator_infos(caplog), coordinator_warnings(caplog)) == (1, 0)


async def test_a_coordinator_unavailable_long_ago_is_counted_anew(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A lookup that gave up, then another much later: the outage is counted
    from the later answer (nobody knows what happened in between), not
    exhausted at its first answer."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.control(ApiKey.FIND_COORDINATOR, lambda call: Fail(15))
        async with Cluster(cluster.bootstrap, unreachable_timeout=10.0) as client:
            with pytest.raises(TimeoutError):
                await client.find_coordinator("g", timeout=3.0)
            await trio.sleep(60.0)
            started = trio.current_time()
            with pytest.raises(CoordinatorUnavailable) as caught:
                await client.find_coordinator("g", timeout=30.0)
            assert caught.value.exhausted
            assert trio.current_time() - started >= 10.0


def refusal_logs(caplog: pytest.LogCaptureFixture) -> tuple[int, int, int]:
    """(INFO that the coordinator found does not serve the group, WARNING that
    it has not for long, INFO that it serves it again)."""
    return (
        count(caplog, logging.INFO, "does not serve the group"),
        count(caplog, logging.WARNING, "has not served the group for"),
        count(caplog, logging.INFO, "serves the group again"),
    )


@pytest.mark.parametrize(
    ("protocol", "api", "code"),
    [
        ("classic", ApiKey.JOIN_GROUP, 15),
        ("classic", ApiKey.JOIN_GROUP, 16),
        ("classic", ApiKey.SYNC_GROUP, 16),
        ("classic", ApiKey.OFFSET_FETCH, 16),
        ("consumer", ApiKey.CONSUMER_GROUP_HEARTBEAT, 15),
        ("consumer", ApiKey.CONSUMER_GROUP_HEARTBEAT, 16),
    ],
    ids=lambda v: v if isinstance(v, str) else getattr(v, "name", str(v)),
)
async def test_a_coordinator_found_that_never_serves_the_group_ends_it(
    protocol: str,
    api: ApiKey,
    code: int,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """FindCoordinator names a broker, and that broker answers the group's
    requests NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE for good (its view
    of the offsets topic is stale, its coordinator failed): the lookups all
    succeed, yet the group is as stuck as with no coordinator. It reaches
    ``async for`` once it has lasted ``unreachable_timeout`` (defaults: 60 s),
    typed, with one INFO and one WARNING; it used to retry forever, silently."""
    caplog.set_level(logging.INFO, logger="gengroup")
    exc, waited, refused = await until_unavailable(api, code, protocol)
    assert exc.exhausted and exc.key == "g"
    assert f"answered {REQUEST_NAMES[api]}" in str(exc)
    assert error_name(code) in str(exc)
    # Bounded: unreachable_timeout, then at most one join backoff (capped at
    # 30 s, jittered up to 20 % more) and a round trip.
    assert 60.0 <= exc.unavailable_for <= waited <= 60.0 + 1.2 * 30.0 + 1.0
    # Backed off between attempts.
    assert 3 <= refused.handled <= 20
    assert refusal_logs(caplog) == (1, 1, 0)
    assert count(caplog, logging.INFO, "rejoining") == 0


async def test_a_coordinator_loading_for_long_is_waited_for_and_said_once(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """COORDINATOR_LOAD_IN_PROGRESS from JoinGroup for three times
    ``unreachable_timeout`` (a large group's state loading): the group waits
    for the same coordinator and forms; the wait is said once when it starts,
    once when it is long and once when it ends, not at every attempt."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        loaded_at = trio.current_time() + 30.0

        def loading(call: Intercepted) -> Fail | None:
            return Fail(14) if trio.current_time() < loaded_at else None

        lookups: list[float] = []
        cluster.control(ApiKey.JOIN_GROUP, loading)
        cluster.control(ApiKey.FIND_COORDINATOR, lambda call: lookups.append(0.0))
        async with ConsumerGroup(
            "g", ["t"], cluster.bootstrap, **{**FAST, "unreachable_timeout": 10.0}
        ) as group:
            async for gen in group:
                assert set(gen.assignments) == {TopicPartition("t", 0)}
                break
    assert trio.current_time() >= loaded_at
    assert refusal_logs(caplog) == (1, 1, 1)
    assert len(lookups) == 1  # the coordinator is the right one: not looked up again
    assert count(caplog, logging.INFO, "rejoining") == 0


REQUEST_NAMES = {
    ApiKey.JOIN_GROUP: "JoinGroup",
    ApiKey.SYNC_GROUP: "SyncGroup",
    ApiKey.OFFSET_FETCH: "OffsetFetch",
    ApiKey.CONSUMER_GROUP_HEARTBEAT: "ConsumerGroupHeartbeat",
}


@pytest.mark.parametrize(("hold", "holds"), [(60.0, 1), (35.0, 2)])
async def test_a_coordinator_that_holds_the_join_before_refusing_it_served_the_group(
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    hold: float,
    holds: int,
) -> None:
    """JoinGroup refused NOT_COORDINATOR (a move), then held ``hold`` seconds
    by the next coordinator (a rebalance waiting for members) before it too
    moved and refused it, ``holds`` times: the coordinators served the group
    while they held it, so however long that took the refusals are not an
    outage of ``unreachable_timeout`` (defaults: 60 s), and the group forms."""
    caplog.set_level(logging.INFO, logger="gengroup")
    answered = 0

    def join(call: Intercepted) -> Fail | Delay | None:
        nonlocal answered
        answered += 1
        if answered == 1:
            return Fail(16)
        return Delay(hold, Fail(16)) if answered <= 1 + holds else None

    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        cluster.control(ApiKey.JOIN_GROUP, join)
        with trio.fail_after(600.0):  # a hang guard in virtual time
            async with ConsumerGroup("g", ["t"], cluster.bootstrap) as group:
                async for gen in group:
                    assert set(gen.assignments) == {TopicPartition("t", 0)}
                    break
    assert answered > 1 + holds  # every refusal was answered before it formed
    assert refusal_logs(caplog)[1] == 0  # never refused for 10 s running


async def test_a_consumer_protocol_outage_is_said_once_with_the_broker_and_request(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A KIP-848 member whose heartbeat and start offsets are both refused
    NOT_COORDINATOR for 40 s, then served: one INFO naming the broker and the
    request, one WARNING, one INFO when it is served again, not one of each
    per refused request."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        moved_at: float | None = None

        def moved(call: Intercepted) -> Fail | None:
            # The first heartbeat (the join) is served; then the coordinator moves.
            nonlocal moved_at
            now = trio.current_time()
            if moved_at is None and call.api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT:
                moved_at = now
                return None
            return Fail(16) if moved_at is not None and now < moved_at + 40.0 else None

        cluster.control(ApiKey.CONSUMER_GROUP_HEARTBEAT, moved)
        cluster.control(ApiKey.OFFSET_FETCH, moved)
        with trio.fail_after(600.0):  # a hang guard in virtual time
            async with ConsumerGroup(
                "g", ["t"], cluster.bootstrap, group_protocol="consumer"
            ) as group:
                async for gen in group:
                    assert len(gen.assignments) == 2
                    break
    assert refusal_logs(caplog) == (1, 1, 1)
    [said] = [
        r.getMessage() for r in caplog.records if "does not serve the group" in r.getMessage()
    ]
    assert "node 0 answered " in said and "NOT_COORDINATOR" in said


def error_name(code: int) -> str:
    return {15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR"}[code]


async def test_a_coordinator_lost_while_forming_is_said_once(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The coordinator's connection breaks at every JoinGroup for 5 s (its node
    died, and FindCoordinator names it until the cluster notices): the group
    forms once it is back, and "coordinator unreachable" is one INFO line,
    the attempts after it DEBUG, not one INFO line per attempt."""
    caplog.set_level(logging.DEBUG, logger="gengroup")
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        back_at = trio.current_time() + 5.0

        def breaking(call: Intercepted) -> Disconnect | None:
            return Disconnect() if trio.current_time() < back_at else None

        broken = cluster.control(ApiKey.JOIN_GROUP, breaking)
        with trio.fail_after(600.0):  # a hang guard in virtual time
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **FAST) as group:
                async for gen in group:
                    assert set(gen.assignments) == {TopicPartition("t", 0)}
                    break
    assert broken.handled >= 3
    assert count(caplog, logging.INFO, "coordinator unreachable") == 1
    assert count(caplog, logging.DEBUG, "coordinator unreachable") >= 2
