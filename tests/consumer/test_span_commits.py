"""Commits and lag of a partition whose ownership span outlived its generation.

A partition-scoped task (``gen.start_soon(..., partition=tp)``, every
``run_workers`` worker) keeps the generation it was started in. Under a
cooperative protocol a rebalance that retains the partition ends that
generation while the task runs on; ``commit()`` and ``lag()`` on it act on the
generation holding the span now, as ``mark`` and ``fetch`` do. Between
generations a commit waits for the next one: a commit carries the generation
id and member id it is made under, and there is none meanwhile.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import trio.testing
from kio.schema.errors import ErrorCode

from gengroup import (
    ConsumerGroup,
    CooperativeStickyBalancer,
    Generation,
    GenerationEnded,
    RequestTimedOut,
    TopicPartition,
)
from gengroup._config import GroupConfig
from gengroup._errors import CoordinatorLoadInProgress
from gengroup._types import GenerationIdentity
from gengroup.broker import FakeCluster
from gengroup.consumer.commits import TopicIds
from gengroup.consumer.generation import OffsetMetadata, Offsets, RebalanceTimings, Span
from gengroup.consumer.ownership import Ownership
from gengroup.protocol.records import NewRecord

from .helpers import EMBEDDED_SETTINGS, all_partitions, unstarted_prefetcher, wait_until
from .kip848 import EMBEDDED_SETTINGS as KIP848_BROKER, KIP848

TP = TopicPartition("t", 0)


# ------------------------------------------------------------ the rules, on hand-made generations


class Recorder:
    """A committer that stores every commit and the identity it carried."""

    def __init__(self) -> None:
        self.commits: list[tuple[GenerationIdentity, dict[TopicPartition, int]]] = []

    async def commit_offsets(
        self,
        identity: GenerationIdentity,
        offsets: Offsets,
        metadata: OffsetMetadata | None = None,
        topic_ids: TopicIds | None = None,
    ) -> dict[TopicPartition, int]:
        self.commits.append((identity, dict(offsets)))
        return dict.fromkeys(offsets, 0)


def generation(
    sequence: int, spans: dict[TopicPartition, Span], committer: Recorder, **fields: Any
) -> Generation:
    """Generation ``sequence`` of member m, assigning ``TP``, sharing ``spans``."""
    return Generation(
        identity=GenerationIdentity("g", sequence, "m", None, sequence),
        is_leader=False,
        protocol="cooperative-sticky",
        assignments={TP: 0},
        timings=RebalanceTimings(),
        _committer=committer,
        _prefetcher=unstarted_prefetcher({TP: 0}),
        _spans=spans,
        **fields,
    )


def ended_holder(mark: int) -> tuple[Recorder, dict[TopicPartition, Span], Generation, Span]:
    """A span whose holder marked ``mark`` and ended: a commit of it waits for a holder."""
    recorder = Recorder()
    spans: dict[TopicPartition, Span] = {}
    first = generation(1, spans, recorder)
    span = spans[TP] = Span(TP, first, position=0)
    first.mark(TP, mark)
    first.set_ended()
    return recorder, spans, first, span


async def test_a_commit_between_generations_waits_and_goes_under_the_next_holder() -> None:
    recorder, spans, first, span = ended_holder(5)
    done = anyio.Event()

    async def commit() -> None:
        await first.commit()
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(commit)
        await anyio.wait_all_tasks_blocked()
        assert not done.is_set() and recorder.commits == []  # no generation to carry it
        first.mark(TP, 7)  # made between generations: carried into the next
        second = generation(2, spans, recorder, retained=frozenset({TP}))
        span.hand_to(second)
    assert recorder.commits == [(second.identity, {TP: 7})]
    assert second.committed == {TP: 7}
    # Explicit offsets go the same way.
    await first.commit({TP: 9})
    assert recorder.commits[-1] == (second.identity, {TP: 9})


async def test_a_commit_waiting_for_a_holder_goes_on_once_the_next_generation_formed() -> None:
    """The next generation formed and holds its retained spans before it revokes
    other spans: the commit goes under it then (a revoked task's cleanup may be
    waiting for it); holding them again, as adopting it does, changes nothing."""
    recorder, spans, first, span = ended_holder(3)
    own = Ownership(GroupConfig.create("g", ["t"], "127.0.0.1:9092"))
    own.spans = spans
    second = generation(2, spans, recorder, retained=frozenset({TP}))
    async with anyio.create_task_group() as tg:
        tg.start_soon(first.commit)
        await anyio.wait_all_tasks_blocked()
        own.hold_retained(second)
    assert recorder.commits == [(second.identity, {TP: 3})]
    first.mark(TP, 5)  # the span's worker, during the revocation: in ``second``
    own.hold_retained(second)
    assert span.gen is second and second.marks == {TP: 5} and second.committed == {TP: 3}


def being_revoked(
    recorder: Recorder, position: int, prefetcher: Any
) -> tuple[Generation, Generation]:
    """Generation 1, ended, whose span of TP (at ``position``) generation 2
    revokes: (the first, the revoking one)."""
    spans: dict[TopicPartition, Span] = {}
    first = generation(1, spans, recorder)
    span = spans[TP] = Span(TP, first, position=position)
    first.set_ended()
    revoking = Generation(
        identity=GenerationIdentity("g", 2, "m", None, 2),
        is_leader=False,
        protocol="cooperative-sticky",
        assignments={},
        timings=RebalanceTimings(),
        _committer=recorder,
        _prefetcher=prefetcher,
        _spans=spans,
        revoked=frozenset({TP}),
    )
    span.hand_to(None, revoking)
    return first, revoking


async def test_a_revoked_spans_commit_goes_under_the_revoking_generation() -> None:
    recorder = Recorder()
    first, revoking = being_revoked(recorder, 0, unstarted_prefetcher({TP: 0}))
    first.mark(TP, 4)  # in the task's cleanup
    await first.commit()
    assert recorder.commits == [(revoking.identity, {TP: 4})]


class Loading(Recorder):
    """A committer that refuses the first ``refusals`` commits: the coordinator is loading."""

    def __init__(self, refusals: int) -> None:
        super().__init__()
        self.refusals = refusals

    async def commit_offsets(
        self,
        identity: GenerationIdentity,
        offsets: Offsets,
        metadata: OffsetMetadata | None = None,
        topic_ids: TopicIds | None = None,
    ) -> dict[TopicPartition, int]:
        self.commits.append((identity, dict(offsets)))
        if self.refusals:
            self.refusals -= 1
            return dict.fromkeys(offsets, int(ErrorCode.coordinator_load_in_progress))
        return dict.fromkeys(offsets, 0)


async def refused_then_rebalanced(recorder: Loading, commit: Any) -> Generation:
    """Run ``commit`` of generation 1 (spans of ``TP``); once its first attempt was
    refused, a cooperative rebalance ends generation 1 and hands the span to 2."""
    spans: dict[TopicPartition, Span] = {}
    first = generation(1, spans, recorder)
    span = spans[TP] = Span(TP, first, position=0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(commit, first)
        await anyio.wait_all_tasks_blocked()  # refused once; backing off
        assert len(recorder.commits) == 1
        first.set_ended()
        second = generation(2, spans, recorder, retained=frozenset({TP}))
        span.hand_to(second)
    return second


async def test_a_commit_retried_across_a_rebalance_keeping_its_span_goes_under_the_next_holder(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A span task's ``gen.commit()`` is refused (retriable) and its generation ends
    meanwhile keeping the span: the retry goes on under the generation holding it."""
    recorder = Loading(refusals=1)
    second = await refused_then_rebalanced(recorder, lambda first: first.commit({TP: 9}))
    assert [(i.generation_id, o) for i, o in recorder.commits] == [(1, {TP: 9}), (2, {TP: 9})]
    assert second.committed == {TP: 9}


async def test_a_commit_retried_across_a_rebalance_has_one_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Refused on under the next holder: RequestTimedOut request_timeout after the call
    (the holder's attempts are retries of that commit, not a commit of their own)."""
    recorder = Loading(refusals=1000)
    raised: list[BaseException] = []

    async def commit(first: Generation) -> None:
        first.mark(TP, 9)
        t0 = anyio.current_time()
        with pytest.raises(RequestTimedOut) as caught:
            await first.commit()  # the marks, under the holder: the span's
        raised.append(caught.value)
        assert anyio.current_time() - t0 == pytest.approx(first._request_timeout)

    await refused_then_rebalanced(recorder, commit)
    assert raised and isinstance(raised[0].__cause__, CoordinatorLoadInProgress)
    assert {i.generation_id for i, _ in recorder.commits[1:]} == {2}


async def test_commits_of_partitions_without_a_live_span_are_refused() -> None:
    recorder = Recorder()
    spans: dict[TopicPartition, Span] = {}
    first = generation(1, spans, recorder)
    first.set_ended()
    with pytest.raises(GenerationEnded, match="has ended; nothing was sent"):
        await first.commit({TP: 1})  # no span: a generation-scoped partition
    # Given up with the membership: the span closed with its ended holder.
    span = spans[TP] = Span(TP, first, position=0)
    span.hand_to(None)
    with pytest.raises(GenerationEnded):
        await first.commit()
    # A span opened later (the partition revoked, then added again) is not this one's.
    later = generation(3, spans, recorder)
    spans[TP] = Span(TP, later, position=0)
    with pytest.raises(GenerationEnded):
        await first.commit({TP: 2})
    assert recorder.commits == []


# ---------------------------------------------------------------- a member, under both protocols


@asynccontextmanager
async def cluster_for(protocol: str) -> AsyncIterator[FakeCluster]:
    if protocol == "classic":
        async with FakeCluster(topics={"t": 4}, initial_rebalance_delay_ms=0) as cluster:
            yield cluster
    else:
        async with FakeCluster(topics={"t": 4}, settings=KIP848_BROKER) as cluster:
            yield cluster
            assert not cluster.state.errors, cluster.state.errors


def member(cluster: FakeCluster, protocol: str, name: str) -> ConsumerGroup:
    """A member that commits only explicitly (no periodic commit within the test)."""
    if protocol == "classic":
        settings: dict[str, Any] = {**EMBEDDED_SETTINGS, "commit_interval": 3600.0}
        settings["balancers"] = [CooperativeStickyBalancer()]
    else:
        settings = {**KIP848, "commit_interval": 3600.0}
    return ConsumerGroup("g", ["t"], cluster.bootstrap, client_id=name, **settings)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_span_worker_commits_and_reads_lag_through_the_generation_it_started_in(
    protocol: str, autojump_clock: trio.testing.MockClock
) -> None:
    """examples/manual_commits.py's pattern (mark, then ``await gen.commit()`` after each
    batch) in span workers: after a rebalance that retains their partitions, their
    commits go under the current generation, and ``gen.lag()`` is the current one."""
    every = set(all_partitions("t", 4))
    errors: list[BaseException] = []
    started_in: dict[TopicPartition, Generation] = {}
    current: dict[str, Generation] = {}
    gate = {tp: anyio.Event() for tp in every}
    for event in gate.values():
        event.set()

    def produce(n: int) -> None:
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"x", (), 0)] * n, partition=p)

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        started_in[tp] = gen
        async for batch in gen.fetch(tp):
            await gate[tp].wait()
            gen.mark(tp, batch.next_offset)
            try:
                await gen.commit()
            except Exception as exc:
                errors.append(exc)
                raise

    async def run(name: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with member(cluster, protocol, name) as group:
            task_status.started()
            async for gen in group:
                current[name] = gen
                for tp in gen.added:
                    gen.start_soon(worker, gen, tp, name=f"{name} {tp}", partition=tp)

    def committed(end: int) -> bool:
        return cluster.committed_offsets("g") == dict.fromkeys(every, end)

    async with cluster_for(protocol) as cluster, anyio.create_task_group() as tg:
        produce(10)
        await tg.start(run, "a")
        await wait_until(lambda: committed(10), "a's first commits", 60)
        await tg.start(run, "b")
        await wait_until(
            lambda: "b" in current and len(current["b"].assignments) == 2,
            "b's partitions",
            120,
        )
        retained = set(current["a"].assignments)
        assert len(retained) == 2
        assert all(started_in[tp].ended for tp in retained)  # the workers' generations
        produce(10)
        await wait_until(lambda: committed(20), "commits after the rebalance", 60)
        assert errors == []
        # The frozen generation's lag is the current one's.
        tp = min(retained)
        gate[tp] = anyio.Event()
        produce(5)

        def behind() -> bool:
            return current["a"].lag().get(tp, 0) >= 4

        await wait_until(behind, "the held partition's lag", 60)
        assert started_in[tp].lag()[tp] == current["a"].lag()[tp] > 0
        gate[tp].set()
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_revoked_worker_commits_in_its_cleanup(
    protocol: str, autojump_clock: trio.testing.MockClock
) -> None:
    """Java's ``onPartitionsRevoked`` → ``commitSync()``: a revoked worker marks and commits
    in its shielded cleanup (every mark of its generation, the retained partitions' too);
    the commit goes under the revoking generation and the newcomer starts at the mark."""
    cleanups: dict[TopicPartition, BaseException | None] = {}
    first_offset: dict[TopicPartition, int] = {}
    newcomer: list[Generation] = []

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        done = -1
        try:
            async for batch in gen.fetch(tp):
                done = batch.next_offset  # processed; marked in the cleanup when revoked
                if done >= 20:
                    gen.mark(tp, done - 5)
        finally:
            with anyio.CancelScope(shield=True):
                if done >= 0 and tp not in cleanups:
                    gen.mark(tp, done)
                    try:
                        await gen.commit()
                        cleanups[tp] = None
                    except Exception as exc:
                        cleanups[tp] = exc
                        raise

    async def newcomer_worker(gen: Generation, tp: TopicPartition) -> None:
        async for batch in gen.fetch(tp):
            first_offset.setdefault(tp, batch.records[0].offset)

    async def run(name: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with member(cluster, protocol, name) as group:
            task_status.started()
            async for gen in group:
                if name == "b":
                    newcomer.append(gen)
                for tp in gen.added:
                    work = worker if name == "a" else newcomer_worker
                    gen.start_soon(work, gen, tp, name=f"{name} {tp}", partition=tp)

    async with cluster_for(protocol) as cluster, anyio.create_task_group() as tg:
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"x", (), 0)] * 30, partition=p)
        await tg.start(run, "a")
        await anyio.sleep(5)
        await tg.start(run, "b")
        await wait_until(lambda: any(g.assignments for g in newcomer), "b's partitions", 120)
        for p in range(4):
            cluster.produce("t", [NewRecord(None, b"y", (), 0)] * 5, partition=p)
        await wait_until(lambda: len(first_offset) == 2, "the newcomer's first batches", 120)
        assert len(cleanups) == 2 and all(exc is None for exc in cleanups.values()), cleanups
        assert first_offset == dict.fromkeys(first_offset, 30)
        tg.cancel_scope.cancel()


async def test_the_position_of_a_partition_being_revoked_is_where_its_span_ends() -> None:
    """A span task's clean-up asks ``gen.position(tp)`` while the next
    generation revokes the partition: the answer is where the span ends (its
    next batch would have started there), not a bare KeyError from the
    revoking generation's prefetcher, which never had the partition."""
    # The revoking generation's prefetcher is built from its own assignments, as formed.
    first, _ = being_revoked(Recorder(), 7, unstarted_prefetcher({}))
    assert first.position(TP) == 7


async def test_a_partition_assigned_again_while_revoked_early_starts_on_the_new_topic() -> None:
    """A topic deleted and created again while its partition's early revocation
    (consumer protocol: early_revocation.py) is pending: the coordinator assigns
    the new topic's partition to the member, and the generation that forms
    takes the revocation over. It must not take the old span's mark, committed
    offset or topic id for the new topic's partition (a commit of them would
    store an offset of the new topic that was never processed): the partition
    starts again as added, and its first commit is the new topic's own."""
    from uuid import uuid4

    from gengroup.consumer.early_revocation import EarlyRevocation

    old_id, new_id = uuid4(), uuid4()
    recorder = Recorder()
    own = Ownership(GroupConfig.create("g", ["t"], "127.0.0.1:9092"))
    first = generation(1, own.spans, recorder)
    first._topic_ids = {"t": old_id}
    own.spans[TP] = Span(TP, first, position=10_000)
    own.owned = {TP}
    first.mark(TP, 10_000)
    first._committed[TP] = 9_000
    first.set_ended()
    revocation = EarlyRevocation.release(
        own, frozenset({TP}), first, 0, 5, RuntimeError("loading"), lambda: 5.0
    )
    second = generation(2, own.spans, recorder, added=frozenset({TP}))
    second._topic_ids = {"t": new_id}
    second.know_spans()
    revocation.hand_to(second)
    assert TP not in second._marks and TP not in second._committed
    assert TP not in second._span_ids
    # The old span's tasks returned; the new topic's partition opens a span.
    del own.spans[TP]
    new = own.spans[TP] = Span(TP, second, position=0)
    assert new.topic_id == new_id
    second.mark(TP, 50)
    await second.commit()
    assert recorder.commits == [(second.identity, {TP: 50})]
