"""The member state machine, driven without sockets or clocks."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from gengroup._errors import IllegalGeneration, RebalanceInProgress
from gengroup.membership.balancers import RangeBalancer, RoundRobinBalancer
from gengroup.membership.member import (
    IllegalTransition,
    Joined,
    Member,
    MemberConfig,
    Outcome,
    Phase,
    Retry,
    Synced,
    outcome_for,
)
from gengroup.protocol.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_subscription,
)


def make(instance: str | None = None, topics: tuple[str, ...] = ("b", "a")) -> Member:
    return Member(
        MemberConfig(
            group_id="g",
            topics=topics,
            balancers=(RangeBalancer(), RoundRobinBalancer()),
            session_timeout=10.0,
            rebalance_timeout=30.0,
            heartbeat_interval=1.0,
            group_instance_id=instance,
        )
    )


def sub(*topics: str) -> bytes:
    return encode_subscription(Subscription(topics=topics))


def test_join_params_offer_every_balancer_in_preference_order() -> None:
    m = make()
    params = m.join_params()
    assert m.phase is Phase.JOINING
    assert [name for name, _ in params.protocols] == ["range", "roundrobin"]
    decoded = decode_subscription(params.protocols[0][1])
    assert decoded.topics == ("a", "b")  # sorted, like the Java client
    assert params.member_id == ""


def test_member_id_required_keeps_the_given_id_and_rejoins_without_backoff() -> None:
    m = make()
    m.join_params()
    r = m.on_join(
        error_code=ErrorCode.member_id_required,
        member_id="c-1",
        generation_id=-1,
        protocol=None,
        leader="",
        members=(),
    )
    assert isinstance(r, Retry) and r.outcome is Outcome.REJOIN
    assert m.member_id == "c-1" and m.phase is Phase.UNJOINED
    assert m.join_params().member_id == "c-1"


@pytest.mark.parametrize(
    ("code", "says"),
    [
        (ErrorCode.invalid_session_timeout, ["session_timeout=10.0 s", "6 s..1800 s"]),
        (ErrorCode.inconsistent_group_protocol, ["[range, roundrobin]", "cooperative-sticky"]),
    ],
)
def test_a_refused_join_says_what_was_sent(code: ErrorCode, says: list[str]) -> None:
    m = make()
    m.join_params()
    r = m.on_join(
        error_code=code, member_id="", generation_id=-1, protocol=None, leader="", members=()
    )
    assert isinstance(r, Retry) and r.outcome is Outcome.FATAL
    for text in says:
        assert text in str(r.error)


def joined_leader(
    m: Member,
    protocol: str = "roundrobin",
    members: tuple[tuple[str, str | None, bytes], ...] = (
        ("m1", None, sub("a")),
        ("m2", None, sub("a", "c")),
    ),
) -> Joined:
    """``m`` joins generation 5 as ``m1``, its leader, with ``members`` on ``protocol``."""
    m.join_params()
    r = m.on_join(
        error_code=0,
        member_id="m1",
        generation_id=5,
        protocol=protocol,
        leader="m1",
        members=members,
    )
    assert isinstance(r, Joined)
    return r


def test_leader_assigns_with_the_chosen_balancer_and_covers_every_member() -> None:
    m = make()
    j = joined_leader(m)
    assert j.is_leader and m.generation_id == 5 and m.phase is Phase.SYNCING
    assert m.subscribed_topics() == {"a", "b", "c"}
    out = m.assign({"a": 3, "c": 1})
    assert set(out) == {"m1", "m2"}
    a1 = decode_assignment(out["m1"]).as_mapping()
    a2 = decode_assignment(out["m2"]).as_mapping()
    assert a1 == {"a": [0, 2]}
    assert a2 == {"a": [1], "c": [0]}


def test_sync_stores_owned_partitions_for_the_next_join() -> None:
    m = make()
    joined_leader(m)
    raw = Assignment.from_mapping({"a": [2, 0]})
    from gengroup.protocol.consumer_protocol import encode_assignment

    s = m.on_sync(error_code=0, assignment=encode_assignment(raw))
    assert isinstance(s, Synced) and m.phase is Phase.STABLE
    assert [str(tp) for tp in s.partitions()] == ["a[0]", "a[2]"]
    m.generation_ended(Outcome.REJOIN, "rebalance")
    params = m.join_params()
    owned = decode_subscription(params.protocols[0][1]).owned_partitions
    assert owned == (("a", (0, 2)),)
    assert params.reason == "rebalance"


def test_empty_assignment_bytes_mean_no_partitions() -> None:
    m = make()
    joined_leader(m)
    s = m.on_sync(error_code=0, assignment=b"")
    assert isinstance(s, Synced) and s.partitions() == []


@pytest.mark.parametrize(
    ("code", "outcome", "reset"),
    [
        (ErrorCode.rebalance_in_progress, Outcome.REJOIN, False),
        (ErrorCode.illegal_generation, Outcome.RESET_MEMBER, True),
        (ErrorCode.unknown_member_id, Outcome.RESET_MEMBER, True),
        (ErrorCode.not_coordinator, Outcome.FIND_COORDINATOR, False),
        (ErrorCode.coordinator_not_available, Outcome.FIND_COORDINATOR, False),
        (ErrorCode.coordinator_load_in_progress, Outcome.RETRY, False),
        (ErrorCode.fenced_instance_id, Outcome.FATAL, False),
    ],
)
def test_sync_errors_follow_the_table(code: int, outcome: Outcome, reset: bool) -> None:
    m = make()
    joined_leader(m)
    r = m.on_sync(error_code=code, assignment=b"")
    assert isinstance(r, Retry) and r.outcome is outcome
    assert r.error.code == code
    assert (m.member_id == "") is reset
    assert m.phase is Phase.UNJOINED


def test_heartbeat_outcomes_and_liveness() -> None:
    m = make()
    joined_leader(m)
    m.on_sync(error_code=0, assignment=b"")
    assert m.on_heartbeat(error_code=0, now=3.0) is None
    assert m.last_heartbeat_ok == 3.0
    assert m.on_heartbeat(error_code=ErrorCode.rebalance_in_progress, now=4.0) is Outcome.REJOIN
    assert m.last_heartbeat_ok == 4.0  # a rebalance answer still proves liveness
    assert m.on_heartbeat(error_code=ErrorCode.illegal_generation, now=5.0) is Outcome.RESET_MEMBER
    assert m.on_heartbeat(error_code=ErrorCode.fenced_instance_id, now=5.0) is Outcome.FATAL


def test_heartbeat_failures_give_up_after_a_session_timeout() -> None:
    m = make()
    joined_leader(m)
    m.on_sync(error_code=0, assignment=b"")
    assert m.on_heartbeat_failure(now=9.9, started=0.0) is None
    assert m.on_heartbeat_failure(now=10.0, started=0.0) is Outcome.FIND_COORDINATOR
    m.on_heartbeat(error_code=0, now=8.0)
    assert m.on_heartbeat_failure(now=17.9, started=0.0) is None
    assert m.on_heartbeat_failure(now=18.0, started=0.0) is Outcome.FIND_COORDINATOR


def test_illegal_transition_poisons_the_machine() -> None:
    m = make()
    with pytest.raises(IllegalTransition, match=r"'synced' is not allowed in phase UNJOINED"):
        m.on_sync(error_code=0, assignment=b"")
    assert m.phase is Phase.ERROR
    with pytest.raises(IllegalTransition):
        m.join_params()


def test_io_failure_returns_to_unjoined_keeping_the_member_id() -> None:
    m = make()
    joined_leader(m)
    m.on_io_failure()
    assert m.phase is Phase.UNJOINED and m.member_id == "m1"


def test_static_members_do_not_send_leave_group() -> None:
    m = make(instance="i-1")
    joined_leader(m)
    assert m.leave_params() is None
    d = make()
    joined_leader(d)
    assert d.leave_params() == ("m1", None)
    fresh = make()
    assert fresh.leave_params() is None


def test_error_table_defaults() -> None:
    assert outcome_for(ErrorCode.request_timed_out) is Outcome.RETRY
    assert outcome_for(ErrorCode.group_authorization_failed) is Outcome.FATAL
    assert outcome_for(9999) is Outcome.FATAL
    assert isinstance(RebalanceInProgress(27), Exception)
    assert IllegalGeneration(22).action == "reset_member"


def test_abandon_is_allowed_before_the_member_synced() -> None:
    m = make()
    joined_leader(m)  # SYNCING: e.g. the leader's metadata refresh failed
    m.abandon(Outcome.REJOIN, "metadata refresh failed")
    assert m.phase is Phase.UNJOINED and m.member_id == "m1"
    m.join_params()
    m.abandon(Outcome.RESET_MEMBER, "unknown member")
    assert m.phase is Phase.UNJOINED and m.member_id == ""


def test_an_unreadable_subscription_gets_an_empty_assignment() -> None:
    m = make()
    bad_member = ("bad", "i-9", b"\x00\x00\xff")
    r = joined_leader(m, "range", (("m1", None, sub("a")), bad_member, ("m2", None, sub("a"))))
    assert [g.member_id for g in r.members] == ["m1", "m2"]
    (bad,) = r.unreadable
    assert (bad.member_id, bad.group_instance_id) == ("bad", "i-9")
    assert "malformed consumer protocol subscription" in str(bad.error)
    out = m.assign({"a": 4})
    assert set(out) == {"m1", "m2", "bad"}
    assert decode_assignment(out["bad"]).as_mapping() == {}
    assert decode_assignment(out["m1"]).as_mapping() == {"a": [0, 1]}
    assert decode_assignment(out["m2"]).as_mapping() == {"a": [2, 3]}


def test_a_session_without_a_heartbeat_has_passed_at_its_deadline_exactly() -> None:
    # 0.7 + 0.1 rounds down: at that instant now - 0.7 < 0.1, and a session
    # judged that way had not passed when a deadline of since + session had.
    m = Member(
        MemberConfig(
            group_id="g",
            topics=("a",),
            balancers=(RangeBalancer(),),
            session_timeout=0.1,
            rebalance_timeout=30.0,
            heartbeat_interval=0.01,
        )
    )
    assert m.on_heartbeat_failure(now=0.7 + 0.1, started=0.7) is Outcome.FIND_COORDINATOR
