"""The client side of incremental fetch sessions (KIP-227), sans-IO.

A session plans each request from the partitions the caller wants fetched:
the first is full and asks for a session (epoch 0); once the broker gives
one, requests name only new or changed partitions and forget the others,
with epochs 1, 2, ... wrapping from INT32_MAX to 1. A broker that declines
keeps getting full requests; errors and failed requests make the next one
full again. A model of Kafka's broker-side session cache (the rules of
``FetchSession.scala``) checks that whatever the sequence of desired sets,
errors and failures, the broker's session always holds exactly what the
caller wanted fetched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings, strategies as st
from kio.schema.errors import ErrorCode

from gengroup import TopicPartition
from gengroup.protocol.fetch import build_fetch_request
from gengroup.protocol.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSession,
    PartitionParams,
    next_epoch,
)

INT32_MAX = (1 << 31) - 1
NOT_FOUND = int(ErrorCode.fetch_session_id_not_found)
BAD_EPOCH = int(ErrorCode.invalid_fetch_session_epoch)
A, B, C = (TopicPartition("t", i) for i in range(3))
D = TopicPartition("u", 0)


def params(offset: int, max_bytes: int = 1024, epoch: int = -1) -> PartitionParams:
    return PartitionParams(offset, max_bytes, epoch)


def established(session_id: int = 7) -> FetchSession:
    """A session that sent a full request for A, B, C and got ``session_id``."""
    session = FetchSession()
    session.plan({A: params(0), B: params(0), C: params(0)})
    assert session.answered(0, session_id, [A]) is None
    return session


def test_the_first_request_is_full_and_asks_for_a_session() -> None:
    session = FetchSession()
    plan = session.plan({A: params(5), B: params(9)})
    assert (plan.session_id, plan.epoch, plan.full) == (0, INITIAL_EPOCH, True)
    assert plan.send == {A: params(5), B: params(9)}
    assert plan.forgotten == ()


def test_incremental_requests_send_only_what_changed_and_forget_what_left() -> None:
    session = established()
    assert session.established and session.epoch == 1
    plan = session.plan({A: params(10), B: params(0), D: params(3)})
    assert (plan.session_id, plan.epoch, plan.full) == (7, 1, False)
    assert plan.send == {A: params(10), D: params(3)}  # A moved, D is new; B unchanged
    assert plan.forgotten == (C,)  # left out this time
    assert session.answered(0, 7, [A]) is None
    # Nothing changed: an empty incremental request (the broker fetches all).
    plan = session.plan({A: params(10), B: params(0), D: params(3)})
    assert (plan.epoch, plan.send, plan.forgotten) == (2, {}, ())
    assert session.answered(0, 7, []) is None  # nothing new is not an error
    # A changed ask or leader epoch sends the partition again.
    plan = session.plan({A: params(10, 2048), B: params(0, epoch=4), D: params(3)})
    assert plan.send == {A: params(10, 2048), B: params(0, epoch=4)}
    # A forgotten partition that comes back is sent whole.
    session.answered(0, 7, [])
    plan = session.plan({C: params(0)})
    assert plan.send == {C: params(0)}
    assert set(plan.forgotten) == {A, B, D}


def test_epochs_wrap_from_int32_max_to_one() -> None:
    assert [next_epoch(e) for e in (0, 1, INT32_MAX - 1, INT32_MAX)] == [1, 2, INT32_MAX, 1]
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH
    session = established()
    for expected in (1, 2, 3):
        assert session.plan({A: params(0)}).epoch == expected
        session.answered(0, 7, [])
    session._epoch = INT32_MAX  # skip two billion requests
    assert session.plan({A: params(0)}).epoch == INT32_MAX
    session.answered(0, 7, [])
    plan = session.plan({A: params(0)})
    assert (plan.epoch, plan.full) == (1, False)  # never 0, which would ask for a new one


def test_a_declined_session_keeps_requests_full() -> None:
    session = FetchSession()
    for _ in range(3):
        plan = session.plan({A: params(0), B: params(1)})
        assert (plan.session_id, plan.epoch, plan.send) == (0, 0, {A: params(0), B: params(1)})
        assert session.answered(0, 0, [A, B]) is None  # session id 0: declined, data good
        assert not session.established
    assert session.resets == 0


def test_sessions_turned_off_send_sessionless_full_requests() -> None:
    session = FetchSession(enabled=False)
    for _ in range(2):
        plan = session.plan({A: params(0)})
        assert (plan.session_id, plan.epoch, plan.full) == (0, FINAL_EPOCH, True)
        assert session.answered(0, 0, [A]) is None
    session.failed()
    assert session.plan({A: params(0)}).epoch == FINAL_EPOCH


@pytest.mark.parametrize(
    ("code", "next_session_id"),
    [(NOT_FOUND, 0), (BAD_EPOCH, 7), (int(ErrorCode.unknown_server_error), 7)],
    ids=["session-not-found", "invalid-epoch", "other-error"],
)
def test_a_top_level_error_makes_the_next_request_full(code: int, next_session_id: int) -> None:
    session = established()
    session.plan({A: params(3), B: params(0)})
    reason = session.answered(code, 0, [])
    assert reason is not None and reason == ErrorCode(code).name.upper()
    assert session.resets == 1 and not session.established
    plan = session.plan({A: params(3), B: params(0)})
    # INVALID_FETCH_SESSION_EPOCH (like any error but a lost session) names the
    # old session with epoch 0: the broker drops it and creates another.
    assert (plan.session_id, plan.epoch, plan.full) == (next_session_id, 0, True)
    assert plan.send == {A: params(3), B: params(0)}


def test_a_failed_or_unanswered_request_makes_the_next_one_full() -> None:
    session = established()
    session.plan({A: params(3)})
    session.failed()  # broken connection, timeout, undecodable answer
    plan = session.plan({A: params(3), B: params(0)})
    assert (plan.session_id, plan.epoch, plan.send) == (7, 0, {A: params(3), B: params(0)})
    assert session.answered(0, 8, [A]) is None
    assert (session.session_id, session.epoch) == (8, 1)
    session.plan({A: params(4)})  # cancelled: its answer never read
    plan = session.plan({A: params(4)})
    assert (plan.session_id, plan.epoch, plan.send) == (8, 0, {A: params(4)})
    assert session.resets == 2


def test_an_answer_for_a_partition_not_asked_for_is_rejected() -> None:
    session = established()
    session.plan({A: params(1)})
    assert session.answered(0, 7, [A, D]) is not None
    assert session.plan({A: params(1)}).full
    session = established()
    session.plan({A: params(1)})
    assert session.answered(0, 99, [A]) is not None  # another session's answer
    assert session.plan({A: params(1)}).full


def test_an_incremental_answer_without_session_id_closed_it() -> None:
    session = established()
    session.plan({A: params(1)})
    assert session.answered(0, 0, [A]) is None  # the data is good
    plan = session.plan({A: params(2), B: params(0)})
    assert (plan.session_id, plan.epoch, plan.full) == (0, 0, True)
    assert session.resets == 0


def test_an_answer_to_no_request_is_rejected() -> None:
    assert FetchSession().answered(0, 5, []) is not None


def test_the_request_carries_the_plan() -> None:
    session = established()
    plan = session.plan({A: params(10, 100, 3), B: params(0)})
    req = build_fetch_request(
        12,
        {tp: p.offset for tp, p in plan.send.items()},
        max_wait=0.5,
        min_bytes=1,
        max_bytes=1000,
        partition_max_bytes={tp: p.max_bytes for tp, p in plan.send.items()},
        isolation_level="read_committed",
        leader_epochs={tp: p.leader_epoch for tp, p in plan.send.items()},
        session_id=plan.session_id,
        session_epoch=plan.epoch,
        forgotten=plan.forgotten,
    )
    assert (req.session_id, req.session_epoch) == (7, 1)
    [topic] = req.topics
    [part] = topic.partitions
    assert (topic.topic, part.partition, part.fetch_offset) == ("t", 0, 10)
    assert (part.partition_max_bytes, part.current_leader_epoch) == (100, 3)
    [forgotten] = req.forgotten_topics_data
    assert (forgotten.topic, list(forgotten.partitions)) == ("t", [2])


# ---------------------------------------------------------------- a model of the broker


@dataclass
class ModelBroker:
    """Kafka's broker-side session cache, for one client: full requests (epoch
    0) replace the named session by a new one (or are declined); incremental
    ones must carry the session's next epoch, update the named partitions and
    drop the forgotten ones."""

    declines: bool = False
    sessions: dict[int, tuple[int, dict[TopicPartition, PartitionParams]]] = field(
        default_factory=dict
    )
    next_id: int = 1

    def fetch(
        self,
        session_id: int,
        epoch: int,
        send: dict[TopicPartition, PartitionParams],
        forgotten: tuple[TopicPartition, ...],
    ) -> tuple[int, int, dict[TopicPartition, PartitionParams]]:
        """(error code, session id, the partitions the request fetches)."""
        if epoch in (0, -1):
            self.sessions.pop(session_id, None)
            if epoch == -1 or self.declines:
                return 0, 0, dict(send)
            sid, self.next_id = self.next_id, self.next_id + 1
            self.sessions[sid] = (1, dict(send))
            return 0, sid, dict(send)
        if session_id not in self.sessions:
            return NOT_FOUND, 0, {}
        expected, parts = self.sessions[session_id]
        if epoch != expected:
            return BAD_EPOCH, 0, {}
        parts = {tp: p for tp, p in parts.items() if tp not in forgotten}
        parts.update(send)
        self.sessions[session_id] = (next_epoch(epoch), parts)
        return 0, session_id, dict(parts)


partitions = st.sampled_from([A, B, C, D, TopicPartition("u", 1)])
desired_sets = st.dictionaries(
    partitions,
    st.builds(
        PartitionParams, st.integers(0, 3), st.sampled_from([512, 1024]), st.sampled_from([-1, 2])
    ),
)
events = st.sampled_from(["ok", "ok", "ok", "fail", "evict", "cancel"])


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(desired_sets, events), max_size=30), declines=st.booleans())
def test_the_broker_session_always_holds_what_the_caller_wants(
    steps: list[tuple[dict[TopicPartition, PartitionParams], str]], declines: bool
) -> None:
    broker = ModelBroker(declines=declines)
    session = FetchSession()
    evicted = False
    for desired, event in steps:
        plan = session.plan(desired)
        assert set(plan.send) <= set(desired)
        if event == "evict":  # the broker's cache evicts every session meanwhile
            broker.sessions.clear()
            evicted = True
        code, sid, fetched = broker.fetch(
            plan.session_id, plan.epoch, dict(plan.send), plan.forgotten
        )
        # The broker refuses a request only for a session it evicted.
        assert code in ((0, NOT_FOUND) if evicted else (0,)), (code, plan)
        evicted = evicted and code == 0 and not plan.full
        if event == "fail":  # the answer is lost on the way
            session.failed()
            continue
        if event == "cancel":  # the next plan comes before the answer
            continue
        rejected = session.answered(code, sid, [tp for tp in fetched if tp in plan.desired][:1])
        if code:
            assert rejected is not None and session.plan(desired).full
            session.failed()
            continue
        assert rejected is None
        # Whatever happened before, the broker fetched exactly what was wanted.
        assert fetched == desired
        assert session.established == (not declines)


def test_a_new_handler_closes_a_session_left_by_an_earlier_one() -> None:
    session = FetchSession(close=41)
    plan = session.plan({A: params(0)})
    # Epoch 0 naming the old session: the broker drops it and creates another.
    assert (plan.session_id, plan.epoch, plan.send) == (41, 0, {A: params(0)})
    assert session.answered(0, 42, [A]) is None
    assert (session.session_id, session.epoch) == (42, 1)
    assert FetchSession(enabled=False, close=41).plan({A: params(0)}).session_id == 0
