"""Classic group coordinator scenarios, run the same way against any broker.

Theory of operation:

Each scenario is an ``async`` function taking a bootstrap address and
returning a :data:`~tests.conformance.client.Transcript` (written as its steps
on a :class:`~tests.conformance.client.Session`, which ``_scenario`` opens): the list of
``(step, normalised answer)`` pairs it observed, in the order the scenario
records them (not the order the broker answered: requests parked in the
background are recorded when the scenario collects them). A scenario checks
nothing but its own setup (topics created); it drives simulated members
through one corner of the protocol and the test compares the transcript with
the one Apache Kafka produces.

Everything a scenario waits for is a broker-side condition observed with
DescribeGroups polling (``wait_state``, ``wait_visible``) or the answer of a
parked request. ``wait_visible`` follows the creation of a group by a
JoinGroup answered MEMBER_ID_REQUIRED: Kafka shows such a group to
DescribeGroups and ListGroups only a moment later (they read the coordinator's
last committed state and that request writes no record). The only sleeps
are the ones that let a timeout elapse (session, rebalance) or let a
background request reach the broker; they are generous compared with the
timeouts involved and never asserted on. Group and topic names are
unique per run, so scenarios can share a broker with other tests.

Timeouts: members use a 10 s session and a 5 s rebalance timeout unless the
scenario is about a timeout, which then uses the broker minimum (1 s session)
or a 3 s rebalance timeout. The tests wrap each scenario in a hang guard.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import anyio

from gengroup.broker import BrokerSettings
from gengroup.testing.pytest_plugin import make_unique_name

from .client import (
    Member,
    Pending,
    Session,
    Transcript,
    by_name,
    id_shape,
    open_session,
    subscription_bytes,
)

__all__ = ["MIN_SESSION_MS", "SCENARIOS"]

SHORT_REBALANCE_MS: Final = 3_000
"""Rebalance timeout of the scenarios that wait for it to expire."""

MIN_SESSION_MS: Final = 1_000
"""``group.min.session.timeout.ms`` of both brokers under test."""

MAX_SESSION_MS: Final = BrokerSettings().group_max_session_timeout_ms
"""``group.max.session.timeout.ms`` of both brokers under test: the default, the same in both."""

PARK_DELAY: Final = 0.3
"""Seconds allowed for a background request to reach the broker and park."""

NO_ANSWER_WAIT: Final = 3.0
"""Seconds after which a request a broker never answers is recorded as ``"no answer"``."""

UNKNOWN_ID: Final = "conf-X-00000000-0000-4000-8000-000000000000"
"""A member id no broker ever handed out (labelled ``"X"``)."""


Scenario = Callable[[str], Awaitable[Transcript]]
"""A scenario: runs against the broker at a bootstrap address and returns its transcript."""


# --------------------------------------------------------------------------- helpers


async def _new_groups(s: Session, count: int) -> list[str]:
    """``count`` fresh group names, each with its coordinator found and loaded."""
    groups = [make_unique_name("conf-g") for _ in range(count)]
    for group in groups:
        await s.admin.wait_coordinator(group)
    return groups


async def _new_group(s: Session) -> str:
    """A fresh group name with its coordinator found and loaded."""
    (group,) = await _new_groups(s, 1)
    return group


def _topic_name(s: Session, alias: str) -> str:
    """A fresh topic name, labelled ``alias`` (the topic is not created)."""
    return s.topic(make_unique_name(f"conf-{alias}"), alias)


async def _topic(s: Session, alias: str, partitions: int) -> str:
    """A fresh topic, labelled ``alias``, created with ``partitions`` partitions."""
    name = _topic_name(s, alias)
    answer = await s.admin.create_topic(name, partitions)
    assert answer["error"] == "NONE", answer
    return name


async def _members(s: Session, group: str, topic: str, *names: str) -> list[Member]:
    """New members of ``group`` subscribed to ``topic``, connected in the order named."""
    return [await s.member(name, group, topics=[topic]) for name in names]


async def _start_rebalance(s: Session, m: Member, **kwargs: Any) -> Pending[dict[str, Any]]:
    """``m`` sends JoinGroup in the background; returns once the group is PreparingRebalance."""
    parked = s.spawn(lambda: m.join(**kwargs))
    await s.admin.wait_state(m.group_id, "PreparingRebalance")
    return parked


async def _knock(s: Session, m: Member, **kwargs: Any) -> Pending[dict[str, Any]]:
    """A new member's handshake into an existing group: ``join without id`` is recorded,
    the join with the id is parked and has started a rebalance."""
    s.record(f"{m.name} join without id", await m.join(**kwargs))
    return await _start_rebalance(s, m, **kwargs)


async def _simple_commit(
    s: Session, group: str, topic: str, offsets: Mapping[int, tuple[int, str | None]]
) -> dict[str, str]:
    """An OffsetCommit from outside the group (generation -1, no member id), by the admin."""
    return await s.admin.commit(
        group, generation=-1, member_id="", instance_id=None, topic=topic, offsets=offsets
    )


async def _join_new(s: Session, m: Member, **kwargs: Any) -> dict[str, Any]:
    """The KIP-394 handshake of a new dynamic member; both answers are recorded."""
    s.record(f"{m.name} join without id", await m.join(**kwargs))
    await s.admin.wait_visible(m.group_id)
    return s.record(f"{m.name} join with id", await m.join(**kwargs))


async def _lead_alone(
    s: Session, m: Member, assignment: Mapping[str, Sequence[int]], **kwargs: Any
) -> None:
    """``m`` creates a group alone and syncs its own assignment (generation 1)."""
    await _join_new(s, m, **kwargs)
    s.record(f"{m.name} sync", await m.sync({m: assignment}))


async def _a_leads_b_waits(s: Session) -> tuple[str, str, Member, Member]:
    """A new group whose member A leads alone (generation 1) over two partitions of
    topic "t", and a member B not joined yet: (group, topic, A, B)."""
    group = await _new_group(s)
    topic = _topic_name(s, "t")
    a, b = await _members(s, group, topic, "A", "B")
    await _lead_alone(s, a, {topic: [0, 1]})
    return group, topic, a, b


async def _rebalance_in(
    s: Session,
    newcomer: Member,
    joined: Sequence[Member],
    *,
    newcomer_kwargs: Mapping[str, Any] | None = None,
    rejoin_kwargs: Mapping[Member, Mapping[str, Any]] | None = None,
) -> None:
    """A new dynamic member joins a group: handshake, rebalance, everyone rejoins.

    Records the newcomer's two answers (``join without id``, ``join with id``)
    and each existing member's ``rejoin``, in that order.
    """
    parked = await _knock(s, newcomer, **(newcomer_kwargs or {}))
    rejoins = [
        s.spawn(functools.partial(m.join, **(rejoin_kwargs or {}).get(m, {}))) for m in joined
    ]
    s.record(f"{newcomer.name} join with id", await parked.result())
    for m, pending in zip(joined, rejoins, strict=True):
        s.record(f"{m.name} rejoin", await pending.result())


async def _sync_all(
    s: Session,
    leader: Member,
    followers: Sequence[Member],
    assignments: Mapping[Member, Mapping[str, Sequence[int]]],
) -> None:
    """Followers send SyncGroup (parked), then the leader; records leader then followers."""
    pending = [s.spawn(f.sync) for f in followers]
    await anyio.sleep(PARK_DELAY)
    plan: dict[Member | str, Mapping[str, Sequence[int]] | bytes] = {
        m: parts for m, parts in assignments.items()
    }
    s.record(f"{leader.name} sync", await leader.sync(plan))
    for f, p in zip(followers, pending, strict=True):
        s.record(f"{f.name} sync", await p.result())


async def _generation_two(s: Session, a: Member, b: Member, topic: str, **kwargs: Any) -> None:
    """A leads generation 1 alone with t:0,1, then B joins: both joined generation 2, unsynced."""
    await _lead_alone(s, a, {topic: [0, 1]}, **kwargs)
    await _rebalance_in(s, b, [a], newcomer_kwargs=kwargs, rejoin_kwargs={a: kwargs})


async def _new_generation_two(s: Session, **kwargs: Any) -> tuple[str, str, Member, Member]:
    """A new group's :func:`_generation_two` over topic "t" (``kwargs`` passed on to
    every join): (group, topic, A, B)."""
    group = await _new_group(s)
    topic = _topic_name(s, "t")
    a, b = await _members(s, group, topic, "A", "B")
    await _generation_two(s, a, b, topic, **kwargs)
    return group, topic, a, b


async def _sync_two(s: Session, a: Member, b: Member, topic: str) -> None:
    """The generation 2 of :func:`_generation_two` synced: A gets t:0, B gets t:1."""
    await _sync_all(s, a, [b], {a: {topic: [0]}, b: {topic: [1]}})


async def _two_member_group(
    s: Session, group: str, topic: str, **kwargs: Any
) -> tuple[Member, Member]:
    """A leads generation 1 alone, B joins: generation 2, A gets t:0, B gets t:1."""
    a, b = await _members(s, group, topic, "A", "B")
    await _generation_two(s, a, b, topic, **kwargs)
    await _sync_two(s, a, b, topic)
    return a, b


# --------------------------------------------------------------------------- scenarios


def _scenario(steps: Callable[[Session], Awaitable[None]]) -> Scenario:
    """A scenario from its steps: they run in a new session, whose transcript is returned."""

    @functools.wraps(steps)
    async def run(bootstrap: str) -> Transcript:
        async with open_session(bootstrap) as s:
            await steps(s)
            return s.transcript

    return run


@_scenario
async def member_id_required(s: Session) -> None:
    """KIP-394: JoinGroup v4+ with an empty member id, then with the given id; v3 joins at once."""
    group, old_group = await _new_groups(s, 2)
    topic = _topic_name(s, "t")
    a = await s.member("A", group, topics=[topic])
    s.record("A join v9 without id", await a.join())
    s.record("A member id shape", id_shape(a.member_id))
    await s.admin.wait_visible(group)
    s.record("describe: a pending member is no member", await s.admin.describe(group))
    s.record("A join v9 with id", await a.join())
    b = await s.member("B", group, topics=[topic])
    s.record("B join v4 without id", await b.join(version=4))
    c = await s.member("C", old_group, topics=[topic])
    s.record("C join v3 without id", await c.join(version=3))
    s.record("C member id shape", id_shape(c.member_id))


@_scenario
async def pending_member_expires(s: Session) -> None:
    """A member id handed out with MEMBER_ID_REQUIRED expires after the session timeout."""
    group = await _new_group(s)
    topic = _topic_name(s, "t")
    a = await s.member("A", group, topics=[topic])
    s.record("A join without id", await a.join(session_ms=MIN_SESSION_MS))
    await anyio.sleep(3 * MIN_SESSION_MS / 1000)
    s.record("A join with the expired id", await a.join(session_ms=MIN_SESSION_MS))
    a.member_id = ""
    await _join_new(s, a, session_ms=MIN_SESSION_MS)


@_scenario
async def single_member_lifecycle(s: Session) -> None:
    """One member: join, heartbeat while CompletingRebalance, sync, heartbeat, leave."""
    group = await _new_group(s)
    topic = _topic_name(s, "t")
    a = await s.member("A", group, topics=[topic])
    await _join_new(s, a)
    s.record("describe after join", await s.admin.describe(group))
    s.record("A heartbeat while CompletingRebalance", await a.heartbeat())
    s.record("A sync", await a.sync({a: {topic: [0, 1]}}))
    s.record("A heartbeat while Stable", await a.heartbeat())
    s.record("describe after sync", await s.admin.describe(group))
    s.record("A sync again with another assignment", await a.sync({a: {topic: [0]}}))
    s.record("A sync v3 while Stable", await a.sync(version=3))
    s.record("A heartbeat v0", await a.heartbeat(version=0))
    s.record("A leave", await a.leave())
    s.record("describe after leave", await s.admin.describe(group))
    s.record("A heartbeat after leave", await a.heartbeat())
    s.record("A sync after leave", await a.sync())
    s.record("A leave again", await a.leave())


@_scenario
async def second_member_rebalance(s: Session) -> None:
    """A second member joins a Stable group; the first learns it from its heartbeat."""
    group, topic, a, b = await _a_leads_b_waits(s)
    s.record("B join without id", await b.join())
    s.record("describe: the pending B starts no rebalance", await s.admin.describe(group))
    s.record("A heartbeat", await a.heartbeat())
    parked = await _start_rebalance(s, b)
    s.record("describe while B waits", await s.admin.describe(group))
    s.record("A heartbeat during the rebalance", await a.heartbeat())
    s.record("A sync during the rebalance", await a.sync())
    s.record("A rejoin", await a.join())
    s.record("B join with id", await parked.result())
    s.record("A heartbeat while CompletingRebalance", await a.heartbeat())
    await _sync_two(s, a, b, topic)
    s.record("A heartbeat", await a.heartbeat())
    s.record("B heartbeat", await b.heartbeat())
    s.record("describe", await s.admin.describe(group))


@_scenario
async def leader_never_syncs(s: Session) -> None:
    """The leader never sends SyncGroup: the parked follower and the rebalance timeout."""
    kw: dict[str, Any] = {"rebalance_ms": SHORT_REBALANCE_MS}
    group, topic, a, b = await _new_generation_two(s, **kw)
    parked = s.spawn(b.sync)
    await anyio.sleep(PARK_DELAY)
    s.record("B sync still parked", not parked.done)
    s.record("describe while B waits for the leader", await s.admin.describe(group))
    s.record("B sync after the rebalance timeout", await parked.result())
    s.record("describe after the timeout", await s.admin.describe(group))
    s.record("A heartbeat", await a.heartbeat())
    s.record("A sync (too late)", await a.sync({a: {topic: [0]}, b: {topic: [1]}}))
    s.record("B heartbeat", await b.heartbeat())
    s.record("B rejoin", await b.join(**kw))
    s.record("B sync", await b.sync({b: {topic: [0, 1]}}))
    s.record("describe", await s.admin.describe(group))


@_scenario
async def follower_never_syncs(s: Session) -> None:
    """A follower never sends SyncGroup: removed after the rebalance timeout, even when Stable."""
    kw: dict[str, Any] = {"rebalance_ms": SHORT_REBALANCE_MS}
    group, topic, a, b = await _new_generation_two(s, **kw)
    s.record("A sync", await a.sync({a: {topic: [0]}, b: {topic: [1]}}))
    s.record("describe before the timeout", await s.admin.describe(group))
    s.record("A heartbeats until an error", await a.heartbeat_until_not("NONE"))
    s.record("describe after the timeout", await s.admin.describe(group))
    s.record("B heartbeat", await b.heartbeat())
    s.record("B sync (too late)", await b.sync())
    s.record("A rejoin", await a.join(**kw))


@_scenario
async def member_misses_rejoin(s: Session) -> None:
    """A member that only heartbeats during a rebalance is dropped when the join completes."""
    group = await _new_group(s)
    topic = _topic_name(s, "t")
    other = _topic_name(s, "u")
    kw: dict[str, Any] = {"rebalance_ms": SHORT_REBALANCE_MS}
    a, b = await _two_member_group(s, group, topic, **kw)
    changed = (("range", subscription_bytes(topic, other)),)
    parked = await _start_rebalance(s, b, protocols=changed, **kw)
    s.record(
        "A heartbeats while REBALANCE_IN_PROGRESS, never rejoins",
        await a.heartbeat_until_not("REBALANCE_IN_PROGRESS"),
    )
    s.record("B rejoin", await parked.result())
    s.record("describe", await s.admin.describe(group))
    s.record("A join with its old id", await a.join(**kw))


@_scenario
async def join_during_completing_rebalance(s: Session) -> None:
    """A member joins while followers wait for the leader's SyncGroup: their syncs fail."""
    group = await _new_group(s)
    topic = _topic_name(s, "t")
    a, b, c = await _members(s, group, topic, "A", "B", "C")
    await _generation_two(s, a, b, topic)
    parked_sync = s.spawn(b.sync)
    await anyio.sleep(PARK_DELAY)
    s.record("C join without id", await c.join())
    s.record("describe: the pending C changes nothing", await s.admin.describe(group))
    parked_join = s.spawn(c.join)
    await s.admin.wait_state(group, "PreparingRebalance")
    s.record("B sync, parked before C joined", await parked_sync.result())
    s.record("A sync (too late)", await a.sync({a: {topic: [0]}, b: {topic: [1]}}))
    rejoin_a = s.spawn(a.join)
    rejoin_b = s.spawn(b.join)
    s.record("C join with id", await parked_join.result())
    s.record("A rejoin", await rejoin_a.result())
    s.record("B rejoin", await rejoin_b.result())


@_scenario
async def parked_join_blocks_connection(s: Session) -> None:
    """A broker answers one connection's requests in order: a parked JoinGroup blocks the next."""
    _, _, a, b = await _a_leads_b_waits(s)
    parked = await _knock(s, b)
    # Sent with generation -1 while the join is parked, on the same connection.
    queued = s.spawn(b.heartbeat)
    await anyio.sleep(PARK_DELAY)
    s.record("B heartbeat still waiting behind the join", not queued.done)
    s.record("A rejoin", await a.join())
    s.record("B join with id", await parked.result())
    s.record("B heartbeat sent during the join", await queued.result())


@_scenario
async def session_expiry(s: Session) -> None:
    """A member stops heartbeating: removed after its session timeout, the other rebalances."""
    group, topic, a, b = await _a_leads_b_waits(s)
    short: dict[str, Any] = {"session_ms": MIN_SESSION_MS}
    await _rebalance_in(s, b, [a], newcomer_kwargs=short)
    await _sync_two(s, a, b, topic)
    # B goes silent from here on.
    s.record("A heartbeats until an error", await a.heartbeat_until_not("NONE"))
    s.record("describe after B expired", await s.admin.describe(group))
    s.record("B heartbeat", await b.heartbeat())
    s.record("B sync", await b.sync())
    s.record("B join with its old id", await b.join(**short))
    s.record("A rejoin", await a.join())
    s.record("A sync", await a.sync({a: {topic: [0, 1]}}))
    s.record("describe", await s.admin.describe(group))


@_scenario
async def stale_generation(s: Session) -> None:
    """Heartbeat, SyncGroup and OffsetCommit with a generation that is not the group's."""
    group = await _new_group(s)
    topic = await _topic(s, "t", 1)
    a = await s.member("A", group, topics=[topic])
    await _lead_alone(s, a, {topic: [0]})
    s.record("A rejoin (the leader rejoins a Stable group)", await a.join())
    s.record("A sync", await a.sync({a: {topic: [0]}}))
    s.record("A heartbeat generation 1", await a.heartbeat(generation=1))
    s.record("A heartbeat generation 3", await a.heartbeat(generation=3))
    s.record("A sync generation 1", await a.sync(generation=1))
    s.record("A commit generation 1", await a.commit_offsets(topic, {0: (1, None)}, generation=1))
    s.record("A commit generation 2", await a.commit_offsets(topic, {0: (2, None)}))
    s.record("A sync with another protocol name", await a.sync(protocol_name="roundrobin"))
    s.record("A sync with another protocol type", await a.sync(protocol_type="connect"))
    s.record("A sync v5 without protocol type", await a.sync(protocol_type=None))
    s.record("A heartbeat", await a.heartbeat())


@_scenario
async def unknown_member(s: Session) -> None:
    """Requests from a member id the group does not know, and to a group that does not exist."""
    group, nowhere = await _new_groups(s, 2)
    s.names.bind(UNKNOWN_ID, "X")
    topic = await _topic(s, "t", 1)
    a = await s.member("A", group, topics=[topic])
    await _lead_alone(s, a, {topic: [0]})
    x: dict[str, Any] = {"member_id": UNKNOWN_ID}
    s.record("heartbeat", await a.heartbeat(**x))
    s.record("sync", await a.sync(**x))
    s.record("join", await a.join(**x))
    s.record("commit", await a.commit_offsets(topic, {0: (1, None)}, **x))
    s.record("leave", await a.leave(**x))
    s.record("describe: A is alone and Stable", await s.admin.describe(group))
    s.record("A heartbeat", await a.heartbeat())
    s.record("heartbeat, unknown group", await a.heartbeat(group_id=nowhere, **x))
    s.record("join with an id, unknown group", await a.join(group_id=nowhere, **x))
    s.record("leave, unknown group", await a.leave(group_id=nowhere, **x))
    for version, label in ((None, "v8"), (9, "v9")):  # None: the default, v8
        s.record(
            f"commit generation 1, unknown group, {label}",
            await a.commit(
                nowhere,
                generation=1,
                member_id=UNKNOWN_ID,
                instance_id=None,
                topic=topic,
                offsets={0: (1, None)},
                version=version,
            ),
        )
    s.record("describe: the unknown group was not created", await s.admin.describe(nowhere))


@_scenario
async def offset_commit_states(s: Session) -> None:
    """OffsetCommit in every group state, with OffsetFetch checking what was stored."""
    group = await _new_group(s)
    topic = await _topic(s, "t", 2)
    admin = s.admin

    async def fetch(step: str) -> None:
        s.record(step, await admin.fetch_offsets(group, topic, [0, 1]))

    await fetch("fetch, unknown group")
    s.record(
        "simple commit, unknown group",
        await _simple_commit(s, group, topic, {0: (10, "simple")}),
    )
    s.record("describe after the simple commit", await admin.describe(group))
    await fetch("fetch after the simple commit")
    a, b = await _members(s, group, topic, "A", "B")

    async def a_commits(
        step: str, offset: int, metadata: str, generation: int | None = None
    ) -> None:
        """A commits ``offset`` of partition 0 (at ``generation`` if given, else its own)."""
        s.record(
            step, await a.commit_offsets(topic, {0: (offset, metadata)}, generation=generation)
        )

    await _join_new(s, a)
    await a_commits("A commit while CompletingRebalance", 11, "completing")
    s.record(
        "simple commit, non-empty group",
        await _simple_commit(s, group, topic, {0: (12, "simple2")}),
    )
    s.record("A sync", await a.sync({a: {topic: [0, 1]}}))
    await a_commits("A commit while Stable", 20, "stable")
    await fetch("fetch while Stable")
    parked = await _knock(s, b)
    await a_commits("A commit while PreparingRebalance", 30, "preparing")
    await a_commits("A commit generation 0 while PreparingRebalance", 31, "stale", generation=0)
    # B's own connection is blocked behind its parked JoinGroup: commit as B elsewhere.
    s.record(
        "B commit before its first generation",
        await admin.commit(
            group,
            generation=-1,
            member_id=b.member_id,
            instance_id=None,
            topic=topic,
            offsets={1: (32, "joining")},
        ),
    )
    s.record("A rejoin", await a.join())
    s.record("B join with id", await parked.result())
    await a_commits("A commit generation 2 while CompletingRebalance", 40, "completing")
    await a_commits("A commit generation 1 while CompletingRebalance", 41, "stale", generation=1)
    await fetch("fetch after the rebalance")
    await _sync_two(s, a, b, topic)
    s.record("B commit while Stable", await b.commit_offsets(topic, {1: (50, None)}))
    await fetch("fetch at the end")


@_scenario
async def leave_unknown_member(s: Session) -> None:
    """LeaveGroup of unknown members, alone and batched with a known one."""
    group, nowhere = await _new_groups(s, 2)
    s.names.bind(UNKNOWN_ID, "X")
    topic = _topic_name(s, "t")
    a = await s.member("A", group, topics=[topic])
    await _lead_alone(s, a, {topic: [0]})
    s.record("leave X", await a.leave(member_id=UNKNOWN_ID))
    s.record("leave X, unknown group", await a.leave(member_id=UNKNOWN_ID, group_id=nowhere))
    s.record(
        "leave X by instance id only",
        await a.leave(member_id="", instance_id="conf-no-such-instance"),
    )
    s.record("leave X, v2", await a.leave(member_id=UNKNOWN_ID, version=2))
    s.record(
        "leave X, unknown group, v2",
        await a.leave(member_id=UNKNOWN_ID, group_id=nowhere, version=2),
    )
    s.record("describe: A unaffected", await s.admin.describe(group))
    s.record("A heartbeat", await a.heartbeat())
    s.record("A leave", await a.leave())
    s.record("describe after A left", await s.admin.describe(group))


@_scenario
async def static_membership(s: Session) -> None:
    """group.instance.id: a restarted static member takes over; the old id is fenced."""
    group = await _new_group(s)
    topic = await _topic(s, "t", 1)
    instance = "conf-i1"
    old = await s.member("A", group, topics=[topic], instance_id=instance)
    s.record("A join without id (static)", await old.join())
    s.record("A member id shape", id_shape(old.member_id))
    s.record("A sync", await old.sync({old: {topic: [0]}}))
    new = await s.member("A", group, topics=[topic], instance_id=instance)
    s.record("A' join without id, same instance", await new.join())
    s.record("describe after the replacement", await s.admin.describe(group))
    s.record("old A heartbeat", await old.heartbeat())
    s.record("old A sync", await old.sync())
    s.record("old A commit", await old.commit_offsets(topic, {0: (1, None)}))
    s.record("old A join with its id", await old.join())
    s.record("old A heartbeat without instance id", await _without_instance(old))
    s.record("old A leave", await old.leave())
    s.record("A' heartbeat", await new.heartbeat())
    s.record("A' sync", await new.sync())
    s.record("A' rejoin with its id", await new.join())
    s.record("A' sync", await new.sync({new: {topic: [0]}}))
    s.record("leave by instance id only", await new.leave(member_id=""))
    s.record("describe after the leave", await s.admin.describe(group))


async def _without_instance(m: Member) -> str:
    instance, m.instance_id = m.instance_id, None
    try:
        return await m.heartbeat()
    finally:
        m.instance_id = instance


@_scenario
async def describe_list_lifecycle(s: Session) -> None:
    """DescribeGroups and ListGroups state names through a group's whole life."""
    group = await _new_group(s)
    topic = _topic_name(s, "t")
    admin = s.admin

    async def look(when: str) -> None:
        s.record(f"describe {when}", await admin.describe(group))
        s.record(f"list {when}", await admin.list_group(group))

    await look("before any join")
    a, b = await _members(s, group, topic, "A", "B")
    s.record("A join without id", await a.join())
    await admin.wait_visible(group)
    await look("with a pending member")
    s.record("A join with id", await a.join())
    await look("after the first join")
    s.record(
        "list Stable only, while CompletingRebalance",
        await admin.list_group(group, states=["Stable"]),
    )
    s.record("A sync", await a.sync({a: {topic: [0, 1]}}))
    await look("when Stable")
    s.record("list Stable only", await admin.list_group(group, states=["Stable"]))
    s.record("list Empty only", await admin.list_group(group, states=["Empty"]))
    s.record("list Stable only, lower case", await admin.list_group(group, states=["stable"]))
    s.record("list v5, classic only", await admin.list_group(group, types=["classic"], version=5))
    s.record("list v5, consumer only", await admin.list_group(group, types=["consumer"], version=5))
    s.record("describe v6 when Stable", await admin.describe(group, version=6))
    parked = await _knock(s, b)
    await look("while rebalancing")
    s.record("A rejoin", await a.join())
    s.record("B join with id", await parked.result())
    await _sync_two(s, a, b, topic)
    s.record("A (leader) leave", await a.leave())
    await look("after the leader left")
    s.record("B rejoin", await b.join())
    s.record("B sync", await b.sync({b: {topic: [0, 1]}}))
    await look("with B leading")
    s.record("B leave", await b.leave())
    await look("after everyone left")
    s.record("delete", await admin.delete_group(group))
    await look("after delete")


@_scenario
async def delete_groups(s: Session) -> None:
    """DeleteGroups: NON_EMPTY_GROUP while a member is in, success once it left."""
    group, offsets_only, nowhere = await _new_groups(s, 3)
    topic = await _topic(s, "t", 1)
    a = await s.member("A", group, topics=[topic])
    await _lead_alone(s, a, {topic: [0]})
    s.record("A commit", await a.commit_offsets(topic, {0: (5, "x")}))
    s.record("delete while Stable", await s.admin.delete_group(group))
    s.record("A heartbeat", await a.heartbeat())
    s.record("A leave", await a.leave())
    s.record("delete after the leave", await s.admin.delete_group(group))
    s.record("delete again", await s.admin.delete_group(group))
    s.record("fetch offsets after delete", await s.admin.fetch_offsets(group, topic, [0]))
    s.record("describe after delete", await s.admin.describe(group))
    s.record("A join with its old id", await a.join())
    s.record(
        "simple commit",
        await _simple_commit(s, offsets_only, topic, {0: (7, None)}),
    )
    s.record("delete a group holding only offsets", await s.admin.delete_group(offsets_only))
    s.record("delete a group that never existed", await s.admin.delete_group(nowhere))


@_scenario
async def follower_rejoin_stable(s: Session) -> None:
    """A known follower rejoining a Stable group: same generation unless its metadata changed."""
    group = await _new_group(s)
    topic = _topic_name(s, "t")
    other = _topic_name(s, "u")
    a, b = await _two_member_group(s, group, topic)
    s.record("B rejoin, unchanged metadata", await b.join())
    s.record("describe", await s.admin.describe(group))
    s.record("A heartbeat", await a.heartbeat())
    s.record("B heartbeat", await b.heartbeat())
    s.record("B sync", await b.sync())
    changed = (("range", subscription_bytes(topic, other)),)
    parked = await _start_rebalance(s, b, protocols=changed)
    s.record("A heartbeat after B changed its subscription", await a.heartbeat())
    s.record("A rejoin", await a.join())
    s.record("B rejoin, new metadata", await parked.result())


@_scenario
async def protocol_vote(s: Session) -> None:
    """Members offering different protocol lists: candidates, votes, inconsistent protocols."""
    group, fresh, fresh2 = await _new_groups(s, 3)
    topic = _topic_name(s, "t")
    sub = subscription_bytes(topic)
    range_rr: dict[str, Any] = {"protocols": (("range", sub), ("roundrobin", sub))}
    rr_range: dict[str, Any] = {"protocols": (("roundrobin", sub), ("range", sub))}
    a, b, c = await _members(s, group, topic, "A", "B", "C")
    await _join_new(s, a, **range_rr)
    s.record("A sync", await a.sync({a: {topic: [0]}}))
    # One vote each for range and roundrobin: Kafka keeps the first in HashMap order.
    await _rebalance_in(s, b, [a], newcomer_kwargs=rr_range, rejoin_kwargs={a: range_rr})
    await _sync_all(s, a, [b], {a: {topic: [0]}})
    # Two votes for roundrobin.
    await _rebalance_in(
        s, c, [a, b], newcomer_kwargs=rr_range, rejoin_kwargs={a: range_rr, b: rr_range}
    )
    await _sync_all(s, a, [b, c], {a: {topic: [0]}})
    d = await s.member("D", group, topics=[topic])
    s.record(
        "D join offering only sticky",
        await d.join(protocols=(("sticky", sub),)),
    )
    s.record("D join with protocol type connect", await d.join(protocol_type="connect", **rr_range))
    s.record("describe", await s.admin.describe(group))
    e = await s.member("E", fresh, topics=[topic])
    s.record("E join with no protocol, fresh group", await e.join(protocols=()))
    f = await s.member("F", fresh2, topics=[topic])
    s.record("F join with an empty protocol type, fresh group", await f.join(protocol_type=""))


@_scenario
async def duplicate_protocol_names(s: Session) -> None:
    """A member offering the same protocol name twice (a documented divergence).

    Kafka counts each occurrence when it tallies the protocols every member
    supports, its protocol vote then throws in the join timer, and the group
    stays in PreparingRebalance with the JoinGroup never answered. The
    embedded broker counts a name once per member and completes the join.
    """
    group = await _new_group(s)
    topic = _topic_name(s, "t")
    sub = subscription_bytes(topic)
    # A long rebalance timeout: Kafka retries (and fails) the join once per timeout.
    kw: dict[str, Any] = {
        "protocols": (("range", sub), ("range", sub)),
        "rebalance_ms": 300_000,
    }
    a = await s.member("A", group, topics=[topic])
    s.record("A join without id", await a.join(**kw))
    await s.admin.wait_visible(group)
    pending = s.spawn(lambda: a.join(**kw))
    answered = await pending.wait(NO_ANSWER_WAIT)
    s.record("A join with id", await pending.result() if answered else "no answer")
    s.record("describe", await s.admin.describe(group))


@_scenario
async def describe_v6_missing_group(s: Session) -> None:
    """DescribeGroups v6 (KIP-1043) reports a missing group with GROUP_ID_NOT_FOUND."""
    group = await _new_group(s)
    topic = await _topic(s, "t", 1)
    s.record("describe v5, unknown group", await s.admin.describe(group))
    s.record("describe v6, unknown group", await s.admin.describe(group, version=6))
    s.record(
        "simple commit",
        await _simple_commit(s, group, topic, {0: (1, None)}),
    )
    s.record("describe v6, group holding offsets", await s.admin.describe(group, version=6))
    s.record("delete", await s.admin.delete_group(group))
    s.record("describe v6 after delete", await s.admin.describe(group, version=6))
    s.record("describe v5 after delete", await s.admin.describe(group))


@_scenario
async def invalid_session_timeout(s: Session) -> None:
    """Session timeouts outside [group.min.session.timeout.ms, group.max.session.timeout.ms]."""
    group = await _new_group(s)
    topic = _topic_name(s, "t")
    a = await s.member("A", group, topics=[topic])
    s.record("join, session below the minimum", await a.join(session_ms=MIN_SESSION_MS - 1))
    s.record("join, session above the maximum", await a.join(session_ms=MAX_SESSION_MS + 1))
    s.record("describe: no group was created", await s.admin.describe(group))
    s.record("join, session at the minimum", await a.join(session_ms=MIN_SESSION_MS))
    s.record(
        "join with id, session below the minimum",
        await a.join(session_ms=MIN_SESSION_MS - 1),
    )
    s.record("join with id, session at the maximum", await a.join(session_ms=MAX_SESSION_MS))
    s.record("join, empty group id", await a.join(group_id="", member_id=""))


@_scenario
async def offset_commit_unknown_partition(s: Session) -> None:
    """OffsetCommit to a partition or topic the broker does not have."""
    group = await _new_group(s)
    s.names.bind(UNKNOWN_ID, "X")
    topic = await _topic(s, "t", 1)
    missing = _topic_name(s, "missing")
    a = await s.member("A", group, topics=[topic])
    await _lead_alone(s, a, {topic: [0]})
    s.record("A commit to t[7]", await a.commit_offsets(topic, {7: (1, None)}))
    s.record(
        "A commit to t[0] and t[7]",
        await a.commit_offsets(topic, {0: (2, None), 7: (3, None)}),
    )
    s.record("A commit to an unknown topic", await a.commit_offsets(missing, {0: (4, None)}))
    s.record(
        "X commit to t[7]",
        await a.commit_offsets(topic, {7: (5, None)}, member_id=UNKNOWN_ID),
    )
    s.record("fetch t[0] and t[7]", await s.admin.fetch_offsets(group, topic, [0, 7]))


@_scenario
async def list_offsets_edges(s: Session) -> None:
    """CreateTopics errors and ListOffsets earliest/latest/max-timestamp on an empty topic."""
    admin = s.admin
    name = _topic_name(s, "t")
    missing = _topic_name(s, "missing")
    zero = _topic_name(s, "zero")
    s.record("create t", await admin.create_topic(name, 1))
    s.record("create t again", await admin.create_topic(name, 1, wait=False))
    s.record("create with 0 partitions", await admin.create_topic(zero, 0, wait=False))
    s.record("list offsets earliest", await admin.list_offsets(name, 0, -2))
    s.record("list offsets latest", await admin.list_offsets(name, 0, -1))
    s.record("list offsets max timestamp", await admin.list_offsets(name, 0, -3))
    s.record("list offsets, partition 3", await admin.list_offsets(name, 3, -1))
    s.record("list offsets, unknown topic", await admin.list_offsets(missing, 0, -1))


@_scenario
async def fetch_edges(s: Session) -> None:
    """Fetch on an empty topic: at the log end, beyond it, before it, and unknown partitions."""
    admin = s.admin
    name = await _topic(s, "t", 1)
    missing = _topic_name(s, "missing")
    s.record("fetch at 0", await admin.fetch(name, 0, 0))
    s.record("fetch at 5", await admin.fetch(name, 0, 5))
    s.record("fetch at -1", await admin.fetch(name, 0, -1))
    s.record("fetch partition 3", await admin.fetch(name, 3, 0))
    s.record("fetch unknown topic", await admin.fetch(missing, 0, 0))


SCENARIOS: Final[dict[str, Scenario]] = by_name(
    member_id_required,
    pending_member_expires,
    single_member_lifecycle,
    second_member_rebalance,
    leader_never_syncs,
    follower_never_syncs,
    member_misses_rejoin,
    join_during_completing_rebalance,
    parked_join_blocks_connection,
    session_expiry,
    stale_generation,
    unknown_member,
    offset_commit_states,
    leave_unknown_member,
    static_membership,
    describe_list_lifecycle,
    delete_groups,
    follower_rejoin_stable,
    protocol_vote,
    invalid_session_timeout,
    duplicate_protocol_names,
    describe_v6_missing_group,
    offset_commit_unknown_partition,
    list_offsets_edges,
    fetch_edges,
)
"""Every scenario by name, in a sensible reading order."""
