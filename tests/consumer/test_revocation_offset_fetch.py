"""A revocation whose generation cannot form: the coordinator refuses OffsetFetch.

Under the consumer protocol the coordinator fences a member that has not
acknowledged a revocation within its rebalance_timeout (10 s here). The
generation that revokes partitions forms once OffsetFetch of the partitions
it keeps answered; the coordinator refusing it (loading) for longer must not
get the member fenced: at the first refusal the revoked partitions' tasks are
cancelled, their marks (made as they return) committed, and the revocation
acknowledged, while the retained partitions' workers run on
(gengroup/consumer/early_revocation.py).
"""

from __future__ import annotations

import logging

import anyio
import anyio.abc
import pytest
import trio.testing
from kio.schema.errors import ErrorCode

from gengroup import Generation, GenerationEnded, TopicPartition
from gengroup._types import show_partitions
from gengroup.broker import Delay, Drop, Fail, FakeCluster, Intercepted
from gengroup.protocol.records import NewRecord
from gengroup.protocol.versions import ApiKey

from .helpers import all_partitions, wait_until
from .test_span_commits import cluster_for, member

EVERY = frozenset(all_partitions("t", 4))


class FlushingMember:
    """Member "a" of a consumer-protocol group; "b" joins to take two of its four
    partitions. a's partition workers mark what they processed only as they return;
    the first two to return once b was started (the revoked ones) flush for
    :attr:`flush` seconds (shielded) first. The
    coordinator refuses a's OffsetFetch while :attr:`refusing_fetch`, its OffsetCommit
    while :attr:`refusing_commit` (COORDINATOR_LOAD_IN_PROGRESS)."""

    def __init__(self, cluster: FakeCluster, flush: float) -> None:
        self.cluster = cluster
        self.flush = flush
        self.joined = False
        self.refusing_fetch = False
        self.refusing_commit = False
        self.handed_out: list[Generation] = []
        self.started: dict[TopicPartition, int] = dict.fromkeys(EVERY, 0)
        self.processed: dict[TopicPartition, int] = {}
        #: When each revoked worker returned, having marked what it processed.
        self.returned: dict[TopicPartition, float] = {}
        #: a's commits the coordinator took and its heartbeats, in the order the
        #: coordinator got them: when, and the partitions committed (or named as owned).
        self.commits: list[tuple[float, frozenset[int]]] = []
        self.beats: list[tuple[float, frozenset[int]]] = []
        self.requests: list[tuple[str, frozenset[int]]] = []
        cluster.control(ApiKey.OFFSET_COMMIT, self._commit)
        cluster.control(ApiKey.OFFSET_FETCH, self._fetch)
        cluster.control(ApiKey.CONSUMER_GROUP_HEARTBEAT, self._beat)
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"x", (), 0)] * 10, partition=p)

    def _commit(self, req: Intercepted) -> Fail | Delay | None:
        if req.client_id != "a":
            return None
        if self.refusing_commit:
            return Fail(ErrorCode.coordinator_load_in_progress)
        parts = frozenset(p.partition_index for t in req.request.topics for p in t.partitions)
        self.commits.append((anyio.current_time(), parts))
        self.requests.append(("commit", parts))
        return None

    def _fetch(self, req: Intercepted) -> Fail | Delay | None:
        if req.client_id == "a" and self.refusing_fetch:
            return Fail(ErrorCode.coordinator_load_in_progress)
        return None

    def _beat(self, req: Intercepted) -> Fail | None:
        if req.client_id == "a" and req.request.member_epoch > 0:
            owned = req.request.topic_partitions or ()
            parts = frozenset(p for t in owned for p in t.partitions)
            self.beats.append((anyio.current_time(), parts))
            self.requests.append(("beat", parts))
        return None

    async def worker(self, gen: Generation, tp: TopicPartition) -> None:
        self.started[tp] += 1
        try:
            async for batch in gen.fetch(tp):
                self.processed[tp] = batch.next_offset
        finally:
            if self.joined and len(self.returned) < 2:
                self.returned[tp] = -1.0
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(self.flush)
                    if tp in self.processed:
                        gen.mark(tp, self.processed[tp])
                    self.returned[tp] = anyio.current_time()

    async def run(self, name: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with member(self.cluster, "consumer", name) as group:
            task_status.started()
            async for gen in group:
                if name != "a":
                    continue
                self.handed_out.append(gen)
                for tp in gen.added:
                    gen.start_soon(self.worker, gen, tp, name=f"a {tp}", partition=tp)

    async def revoking_while_refused(self, tg: anyio.abc.TaskGroup) -> None:
        """Start a, let it process everything, then refuse its OffsetFetch and start b."""
        await tg.start(self.run, "a")
        await wait_until(lambda: self.processed == dict.fromkeys(EVERY, 10), "a's batches", 60)
        self.refusing_fetch = True
        self.joined = True
        await tg.start(self.run, "b")

    def revoked_returned(self) -> bool:
        return len(self.returned) == 2 and min(self.returned.values()) >= 0

    def committed_before_acknowledged(self, revoked: set[TopicPartition]) -> bool:
        """Whether a commit naming ``revoked`` came before a's first heartbeat that
        named none of them, having named them (the acknowledgement)."""
        ids = {tp.partition for tp in revoked}
        named = next(i for i, (what, p) in enumerate(self.requests) if what == "beat" and p & ids)
        acknowledged = next(
            i
            for i, (what, parts) in enumerate(self.requests)
            if i > named and what == "beat" and not parts & ids
        )
        return any(what == "commit" and p & ids for what, p in self.requests[:acknowledged])


@pytest.mark.parametrize("flush", [0.0, 2.0])
@pytest.mark.parametrize("stored", [True, False])
async def test_a_revocation_whose_offset_fetch_is_refused_is_acknowledged_in_time(
    flush: float,
    stored: bool,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """OffsetFetch is refused for 15 s, past rebalance_timeout, as a forms the
    generation that revokes two of its partitions. Their workers are cancelled at
    the first refusal; as they return (after a flush of ``flush`` s) they mark what
    they processed, and those marks are committed before the revocation is
    acknowledged, in time: a is not fenced and its retained workers never restart.
    With commits refused too (``stored`` False), the marks are named in one WARNING,
    and no later commit names the revoked partitions."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with cluster_for("consumer") as cluster, anyio.create_task_group() as tg:
        a = FlushingMember(cluster, flush)
        a.refusing_commit = not stored
        await a.revoking_while_refused(tg)
        asked = len(a.handed_out)
        await wait_until(a.revoked_returned, "the revoked workers' return", 60)
        revoked = set(a.returned)
        await anyio.sleep(15)  # past the deadline: a fenced member would have been by now
        assert len(a.handed_out) == asked  # no generation formed meanwhile
        a.refusing_fetch = a.refusing_commit = False
        lifted = anyio.current_time()
        await wait_until(lambda: len(a.handed_out) > asked, "a's next generation", 60)
        await anyio.sleep(2)
        tg.cancel_scope.cancel()
    assert not [r for r in caplog.records if "fenced" in r.getMessage()]
    assert all(a.started[tp] == 1 for tp in EVERY), a.started
    (kept,) = a.handed_out[asked:]
    assert kept.revoked == revoked and set(kept.assignments) == EVERY - revoked
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    ids = {tp.partition for tp in revoked}
    committed = cluster.committed_offsets("g")
    if stored:
        assert {tp: committed.get(tp) for tp in revoked} == dict.fromkeys(revoked, 10)
        (at,) = [at for at, parts in a.commits if parts & ids]
        assert at >= max(a.returned[tp] for tp in revoked)
        assert a.committed_before_acknowledged(revoked), a.requests
        assert not warnings, warnings
    else:
        assert not set(committed) & revoked
        (said,) = warnings
        assert f"commit of revoked [{show_partitions(revoked)}] failed" in said, said
        assert "marks are dropped" in said, said
        assert not [parts for at, parts in a.commits if at >= lifted and parts & ids]


@pytest.mark.parametrize("flush", [10.1, 12.0])
async def test_a_revoked_task_outliving_rebalance_timeout_gets_the_member_fenced_quietly(
    flush: float, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """As above, but the revoked workers flush for ``flush`` s, past rebalance_timeout:
    the revocation cannot be acknowledged in time and the coordinator fences a.
    Nothing is said of the marks they make as they return (the fencing lost them; no
    commit of a names them), not even when they return just after the fencing,
    before a heard of it (10.1 s: a waits for a heartbeat's answer before it
    acknowledges), and, cancelled at the first refusal, they return before the
    fenced member's wait for them ends: no task is abandoned."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with cluster_for("consumer") as cluster, anyio.create_task_group() as tg:
        a = FlushingMember(cluster, flush)
        await a.revoking_while_refused(tg)
        await anyio.sleep(25)  # fenced at 10 s; the revoked workers return at 12 s
        returned = a.revoked_returned()
        fenced = len(a.handed_out)
        a.refusing_fetch = False
        await wait_until(lambda: len(a.handed_out) > fenced, "a's generation once fenced", 60)
        await anyio.sleep(2)
        tg.cancel_scope.cancel()
    assert [r for r in caplog.records if "fenced" in r.getMessage()]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not warnings, warnings
    assert not [r for r in caplog.records if "before the generation revoking" in r.getMessage()]
    assert returned, a.returned
    revoked = set(a.returned)
    ids = {tp.partition for tp in revoked}
    assert not [parts for _, parts in a.commits if parts & ids]
    assert not set(cluster.committed_offsets("g")) & revoked


async def test_a_generation_formed_while_the_revoked_tasks_return_takes_the_revocation_over(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """OffsetFetch is refused for 4 s and the revoked workers flush for 7 s: the
    revoking generation forms while they return (cancelled at the first refusal,
    they would return past rebalance_timeout if cancelled only then). It holds
    them, commits the marks they make as they return, then acknowledges: a is not
    fenced, its retained workers never restart, nothing is lost."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with cluster_for("consumer") as cluster, anyio.create_task_group() as tg:
        a = FlushingMember(cluster, 7.0)
        await a.revoking_while_refused(tg)
        asked = len(a.handed_out)
        await anyio.sleep(4)
        a.refusing_fetch = False
        await wait_until(lambda: len(a.handed_out) > asked, "a's next generation", 60)
        await anyio.sleep(2)
        tg.cancel_scope.cancel()
    assert not [r for r in caplog.records if "fenced" in r.getMessage()]
    assert all(a.started[tp] == 1 for tp in EVERY), a.started
    assert a.revoked_returned()
    revoked = set(a.returned)
    (kept,) = a.handed_out[asked:]
    assert kept.revoked == revoked and set(kept.assignments) == EVERY - revoked
    committed = cluster.committed_offsets("g")
    assert {tp: committed.get(tp) for tp in revoked} == dict.fromkeys(revoked, 10)
    assert a.committed_before_acknowledged(revoked), a.requests
    said = [r.getMessage() for r in caplog.records if "; acknowledging" in r.getMessage()]
    (by_kept,) = said  # by the generation, not before it formed
    assert f"{kept.member_id}: revoked" in by_kept and "before" not in by_kept, by_kept
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not warnings, warnings


class PeriodicCommitter(FlushingMember):
    """As :class:`FlushingMember`, with a second task for each partition calling
    ``gen.commit()`` (its marks) every second; what a commit raised is kept."""

    def __init__(self, cluster: FakeCluster, flush: float) -> None:
        super().__init__(cluster, flush)
        self.commit_errors: list[tuple[TopicPartition, BaseException]] = []

    async def committer(self, gen: Generation, tp: TopicPartition) -> None:
        while True:
            await anyio.sleep(1.0)
            try:
                await gen.commit()
            except Exception as exc:
                self.commit_errors.append((tp, exc))
                raise

    async def run(self, name: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with member(self.cluster, "consumer", name) as group:
            task_status.started()
            async for gen in group:
                if name != "a":
                    continue
                self.handed_out.append(gen)
                for tp in gen.added:
                    gen.start_soon(self.worker, gen, tp, name=f"a {tp}", partition=tp)
                    gen.start_soon(self.committer, gen, tp, name=f"a commits {tp}", partition=tp)


@pytest.mark.parametrize("refused", [5.0, 15.0])
async def test_a_retained_tasks_commit_goes_on_through_an_early_revocation(
    refused: float, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Each partition has a task calling ``gen.commit()`` every second; OffsetFetch
    is refused for ``refused`` s and the revoked workers take 2 s to return. The
    retained partitions' commits asked between generations wait for the next one,
    as they do without a refusal: the revocation acknowledged meanwhile does not make
    them fail (its partitions' marks are its own to commit). No task raises, the
    retained workers never restart, and the revoked marks are committed."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with cluster_for("consumer") as cluster, anyio.create_task_group() as tg:
        a = PeriodicCommitter(cluster, 2.0)
        await a.revoking_while_refused(tg)
        asked = len(a.handed_out)
        await anyio.sleep(refused)
        a.refusing_fetch = False
        await wait_until(lambda: len(a.handed_out) > asked, "a's next generation", 60)
        await anyio.sleep(3)
        tg.cancel_scope.cancel()
    assert not a.commit_errors, a.commit_errors
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [r for r in caplog.records if "fenced" in r.getMessage()]
    assert all(a.started[tp] == 1 for tp in EVERY), a.started
    revoked = set(a.returned)
    committed = cluster.committed_offsets("g")
    assert {tp: committed.get(tp) for tp in revoked} == dict.fromkeys(revoked, 10)
    (kept,) = a.handed_out[asked:]
    assert kept.revoked == revoked


class CommitOnRevoke(FlushingMember):
    """Member "a" whose partition workers mark each batch and commit, shielded, in
    their cleanup (commit on revoke): their offsets (``explicit``) or their marks."""

    def __init__(self, cluster: FakeCluster, explicit: bool) -> None:
        super().__init__(cluster, 0.0)
        self.explicit = explicit
        #: Each cleanup commit of a revoked worker: its partition and what it raised (None).
        self.cleanups: list[tuple[TopicPartition, BaseException | None]] = []

    async def worker(self, gen: Generation, tp: TopicPartition) -> None:
        self.started[tp] += 1
        try:
            async for batch in gen.fetch(tp):
                self.processed[tp] = batch.next_offset
                gen.mark(tp, batch.next_offset)
        finally:
            if self.joined and len(self.returned) < 2:
                self.returned[tp] = -1.0
                with anyio.CancelScope(shield=True):
                    try:
                        if self.explicit:
                            await gen.commit({tp: self.processed[tp]})
                        else:
                            await gen.commit()
                    except Exception as exc:
                        self.cleanups.append((tp, exc))
                        raise
                    self.cleanups.append((tp, None))
                    self.returned[tp] = anyio.current_time()


@pytest.mark.parametrize(
    ("explicit", "refused"), [(True, 3.0), (True, 15.0), (False, 3.0)], ids=str
)
async def test_a_revoked_tasks_commit_in_its_cleanup_is_stored(
    explicit: bool,
    refused: float,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The revoked workers commit in their shielded cleanup while OffsetFetch is
    refused for ``refused`` s. Offsets they give (``explicit``) are committed at
    once, under the member's newest epoch, and the revocation is acknowledged in
    time even when the refusal outlasts rebalance_timeout; a commit of marks waits,
    as any commit between generations does, for the next generation. No task
    raises, a is not fenced, the revoked partitions' offsets are stored."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with cluster_for("consumer") as cluster, anyio.create_task_group() as tg:
        a = CommitOnRevoke(cluster, explicit)
        await a.revoking_while_refused(tg)
        asked = len(a.handed_out)
        await anyio.sleep(refused)
        a.refusing_fetch = False
        await wait_until(lambda: len(a.handed_out) > asked, "a's next generation", 60)
        await anyio.sleep(2)
        tg.cancel_scope.cancel()
    assert a.revoked_returned(), a.returned
    assert sorted(a.cleanups) == [(tp, None) for tp in sorted(a.returned)], a.cleanups
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [r for r in caplog.records if "fenced" in r.getMessage()]
    assert all(a.started[tp] == 1 for tp in EVERY), a.started
    revoked = set(a.returned)
    committed = cluster.committed_offsets("g")
    assert {tp: committed.get(tp) for tp in revoked} == dict.fromkeys(revoked, 10)
    assert a.committed_before_acknowledged(revoked), a.requests
    if explicit:  # stored before the generation formed
        assert max(a.returned.values()) < refused


class SlowFetch(FlushingMember):
    """As :class:`FlushingMember`; while :attr:`delay_fetch`, a's OffsetFetch that
    is not refused is answered 3 s late."""

    delay_fetch = False

    def _fetch(self, req: Intercepted) -> Fail | Delay | None:
        if req.client_id == "a" and self.delay_fetch and not self.refusing_fetch:
            return Delay(3.0)
        return super()._fetch(req)


async def test_a_revocation_acknowledged_while_offset_fetch_is_answered_is_said_once(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The refusal ends 1 s after the revocation began; the OffsetFetch answered
    then takes 3 s, and the revoked workers, 2.5 s to return: the revocation is
    acknowledged before the generation forms, with that answer. It is said once,
    and the generation names the partitions in ``revoked``."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with cluster_for("consumer") as cluster, anyio.create_task_group() as tg:
        a = SlowFetch(cluster, 2.5)
        a.delay_fetch = True
        await a.revoking_while_refused(tg)
        asked = len(a.handed_out)
        await anyio.sleep(1.0)
        a.refusing_fetch = False
        await wait_until(lambda: len(a.handed_out) > asked, "a's next generation", 60)
        a.delay_fetch = False
        await anyio.sleep(2)
        tg.cancel_scope.cancel()
    said = [r.getMessage() for r in caplog.records if "; acknowledging" in r.getMessage()]
    (early,) = said
    assert "before the generation revoking them formed" in early, early
    revoked = set(a.returned)
    (kept,) = a.handed_out[asked:]
    assert kept.revoked == revoked
    committed = cluster.committed_offsets("g")
    assert {tp: committed.get(tp) for tp in revoked} == dict.fromkeys(revoked, 10)


async def test_a_group_closing_while_its_revoked_tasks_return_ends_cleanly(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The group closes 2 s into the refusal, while the revoked workers (cancelled
    at the first refusal) flush for 5 s: closing waits for them, nothing is
    acknowledged nor said of their marks, and nothing fails."""
    caplog.set_level(logging.INFO, logger="gengroup")
    with anyio.fail_after(60):
        async with cluster_for("consumer") as cluster, anyio.create_task_group() as tg:
            a = FlushingMember(cluster, 5.0)
            await a.revoking_while_refused(tg)
            await anyio.sleep(2)
            assert len(a.returned) == 2 and max(a.returned.values()) < 0  # returning
            tg.cancel_scope.cancel()
    assert a.revoked_returned(), a.returned
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not said, said
    assert not [r for r in caplog.records if "before the generation revoking" in r.getMessage()]


async def test_two_successive_early_revocations_are_each_acknowledged(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """While a's OffsetFetch is refused, b joins, then c and d: two revocations of a's
    partitions, each begun early (its tasks cancelled at a failed attempt to form
    the generation), each acknowledged once its tasks returned, each said once. a
    is not fenced and its remaining workers never restart; the generation formed
    once the refusal ends names both in ``revoked``."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with cluster_for("consumer") as cluster, anyio.create_task_group() as tg:
        a = FlushingMember(cluster, 0.0)
        await a.revoking_while_refused(tg)
        asked = len(a.handed_out)
        await wait_until(a.revoked_returned, "the first revoked workers' return", 60)
        await anyio.sleep(3)
        await tg.start(a.run, "c")
        await tg.start(a.run, "d")  # (a keeps one partition of four)
        await anyio.sleep(12)
        a.refusing_fetch = False
        await wait_until(lambda: len(a.handed_out) > asked, "a's next generation", 60)
        await anyio.sleep(2)
        tg.cancel_scope.cancel()
    by_a = f"member {a.handed_out[0].member_id}: revoked"
    said = [r.getMessage() for r in caplog.records if by_a in r.getMessage()]
    early = [m for m in said if "before the generation revoking them formed" in m]
    assert len(early) == 2 and len(said) == 2, said
    assert not [r for r in caplog.records if "fenced" in r.getMessage()]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    (kept,) = a.handed_out[asked:]
    assert len(kept.revoked) == 3 and not kept.revoked & set(kept.assignments), kept.revoked
    assert all(a.started[tp] == 1 for tp in EVERY), a.started
    committed = cluster.committed_offsets("g")
    assert {tp: committed.get(tp) for tp in a.returned} == dict.fromkeys(a.returned, 10)


class FencedWhileCommitting(FlushingMember):
    """As :class:`FlushingMember`; a's first commit naming a revoked partition is held
    3 s, then refused UNKNOWN_MEMBER_ID, and a's heartbeats meanwhile are answered
    so (a fencing while the early revocation's commit is in flight)."""

    fencing = False
    fenced_beats = 0

    def _commit(self, req: Intercepted) -> Fail | Delay | None:
        parts = {p.partition_index for t in req.request.topics for p in t.partitions}
        if req.client_id == "a" and self.joined and parts & {2, 3} and not self.fenced_beats:
            self.fencing = True
            return Delay(3.0, then=Fail(ErrorCode.unknown_member_id))
        return super()._commit(req)

    def _beat(self, req: Intercepted) -> Fail | None:
        if req.client_id == "a" and self.fencing and req.request.member_epoch > 0:
            self.fenced_beats += 1
            self.fencing = False
            return Fail(ErrorCode.unknown_member_id)
        return super()._beat(req)


async def test_a_member_fenced_while_its_early_revocation_commits_says_nothing(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The early revocation's commit is in flight when a is fenced: the revocation
    is not acknowledged, nothing is said of its marks, no task fails, and a rejoins."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with cluster_for("consumer") as cluster, anyio.create_task_group() as tg:
        a = FencedWhileCommitting(cluster, 0.0)
        await a.revoking_while_refused(tg)
        asked = len(a.handed_out)
        await anyio.sleep(8)
        a.refusing_fetch = False
        await wait_until(lambda: len(a.handed_out) > asked, "a's generation once fenced", 60)
        await anyio.sleep(2)
        tg.cancel_scope.cancel()
    assert a.fenced_beats == 1
    assert [r for r in caplog.records if "fenced at" in r.getMessage()]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in caplog.records if "before the generation revoking" in r.getMessage()]


class LateCleanupCommit(FlushingMember):
    """As :class:`FlushingMember`, but the revoked workers, having flushed, commit
    their offsets (``gen.commit({tp: offset})``) instead of marking them; the
    coordinator refuses a's commits from then on if :attr:`refuse_late`."""

    refuse_late = False

    def __init__(self, cluster: FakeCluster, flush: float) -> None:
        super().__init__(cluster, flush)
        self.cleanups: list[tuple[TopicPartition, BaseException | None]] = []

    async def worker(self, gen: Generation, tp: TopicPartition) -> None:
        self.started[tp] += 1
        try:
            async for batch in gen.fetch(tp):
                self.processed[tp] = batch.next_offset
        finally:
            if self.joined and len(self.returned) < 2:
                self.returned[tp] = -1.0
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(self.flush)
                    self.refusing_commit = self.refuse_late
                    try:
                        await gen.commit({tp: self.processed[tp]})
                    except Exception as exc:
                        self.cleanups.append((tp, exc))
                        raise
                    finally:
                        self.returned[tp] = anyio.current_time()
                    self.cleanups.append((tp, None))


@pytest.mark.parametrize("refused", [False, True], ids=["answered", "refused"])
async def test_a_revoked_tasks_late_cleanup_commit_is_tried(
    refused: bool, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The revoked workers commit their offsets in their cleanup 9.3 s after their
    cancellation: past the revocation's own deadline (a second before the
    coordinator's rebalance_timeout), yet before a is fenced. The commit is sent
    all the same, and stored; if the coordinator refuses it, the workers' commit
    raises GenerationEnded (they return, the group goes on), and the revocation's
    one WARNING names their partitions. Never a RequestTimedOut of no attempt."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with cluster_for("consumer") as cluster, anyio.create_task_group() as tg:
        a = LateCleanupCommit(cluster, 9.3)
        a.refuse_late = refused
        await a.revoking_while_refused(tg)
        await wait_until(a.revoked_returned, "a's revoked workers", 60)
        await anyio.sleep(3)
        tg.cancel_scope.cancel()
    revoked = sorted(a.returned)
    assert [tp for tp, _ in sorted(a.cleanups)] == revoked, a.cleanups
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [r for r in caplog.records if "fenced" in r.getMessage()]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    committed = cluster.committed_offsets("g")
    if refused:
        assert all(type(exc) is GenerationEnded for _, exc in a.cleanups), a.cleanups
        (warning,) = warnings
        assert f"[{show_partitions(revoked)}]" in warning, warning
        assert all(committed.get(tp) != 10 for tp in revoked), committed
    else:
        assert all(exc is None for _, exc in a.cleanups), a.cleanups
        assert not warnings, warnings
        assert {tp: committed.get(tp) for tp in revoked} == dict.fromkeys(revoked, 10)


class CommitAfterFencing(FlushingMember):
    """As :class:`FlushingMember`, the revoked workers, having flushed and marked,
    commit their marks (``gen.commit()``)."""

    def __init__(self, cluster: FakeCluster, flush: float) -> None:
        super().__init__(cluster, flush)
        self.cleanups: list[tuple[TopicPartition, BaseException | None]] = []

    async def worker(self, gen: Generation, tp: TopicPartition) -> None:
        try:
            await super().worker(gen, tp)
        finally:
            if tp in self.returned:
                with anyio.CancelScope(shield=True):
                    try:
                        await gen.commit()
                    except Exception as exc:
                        self.cleanups.append((tp, exc))
                        raise
                    self.cleanups.append((tp, None))


async def test_a_revoked_tasks_commit_of_marks_after_the_fencing_raises_generation_ended(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The revoked workers return 14 s after their cancellation, past
    rebalance_timeout: a was fenced meanwhile (and its retained workers returned).
    Their commit of marks then raises GenerationEnded, as a fenced member's commit
    does, not returning as if stored; the workers count as returned."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with cluster_for("consumer") as cluster, anyio.create_task_group() as tg:
        a = CommitAfterFencing(cluster, 14.0)
        await a.revoking_while_refused(tg)
        await wait_until(lambda: len(a.cleanups) == 2, "a's revoked workers' commits", 60)
        await anyio.sleep(2)
        tg.cancel_scope.cancel()
    assert [r for r in caplog.records if "fenced at" in r.getMessage()]
    assert all(type(exc) is GenerationEnded for _, exc in a.cleanups), a.cleanups
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    committed = cluster.committed_offsets("g")
    assert all(committed.get(tp) != 10 for tp in a.returned), committed


class DroppedBeats(FlushingMember):
    """As :class:`FlushingMember`; a's heartbeats are dropped while :attr:`dropping`."""

    dropping = False

    def _beat(self, req: Intercepted) -> Fail | Drop | None:
        super()._beat(req)
        if req.client_id == "a" and self.dropping and req.request.member_epoch > 0:
            return Drop()
        return None


async def test_a_generation_taking_over_a_revocation_past_rebalance_timeout_waits_to_know(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The revoked workers return 10.1 s after their cancellation, past
    rebalance_timeout: the coordinator fenced a, which has not heard it yet (its
    heartbeats are dropped from 10.9 s). OffsetFetch is answered again as they
    return, so the generation revoking them forms while the revocation waits for a
    heartbeat's answer: it waits for it too, and nothing is said of the revoked
    partitions (no acknowledgement, no WARNING) before a knows it was fenced."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with cluster_for("consumer") as cluster, anyio.create_task_group() as tg:
        a = DroppedBeats(cluster, 10.1)
        await a.revoking_while_refused(tg)
        await anyio.sleep(10.9)
        a.dropping = True
        await wait_until(a.revoked_returned, "a's revoked workers", 60)
        a.refusing_fetch = False
        await wait_until(
            lambda: any("fenced at" in r.getMessage() for r in caplog.records), "a's fencing", 60
        )
        await anyio.sleep(2)
        tg.cancel_scope.cancel()
    said = [r.getMessage() for r in caplog.records]
    fenced = next(i for i, m in enumerate(said) if "fenced at" in m)
    revoked = f"[{show_partitions(a.returned)}]"
    early = [m for m in said[:fenced] if revoked in m and "acknowledging" in m]
    assert not early, early
    warned = [r.getMessage() for r in caplog.records[:fenced] if r.levelno >= logging.WARNING]
    assert not warned, warned


async def test_a_fatal_heartbeat_answer_ends_forming_that_waits_for_an_early_revocation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Forming that waits for a heartbeat's answer for an early revocation past
    rebalance_timeout (the member may have been fenced) must end when the
    heartbeat fails fatally (its loop returns, no answer comes): it raises the
    fatal error, where it used to wait for ever. The member's state machine
    alone, on a client that answers forming's requests at once."""
    import types

    from gengroup._config import GroupConfig
    from gengroup.consumer.consumer_protocol import ConsumerProtocolMember

    class Coordinator:
        def accepted(self) -> None:
            pass

    class Client:
        config = GroupConfig.create("g", ["t"], "127.0.0.1:9092")
        coordinator = Coordinator()

        async def find_coordinator(self, timings: object) -> int:
            return 1

        async def start_positions(
            self, node: int, tps: object
        ) -> tuple[dict[str, int], dict[str, int]]:
            return {}, {}

        def forget_coordinator(self) -> None:
            pass

    member = ConsumerProtocolMember(Client())  # type: ignore[arg-type]
    member._target = frozenset()
    waiting = types.SimpleNamespace(partitions=frozenset(), acknowledged=False, awaiting=5.0)
    member._early = [waiting]  # type: ignore[list-item]
    fatal = RuntimeError("GROUP_AUTHORIZATION_FAILED (heartbeat)")
    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:

            async def fail_soon() -> None:
                await anyio.sleep(1)
                member._fail(fatal)  # the heartbeat loop returns with it

            tg.start_soon(fail_soon)
            with pytest.raises(RuntimeError) as raised:
                await member.form_generation(lambda: False)
    assert raised.value is fatal
