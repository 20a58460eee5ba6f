"""How fast a cooperative rebalance's second phase starts, in virtual time.

A member joins a cooperative group: in phase one the others give up the
partitions it is to get and rejoin at once; the newcomer learns of phase two
at its next heartbeat. A cooperative generation beats early, so phase two
starts within milliseconds of phase one, not a heartbeat interval later. On
the embedded broker, in trio's virtual time, so the times are exact.
"""

from __future__ import annotations

import itertools

import pytest
import trio
import trio.testing

from gengroup import ConsumerGroup, CooperativeStickyBalancer, Generation, RangeBalancer
from gengroup.broker import BrokerSettings, FakeCluster
from gengroup.broker.faults import Intercepted
from gengroup.consumer.cadence import FIRST_EARLY_BEAT, beat_period
from gengroup.protocol.versions import ApiKey

from .cooperative import SpanLedger, group_on, wait_until
from .helpers import EMBEDDED_SETTINGS, all_partitions

PARTITIONS = 6
INTERVAL = EMBEDDED_SETTINGS["heartbeat_interval"]
PERIOD = beat_period(INTERVAL, EMBEDDED_SETTINGS["session_timeout"])


async def newcomer_generations(
    balancer: CooperativeStickyBalancer | RangeBalancer | None,
    acks: list[float] | None = None,
) -> list[tuple[float, Generation]]:
    """Two members share the topic; a third joins. Its generations, with the
    virtual time each was handed out at. ``None``: the consumer protocol
    (KIP-848), its heartbeat interval the same; ``acks`` then gets the times
    of the heartbeats in which m1 or m2 reported fewer partitions than before
    (acknowledging a revocation)."""
    owned: dict[str, int] = {}

    def heartbeat(call: Intercepted) -> None:
        name = str(call.client_id)
        parts = call.request.topic_partitions
        count = sum(len(t.partitions) for t in parts) if parts is not None else None
        if count is not None and acks is not None and name != "m3":
            if count < owned.get(name, 0):
                acks.append(trio.current_time())
            owned[name] = count

    every = all_partitions("t", PARTITIONS)
    ledger = SpanLedger()
    received: list[tuple[float, Generation]] = []
    settings = BrokerSettings(
        group_initial_rebalance_delay_ms=0,
        group_consumer_heartbeat_interval_ms=int(INTERVAL * 1000),
    )
    async with FakeCluster(topics={"t": PARTITIONS}, settings=settings) as cluster:
        cluster.control(ApiKey.CONSUMER_GROUP_HEARTBEAT, heartbeat)

        def open_group(name: str) -> ConsumerGroup:
            if balancer is None:
                return group_on(cluster, name, [], group_protocol="consumer")
            return group_on(cluster, name, [balancer])

        async def newcomer() -> None:
            async with open_group("m3") as group:
                async for gen in group:
                    received.append((trio.current_time(), gen))
                    ledger.generations.setdefault("m3", []).append(gen)
                    for tp in sorted(gen.added):
                        gen.start_soon(ledger.worker, "m3", gen, tp, partition=tp)

        async def member(name: str) -> None:
            async with open_group(name) as group:
                await ledger.member(name, group)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(member, "m1")
            nursery.start_soon(member, "m2")
            # (Under the consumer protocol each member has its own epoch.)
            same = balancer is not None
            await wait_until(lambda: ledger.stable({"m1", "m2"}, every, same), "two members", 120)
            # Well past the join, so that heartbeats are not due by chance.
            await trio.sleep(INTERVAL * 0.3)
            nursery.start_soon(newcomer)
            await wait_until(
                lambda: ledger.stable({"m1", "m2", "m3"}, every, same_generation=False),
                "three members",
                120,
            )
            nursery.cancel_scope.cancel()
    return received


async def test_a_newcomer_gets_its_partitions_without_waiting_a_heartbeat_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    received = await newcomer_generations(CooperativeStickyBalancer())
    # Phase one gives the newcomer nothing (the partitions are being revoked);
    # phase two gives it its share.
    (first_at, first), (second_at, second) = received[0], received[-1]
    assert not first.assignments and len(second.assignments) == PARTITIONS // 3
    assert first.rebalance_protocol == second.rebalance_protocol == "cooperative"
    # Without early beats the newcomer heard of phase two at its first regular
    # heartbeat, a whole interval after phase one.
    assert second_at - first_at < INTERVAL / 2, (first_at, second_at)
    # The first early beat already found phase two under way.
    assert second_at - first_at == pytest.approx(FIRST_EARLY_BEAT)


async def test_an_eager_group_keeps_its_regular_heartbeats(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Eager rebalances have no second phase: one generation, no early beats
    (a newcomer's single generation has its share at once)."""
    received = await newcomer_generations(RangeBalancer())
    assert len(received) == 1
    assert len(received[0][1].assignments) == PARTITIONS // 3


async def test_a_consumer_protocol_newcomer_gets_its_partitions_without_waiting_an_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """KIP-848: the newcomer's first epoch brings none of its partitions (the
    others still own them); they come with the answer to a heartbeat after
    the owners, at their own next heartbeat, acknowledged their revocation.
    Beating early while reconciling, the newcomer learns of them within a
    quarter interval of the last acknowledgement; at its regular interval,
    up to a whole interval later."""
    acks: list[float] = []
    received = await newcomer_generations(None, acks)
    (first_at, first), (last_at, last) = received[0], received[-1]
    assert not first.assignments and len(last.assignments) == PARTITIONS // 3
    assert last.rebalance_protocol == "cooperative"
    shown = ([(t, g.label, len(g.assignments)) for t, g in received], acks)
    assert acks and first_at < acks[-1] <= last_at, shown
    assert last_at - acks[-1] <= INTERVAL / 4, shown


async def test_a_settled_consumer_protocol_member_beats_once_a_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Early beats stop once the assignment stops changing, although the
    answer to each (full) heartbeat carries the unchanged assignment."""
    beats: list[float] = []

    def count(call: Intercepted) -> None:
        beats.append(trio.current_time())

    settings = BrokerSettings(
        group_initial_rebalance_delay_ms=0,
        group_consumer_heartbeat_interval_ms=int(INTERVAL * 1000),
    )
    async with FakeCluster(topics={"t": PARTITIONS}, settings=settings) as cluster:
        cluster.control(ApiKey.CONSUMER_GROUP_HEARTBEAT, count)
        async with group_on(cluster, "m1", [], group_protocol="consumer") as group:
            gen = await group.next()
            assert len(gen.assignments) == PARTITIONS
            await trio.sleep(5 * INTERVAL)  # the early beats, over within an interval or two
            settled = len(beats)
            await trio.sleep(10 * INTERVAL)
            # One beat a period (on the group's grid), none early: 9 or 10 of
            # them in 10 intervals, depending on where the grid falls.
            recent = beats[settled:]
            assert len(recent) >= 9, beats
            gaps = [b - a for a, b in itertools.pairwise(recent)]
            assert gaps == pytest.approx([PERIOD] * len(gaps)), beats
