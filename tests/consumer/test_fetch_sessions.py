"""Incremental fetch sessions (KIP-227) in a member with many mostly idle partitions.

On Apache Kafka, after each fetch connection's first (full) request the
requests are incremental and name a few partitions, not the hundred
assigned; every record is processed exactly once. Sessions the broker
drops or rejects mid-stream (a broken fetch connection, an epoch out of
order, a session it does not know) make the next request full again, and
still nothing is lost or processed twice. Every scenario runs on
Apache Kafka and on the embedded broker, which keeps sessions as Kafka does;
``fetch_sessions=False`` sends full requests to both, and a broker that
declines sessions (no cache slots) gets full requests, declined once in the
log.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from gengroup import ConsumerGroup, Generation, Producer
from gengroup.broker import BrokerSettings
from gengroup.consumer.metrics import GroupMetrics
from gengroup.producer import ProducerRecord
from gengroup.protocol.fetch_session import FetchPlan, FetchSession
from gengroup.testing.pytest_plugin import make_unique_name

from .helpers import FAST, Ledger, assert_processed_once, broker_under_test, create_topic

PARTITIONS = 100
#: The partitions records are produced to; the other 95 stay idle.
BUSY = (0, 17, 42, 63, 99)
WAVE = 100

BROKERS = [
    pytest.param("kafka", True, id="kafka", marks=pytest.mark.kafka),
    pytest.param("kafka", False, id="kafka-sessions-off", marks=pytest.mark.kafka),
    pytest.param("embedded", True, id="embedded"),
    pytest.param("embedded", False, id="embedded-sessions-off"),
    pytest.param("embedded-no-slots", True, id="embedded-declining"),
]
#: Whether each broker grants the sessions it is asked for.
GRANTS = {"kafka": True, "embedded": True, "embedded-no-slots": False}


class Wave:
    """Produces waves of ``id-<n>`` records to the busy partitions, numbered on."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic, self.sent = bootstrap, topic, 0

    async def send(self, producer: Producer, count: int = WAVE) -> None:
        first, self.sent = self.sent, self.sent + count
        await producer.send_many(
            self.topic,
            [
                ProducerRecord(value=f"id-{i}".encode(), partition=BUSY[i % len(BUSY)])
                for i in range(first, self.sent)
            ],
        )

    def expected(self) -> set[bytes]:
        return {f"id-{i}".encode() for i in range(self.sent)}


async def wait_for(predicate: Any, what: str, timeout: float = 60.0) -> None:
    with anyio.fail_after(timeout):  # a hang guard, not a timing assertion
        while not predicate():
            await anyio.sleep(0.05)


async def setup(bootstrap: str) -> tuple[str, str, Wave]:
    topic, group_id = make_unique_name("fsess"), make_unique_name("g")
    await create_topic(bootstrap, topic, PARTITIONS)
    return topic, group_id, Wave(bootstrap, topic)


@pytest.mark.parametrize(("broker", "sessions"), BROKERS)
async def test_many_idle_partitions_are_consumed_once_with_few_partitions_per_request(
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
    broker: str,
    sessions: bool,
) -> None:
    slots = 0 if broker == "embedded-no-slots" else 1000
    settings = BrokerSettings(
        group_initial_rebalance_delay_ms=0, max_incremental_fetch_session_cache_slots=slots
    )
    caplog.set_level(logging.INFO, logger="gengroup")
    which = broker.removesuffix("-no-slots")
    async with broker_under_test(request, which, settings) as bootstrap:
        now, idle = await many_idle_partitions_consumed_once(bootstrap, sessions)
    assert now.fetch_session_resets == 0
    declined = [r for r in caplog.records if "declined a fetch session" in r.getMessage()]
    # Logged once (one broker), not per request.
    assert len(declined) == (sessions and not GRANTS[broker]), declined
    requests = idle.fetch_requests_full + idle.fetch_requests_incremental
    assert requests >= IDLE_FETCHES
    if sessions and GRANTS[broker]:
        # One full request per fetch connection, then incremental ones naming
        # the busy partitions as they move (and those going back and forth
        # between the two connections); long polls over idle partitions name
        # none.
        assert now.fetch_requests_full <= 2, now
        assert now.fetch_requests_incremental >= 4 * now.fetch_requests_full, now
        assert idle.fetch_requests_full == 0, idle
        assert idle.fetch_partitions_sent <= requests, idle
    else:
        # Sessions off, or declined: every request named every partition it
        # fetched; the idle long polls name all of them, in one request or
        # shared by the two connections.
        assert now.fetch_requests_incremental == 0
        assert now.fetch_partitions_forgotten == 0
        assert idle.fetch_partitions_sent >= 0.45 * PARTITIONS * requests, idle


#: Fetch answers the idle member gets at the end.
IDLE_FETCHES = 10


def delta(after: GroupMetrics, before: GroupMetrics) -> GroupMetrics:
    """The counters of the fetch requests between two snapshots."""
    names = (
        "fetches",
        "fetch_requests_full",
        "fetch_requests_incremental",
        "fetch_partitions_sent",
        "fetch_partitions_forgotten",
        "fetch_session_resets",
    )
    return GroupMetrics(**{n: getattr(after, n) - getattr(before, n) for n in names})


async def many_idle_partitions_consumed_once(
    bootstrap: str, sessions: bool
) -> tuple[GroupMetrics, GroupMetrics]:
    """One member over ``PARTITIONS`` partitions, five of them busy: waves of
    records, each processed exactly once, then ``IDLE_FETCHES`` long polls with
    nothing to read. Returns the member's counters, and those of the idle polls."""
    topic, group_id, wave = await setup(bootstrap)
    ledger = Ledger()
    async with Producer(bootstrap) as producer:
        await wave.send(producer, 5 * WAVE)
        async with (
            ConsumerGroup(group_id, [topic], bootstrap, fetch_sessions=sessions, **FAST) as group,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(ledger.member, "m", group)
            for _ in range(6):
                await wait_for(
                    lambda: set(ledger.processed) == wave.expected(), f"{wave.sent} records"
                )
                await wave.send(producer)
            await wait_for(lambda: set(ledger.processed) == wave.expected(), "the last wave")
            # The answer bringing the last records may be followed by one
            # asking for the partitions' new positions: idle from the next.
            settled = group.metrics().fetches + 2
            await wait_for(lambda: group.metrics().fetches >= settled, "two more fetches")
            before = group.metrics()
            await wait_for(
                lambda: group.metrics().fetches >= before.fetches + IDLE_FETCHES, "idle polls"
            )
            now = group.metrics()
            tg.cancel_scope.cancel()
    assert_processed_once(ledger, wave.expected(), {})
    assert now.generations == 1
    return now, delta(now, before)


@pytest.mark.parametrize("broker", [pytest.param("kafka", marks=pytest.mark.kafka), "embedded"])
async def test_dropped_and_rejected_sessions_lose_and_repeat_nothing(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture, broker: str
) -> None:
    settings = BrokerSettings(group_initial_rebalance_delay_ms=0)
    caplog.set_level(logging.INFO, logger="gengroup")
    async with broker_under_test(request, broker, settings) as bootstrap:
        now = await sessions_reset_mid_stream(bootstrap)
    assert now.fetch_session_resets >= 3, now
    reasons = " ".join(r.getMessage() for r in caplog.records if "fetch session" in r.getMessage())
    # The broker itself refused the epoch and the unknown session.
    assert "INVALID_FETCH_SESSION_EPOCH" in reasons, reasons
    assert "FETCH_SESSION_ID_NOT_FOUND" in reasons, reasons
    assert "request failed" in reasons, reasons


def live_sessions(gen: Generation) -> list[FetchSession]:
    return [s for s in gen._prefetcher._sessions if s.established]


async def sessions_reset_mid_stream(bootstrap: str) -> GroupMetrics:
    """Records flow while the member's fetch sessions are broken three ways,
    each followed by a wave: every record is processed exactly once."""
    topic, group_id, wave = await setup(bootstrap)
    ledger = Ledger()

    async def disturbed(group: ConsumerGroup, producer: Producer, harm: Any) -> None:
        # A harm can miss: the member fetches on two connections, and a
        # session whose first (full) request is in flight is not established
        # yet, so the harm leaves it alone; if the next waves all go through
        # it, the harmed one is not used again. Then the harm is repeated
        # (each time with a wave), until a session is dropped.
        gen = ledger.current()["m"]
        resets = group.metrics().fetch_session_resets
        for _ in range(10):
            await wait_for(lambda: bool(live_sessions(gen)), "an incremental session")
            await harm(gen, group)
            await wave.send(producer)
            with anyio.move_on_after(5):  # a retry interval, not a timing assertion
                await wait_for(lambda: group.metrics().fetch_session_resets > resets, "a reset")
            if group.metrics().fetch_session_resets > resets:
                break
        else:
            raise AssertionError(f"{harm.__name__} dropped no session in 10 tries")
        await wait_for(lambda: set(ledger.processed) == wave.expected(), f"{wave.sent} records")

    async def close_fetch_connections(gen: Generation, group: ConsumerGroup) -> None:
        for (_, channel), conn in list(group.cluster._conns.items()):
            if channel.startswith("fetch"):
                await conn.aclose()

    async def skip_an_epoch(gen: Generation, group: ConsumerGroup) -> None:
        for session in live_sessions(gen):
            session._epoch += 5

    async def forget_the_session_id(gen: Generation, group: ConsumerGroup) -> None:
        for session in live_sessions(gen):
            session._session_id ^= 0x5A5A5A5

    async with Producer(bootstrap) as producer:
        await wave.send(producer, 2 * WAVE)
        async with (
            ConsumerGroup(group_id, [topic], bootstrap, **FAST) as group,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(ledger.member, "m", group)
            await wait_for(lambda: set(ledger.processed) == wave.expected(), "the first records")
            for harm in (close_fetch_connections, skip_an_epoch, forget_the_session_id) * 2:
                await disturbed(group, producer, harm)
            await wave.send(producer)
            await wait_for(lambda: set(ledger.processed) == wave.expected(), "the last wave")
            now = group.metrics()
            tg.cancel_scope.cancel()
    assert_processed_once(ledger, wave.expected(), {})
    assert now.fetch_requests_incremental > now.fetch_requests_full, now
    return now


@pytest.mark.parametrize("broker", [pytest.param("kafka", marks=pytest.mark.kafka), "embedded"])
async def test_a_new_generation_closes_the_sessions_of_the_last(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, broker: str
) -> None:
    """The sessions an ended generation's prefetcher leaves are named (epoch 0)
    in the next one's first requests: the broker drops them as it creates the
    new ones, refusing nothing; every record is still processed once."""
    closed: list[int] = []
    plan = FetchSession.plan

    def spy(session: FetchSession, desired: Any, *args: Any) -> FetchPlan:
        made = plan(session, desired, *args)
        if made.epoch == 0 and made.session_id:
            closed.append(made.session_id)
        return made

    monkeypatch.setattr(FetchSession, "plan", spy)
    settings = BrokerSettings(group_initial_rebalance_delay_ms=0)
    async with broker_under_test(request, broker, settings) as bootstrap:
        now, ids = await generations_in_turn(bootstrap, 3)
    assert (now.fetch_errors, now.fetch_session_resets) == (0, 0), now
    assert now.fetch_requests_full <= 2 * now.generations, now
    # Each generation's sessions, closed by the next generation.
    assert sorted(closed) == sorted(i for gen in ids[:-1] for i in gen), (closed, ids)


async def generations_in_turn(bootstrap: str, count: int) -> tuple[GroupMetrics, list[set[int]]]:
    """One member ends ``count - 1`` generations once each has an incremental
    session, a wave of records between them, every record processed once.
    Returns its counters and each generation's session ids."""
    topic, group_id, wave = await setup(bootstrap)
    ledger = Ledger()
    ids: list[set[int]] = []

    async def sessions_of(gen: Generation) -> set[int]:
        await wait_for(lambda: bool(live_sessions(gen)), "an incremental session")
        return {s.session_id for s in gen._prefetcher._sessions if s.session_id}

    async with Producer(bootstrap) as producer:
        await wave.send(producer)
        async with (
            ConsumerGroup(group_id, [topic], bootstrap, **FAST) as group,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(ledger.member, "m", group)
            for n in range(1, count + 1):
                await wait_for(lambda: set(ledger.processed) == wave.expected(), "records")
                formed = ledger.generations.setdefault("m", [])
                await wait_for(lambda: len(formed) == n, "generation")  # noqa: B023
                gen = ledger.generations["m"][-1]
                ids.append(await sessions_of(gen))
                if n < count:
                    gen.cancel()
                    await wave.send(producer)
            await wait_for(lambda: set(ledger.processed) == wave.expected(), "the last wave")
            now = group.metrics()
            tg.cancel_scope.cancel()
    assert_processed_once(ledger, wave.expected(), {})
    assert now.generations == count
    return now, ids
