"""Heartbeats keep a fixed rate, whatever their round trip, in virtual time.

A beat is due a whole period after the previous one was *sent*, not after
its answer came back, as in Java's consumer. Settled members of a group beat
on the grid of that period that they share (``consumer/cadence.py``), so two
members of a generation beat together for as long as it lasts and learn of
the next rebalance within the same instant: neither waits in JoinGroup for
the other to notice. That holds for one that took longer to start its
generation (a slow OffsetFetch) and for one that read SyncGroup's answer
later than the others. On the embedded broker, in trio's virtual time, with
every Heartbeat answered after a delay.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from gengroup import CooperativeStickyBalancer, RangeBalancer
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay, Drop, Intercepted
from gengroup.consumer.cadence import EXPIRY_MARGIN, FIRST_EARLY_BEAT, beat_period, until_grid
from gengroup.protocol.versions import ApiKey

from .cooperative import SpanLedger, group_on
from .helpers import EMBEDDED_SETTINGS, all_partitions, embedded_broker_settings, wait_until

INTERVAL = EMBEDDED_SETTINGS["heartbeat_interval"]
SESSION = EMBEDDED_SETTINGS["session_timeout"]
PERIOD = beat_period(INTERVAL, SESSION)  # 10 s / 1 s: 1.005 s (10 beats span 10.05 s)
ROUND_TRIP = 0.3  # every Heartbeat is answered this long after it arrives
BEATS = 8
M3_LATE = 0.002  # the crashing member's beats reach the coordinator this much later


async def _beats(
    late: ApiKey | None = None,
    by: float | Callable[[float], float] = 0.0,
    follower: bool = False,
) -> dict[str, list[float]]:
    """When each of two members' Heartbeats of a shared generation arrived.

    Every Heartbeat is answered :data:`ROUND_TRIP` late; m2's ``late``
    requests (OffsetFetch), or with ``follower`` the follower's (SyncGroup:
    the leader's would hold up both answers), are served ``by`` seconds late.
    """
    every = all_partitions("t", 4)
    ledger = SpanLedger()
    arrivals: dict[str, list[float]] = {"m1": [], "m2": []}

    def slow_heartbeat(call: Intercepted) -> Delay:
        arrivals[str(call.client_id)].append(trio.current_time())
        return Delay(ROUND_TRIP)

    def slow(call: Intercepted) -> Delay | None:
        chosen = not call.request.assignments if follower else call.client_id == "m2"
        if not chosen:
            return None
        return Delay(by(trio.current_time()) if callable(by) else by)

    async with FakeCluster(topics={"t": 4}, initial_rebalance_delay_ms=0) as cluster:
        cluster.control(ApiKey.HEARTBEAT, slow_heartbeat)
        if late is not None:
            cluster.control(late, slow)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ledger.join, cluster, "m1", [RangeBalancer()])
            nursery.start_soon(ledger.join, cluster, "m2", [RangeBalancer()])
            await wait_until(lambda: ledger.stable({"m1", "m2"}, every), "two members", 120)
            # The beats of the generation both members share.
            arrivals["m1"].clear()
            arrivals["m2"].clear()
            await wait_until(lambda: min(len(a) for a in arrivals.values()) >= BEATS, "beats", 120)
            nursery.cancel_scope.cancel()
    return {name: times[:BEATS] for name, times in arrivals.items()}


def _in_step(arrivals: dict[str, list[float]]) -> None:
    """m1 and m2 beat at the same instants from their first shared beat on.

    One of them may have beaten once alone before it: the first grid point
    half a period after its SyncGroup answer, where the other's answer came
    later and its first point is the next one.
    """
    m1, m2 = arrivals["m1"], arrivals["m2"]
    first = next((t for t in m1 if t == pytest.approx(m2[0]) or t > m2[0]), None)
    assert first is not None, arrivals
    a = m1[m1.index(first) :]
    b = m2[next(i for i, t in enumerate(m2) if t == pytest.approx(first) or t > first) :]
    assert len(m1) - len(a) + len(m2) - len(b) <= 1, arrivals
    assert a[: BEATS - 1] == pytest.approx(b[: BEATS - 1]), arrivals


async def test_beats_keep_their_rate_and_members_formed_together_beat_together(
    autojump_clock: trio.testing.MockClock,
) -> None:
    arrivals = await _beats()
    for name, times in arrivals.items():
        gaps = [b - a for a, b in itertools.pairwise(times)]
        # Sleeping an interval after each answer made these INTERVAL + ROUND_TRIP.
        assert gaps == pytest.approx([PERIOD] * (BEATS - 1)), (name, gaps)
    # Formed together, beating together: no drift between the members.
    assert arrivals["m1"] == pytest.approx(arrivals["m2"]), arrivals


async def test_a_member_whose_offset_fetch_was_slow_still_beats_with_the_others(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Counted from each member's start of its generation, m2's first beat,
    # after an OffsetFetch answered 0.4 s late, came 0.4 s after m1's, and so
    # did every beat of m2's, m1 waiting that long in JoinGroup at the next
    # rebalance. The first beat is the first grid point half a period after
    # SyncGroup's answer, which both share: from there on, every beat too.
    arrivals = await _beats(ApiKey.OFFSET_FETCH, 0.4)
    assert arrivals["m1"] == pytest.approx(arrivals["m2"]), arrivals


async def test_a_member_whose_generation_started_a_period_late_beats_at_the_others_next_beat(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # m2's OffsetFetch (sent beside SyncGroup) is answered three quarters of
    # a period after the grid point that is the generation's first beat: its
    # heartbeat loop starts after that point, a quarter period before the
    # next. It beats at the next one, with the others, not a period later.
    def past_the_first_point(sent: float) -> float:
        return until_grid(PERIOD, PERIOD / 2, "g", now=sent) + 0.75 * PERIOD

    arrivals = await _beats(ApiKey.OFFSET_FETCH, past_the_first_point)
    assert arrivals["m1"] == pytest.approx(arrivals["m2"]), arrivals


async def test_a_member_that_read_sync_groups_answer_late_still_beats_with_the_others(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The follower's SyncGroup reaches the coordinator 0.3 s after the
    # leader's, so it is answered 0.3 s after the leader (as when a busy
    # process sends it late, or reads the answer late). Counted from each
    # member's answer, the follower's beats came 0.3 s after the leader's
    # for the whole generation.
    arrivals = await _beats(ApiKey.SYNC_GROUP, 0.3, follower=True)
    _in_step(arrivals)


async def _crash(protocol: str) -> dict[str, Any]:
    """Three members settle; m3 crashes: it sends nothing more, leave included.

    m3's beats reach the coordinator a hair after the others' (2 ms), as on
    any real network. Under ``"classic"`` (range) the members start together,
    under ``"consumer"`` (KIP-848) at different instants. Returns m3's
    expiry, when m1 and m2 beat and sent JoinGroup after the crash, and when
    they had m3's partitions.
    """
    every = all_partitions("t", 6)
    ledger = SpanLedger()
    crashed = False
    m3_beats: list[float] = []  # when the coordinator took each of m3's beats
    seen: dict[str, Any] = {name: {"beats": [], "joins": []} for name in ("m1", "m2")}

    def heartbeat(call: Intercepted) -> Delay | Drop | None:
        if call.client_id in seen:
            seen[str(call.client_id)]["beats"].append(trio.current_time())
            return None
        if crashed:
            return Drop()
        m3_beats.append(trio.current_time() + M3_LATE)
        return Delay(M3_LATE)

    def m3_silent(call: Intercepted) -> Drop | None:
        if call.client_id in seen and call.api_key == ApiKey.JOIN_GROUP:
            seen[str(call.client_id)]["joins"].append(trio.current_time())
        return Drop() if crashed and call.client_id == "m3" else None

    async with FakeCluster(topics={"t": 6}, settings=embedded_broker_settings()) as cluster:
        cluster.control(ApiKey.HEARTBEAT, heartbeat)
        cluster.control(ApiKey.CONSUMER_GROUP_HEARTBEAT, heartbeat)
        for key in (ApiKey.JOIN_GROUP, ApiKey.OFFSET_COMMIT, ApiKey.LEAVE_GROUP, ApiKey.FETCH):
            cluster.control(key, m3_silent)
        same = protocol == "classic"

        async def member(name: str) -> None:
            if same:
                await ledger.join(cluster, name, [RangeBalancer()])
                return
            async with group_on(cluster, name, [], group_protocol="consumer") as group:
                await ledger.member(name, group)

        async with trio.open_nursery() as nursery:
            for name, delay in (("m1", 0.0), ("m2", 0.37), ("m3", 0.81)):
                if not same:
                    await trio.sleep(delay)  # joined at different instants
                nursery.start_soon(member, name)
            members = {"m1", "m2", "m3"}
            await wait_until(lambda: ledger.stable(members, every, same), "three members", 120)

            def settled() -> bool:  # m3's early beats are over: its last two a period apart
                return len(m3_beats) >= 2 and m3_beats[-1] - m3_beats[-2] == pytest.approx(PERIOD)

            await wait_until(settled, "m3's beats a period apart", 60)
            await trio.sleep(PERIOD / 2)  # between two beats
            crashed = True
            for name in seen:
                seen[name] = {"beats": [], "joins": []}
            seen["expiry"] = m3_beats[-1] + SESSION
            await wait_until(lambda: ledger.stable({"m1", "m2"}, every, same), "two members", 120)
            seen["moved"] = trio.current_time()
            nursery.cancel_scope.cancel()
    return seen


async def test_the_others_learn_of_a_crashed_members_expiry_together_just_after_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Three members beat together. The coordinator expires m3 a session after
    # its last beat, the instant the others' tenth beat would arrive were
    # beats a whole interval apart: just before the expiry, so they learnt of
    # it a whole interval later. With the beat period, their beat lands
    # EXPIRY_MARGIN after the expiry, and both rejoin then.
    seen = await _crash("classic")
    expiry = seen["expiry"]
    joins = {name: seen[name]["joins"] for name in ("m1", "m2")}
    for name, times in joins.items():
        assert times, name
        assert expiry <= times[0] <= expiry + EXPIRY_MARGIN, (name, expiry, times)
    assert joins["m1"][0] == joins["m2"][0], joins


async def test_consumer_protocol_members_learn_of_a_crashed_members_expiry_just_after_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The same under the consumer protocol (KIP-848), where nothing puts the
    # members in step: each beats from its own answers, and they joined at
    # different instants. Settled, they beat on a grid of the beat period
    # over a clock they share (virtual time here), so the survivors' beats
    # land just after the crashed member's expiry, and its partitions move
    # then, not up to an interval later.
    seen = await _crash("consumer")
    expiry = seen["expiry"]
    for name in ("m1", "m2"):
        times = seen[name]["beats"]
        after = [t for t in times if t >= expiry]
        assert after and after[0] <= expiry + EXPIRY_MARGIN, (name, expiry, times[-15:])
    assert seen["moved"] <= expiry + EXPIRY_MARGIN + FIRST_EARLY_BEAT, seen


async def test_a_cooperative_generation_beats_early_then_on_the_grid(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A cooperative generation beats early, counted from SyncGroup's answer
    # (FIRST_EARLY_BEAT, doubling while below the period); those already past
    # when its heartbeat loop starts (an OffsetFetch answered 0.15 s late:
    # 0.05 and 0.1) are skipped, not sent in a burst; then it beats on the
    # group's grid, a period apart.
    synced: list[float] = []
    beats: list[float] = []

    def sync(call: Intercepted) -> None:
        synced.append(trio.current_time())  # a lone leader's SyncGroup is answered at once

    def beat(call: Intercepted) -> None:
        beats.append(trio.current_time())

    async with FakeCluster(topics={"t": 2}, initial_rebalance_delay_ms=0) as cluster:
        cluster.control(ApiKey.SYNC_GROUP, sync)
        cluster.control(ApiKey.OFFSET_FETCH, lambda call: Delay(0.15))
        cluster.control(ApiKey.HEARTBEAT, beat)
        async with group_on(cluster, "m1", [CooperativeStickyBalancer()]) as group:
            gen = await group.next()
            assert gen.rebalance_protocol == "cooperative"
            await wait_until(lambda: len(beats) >= 6, "six beats", 60)
    [anchor] = synced
    early = [b - anchor for b in beats[:3]]
    assert early == pytest.approx(
        [4 * FIRST_EARLY_BEAT, 8 * FIRST_EARLY_BEAT, 16 * FIRST_EARLY_BEAT]
    )
    regular = beats[3:6]
    assert regular[0] - beats[2] >= PERIOD / 2
    for at in regular:  # each on the grid: the next grid point a whole period away
        off = until_grid(PERIOD, 0.0, "g", now=at) % PERIOD
        assert min(off, PERIOD - off) < 1e-6, (at, beats)
    assert [b - a for a, b in itertools.pairwise(regular)] == pytest.approx([PERIOD] * 2)
