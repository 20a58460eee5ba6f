"""Tests for the sans-IO classic group coordinator.

Everything runs on integer milliseconds, without sockets or an event loop. The
``Driver`` below plays the server: before each request it fires the timers that
are due (as a timer task sleeping until ``next_deadline()`` would), and it
records when each token was answered, so tests assert exact virtual times.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import pkgutil
from collections.abc import Sequence
from types import ModuleType
from typing import Any, TypeVar

import pytest
from kio.schema.errors import ErrorCode

from gengroup import _java
from gengroup.broker import coordinator as coordinator_package
from gengroup.broker.coordinator import (
    TRANSITIONS,
    ClassicGroup,
    CoordinatorConfig,
    CoordinatorPoisonedError,
    DeletableGroupResult,
    DeleteGroupsInput,
    DeleteGroupsOutput,
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsInput,
    DescribeGroupsOutput,
    GroupCoordinator,
    GroupEvent,
    GroupState,
    HeartbeatInput,
    HeartbeatOutput,
    IllegalTransitionError,
    JoinGroupInput,
    JoinGroupMember,
    JoinGroupOutput,
    LeaveGroupInput,
    LeaveGroupMemberOutput,
    LeaveGroupOutput,
    ListedGroup,
    ListGroupsInput,
    ListGroupsOutput,
    MemberIdentity,
    OffsetCommitInput,
    OffsetCommitOutput,
    OffsetCommitPartition,
    OffsetCommitTopic,
    OffsetFetchGroup,
    OffsetFetchInput,
    OffsetFetchOutput,
    OffsetFetchPartitionOutput,
    OffsetFetchTopic,
    OffsetFetchTopicOutput,
    Reply,
    Request,
    Response,
    SyncGroupInput,
    SyncGroupOutput,
)

E = ErrorCode
RANGE = (("range", b"meta"),)
EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE

T = TypeVar("T")


class Driver:
    """Drives a coordinator like the server will, recording reply times."""

    def __init__(self, **config: Any) -> None:
        counter = itertools.count(1)
        config.setdefault("member_id_generator", lambda prefix: f"{prefix}-{next(counter)}")
        self.c = GroupCoordinator(CoordinatorConfig(**config))
        self.answers: dict[int, list[tuple[int, Response]]] = {}
        self._tokens = itertools.count(1)
        self.now = 0

    # -- time --------------------------------------------------------------

    def _record(self, now: int, replies: list[Reply]) -> None:
        for reply in replies:
            assert isinstance(reply.token, int)
            self.answers.setdefault(reply.token, []).append((now, reply.response))

    def run_until(self, end: int) -> None:
        """Fire every timer due up to ``end``, each at its own deadline."""
        for _ in range(10_000):
            deadline = self.c.next_deadline()
            if deadline is None or deadline > end:
                break
            at = max(deadline, self.now)
            self._record(at, self.c.advance(at))
            self.now = at
        else:  # pragma: no cover
            raise AssertionError("timers do not settle")
        self.now = max(self.now, end)

    def run_until_answered(self, *tokens: int, limit: int = 10_000_000) -> int:
        """Advance from deadline to deadline until every token is answered."""
        while not all(t in self.answers for t in tokens):
            deadline = self.c.next_deadline()
            assert deadline is not None and deadline <= limit, "nothing left to wait for"
            self.run_until(max(deadline, self.now))
        return self.now

    # -- requests ----------------------------------------------------------

    def submit(self, now: int, request: Request) -> int:
        self.run_until(now)
        token = next(self._tokens)
        self._record(now, self.c.handle(now, token, request))
        return token

    def request(self, now: int, request: Request, output: type[T]) -> T:
        """Submit a request answered at once; its response, of type ``output``."""
        response = self.answer(self.submit(now, request))
        assert isinstance(response, output)
        return response

    def answer(self, token: int) -> Any:
        return self._only_answer(token)[1]

    def answered_at(self, token: int) -> int:
        return self._only_answer(token)[0]

    def _only_answer(self, token: int) -> tuple[int, Response]:
        answers = self.answers.get(token, [])
        assert len(answers) == 1, f"token {token} answered {len(answers)} times"
        return answers[0]

    def answered(self, token: int) -> bool:
        return token in self.answers

    def join(
        self,
        now: int,
        member_id: str = "",
        *,
        group: str = "g",
        session: int = 10_000,
        rebalance: int = 10_000,
        protocols: Sequence[tuple[str, bytes]] = RANGE,
        protocol_type: str = "consumer",
        instance: str | None = None,
        client: str = "client",
        require_known: bool = True,
        version: int = 9,
    ) -> int:
        return self.submit(
            now,
            JoinGroupInput(
                group,
                member_id,
                session,
                rebalance,
                protocol_type,
                protocols,
                instance,
                client,
                "/127.0.0.1",
                require_known,
                version,
            ),
        )

    def new_member(self, now: int, client: str = "client", **kwargs: Any) -> tuple[str, int]:
        """KIP-394 dance: MEMBER_ID_REQUIRED, then rejoin with the id (parked)."""
        first = self.answer(self.join(now, client=client, **kwargs))
        assert first.error_code is E.member_id_required
        return first.member_id, self.join(now, first.member_id, client=client, **kwargs)

    def sync(
        self,
        now: int,
        member_id: str,
        generation: int,
        assignments: Sequence[tuple[str, bytes]] = (),
        *,
        group: str = "g",
        instance: str | None = None,
        protocol_type: str | None = "consumer",
        protocol_name: str | None = "range",
        version: int = 5,
    ) -> int:
        return self.submit(
            now,
            SyncGroupInput(
                group,
                generation,
                member_id,
                instance,
                protocol_type,
                protocol_name,
                assignments,
                version,
            ),
        )

    def heartbeat(
        self,
        now: int,
        member_id: str,
        generation: int,
        *,
        group: str = "g",
        instance: str | None = None,
    ) -> ErrorCode:
        request = HeartbeatInput(group, generation, member_id, instance)
        return self.request(now, request, HeartbeatOutput).error_code

    def leave(self, now: int, *members: MemberIdentity, group: str = "g") -> LeaveGroupOutput:
        return self.request(now, LeaveGroupInput(group, members), LeaveGroupOutput)

    def commit(
        self,
        now: int,
        offsets: dict[tuple[str, int], int],
        *,
        group: str | None = "g",
        generation: int = -1,
        member_id: str = "",
        instance: str | None = None,
        version: int = 9,
        metadata: str | None = "",
    ) -> dict[tuple[str, int], ErrorCode]:
        topics: dict[str, list[OffsetCommitPartition]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(
                OffsetCommitPartition(partition, offset, 7, metadata)
            )
        request = OffsetCommitInput(
            group_id=group,
            topics=[OffsetCommitTopic(name, parts) for name, parts in topics.items()],
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
            version=version,
        )
        response = self.request(now, request, OffsetCommitOutput)
        return {
            (topic.name, p.partition_index): p.error_code
            for topic in response.topics
            for p in topic.partitions
        }

    def fetch(self, now: int, *groups: OffsetFetchGroup) -> OffsetFetchOutput:
        return self.request(now, OffsetFetchInput(groups), OffsetFetchOutput)

    def describe(self, now: int, *group_ids: str | None) -> tuple[DescribedGroup, ...]:
        return self.request(now, DescribeGroupsInput(group_ids), DescribeGroupsOutput).groups

    def list(self, now: int, states: Sequence[str] = (), types: Sequence[str] = ()) -> Any:
        return self.request(now, ListGroupsInput(states, types), ListGroupsOutput).groups

    def delete(self, now: int, *group_ids: str | None) -> tuple[DeletableGroupResult, ...]:
        return self.request(now, DeleteGroupsInput(group_ids), DeleteGroupsOutput).results

    # -- group state -------------------------------------------------------

    def group(self, group_id: str = "g") -> ClassicGroup:
        group = self.c.group(group_id)
        assert group is not None
        return group

    def state(self, group_id: str = "g") -> GroupState:
        return self.group(group_id).state


def form_group(
    d: Driver, clients: Sequence[str], at: int = 0, **join_kwargs: Any
) -> tuple[list[str], int]:
    """Join ``clients`` at ``at``, let the join complete, sync everyone.

    Each member is assigned ``b"assignment-<member id>"``. Returns the member
    ids (first one is the leader) and the generation.
    """
    joined = [d.new_member(at, client=client, **join_kwargs) for client in clients]
    tokens = [token for _, token in joined]
    d.run_until_answered(*tokens)
    responses = [d.answer(token) for token in tokens]
    generation = responses[0].generation_id
    leader = responses[0].leader
    member_ids = [member_id for member_id, _ in joined]
    assert leader == member_ids[0]
    now = d.now
    group = join_kwargs.get("group", "g")
    instance = join_kwargs.get("instance")
    assignments = [(m, f"assignment-{m}".encode()) for m in member_ids]
    sync = d.sync(now, leader, generation, assignments, group=group, instance=instance)
    assert d.answer(sync).error_code is E.none
    for member_id in member_ids[1:]:
        sync = d.sync(now, member_id, generation, group=group, instance=instance)
        assert d.answer(sync).error_code is E.none
    assert d.state(group) is STABLE
    return member_ids, generation


def joined(
    member_id: str, generation: int, leader: str, members: tuple[JoinGroupMember, ...] = ()
) -> JoinGroupOutput:
    """A successful JoinGroup response of a ``consumer`` group using ``range``."""
    return JoinGroupOutput(
        E.none,
        member_id=member_id,
        generation_id=generation,
        protocol_type="consumer",
        protocol_name="range",
        leader=leader,
        members=members,
    )


def join_two_during_initial_delay(d: Driver, rebalance_a: int, rebalance_b: int) -> int:
    """Member a joins an empty group at 0, b at 1000; run to 3000, the initial delay.

    Returns a's parked JoinGroup token.
    """
    token = d.new_member(0, client="a", rebalance=rebalance_a)[1]
    d.new_member(1_000, client="b", rebalance=rebalance_b)
    d.run_until(3_000)
    return token


# ---------------------------------------------------------------------------
# Structure
# ---------------------------------------------------------------------------


def _package_modules() -> list[ModuleType]:
    names = [info.name for info in pkgutil.iter_modules(coordinator_package.__path__)]
    assert {"admin", "config", "group", "messages", "offsets", "service", "timers"} <= set(names)
    prefix = coordinator_package.__name__
    return [coordinator_package] + [importlib.import_module(f"{prefix}.{n}") for n in names]


@pytest.mark.parametrize("module", _package_modules(), ids=lambda m: m.__name__)
def test_package_does_no_io_and_reads_no_clock(module: ModuleType) -> None:
    tree = ast.parse(inspect.getsource(module))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            imported.add(node.module.split(".")[0])
        elif isinstance(node, ast.Attribute):
            assert node.attr not in {"monotonic", "perf_counter", "time_ns"}, "reads a clock"
    assert not imported & {"trio", "anyio", "asyncio", "socket", "time", "selectors", "datetime"}


def test_handle_refuses_what_is_not_a_request() -> None:
    c = GroupCoordinator()
    with pytest.raises(TypeError, match="not a group coordinator request: str"):
        c.handle(0, "t", "JoinGroup")  # type: ignore[arg-type]
    assert c.advance(0) == []  # not poisoned


def test_transition_table_is_kafkas() -> None:
    # ClassicGroupState: valid previous states of each target state.
    previous: dict[GroupState, set[GroupState]] = {}
    for (state, _event), target in TRANSITIONS.items():
        previous.setdefault(target, set()).add(state)
    assert previous == {
        EMPTY: {PREPARING},
        PREPARING: {STABLE, COMPLETING, EMPTY},
        COMPLETING: {PREPARING},
        STABLE: {COMPLETING},
        GroupState.DEAD: {STABLE, PREPARING, COMPLETING, EMPTY, GroupState.DEAD},
    }
    assert [s.value for s in GroupState] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]


def test_illegal_transition_names_state_and_event() -> None:
    group = ClassicGroup("g", 0, lambda token, response: None)
    with pytest.raises(IllegalTransitionError) as info:
        group.transition(GroupEvent.STORE_ASSIGNMENT, 0)
    assert info.value.state is EMPTY
    assert info.value.event is GroupEvent.STORE_ASSIGNMENT
    assert "store_assignment" in str(info.value)
    assert "Empty" in str(info.value)
    assert group.state is EMPTY


def test_unexpected_failure_poisons_the_coordinator() -> None:
    def broken_generator(prefix: str) -> str:
        raise RuntimeError("boom")

    d = Driver(member_id_generator=broken_generator)
    with pytest.raises(RuntimeError):
        d.join(0)
    with pytest.raises(CoordinatorPoisonedError) as info:
        d.c.advance(1)
    assert isinstance(info.value.__cause__, RuntimeError)


# ---------------------------------------------------------------------------
# JoinGroup validation and KIP-394
# ---------------------------------------------------------------------------


def test_join_with_empty_group_id_is_invalid() -> None:
    d = Driver()
    response = d.answer(d.join(0, "m", group=""))
    assert response == JoinGroupOutput(E.invalid_group_id, member_id="m")
    assert d.c.groups == {}


@pytest.mark.parametrize(
    ("session", "error"),
    [
        (5999, E.invalid_session_timeout),
        (6000, E.member_id_required),
        (1_800_000, E.member_id_required),
        (1_800_001, E.invalid_session_timeout),
    ],
)
def test_session_timeout_bounds(session: int, error: ErrorCode) -> None:
    d = Driver()
    assert d.answer(d.join(0, session=session)).error_code is error


def test_invalid_session_timeout_echoes_member_id_and_creates_no_group() -> None:
    d = Driver()
    assert d.answer(d.join(0, "m-1", session=1)) == JoinGroupOutput(
        E.invalid_session_timeout, member_id="m-1"
    )
    assert d.c.group("g") is None


def test_known_member_id_on_unknown_group_is_unknown_member() -> None:
    d = Driver()
    assert d.answer(d.join(0, "ghost")) == JoinGroupOutput(E.unknown_member_id, member_id="ghost")
    assert d.c.group("g") is None


def test_member_id_required_hands_out_an_id_and_keeps_a_pending_member() -> None:
    d = Driver()
    response = d.answer(d.join(100, client="app"))
    assert response == JoinGroupOutput(E.member_id_required, member_id="app-1")
    group = d.group()
    assert group.state is EMPTY
    assert group.pending_members == ("app-1",)
    assert group.members == {}
    # The pending member expires after its session timeout.
    assert d.c.session_deadline("g", "app-1") == 10_100
    # It is not a member: heartbeats are refused.
    assert d.heartbeat(200, "app-1", 0) is E.unknown_member_id


def test_pending_member_expires_and_cannot_rejoin_afterwards() -> None:
    d = Driver()
    member_id = d.answer(d.join(0)).member_id
    d.run_until(9_999)
    assert d.group().pending_members == (member_id,)
    d.run_until(10_000)
    assert d.group().pending_members == ()
    assert d.answer(d.join(10_001, member_id)) == JoinGroupOutput(
        E.unknown_member_id, member_id=member_id
    )


def test_join_without_known_member_id_requirement_adds_the_member_directly() -> None:
    d = Driver()
    token = d.join(0, client="old", require_known=False, version=3)
    assert not d.answered(token)
    d.run_until(3_000)
    response = d.answer(token)
    assert response.error_code is E.none
    assert response.member_id == "old-1"
    assert response.leader == "old-1"
    assert d.answered_at(token) == 3_000


def test_pending_member_rejoining_with_an_instance_id_is_an_unknown_server_error() -> None:
    d = Driver()
    member_id = d.answer(d.join(0)).member_id
    response = d.answer(d.join(1, member_id, instance="i"))
    assert response == JoinGroupOutput(E.unknown_server_error)
    assert d.group().pending_members == (member_id,)


# ---------------------------------------------------------------------------
# The initial delayed join
# ---------------------------------------------------------------------------


def test_single_member_initial_join_completes_after_the_delay() -> None:
    d = Driver()
    member_id, token = d.new_member(0, client="c")
    assert d.state() is PREPARING
    assert d.c.join_deadline("g") == 3_000
    d.run_until(2_999)
    assert not d.answered(token)
    d.run_until(3_000)
    assert d.answered_at(token) == 3_000
    assert d.answer(token) == joined(
        member_id, 1, member_id, members=(JoinGroupMember(member_id, None, b"meta"),)
    )
    group = d.group()
    assert group.state is COMPLETING
    assert group.generation_id == 1
    assert group.pending_sync_members == (member_id,)
    assert d.c.sync_deadline("g") == 13_000
    assert d.c.session_deadline("g", member_id) == 13_000


def test_initial_join_does_not_complete_early_when_everyone_joined() -> None:
    d = Driver()
    _, token = d.new_member(0)
    d.run_until(100)
    assert not d.answered(token)


def test_new_member_extends_the_initial_delay() -> None:
    # delay 3000, rebalance timeout 10000: a second member at 1000 -> 6000.
    d = Driver()
    first, t1 = d.new_member(0, client="a")
    second, t2 = d.new_member(1_000, client="b")
    d.run_until(3_000)
    assert d.c.join_deadline("g") == 6_000
    assert not d.answered(t1)
    d.run_until(6_000)
    assert d.answered_at(t1) == d.answered_at(t2) == 6_000
    leader, follower = d.answer(t1), d.answer(t2)
    assert leader.generation_id == follower.generation_id == 1
    assert leader.leader == follower.leader == first
    assert leader.members == (
        JoinGroupMember(first, None, b"meta"),
        JoinGroupMember(second, None, b"meta"),
    )
    assert follower.members == ()
    assert follower.member_id == second


def test_initial_delay_extension_chain_ends_at_the_rebalance_timeout() -> None:
    # remaining: 7000 -> 4000 -> 1000 -> 0; deadlines 3000, 6000, 9000, 10000.
    d = Driver()
    tokens = [d.new_member(0, client="a")[1]]
    tokens.append(d.new_member(1_000, client="b")[1])
    d.run_until(3_000)
    assert d.c.join_deadline("g") == 6_000
    tokens.append(d.new_member(5_000, client="c")[1])
    d.run_until(6_000)
    assert d.c.join_deadline("g") == 9_000
    tokens.append(d.new_member(8_000, client="d")[1])
    d.run_until(9_000)
    assert d.c.join_deadline("g") == 10_000
    tokens.append(d.new_member(9_500, client="e")[1])
    d.run_until(10_000)
    assert [d.answered_at(t) for t in tokens] == [10_000] * 5
    assert len(d.answer(tokens[0]).members) == 5


def test_initial_delay_extension_is_capped_by_the_remaining_time() -> None:
    # Rebalance timeout 4000: remaining 1000, so the extension is 1000 long.
    d = Driver()
    t1 = join_two_during_initial_delay(d, 4_000, 4_000)
    assert d.c.join_deadline("g") == 4_000
    t3 = d.new_member(3_500, client="c", rebalance=4_000)[1]
    d.run_until(4_000)
    assert d.answered_at(t1) == d.answered_at(t3) == 4_000


def test_initial_delay_not_extended_when_rebalance_timeout_is_below_the_delay() -> None:
    d = Driver()
    t1 = join_two_during_initial_delay(d, 2_000, 2_000)
    assert d.answered_at(t1) == 3_000
    assert len(d.answer(t1).members) == 2


def test_initial_remaining_time_uses_the_rebalance_timeout_at_the_start() -> None:
    # A later member with a longer rebalance timeout does not extend the budget.
    d = Driver()
    t1 = join_two_during_initial_delay(d, 10_000, 60_000)
    assert d.c.join_deadline("g") == 6_000
    d.run_until(6_000)
    assert d.answered_at(t1) == 6_000


def test_initial_delay_no_extension_without_new_member() -> None:
    d = Driver()
    t1 = d.new_member(0, client="a")[1]
    d.run_until(3_000)
    assert d.answered_at(t1) == 3_000


def test_zero_initial_delay_completes_on_the_next_advance() -> None:
    c = GroupCoordinator(
        CoordinatorConfig(initial_rebalance_delay_ms=0, member_id_generator=lambda p: f"{p}-x")
    )
    request = JoinGroupInput("g", "", 10_000, 10_000, "consumer", RANGE, client_id="c")
    [reply] = c.handle(0, "t0", request)
    assert isinstance(reply.response, JoinGroupOutput)
    member_id = reply.response.member_id
    assert (
        c.handle(0, "t1", JoinGroupInput("g", member_id, 10_000, 10_000, "consumer", RANGE)) == []
    )
    assert c.next_deadline() == 0
    [reply] = c.advance(0)
    assert reply.token == "t1"
    assert isinstance(reply.response, JoinGroupOutput)
    assert reply.response.generation_id == 1


# ---------------------------------------------------------------------------
# Rebalances of a formed group
# ---------------------------------------------------------------------------


def test_new_member_triggers_a_rebalance_that_completes_when_all_rejoined() -> None:
    d = Driver()
    (a, b), generation = form_group(d, ["a", "b"])
    assert generation == 1
    c, tc = d.new_member(10_000, client="c")
    assert d.state() is PREPARING
    assert d.c.join_deadline("g") == 20_000
    assert d.heartbeat(10_100, a, 1) is E.rebalance_in_progress
    ta = d.join(10_200, a)
    assert not d.answered(ta)
    tb = d.join(10_300, b)
    assert d.answered_at(ta) == d.answered_at(tb) == d.answered_at(tc) == 10_300
    assert d.c.join_deadline("g") is None
    leader = d.answer(ta)
    assert leader.generation_id == 2
    assert leader.leader == a
    assert [m.member_id for m in leader.members] == [a, b, c]
    assert d.answer(tb).members == d.answer(tc).members == ()
    assert d.state() is COMPLETING


def test_rebalance_waits_for_the_largest_rebalance_timeout() -> None:
    d = Driver()
    (a, b), _ = form_group(d, ["a", "b"], rebalance=10_000)
    # b's rejoin carries a longer rebalance timeout; the join timer uses the max.
    tb = d.join(10_000, b, rebalance=25_000, protocols=(("range", b"new"),))
    assert d.c.join_deadline("g") == 35_000
    for now in (14_000, 22_000, 30_000):
        assert d.heartbeat(now, a, 1) is E.rebalance_in_progress
    d.run_until(34_999)
    assert not d.answered(tb)
    d.run_until(35_000)
    assert d.answered_at(tb) == 35_000
    response = d.answer(tb)
    # a did not rejoin: removed; b becomes the leader.
    assert response.generation_id == 2
    assert response.leader == b
    assert response.members == (JoinGroupMember(b, None, b"new"),)
    assert d.heartbeat(35_001, a, 1) is E.unknown_member_id


def test_leader_leaving_hands_leadership_to_the_next_member() -> None:
    d = Driver()
    (a, b, c), _ = form_group(d, ["a", "b", "c"])
    assert d.group().leader_id == a
    result = d.leave(10_000, MemberIdentity(a))
    assert result == LeaveGroupOutput(E.none, (LeaveGroupMemberOutput(a, None, E.none),))
    assert d.group().leader_id == b
    assert d.state() is PREPARING
    tc = d.join(10_100, c)
    tb = d.join(10_200, b)
    assert d.answered_at(tc) == 10_200
    assert d.answer(tb).leader == b
    assert [m.member_id for m in d.answer(tb).members] == [b, c]


def test_known_follower_rejoining_stable_group_gets_current_generation() -> None:
    d = Driver()
    (a, b), generation = form_group(d, ["a", "b"])
    response = d.answer(d.join(10_000, b))
    assert response == joined(b, generation, a)
    assert d.state() is STABLE


def test_follower_rejoining_with_changed_metadata_triggers_a_rebalance() -> None:
    d = Driver()
    (_a, b), _ = form_group(d, ["a", "b"])
    token = d.join(10_000, b, protocols=(("range", b"other"),))
    assert not d.answered(token)
    assert d.state() is PREPARING


def test_leader_rejoining_with_unchanged_metadata_triggers_a_rebalance() -> None:
    d = Driver()
    (a, _b), _ = form_group(d, ["a", "b"])
    token = d.join(10_000, a)
    assert not d.answered(token)
    assert d.state() is PREPARING


def test_rejoin_during_completing_rebalance() -> None:
    d = Driver()
    ta = d.new_member(0, client="a")
    tb = d.new_member(0, client="b")
    assert d.run_until_answered(ta[1], tb[1]) == 6_000
    (a, _), (b, _) = ta, tb
    assert d.state() is COMPLETING
    # Same metadata: current generation, the leader gets the member list again.
    follower = d.answer(d.join(6_500, b))
    assert follower.generation_id == 1 and follower.members == ()
    leader = d.answer(d.join(6_600, a))
    assert [m.member_id for m in leader.members] == [a, b]
    assert d.state() is COMPLETING
    # b waits for the leader's assignment; a's changed metadata restarts the
    # rebalance and b's SyncGroup is answered REBALANCE_IN_PROGRESS.
    sb = d.sync(6_700, b, 1)
    assert not d.answered(sb)
    ta2 = d.join(6_800, a, protocols=(("range", b"v2"),))
    assert d.answer(sb) == SyncGroupOutput(E.rebalance_in_progress)
    assert d.answered_at(sb) == 6_800
    assert not d.answered(ta2)
    assert d.state() is PREPARING
    assert d.c.join_deadline("g") == 16_800


def test_duplicate_join_replaces_the_parked_request() -> None:
    d = Driver()
    (a, b), _ = form_group(d, ["a", "b"])
    first = d.join(10_000, a)
    second = d.join(10_100, a)
    tb = d.join(10_200, b)
    assert d.answered_at(second) == d.answered_at(tb) == 10_200
    assert not d.answered(first)


def test_join_completes_empty_when_nobody_rejoins() -> None:
    d = Driver()
    (a, b), _ = form_group(d, ["a", "b"])
    # Both stop heartbeating at 6000 (the sync reset their sessions).
    assert d.c.session_deadline("g", a) == d.c.session_deadline("g", b) == 16_000
    d.run_until(16_000)
    group = d.group()
    # a and b expire at the same deadline: the first expiry starts a rebalance,
    # the second completes it with nobody left.
    assert group.state is EMPTY
    assert group.generation_id == 2
    assert group.members == {}
    assert group.protocol_name is None
    assert group.protocol_type == "consumer"
    assert group.state_timestamp_ms == 16_000


def test_only_static_members_left_and_none_rejoined_postpones_the_join() -> None:
    d = Driver()
    ts = d.join(0, instance="i-s", client="s")
    d.run_until(3_000)
    s = d.answer(ts).member_id
    assert d.answer(d.sync(3_000, s, 1, instance="i-s")).error_code is E.none
    assert d.heartbeat(5_000, s, 1, instance="i-s") is E.none
    # A dynamic member joins (rebalance) and leaves again.
    x = d.join(10_000, client="x", require_known=False)
    assert d.state() is PREPARING
    assert d.c.join_deadline("g") == 20_000
    d.leave(11_000, MemberIdentity("x-2"))
    assert d.answer(x) == JoinGroupOutput(E.unknown_member_id)
    assert d.heartbeat(14_000, s, 1, instance="i-s") is E.rebalance_in_progress
    d.run_until(20_000)
    # Nobody rejoined: the join timer is re-armed, no new generation.
    group = d.group()
    assert group.state is PREPARING
    assert group.generation_id == 1
    assert d.c.join_deadline("g") == 30_000
    # s's session expires at 24000: the group completes the join, empty.
    d.run_until(24_000)
    assert group.state is EMPTY
    assert group.generation_id == 2
    assert d.c.join_deadline("g") is None


def test_pending_member_blocks_early_completion_until_it_expires() -> None:
    d = Driver()
    [a], _ = form_group(d, ["a"])
    pending = d.answer(d.join(10_000, client="n")).member_id
    assert d.state() is STABLE
    ta = d.join(11_000, a)
    assert d.state() is PREPARING
    assert d.c.join_deadline("g") == 21_000
    d.run_until(19_999)
    assert not d.answered(ta)
    d.run_until(20_000)  # the pending member's session expires
    assert d.answered_at(ta) == 20_000
    assert d.answer(ta).generation_id == 2
    assert d.group().pending_members == ()
    assert pending not in d.group().members


def test_pending_member_rejoining_completes_the_rebalance() -> None:
    d = Driver()
    [a], _ = form_group(d, ["a"])
    pending = d.answer(d.join(10_000, client="n")).member_id
    ta = d.join(11_000, a)
    tn = d.join(12_000, pending)
    assert d.answered_at(ta) == d.answered_at(tn) == 12_000
    assert [m.member_id for m in d.answer(ta).members] == [a, pending]


# ---------------------------------------------------------------------------
# Protocol selection and consistency
# ---------------------------------------------------------------------------


def test_protocol_vote_picks_the_most_preferred_common_protocol() -> None:
    d = Driver()
    both = (("range", b"r"), ("roundrobin", b"rr"))
    reverse = (("roundrobin", b"rr"), ("range", b"r"))
    t1 = d.new_member(0, client="a", protocols=both)[1]
    d.new_member(0, client="b", protocols=reverse)
    d.new_member(0, client="c", protocols=reverse)
    d.run_until_answered(t1)
    response = d.answer(t1)
    assert response.protocol_name == "roundrobin"
    assert {m.metadata for m in response.members} == {b"rr"}


def test_protocol_vote_only_counts_protocols_every_member_supports() -> None:
    d = Driver()
    t1 = d.new_member(0, client="a", protocols=(("sticky", b"s"), ("range", b"r")))[1]
    d.new_member(0, client="b", protocols=(("range", b"r"),))
    d.run_until_answered(t1)
    assert d.answer(t1).protocol_name == "range"


@pytest.mark.parametrize(
    ("first", "second", "winner"),
    [
        # Java HashMap buckets (16 slots): range 9, roundrobin 10, sticky 8.
        ("range", "roundrobin", "range"),
        ("roundrobin", "range", "range"),
        ("range", "sticky", "sticky"),
        ("cooperative-sticky", "range", "range"),
    ],
)
def test_protocol_vote_tie_follows_java_hashmap_order(first: str, second: str, winner: str) -> None:
    d = Driver()
    t1 = d.new_member(0, client="a", protocols=((first, b"1"), (second, b"2")))[1]
    d.new_member(0, client="b", protocols=((second, b"2"), (first, b"1")))
    d.run_until_answered(t1)
    assert d.answer(t1).protocol_name == winner


def test_java_string_hash_matches_java() -> None:
    assert _java.string_hash_unsigned("hello") == 99162322
    assert _java.string_hash_unsigned("roundrobin") == (-128548644) % 2**32
    assert _java.string_hash_unsigned("\U0001f600x") == 54959989
    # Colliding keys keep insertion order; order checked against a real JVM.
    order = _java.hashmap_order(["b", "a", "c", "zz", "Aa", "BB"])
    assert order == ["zz", "Aa", "BB", "a", "b", "c"]
    order = _java.hashmap_order([f"p{i}" for i in range(14)])
    assert order == [f"p{i}" for i in range(11)] + ["p12", "p11", "p13"]


@pytest.mark.parametrize(
    ("protocol_type", "protocols"),
    [("consumer", ()), ("", RANGE)],
)
def test_new_member_with_unusable_protocols_is_inconsistent(
    protocol_type: str, protocols: tuple[tuple[str, bytes], ...]
) -> None:
    d = Driver()
    response = d.answer(d.join(0, protocol_type=protocol_type, protocols=protocols))
    assert response == JoinGroupOutput(E.inconsistent_group_protocol, member_id="")
    # As in Kafka, the group was created by the attempt.
    assert d.list(1) == (ListedGroup("g", "", "Empty"),)


def test_joining_with_another_protocol_type_or_no_common_protocol_is_inconsistent() -> None:
    d = Driver()
    (a, _), _ = form_group(d, ["a", "b"])
    other_type = d.answer(d.join(10_000, protocol_type="connect"))
    assert other_type == JoinGroupOutput(E.inconsistent_group_protocol, member_id="")
    no_common = d.answer(d.join(10_000, protocols=(("roundrobin", b""),)))
    assert no_common.error_code is E.inconsistent_group_protocol
    existing = d.answer(d.join(10_000, a, protocol_type="connect"))
    assert existing == JoinGroupOutput(E.inconsistent_group_protocol, member_id=a)
    assert d.state() is STABLE


# ---------------------------------------------------------------------------
# Group size
# ---------------------------------------------------------------------------


def test_group_max_size_in_stable_group() -> None:
    d = Driver(max_group_size=2)
    form_group(d, ["a", "b"])
    assert d.answer(d.join(10_000, client="c")) == JoinGroupOutput(
        E.group_max_size_reached, member_id=""
    )


def test_group_max_size_during_initial_rebalance() -> None:
    d = Driver(max_group_size=1)
    d.new_member(0, client="a")
    response = d.answer(d.join(100, client="b"))
    assert response.error_code is E.group_max_size_reached


def test_group_max_size_counts_rejoined_members_and_evicts_late_ones() -> None:
    d = Driver(max_group_size=2)
    (a, b), _ = form_group(d, ["a", "b"])
    ta = d.join(10_000, a)  # rebalance, 1 member awaiting
    c, tc = d.new_member(10_100, client="c")  # 2 awaiting
    assert not d.answered(tc)
    assert d.answer(d.join(10_200, b)) == JoinGroupOutput(E.group_max_size_reached, member_id="")
    assert b not in d.group().members
    # Kafka does not try to complete the join here: the timer does.
    assert not d.answered(ta)
    d.run_until(20_000)
    assert d.answered_at(ta) == 20_000
    assert [m.member_id for m in d.answer(ta).members] == [a, c]


# ---------------------------------------------------------------------------
# SyncGroup
# ---------------------------------------------------------------------------


def test_sync_parks_followers_until_the_leader_sends_the_assignment() -> None:
    d = Driver()
    (a, _), (b, _), (c, _) = (d.new_member(0, client=x) for x in "abc")
    d.run_until(6_000)
    sb = d.sync(6_100, b, 1)
    sc = d.sync(6_200, c, 1)
    assert not d.answered(sb) and not d.answered(sc)
    assert d.state() is COMPLETING
    sa = d.sync(6_300, a, 1, [(a, b"A"), (b, b"B"), ("stranger", b"X")])
    assert d.answered_at(sa) == d.answered_at(sb) == d.answered_at(sc) == 6_300
    assert d.answer(sa) == SyncGroupOutput(E.none, "consumer", "range", b"A")
    assert d.answer(sb) == SyncGroupOutput(E.none, "consumer", "range", b"B")
    # Members the leader omitted get an empty assignment.
    assert d.answer(sc) == SyncGroupOutput(E.none, "consumer", "range", b"")
    assert d.state() is STABLE
    assert d.c.sync_deadline("g") is None
    # Parked members' sessions restart when their SyncGroup is answered.
    assert d.c.session_deadline("g", b) == 16_300


def test_sync_in_stable_group_returns_the_stored_assignment() -> None:
    d = Driver()
    (a, b), generation = form_group(d, ["a", "b"])
    assert d.answer(d.sync(9_000, b, generation)) == SyncGroupOutput(
        E.none, "consumer", "range", f"assignment-{b}".encode()
    )
    # The leader's assignments in a Stable group are ignored.
    assert d.answer(d.sync(9_000, a, generation, [(a, b"new")])).assignment == (
        f"assignment-{a}".encode()
    )


def test_sync_during_preparing_rebalance() -> None:
    d = Driver()
    (a, b), generation = form_group(d, ["a", "b"])
    d.join(10_000, a)
    assert d.answer(d.sync(10_100, b, generation)) == SyncGroupOutput(E.rebalance_in_progress)


def test_sync_errors_and_their_precedence() -> None:
    d = Driver()
    (_a, b), generation = form_group(d, ["a", "b"])

    def error(**kwargs: Any) -> ErrorCode:
        fields: dict[str, Any] = {"member_id": b, "generation": generation} | kwargs
        member_id, gen = fields.pop("member_id"), fields.pop("generation")
        response = d.answer(d.sync(9_000, member_id, gen, **fields))
        assert isinstance(response, SyncGroupOutput)
        return response.error_code

    assert error(group="") is E.invalid_group_id
    assert error(group="nope") is E.unknown_member_id
    assert error(member_id="ghost") is E.unknown_member_id
    assert error(member_id="ghost", generation=99) is E.unknown_member_id
    assert error(generation=99) is E.illegal_generation
    assert error(generation=99, protocol_name="other") is E.illegal_generation
    assert error(protocol_type="connect") is E.inconsistent_group_protocol
    assert error(protocol_name="roundrobin") is E.inconsistent_group_protocol
    # v5 requires both fields; older versions may omit them.
    assert error(protocol_type=None) is E.inconsistent_group_protocol
    assert error(protocol_name=None) is E.inconsistent_group_protocol
    assert error(protocol_type=None, protocol_name=None, version=4) is E.none
    assert error(instance="i") is E.unknown_member_id


def test_sync_to_an_empty_group_is_unknown_member() -> None:
    d = Driver()
    d.answer(d.join(0))  # creates the group, Empty with a pending member
    assert d.answer(d.sync(1, "client-1", 0)).error_code is E.unknown_member_id


def test_members_that_do_not_sync_are_removed_and_a_rebalance_starts() -> None:
    d = Driver()
    (a, _), (b, _) = d.new_member(0, client="a"), d.new_member(0, client="b")
    d.run_until(6_000)
    assert d.c.sync_deadline("g") == 16_000
    d.sync(7_000, a, 1, [(a, b"A"), (b, b"B")])
    assert d.state() is STABLE
    assert d.group().pending_sync_members == (b,)
    assert d.heartbeat(12_000, b, 1) is E.none
    d.run_until(15_999)
    assert d.state() is STABLE
    d.run_until(16_000)
    group = d.group()
    assert b not in group.members
    assert group.state is PREPARING
    assert d.c.join_deadline("g") == 26_000
    assert d.heartbeat(16_500, a, 1) is E.rebalance_in_progress
    ta = d.join(16_600, a)
    assert d.answered_at(ta) == 16_600
    assert d.answer(ta).generation_id == 2
    assert d.heartbeat(16_601, b, 1) is E.unknown_member_id


def test_pending_sync_timer_is_cancelled_when_everyone_synced() -> None:
    d = Driver()
    form_group(d, ["a", "b"])
    assert d.c.sync_deadline("g") is None
    assert d.group().pending_sync_members == ()


def test_leader_sync_for_an_old_generation_is_illegal() -> None:
    d = Driver()
    (a, b), generation = form_group(d, ["a", "b"])
    ta, tb = d.join(10_000, a), d.join(10_000, b)
    assert d.answer(ta).generation_id == d.answer(tb).generation_id == generation + 1
    assert d.answer(d.sync(10_001, a, generation)).error_code is E.illegal_generation
    assert d.state() is COMPLETING


# ---------------------------------------------------------------------------
# Heartbeats and sessions
# ---------------------------------------------------------------------------


def test_heartbeat_answers_by_state() -> None:
    d = Driver()
    (a, _), (b, _) = d.new_member(0, client="a"), d.new_member(0, client="b")
    assert d.heartbeat(100, a, 0) is E.rebalance_in_progress
    d.run_until(6_000)
    assert d.state() is COMPLETING
    assert d.heartbeat(6_100, a, 1) is E.none
    d.sync(6_200, a, 1)
    assert d.state() is STABLE
    assert d.heartbeat(6_300, b, 1) is E.none


def test_heartbeat_errors_and_their_precedence() -> None:
    d = Driver()
    (a, _), generation = form_group(d, ["a", "b"])
    assert d.heartbeat(9_000, a, generation, group="") is E.invalid_group_id
    assert d.heartbeat(9_000, a, generation, group="nope") is E.unknown_member_id
    assert d.heartbeat(9_000, "ghost", 99) is E.unknown_member_id
    assert d.heartbeat(9_000, a, generation + 1) is E.illegal_generation
    assert d.heartbeat(9_000, a, generation, instance="i") is E.unknown_member_id


def test_heartbeat_to_empty_group_is_unknown_member() -> None:
    d = Driver()
    [a], generation = form_group(d, ["a"])
    d.leave(5_000, MemberIdentity(a))
    assert d.state() is EMPTY
    assert d.heartbeat(5_001, a, generation + 1) is E.unknown_member_id


def test_session_expiry_removes_the_member_and_rebalances() -> None:
    d = Driver()
    [a], _ = form_group(d, ["a"])  # joined and synced at 3000
    assert d.c.session_deadline("g", a) == 13_000
    assert d.heartbeat(5_000, a, 1) is E.none
    assert d.c.session_deadline("g", a) == 15_000
    d.run_until(14_999)
    assert a in d.group().members
    d.run_until(15_000)
    group = d.group()
    assert group.members == {}
    assert group.state is EMPTY
    assert group.generation_id == 2
    assert d.heartbeat(15_001, a, 1) is E.unknown_member_id


def test_members_parked_in_join_are_not_expired() -> None:
    d = Driver()
    (a, b), _ = form_group(d, ["a", "b"], session=6_000, rebalance=20_000)
    assert d.now == 6_000
    ta = d.join(7_000, a, session=6_000, rebalance=20_000)  # rebalance until 27000
    assert d.c.join_deadline("g") == 27_000
    assert d.heartbeat(8_000, b, 1) is E.rebalance_in_progress
    d.run_until(13_999)
    # a's session deadline (12000) passed while it was parked: it stays.
    assert a in d.group().members
    assert not d.answered(ta)
    d.run_until(14_000)  # b's session expires; everyone left has rejoined
    assert d.answered_at(ta) == 14_000
    assert d.answer(ta).generation_id == 2
    assert d.answer(ta).members == (JoinGroupMember(a, None, b"meta"),)
    assert d.c.session_deadline("g", a) == 20_000


def test_members_parked_in_sync_are_not_expired() -> None:
    d = Driver()
    (a, _), (b, _) = (d.new_member(0, client=x, rebalance=60_000) for x in "ab")
    d.run_until(6_000)
    sb = d.sync(6_000, b, 1)
    assert d.heartbeat(12_000, a, 1) is E.none
    assert d.heartbeat(19_000, a, 1) is E.none
    d.run_until(20_000)  # b's session deadline (16000) passed while parked
    assert b in d.group().members
    d.sync(20_000, a, 1, [(b, b"B")])
    assert d.answer(sb).assignment == b"B"
    assert d.c.session_deadline("g", b) == 30_000


def test_new_member_parked_in_join_expires_after_the_new_member_timeout() -> None:
    d = Driver(new_member_join_timeout_ms=50_000)
    [a], _ = form_group(d, ["a"], rebalance=100_000)
    tc = d.join(10_000, client="c", require_known=False, rebalance=100_000)
    assert d.c.join_deadline("g") == 110_000
    assert d.c.session_deadline("g", "c-2") == 60_000
    for now in range(12_000, 110_000, 5_000):
        assert d.heartbeat(now, a, 1) is E.rebalance_in_progress
    assert d.answered_at(tc) == 60_000
    assert d.answer(tc) == JoinGroupOutput(E.unknown_member_id, member_id="")
    d.run_until(110_000)
    group = d.group()
    assert group.state is EMPTY
    assert group.generation_id == 2


def test_offset_commit_keeps_the_session_alive() -> None:
    d = Driver()
    [a], generation = form_group(d, ["a"])
    assert d.commit(8_000, {("t", 0): 5}, generation=generation, member_id=a) == {("t", 0): E.none}
    assert d.c.session_deadline("g", a) == 18_000


# ---------------------------------------------------------------------------
# Static membership
# ---------------------------------------------------------------------------


def test_static_member_joins_without_member_id_required() -> None:
    d = Driver()
    token = d.join(0, instance="pod-0", client="c")
    d.run_until(3_000)
    response = d.answer(token)
    assert response.error_code is E.none
    assert response.member_id == "pod-0-1"
    assert response.members == (JoinGroupMember("pod-0-1", "pod-0", b"meta"),)


def _static_group(d: Driver, leader_static: bool) -> tuple[str, str, int]:
    """A Stable group of a static and a dynamic member; returns (static, dynamic, gen)."""
    if leader_static:
        ts = d.join(0, instance="i-s", client="s")
        dynamic, td = d.new_member(0, client="d")
    else:
        dynamic, td = d.new_member(0, client="d")
        ts = d.join(0, instance="i-s", client="s")
    d.run_until_answered(ts, td)
    static = d.answer(ts).member_id
    leader = d.answer(ts).leader
    assert (
        d.answer(d.sync(d.now, leader, 1, [(static, b"S"), (dynamic, b"D")])).error_code is E.none
    )
    follower = dynamic if leader == static else static
    assert d.answer(d.sync(d.now, follower, 1)).error_code is E.none
    assert d.state() is STABLE
    return static, dynamic, 1


def test_static_follower_restart_in_stable_group_keeps_the_assignment() -> None:
    d = Driver()
    old, dynamic, generation = _static_group(d, leader_static=False)
    token = d.join(10_000, instance="i-s", client="s")
    response = d.answer(token)
    new = response.member_id
    assert new != old
    assert response == joined(new, generation, dynamic)
    assert d.state() is STABLE
    assert d.group().static_member_id("i-s") == new
    # The old id is fenced.
    assert d.heartbeat(10_001, old, generation, instance="i-s") is E.fenced_instance_id
    assert d.heartbeat(10_001, old, generation) is E.unknown_member_id
    fenced_sync = d.sync(10_001, old, generation, instance="i-s")
    assert d.answer(fenced_sync).error_code is E.fenced_instance_id
    fenced_commit = d.commit(10_001, {("t", 0): 1}, generation=1, member_id=old, instance="i-s")
    assert fenced_commit == {("t", 0): E.fenced_instance_id}
    # The new id inherits the old assignment.
    assert d.answer(d.sync(10_002, new, generation, instance="i-s")).assignment == b"S"
    assert d.heartbeat(10_003, new, generation, instance="i-s") is E.none


def test_static_leader_restart_skips_assignment_from_v9() -> None:
    d = Driver()
    _old, dynamic, generation = _static_group(d, leader_static=True)
    response = d.answer(d.join(10_000, instance="i-s", client="s", version=9))
    new = response.member_id
    assert response.leader == new
    assert response.skip_assignment is True
    assert response.generation_id == generation
    assert [m.member_id for m in response.members] == [dynamic, new]
    assert d.state() is STABLE
    assert d.group().leader_id == new


def test_static_leader_restart_before_v9_reports_the_old_leader() -> None:
    d = Driver()
    old, _dynamic, generation = _static_group(d, leader_static=True)
    response = d.answer(d.join(10_000, instance="i-s", client="s", version=8))
    assert response.member_id != old
    assert response.leader == old
    assert response.skip_assignment is False
    assert response.members == ()
    assert response.generation_id == generation


def test_static_restart_changing_the_selected_protocol_rebalances() -> None:
    d = Driver()
    both = (("range", b"r"), ("roundrobin", b"rr"))
    token = d.join(0, instance="i", protocols=both)
    d.run_until_answered(token)
    old = d.answer(token).member_id
    d.sync(3_000, old, 1)
    restart = d.join(5_000, instance="i", protocols=(("roundrobin", b"rr"), ("range", b"r")))
    # Rebalance, and the only member has rejoined: completes at once.
    response = d.answer(restart)
    assert d.answered_at(restart) == 5_000
    assert response.generation_id == 2
    assert response.protocol_name == "roundrobin"


def test_static_restart_with_new_metadata_but_same_protocol_does_not_rebalance() -> None:
    d = Driver()
    token = d.join(0, instance="i")
    d.run_until_answered(token)
    d.sync(3_000, d.answer(token).member_id, 1)
    response = d.answer(d.join(5_000, instance="i", protocols=(("range", b"new"),)))
    assert response.generation_id == 1
    assert d.state() is STABLE
    [described] = d.describe(5_001, "g")
    assert described.members[0].member_metadata == b"new"


def test_static_replacement_fences_a_parked_join() -> None:
    d = Driver()
    old, dynamic, _ = _static_group(d, leader_static=True)
    parked = d.join(10_000, old, instance="i-s")  # leader rejoins: rebalance
    assert d.state() is PREPARING
    restart = d.join(10_100, instance="i-s", client="s")
    assert d.answer(parked) == JoinGroupOutput(E.fenced_instance_id, member_id=old, leader="")
    assert d.answered_at(parked) == 10_100
    new = d.group().static_member_id("i-s")
    assert new is not None and new != old
    td = d.join(10_200, dynamic)
    assert d.answered_at(restart) == d.answered_at(td) == 10_200
    assert d.answer(restart).leader == new
    assert d.answer(restart).generation_id == 2


def test_static_replacement_during_completing_rebalance_restarts_it() -> None:
    d = Driver()
    ts = d.join(0, instance="i-s", client="s")
    dynamic, td = d.new_member(0, client="d")
    d.run_until_answered(ts, td)
    parked_sync = d.sync(6_100, dynamic, 1)
    restart = d.join(6_200, instance="i-s", client="s")
    assert d.answer(parked_sync) == SyncGroupOutput(E.rebalance_in_progress)
    assert not d.answered(restart)
    assert d.state() is PREPARING


def test_static_members_that_do_not_rejoin_are_kept() -> None:
    d = Driver()
    static, dynamic, _ = _static_group(d, leader_static=True)
    td = d.join(10_000, dynamic, protocols=(("range", b"v2"),))
    assert d.heartbeat(15_000, static, 1, instance="i-s") is E.rebalance_in_progress
    d.run_until(20_000)
    response = d.answer(td)
    assert d.answered_at(td) == 20_000
    assert response.generation_id == 2
    assert response.leader == dynamic  # the static leader did not rejoin
    assert [(m.member_id, m.group_instance_id) for m in response.members] == [
        (static, "i-s"),
        (dynamic, None),
    ]
    assert d.heartbeat(20_001, static, 1, instance="i-s") is E.illegal_generation
    assert d.heartbeat(20_001, static, 2, instance="i-s") is E.none


def test_static_member_with_known_id_rejoining_stable_group() -> None:
    d = Driver()
    static, _dynamic, generation = _static_group(d, leader_static=False)
    response = d.answer(d.join(10_000, static, instance="i-s"))
    assert response.error_code is E.none
    assert response.generation_id == generation
    assert d.state() is STABLE
    assert d.answer(d.join(10_000, "other", instance="i-s")).error_code is E.fenced_instance_id
    assert d.answer(d.join(10_000, static, instance="i-x")).error_code is E.unknown_member_id


def test_static_member_without_heartbeats_expires_after_its_session() -> None:
    d = Driver()
    static, dynamic, generation = _static_group(d, leader_static=False)
    # Both synced at 6000; the dynamic member keeps heartbeating.
    assert d.c.session_deadline("g", static) == 16_000
    assert d.heartbeat(12_000, dynamic, generation) is E.none
    d.run_until(16_000)
    assert static not in d.group().members
    assert d.group().static_member_id("i-s") is None
    assert d.state() is PREPARING
    td = d.join(16_500, dynamic)
    assert d.answer(td).generation_id == generation + 1
    assert d.answer(td).members == (JoinGroupMember(dynamic, None, b"meta"),)


def test_leave_group_by_instance_id() -> None:
    d = Driver()
    static, _dynamic, _ = _static_group(d, leader_static=False)
    result = d.leave(
        10_000,
        MemberIdentity("", "i-unknown"),
        MemberIdentity("wrong", "i-s"),
        MemberIdentity("", "i-s"),
    )
    assert result == LeaveGroupOutput(
        E.none,
        (
            LeaveGroupMemberOutput("", "i-unknown", E.unknown_member_id),
            LeaveGroupMemberOutput("wrong", "i-s", E.fenced_instance_id),
            LeaveGroupMemberOutput("", "i-s", E.none),
        ),
    )
    assert static not in d.group().members
    assert d.group().static_member_id("i-s") is None
    assert d.state() is PREPARING


# ---------------------------------------------------------------------------
# LeaveGroup
# ---------------------------------------------------------------------------


def test_last_member_leaving_empties_the_group_with_a_new_generation() -> None:
    d = Driver()
    [a], generation = form_group(d, ["a"])
    assert d.leave(5_000, MemberIdentity(a)) == LeaveGroupOutput(
        E.none, (LeaveGroupMemberOutput(a, None, E.none),)
    )
    group = d.group()
    assert group.state is EMPTY
    assert group.generation_id == generation + 1
    assert d.c.session_deadline("g", a) is None


def test_leave_group_errors() -> None:
    d = Driver()
    assert d.leave(0, MemberIdentity("m"), group="") == LeaveGroupOutput(E.invalid_group_id)
    assert d.leave(0, MemberIdentity("m"), MemberIdentity("", "i"), group="nope") == (
        LeaveGroupOutput(
            E.none,
            (
                LeaveGroupMemberOutput("m", None, E.unknown_member_id),
                LeaveGroupMemberOutput("", "i", E.unknown_member_id),
            ),
        )
    )
    (a, _b), _ = form_group(d, ["a", "b"])
    result = d.leave(9_000, MemberIdentity("ghost"), MemberIdentity(a, "i"))
    assert [m.error_code for m in result.members] == [E.unknown_member_id, E.unknown_member_id]
    assert d.state() is STABLE  # nobody left: no rebalance


def test_leaving_during_a_rebalance_answers_the_parked_join_and_completes() -> None:
    d = Driver()
    (a, b, c), _ = form_group(d, ["a", "b", "c"])
    ta = d.join(10_000, a)
    tb = d.join(10_100, b)
    result = d.leave(10_200, MemberIdentity(b), MemberIdentity(c))
    assert [m.error_code for m in result.members] == [E.none, E.none]
    assert d.answer(tb) == JoinGroupOutput(E.unknown_member_id)
    # Everybody left has rejoined: the join completes at once.
    assert d.answered_at(ta) == 10_200
    assert d.answer(ta).members == (JoinGroupMember(a, None, b"meta"),)


def test_pending_member_leaving_still_triggers_a_rebalance() -> None:
    # Kafka counts the pending member as a successful leave.
    d = Driver()
    form_group(d, ["a"])
    pending = d.answer(d.join(5_000, client="n")).member_id
    result = d.leave(5_100, MemberIdentity(pending))
    assert result.members == (LeaveGroupMemberOutput(pending, None, E.none),)
    assert d.group().pending_members == ()
    assert d.state() is PREPARING


# ---------------------------------------------------------------------------
# Offsets
# ---------------------------------------------------------------------------


def test_simple_commit_creates_an_empty_group_and_fetch_returns_it() -> None:
    d = Driver()
    assert d.commit(0, {("t", 0): 42, ("t", 1): 7, ("u", 0): 1}, metadata=None) == {
        ("t", 0): E.none,
        ("t", 1): E.none,
        ("u", 0): E.none,
    }
    assert d.state() is EMPTY
    assert d.list(1) == (ListedGroup("g", "", "Empty"),)
    fetched = d.fetch(
        2, OffsetFetchGroup("g", [OffsetFetchTopic("t", [0, 1, 2]), OffsetFetchTopic("x", [0])])
    )
    [group] = fetched.groups
    assert group.error_code is E.none
    assert group.topics == (
        OffsetFetchTopicOutput(
            "t",
            (
                OffsetFetchPartitionOutput(0, 42, 7, ""),
                OffsetFetchPartitionOutput(1, 7, 7, ""),
                OffsetFetchPartitionOutput(2, -1, -1, ""),
            ),
        ),
        OffsetFetchTopicOutput("x", (OffsetFetchPartitionOutput(0, -1, -1, ""),)),
    )
    [everything] = d.fetch(3, OffsetFetchGroup("g")).groups
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in everything.topics] == [
        ("t", [42, 7]),
        ("u", [1]),
    ]


def test_offset_fetch_for_unknown_group_and_null_group() -> None:
    d = Driver()
    output = d.fetch(
        0,
        OffsetFetchGroup("nope", [OffsetFetchTopic("t", [3])]),
        OffsetFetchGroup("nope"),
        OffsetFetchGroup(None),
    )
    assert [g.error_code for g in output.groups] == [E.none, E.none, E.invalid_group_id]
    assert output.groups[0].topics == (
        OffsetFetchTopicOutput("t", (OffsetFetchPartitionOutput(3, -1),)),
    )
    assert output.groups[1].topics == ()


def test_offset_fetch_accepts_require_stable() -> None:
    d = Driver()
    d.commit(0, {("t", 0): 1})
    request = OffsetFetchInput([OffsetFetchGroup("g", [OffsetFetchTopic("t", [0])])], True)
    output = d.answer(d.submit(1, request))
    assert output.groups[0].topics[0].partitions[0].committed_offset == 1


def test_offset_commit_validation() -> None:
    d = Driver()
    (a, _b), generation = form_group(d, ["a", "b"])
    p = {("t", 0): 10}

    def commit(**kwargs: Any) -> ErrorCode:
        return d.commit(9_000, p, **kwargs)[("t", 0)]

    assert commit(group=None) is E.invalid_group_id
    assert commit() is E.unknown_member_id  # simple commit to a non-empty group
    assert commit(member_id=a) is E.illegal_generation  # generation -1
    assert commit(generation=generation, member_id="ghost") is E.unknown_member_id
    assert commit(generation=generation + 1, member_id=a) is E.illegal_generation
    assert commit(generation=generation, member_id=a, instance="i") is E.unknown_member_id
    assert commit(generation=generation, member_id=a) is E.none
    # Unknown group with a generation: v9+ GROUP_ID_NOT_FOUND, older ILLEGAL_GENERATION.
    assert commit(group="nope", generation=3, member_id="m") is E.group_id_not_found
    assert commit(group="nope", generation=3, member_id="m", version=8) is E.illegal_generation
    assert d.c.group("nope") is None


def test_offset_commit_by_rebalance_state() -> None:
    d = Driver()
    (a, b), generation = form_group(d, ["a", "b"])
    p = {("t", 0): 10}
    # PreparingRebalance: the current (old) generation may still commit.
    d.join(10_000, a)
    assert d.commit(10_100, p, generation=generation, member_id=b) == {("t", 0): E.none}
    d.join(10_200, b)
    assert d.state() is COMPLETING
    assert d.commit(10_300, p, generation=generation + 1, member_id=b) == {
        ("t", 0): E.rebalance_in_progress
    }
    assert d.commit(10_300, p, generation=generation, member_id=b) == {
        ("t", 0): E.illegal_generation
    }


def test_offset_commit_to_empty_group_by_former_member_is_unknown_member() -> None:
    d = Driver()
    [a], generation = form_group(d, ["a"])
    d.leave(5_000, MemberIdentity(a))
    assert d.commit(5_001, {("t", 0): 1}, generation=generation, member_id=a) == {
        ("t", 0): E.unknown_member_id
    }
    # A simple commit with a member id but no generation is accepted when Empty.
    assert d.commit(5_002, {("t", 0): 2}, member_id=a) == {("t", 0): E.none}


def test_offset_metadata_too_large() -> None:
    d = Driver(offset_metadata_max_bytes=4)
    assert d.commit(0, {("t", 0): 1}, metadata="abcd") == {("t", 0): E.none}
    assert d.commit(0, {("t", 1): 1}, metadata="abcde") == {("t", 1): E.offset_metadata_too_large}
    [group] = d.fetch(1, OffsetFetchGroup("g", [OffsetFetchTopic("t", [0, 1])])).groups
    assert [p.committed_offset for p in group.topics[0].partitions] == [1, -1]
    assert group.topics[0].partitions[0].metadata == "abcd"


# ---------------------------------------------------------------------------
# Admin requests
# ---------------------------------------------------------------------------


def test_describe_groups() -> None:
    d = Driver()
    (a, b), _ = form_group(d, ["a", "b"])
    stable, unknown, null = d.describe(9_000, "g", "nope", None)
    assert stable == DescribedGroup(
        "g",
        E.none,
        group_state="Stable",
        protocol_type="consumer",
        protocol_data="range",
        members=tuple(
            DescribedGroupMember(m, None, c, "/127.0.0.1", b"meta", f"assignment-{m}".encode())
            for m, c in ((a, "a"), (b, "b"))
        ),
    )
    assert unknown == DescribedGroup("nope", E.none, group_state="Dead")
    assert null == DescribedGroup(None, E.invalid_group_id)
    # Outside Stable: no protocol and no metadata, assignment as stored.
    d.join(10_000, a)
    [preparing] = d.describe(10_001, "g")
    assert preparing.group_state == "PreparingRebalance"
    assert preparing.protocol_data == ""
    assert [m.member_metadata for m in preparing.members] == [b"", b""]
    assert preparing.members[0].member_assignment == f"assignment-{a}".encode()


def test_list_groups_with_filters() -> None:
    d = Driver()
    form_group(d, ["a"], group="g1")
    d.commit(5_000, {("t", 0): 1}, group="g2")
    assert d.list(5_001) == (
        ListedGroup("g1", "consumer", "Stable"),
        ListedGroup("g2", "", "Empty"),
    )
    assert d.list(5_001, states=["stable"]) == (ListedGroup("g1", "consumer", "Stable"),)
    assert d.list(5_001, states=["EMPTY", "Dead"]) == (ListedGroup("g2", "", "Empty"),)
    assert len(d.list(5_001, types=["Classic"])) == 2
    assert d.list(5_001, types=["consumer"]) == ()


def test_delete_groups() -> None:
    d = Driver()
    form_group(d, ["a"], group="busy")
    d.commit(5_000, {("t", 0): 1}, group="idle")
    results = d.delete(5_001, "idle", "busy", "nope", "idle", None)
    assert results == (
        DeletableGroupResult("idle", E.none),
        DeletableGroupResult("busy", E.non_empty_group),
        DeletableGroupResult("nope", E.group_id_not_found),
        DeletableGroupResult(None, E.invalid_group_id),
    )
    assert d.c.group("idle") is None
    assert d.describe(5_002, "idle")[0].group_state == "Dead"
    [fetched] = d.fetch(5_003, OffsetFetchGroup("idle", [OffsetFetchTopic("t", [0])])).groups
    assert fetched.topics[0].partitions[0].committed_offset == -1
    assert [g.group_id for g in d.list(5_004)] == ["busy"]


def test_groups_are_independent() -> None:
    d = Driver()
    t1 = d.new_member(0, client="a", group="g1")[1]
    t2 = d.new_member(1_000, client="b", group="g2")[1]
    d.run_until(3_000)
    assert d.answered_at(t1) == 3_000
    assert not d.answered(t2)
    d.run_until(4_000)
    assert d.answered_at(t2) == 4_000
    assert d.answer(t1).members == (JoinGroupMember("a-1", None, b"meta"),)
    assert d.answer(t2).members == (JoinGroupMember("b-2", None, b"meta"),)
    assert d.answer(t1).generation_id == d.answer(t2).generation_id == 1


# ---------------------------------------------------------------------------
# Time handling
# ---------------------------------------------------------------------------


def test_timers_fire_at_their_deadline_even_when_the_driver_is_late() -> None:
    c = GroupCoordinator(CoordinatorConfig(member_id_generator=lambda p: f"{p}-1"))
    request = JoinGroupInput("g", "", 10_000, 10_000, "consumer", RANGE, client_id="c")
    c.handle(0, "t0", request)
    assert c.handle(0, "t1", JoinGroupInput("g", "c-1", 10_000, 10_000, "consumer", RANGE)) == []
    # The driver wakes up late, at 5000: the join completed "at" 3000.
    [reply] = c.advance(5_000)
    assert reply.token == "t1"
    assert c.session_deadline("g", "c-1") == 13_000
    assert c.sync_deadline("g") == 13_000


def test_requests_fire_due_timers_first() -> None:
    c = GroupCoordinator(CoordinatorConfig(member_id_generator=lambda p: f"{p}-1"))
    c.handle(0, "t0", JoinGroupInput("g", "", 10_000, 10_000, "consumer", RANGE, client_id="c"))
    c.handle(0, "t1", JoinGroupInput("g", "c-1", 10_000, 10_000, "consumer", RANGE))
    replies = c.handle(4_000, "hb", HeartbeatInput("g", 1, "c-1"))
    assert [r.token for r in replies] == ["t1", "hb"]
    assert replies[1].response == HeartbeatOutput(E.none)


def test_time_never_goes_backwards() -> None:
    d = Driver()
    [a], generation = form_group(d, ["a"])
    assert d.heartbeat(8_000, a, generation) is E.none
    assert d.c.session_deadline("g", a) == 18_000
    d.c.handle(7_000, "late", HeartbeatInput("g", generation, a))
    assert d.c.session_deadline("g", a) == 18_000


def test_next_deadline_is_none_when_idle() -> None:
    c = GroupCoordinator()
    assert c.next_deadline() is None
    assert c.advance(1_000_000) == []
