"""A revoked partition's task that raises while it is being revoked ends the group at once.

Under both cooperative protocols the generation that revokes a partition
first cancels and awaits the partition's tasks. An exception one of them
raises (a flush in ``finally`` that fails) comes out of ``async for`` as
itself, as a generation-scoped task's does: the revoking generation is not
handed out, and the member does not go on consuming its other partitions;
so does a retained partition's task raising while the revocation runs.
An outage during a revocation ends the group with the outage's error, not
with a TaskStuckError naming no task.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import anyio.abc
import pytest
import trio.testing
from kio.schema.errors import ErrorCode

from gengroup import (
    ClusterUnreachable,
    ConsumerGroup,
    CooperativeStickyBalancer,
    Generation,
    TopicPartition,
)
from gengroup.broker import Fail, FakeCluster, Intercepted
from gengroup.broker.state import BrokerSettings
from gengroup.protocol.records import NewRecord
from gengroup.protocol.versions import ApiKey

from .helpers import EMBEDDED_SETTINGS, all_partitions, wait_until
from .test_span_commits import cluster_for, member

FLUSH = 4.0


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_revoked_partitions_exception_comes_out_at_once(
    protocol: str, autojump_clock: trio.testing.MockClock
) -> None:
    raised_at: list[float] = []
    handed_out: list[Generation] = []
    newcomer: list[Generation] = []

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        try:
            async for batch in gen.fetch(tp):
                gen.mark(tp, batch.next_offset)
        finally:
            # Only a revocation ends a worker before the group fails.
            if not raised_at:
                raised_at.append(anyio.current_time())
                raise ValueError(f"flush of {tp} failed while revoking")

    def marked() -> bool:
        return bool(handed_out[0].marks)

    async def run_newcomer(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with member(cluster, protocol, "b") as group:
            task_status.started()
            async for gen in group:
                newcomer.append(gen)

    async with cluster_for(protocol) as cluster:
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"x", (), 0)] * 10, partition=p)
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(120), pytest.raises(ValueError, match="while revoking"):
                async with member(cluster, protocol, "a") as group:
                    async for gen in group:
                        handed_out.append(gen)
                        for tp in gen.added:
                            gen.start_soon(worker, gen, tp, partition=tp)
                        if len(handed_out) == 1:
                            await wait_until(marked, "a's first marks", 60)
                            await tg.start(run_newcomer)
            failed_at = anyio.current_time()
            tg.cancel_scope.cancel()
    assert raised_at, "no revoked task raised"
    # At once: not after a heartbeat interval, nor whenever something else ends the generation.
    assert failed_at - raised_at[0] < 0.2
    # The generation that revoked the partitions was not handed out.
    assert not any(g.revoked for g in handed_out)


class Boom(Exception):
    pass


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_retained_partitions_exception_during_a_revocation_ends_it_at_once(
    protocol: str, autojump_clock: trio.testing.MockClock
) -> None:
    """Member a owns four partitions; b joins, so a revokes two, whose workers flush
    for FLUSH seconds (shielded). The retained partitions are served meanwhile, and
    one retained worker raises on its next batch: as any task's exception, it ends
    the revoking generation at once. The other retained worker gets no batch after
    the raise (it is cancelled then, not once the flush is over), and the exception
    comes out as itself once the flushing workers returned."""
    every = set(all_partitions("t", 4))
    flushing: dict[TopicPartition, float] = {}
    processed: dict[TopicPartition, list[tuple[float, int]]] = {tp: [] for tp in every}
    stopped: dict[TopicPartition, float] = {}
    raised_at: list[float] = []
    failed: list[tuple[float, BaseException]] = []
    joined = anyio.Event()

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        try:
            async for batch in gen.fetch(tp):
                processed[tp].append((anyio.current_time(), batch.next_offset))
                gen.mark(tp, batch.next_offset)
                if flushing and not raised_at and tp == min(every - set(flushing)):
                    raised_at.append(anyio.current_time())
                    raise Boom(f"{tp} failed")
        finally:
            stopped[tp] = anyio.current_time()
            if joined.is_set() and not raised_at:
                flushing[tp] = anyio.current_time()
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(FLUSH)

    async def run(name: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with member(cluster, protocol, name) as group:
            task_status.started()
            try:
                async for gen in group:
                    if name == "a":
                        for tp in gen.added:
                            gen.start_soon(worker, gen, tp, name=f"a {tp}", partition=tp)
            except Boom as exc:
                failed.append((anyio.current_time(), exc))

    async with cluster_for(protocol) as cluster, anyio.create_task_group() as tg:
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"x", (), 0)] * 5, partition=p)
        await tg.start(run, "a")
        await wait_until(lambda: all(processed[tp] for tp in every), "a's first batches", 60)
        joined.set()
        await tg.start(run, "b")
        await wait_until(lambda: bool(flushing), "a revoked worker's flush", 120)
        flush_ends = max(flushing.values()) + FLUSH
        retained = every - set(flushing)
        assert len(retained) == 2
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"y", (), 0)] * 3, partition=p)
        await wait_until(lambda: bool(raised_at), "the raise", 60)
        await anyio.sleep(0.5)
        for p in range(4):  # a sibling still served would get these
            cluster.produce("t", [NewRecord(None, b"z", (), 0)] * 2, partition=p)
        await wait_until(lambda: bool(failed), "a's failure", 120)
        tg.cancel_scope.cancel()
    (raised,) = raised_at
    assert raised < flush_ends
    (sibling,) = retained - {min(retained)}
    assert not [o for t, o in processed[sibling] if t > raised]
    assert stopped[sibling] - raised < 0.5, "the sibling was served on until the flush ended"
    ((at, err),) = failed
    assert isinstance(err, Boom) and at >= flush_ends


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_an_outage_during_a_revocation_ends_the_group_with_its_own_error(
    protocol: str, autojump_clock: trio.testing.MockClock
) -> None:
    """The only broker stops while a revocation runs, and its commit of the revoked
    partitions would retry for request_timeout, far longer than rebalance_timeout:
    no task is stuck (the workers' flush takes 1 s), so the group ends with the
    outage's ClusterUnreachable, within unreachable_timeout and one attempt's
    timeout of the stop (docs/guarantees.md, section 9), not TaskStuckError."""
    overrides: dict[str, Any] = {
        "rebalance_timeout": 5.0,
        "request_timeout": 30.0,
        "unreachable_timeout": 20.0,
    }
    settings = {**EMBEDDED_SETTINGS, **overrides}  # session_timeout=10
    if protocol == "classic":
        settings["balancers"] = [CooperativeStickyBalancer()]
    else:
        settings["group_protocol"] = "consumer"
    broker = BrokerSettings(
        group_initial_rebalance_delay_ms=0,
        group_consumer_heartbeat_interval_ms=1000,
        group_consumer_session_timeout_ms=10000,
    )
    revoking = anyio.Event()
    flushing: list[TopicPartition] = []
    outcome: dict[str, BaseException] = {}

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        try:
            async for batch in gen.fetch(tp):
                gen.mark(tp, batch.next_offset)
        finally:
            if revoking.is_set():
                flushing.append(tp)
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(1)  # a short flush, far below rebalance_timeout

    async def run(name: str) -> None:
        try:
            async with ConsumerGroup(
                "g", ["t"], cluster.bootstrap, client_id=name, **settings
            ) as g:
                async for gen in g:
                    for tp in gen.added:
                        gen.start_soon(worker, gen, tp, partition=tp)
        except Exception as exc:
            outcome[name] = exc

    async with (
        FakeCluster(topics={"t": 4}, settings=broker) as cluster,
        anyio.create_task_group() as tg,
    ):
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"x", (), 0)] * 5, partition=p)
        tg.start_soon(run, "a")
        await anyio.sleep(2)
        revoking.set()
        tg.start_soon(run, "b")
        await wait_until(lambda: bool(flushing), "a revoked worker's flush", 60)
        await anyio.sleep(0.5)
        stopped_at = anyio.current_time()
        await cluster.stop_broker(0)
        await wait_until(lambda: "a" in outcome, "a's error", 300)
        failed_after = anyio.current_time() - stopped_at
        tg.cancel_scope.cancel()
    error = outcome["a"]
    assert isinstance(error, ClusterUnreachable), repr(error)
    assert failed_after <= overrides["unreachable_timeout"] + 10.0


class RefusedMember:
    """Member "a" of a consumer-protocol group, whose commits the coordinator refuses
    (COORDINATOR_LOAD_IN_PROGRESS) while :attr:`refusing`; "b" joins to take two of
    its four partitions. a's workers mark every batch: partition tasks
    (``partition=tp``), or generation-scoped ones (``spans=False``)."""

    def __init__(self, cluster: FakeCluster, *, spans: bool = True) -> None:
        self.cluster = cluster
        self.spans = spans
        self.refusing = False
        self.handed_out: list[Generation] = []
        self.started: dict[TopicPartition, int] = dict.fromkeys(all_partitions("t", 4), 0)
        #: a's commits the coordinator was let to take: when, and their partitions.
        self.commits: list[tuple[float, frozenset[int]]] = []
        cluster.control(ApiKey.OFFSET_COMMIT, self._commit)
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"x", (), 0)] * 10, partition=p)

    def _commit(self, req: Intercepted) -> Fail | None:
        if req.client_id != "a":
            return None
        if self.refusing:
            return Fail(ErrorCode.coordinator_load_in_progress)
        parts = frozenset(p.partition_index for t in req.request.topics for p in t.partitions)
        self.commits.append((anyio.current_time(), parts))
        return None

    async def worker(self, gen: Generation, tp: TopicPartition) -> None:
        self.started[tp] += 1
        async for batch in gen.fetch(tp):
            gen.mark(tp, batch.next_offset)

    async def run(self, name: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with member(self.cluster, "consumer", name) as group:
            task_status.started()
            async for gen in group:
                if name != "a":
                    continue
                self.handed_out.append(gen)
                if self.spans:
                    for tp in gen.added:
                        gen.start_soon(self.worker, gen, tp, partition=tp)
                else:  # generation-scoped: no span
                    for tp in gen.assignments:
                        gen.start_soon(self.worker, gen, tp)

    async def marked(self, tg: anyio.abc.TaskGroup) -> None:
        """Start a; wait until its first generation marked all it read."""
        every = dict.fromkeys(all_partitions("t", 4), 10)
        await tg.start(self.run, "a")
        await wait_until(
            lambda: bool(self.handed_out) and self.handed_out[0].marks == every, "marks", 60
        )


async def test_a_revocation_whose_commit_is_refused_is_acknowledged_in_time(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The consumer protocol: the coordinator fences a member that has not acknowledged
    a revocation within its rebalance_timeout (10 s here), and the commits on the way
    (the ending generation's, then the revoked partitions') would retry a refusal for
    request_timeout (30 s). They give up before the deadline instead: the member
    acknowledges in time and is not fenced (its retained workers run on), and the
    revoked partitions' marks, not stored, are dropped, so no later commit of the
    member (under the newest epoch, which the coordinator accepts) moves the offsets
    of their new owner."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with cluster_for("consumer") as cluster, anyio.create_task_group() as tg:
        a = RefusedMember(cluster)
        await a.marked(tg)
        a.refusing = True
        await tg.start(a.run, "b")
        await wait_until(lambda: any(g.revoked for g in a.handed_out), "a's revocation", 60)
        revoked = next(g for g in a.handed_out if g.revoked).revoked
        await anyio.sleep(12)  # past the deadline: a fenced member would have been by now
        a.refusing = False
        lifted = anyio.current_time()
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"y", (), 0)] * 5, partition=p)
        revoking = a.handed_out[-1]
        await revoking.commit()  # a retained worker's records, from here on stored
        # The application committing a revoked partition itself: refused, typed.
        with pytest.raises(KeyError, match="revocation is acknowledged"):
            await revoking.commit({min(revoked): 10})
        await anyio.sleep(3)
        tg.cancel_scope.cancel()
    # Acknowledged before a's rebalance_timeout ran out: a was never fenced.
    assert not [r for r in caplog.records if "fenced" in r.getMessage()]
    assert len(revoked) == 2
    assert all(a.started[tp] == 1 for tp in set(a.started) - revoked), a.started
    # One WARNING, the dropped marks (the ending generation's commit that gave up
    # first is an INFO: its marks went with the revocation's commit).
    (dropped,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "commit of revoked [t[2-3]] failed" in dropped.getMessage()
    # a's commits once the coordinator accepts them again never name a revoked partition.
    later = [parts for at, parts in a.commits if at >= lifted]
    assert later, "a committed nothing after the refusals ended"
    revoked_ids = {tp.partition for tp in revoked}
    assert not [parts for parts in later if parts & revoked_ids], later


async def test_a_revocation_refused_after_its_marks_were_stored_drops_nothing(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Every mark is committed before the revocation, then every commit of the member
    is refused: the revoking generation knows the revoked partitions' committed offsets
    (their previous holder's), so nothing is due for them, nothing is said dropped,
    and the committed offsets stay the marks."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with cluster_for("consumer") as cluster, anyio.create_task_group() as tg:
        a = RefusedMember(cluster)
        await a.marked(tg)
        await a.handed_out[0].commit()
        stored = cluster.committed_offsets("g")
        a.refusing = True
        await tg.start(a.run, "b")
        await wait_until(lambda: any(g.revoked for g in a.handed_out), "a's revocation", 60)
        revoking = next(g for g in a.handed_out if g.revoked)
        await anyio.sleep(12)
        assert cluster.committed_offsets("g") == stored == dict.fromkeys(a.started, 10)
        tg.cancel_scope.cancel()
    assert all(revoking.committed[tp] == 10 for tp in revoking.revoked)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in caplog.records if "fenced" in r.getMessage()]


async def test_marks_of_generation_scoped_tasks_lost_at_the_revocation_deadline_are_a_warning(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The ending generation's commit that gives up at the revocation's deadline is
    an INFO only when open spans carry its marks on. Marks of generation-scoped tasks
    (``gen.start_soon(worker, gen, tp)``, the lake sink's way) end with their
    generation: their records are processed again, and the final commit's WARNING
    says so."""
    caplog.set_level(logging.INFO, logger="gengroup")
    async with cluster_for("consumer") as cluster, anyio.create_task_group() as tg:
        a = RefusedMember(cluster, spans=False)
        await a.marked(tg)
        a.refusing = True  # nothing of a's is stored from here on
        await tg.start(a.run, "b")
        await wait_until(lambda: len(a.handed_out) >= 2, "a's next generation", 60)
        tg.cancel_scope.cancel()
    first = a.handed_out[0]
    assert first.commit_error is not None
    said = [
        r
        for r in caplog.records
        if f"generation {first.label} member" in r.getMessage()
        and "final commit failed" in r.getMessage()
    ]
    assert [r.levelno for r in said] == [logging.WARNING], [r.getMessage() for r in said]
    assert not [r for r in caplog.records if "fenced" in r.getMessage()]
