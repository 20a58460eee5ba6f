"""Closing with a handover: the leave lands just before the group's next heartbeat.

The other members learn of a leave only at their next heartbeat. A member
closing with ``aclose()`` (``handover=True``, the default) keeps its
generation working until just before that heartbeat, which it knows (the
members beat in phase, on the group's shared grid under both protocols), and
only then ends it, commits and leaves; the others take its partitions at
that heartbeat. With
``handover=False`` it leaves at once, and the others learn of it at their next
heartbeat, up to a period later. On the embedded broker, in virtual time.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from gengroup import ConsumerGroup, CooperativeStickyBalancer, RangeBalancer
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay, Intercepted
from gengroup.consumer.cadence import HANDOVER_MARGIN, beat_period, handover_lead
from gengroup.protocol.versions import ApiKey

from .cooperative import SpanLedger, group_on
from .helpers import EMBEDDED_SETTINGS, all_partitions, embedded_broker_settings, wait_until

INTERVAL = EMBEDDED_SETTINGS["heartbeat_interval"]
SESSION = EMBEDDED_SETTINGS["session_timeout"]
PERIOD = beat_period(INTERVAL, SESSION)
#: Joined at different instants: under the consumer protocol, only the grid
#: puts their beats in phase.
JOIN_DELAYS = (("m1", 0.0), ("m2", 0.37), ("m3", 0.81))

PROTOCOLS: dict[str, dict[str, Any]] = {
    "eager": {"balancers": [RangeBalancer()]},
    "cooperative": {"balancers": [CooperativeStickyBalancer()]},
    "consumer": {"balancers": [], "group_protocol": "consumer"},
}


async def _leave(
    protocol: str, *, handover: bool, close_at: float, answer_delay: float = 0.0
) -> dict[str, Any]:
    """Three members settle; ``close_at`` of a period after a beat, m3 closes.

    Heartbeats are answered ``answer_delay`` s after they arrive.

    Returns when m3 asked to close, when its generation ended, when its leave
    reached the coordinator, when the survivors beat next, when they had its
    partitions, and when ``aclose`` returned.
    """
    every = all_partitions("t", 6)
    ledger = SpanLedger()
    beats: dict[str, list[float]] = {"m1": [], "m2": [], "m3": []}
    seen: dict[str, float] = {}
    groups: dict[str, ConsumerGroup] = {}

    def heartbeat(call: Intercepted) -> Delay | None:
        if call.api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT and call.request.member_epoch < 0:
            seen.setdefault("left", trio.current_time())
            return None
        if call.client_id in beats:
            beats[str(call.client_id)].append(trio.current_time())
        return Delay(answer_delay) if answer_delay else None

    def leave(call: Intercepted) -> None:
        seen.setdefault("left", trio.current_time())

    async def sentinel(name: str) -> None:
        try:
            await trio.sleep_forever()
        finally:
            seen[f"{name} stopped"] = trio.current_time()

    async def member(name: str) -> None:
        extra = dict(PROTOCOLS[protocol])
        balancers = extra.pop("balancers")
        async with group_on(cluster, name, balancers, **extra) as group:
            groups[name] = group
            async for gen in group:
                ledger.generations.setdefault(name, []).append(gen)
                gen.start_soon(sentinel, name)
                for tp in sorted(gen.added):
                    gen.start_soon(ledger.worker, name, gen, tp, partition=tp)

    async with FakeCluster(topics={"t": 6}, settings=embedded_broker_settings()) as cluster:
        cluster.control(ApiKey.HEARTBEAT, heartbeat)
        cluster.control(ApiKey.CONSUMER_GROUP_HEARTBEAT, heartbeat)
        cluster.control(ApiKey.LEAVE_GROUP, leave)
        async with trio.open_nursery() as nursery:
            for name, delay in JOIN_DELAYS:
                await trio.sleep(delay)
                nursery.start_soon(member, name)
            same = protocol != "consumer"
            await wait_until(lambda: ledger.stable({"m1", "m2", "m3"}, every, same), "3", 120)
            await trio.sleep(3 * INTERVAL)  # settled: the early beats are over
            beats["m3"].clear()
            await wait_until(lambda: len(beats["m3"]) > 0, "a beat", 10)
            last = beats["m3"][-1]
            await trio.sleep(last + close_at * PERIOD - trio.current_time())
            seen["close"] = trio.current_time()
            await groups["m3"].aclose(handover=handover)
            seen["closed"] = trio.current_time()
            await wait_until(lambda: ledger.stable({"m1", "m2"}, every, same), "2", 120)
            seen["moved"] = trio.current_time()
            nursery.cancel_scope.cancel()
    assert not ledger.overlaps, ledger.overlaps
    for name in ("m1", "m2"):
        seen[f"{name} beat"] = min(t for t in beats[name] if t >= seen["close"])
    return seen


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
@pytest.mark.parametrize("close_at", [0.1, 0.5])
async def test_a_leave_lands_just_before_the_others_beat(
    protocol: str, close_at: float, autojump_clock: trio.testing.MockClock
) -> None:
    seen = await _leave(protocol, handover=True, close_at=close_at)
    beat = min(seen["m1 beat"], seen["m2 beat"])
    # m3 worked on until just before the beat, and its leave arrived before it.
    lead = handover_lead(0.0)
    assert beat - lead - 0.01 <= seen["m3 stopped"] <= beat - HANDOVER_MARGIN, seen
    assert seen["m3 stopped"] <= seen["left"] < beat, seen
    # The others took its partitions at that beat, and closing took less than a period.
    assert seen["moved"] - beat < 0.1, seen
    assert seen["closed"] - seen["close"] < PERIOD, seen


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
async def test_without_a_handover_the_others_learn_of_the_leave_at_their_next_beat(
    protocol: str, autojump_clock: trio.testing.MockClock
) -> None:
    seen = await _leave(protocol, handover=False, close_at=0.1)
    beat = min(seen["m1 beat"], seen["m2 beat"])
    assert seen["m3 stopped"] - seen["close"] < 0.01, seen
    assert seen["left"] - seen["close"] < 0.05, seen
    # Partitions unconsumed from m3's stop until the others' beat.
    assert seen["moved"] >= beat > seen["left"] + 0.5 * PERIOD, seen


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
async def test_a_leave_too_close_to_the_next_beat_is_not_put_off_a_period(
    protocol: str, autojump_clock: trio.testing.MockClock
) -> None:
    seen = await _leave(protocol, handover=True, close_at=0.95)
    assert seen["m3 stopped"] - seen["close"] < 0.01, seen
    assert seen["closed"] - seen["close"] < 0.1, seen


async def test_a_close_while_a_heartbeat_is_in_flight_hands_over_at_the_next_beat(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Heartbeats answered 0.3 s late; m3 closes 0.1 of a period after its beat
    # arrived, while it waits for the answer: the beat that is due next is the
    # one after it.
    seen = await _leave("eager", handover=True, close_at=0.1, answer_delay=0.3)
    beat = min(seen["m1 beat"], seen["m2 beat"])
    assert beat - seen["close"] > 0.5 * PERIOD, seen
    assert beat - handover_lead(0.0) - 0.01 <= seen["m3 stopped"] <= beat - HANDOVER_MARGIN, seen
    assert seen["m3 stopped"] <= seen["left"] < beat, seen
