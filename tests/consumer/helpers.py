"""Shared pieces of the consumer-group tests against a real broker."""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import pytest
import trio
import trio.lowlevel

from gengroup import Admin, ConsumerGroup, FetchedBatch, Generation, Producer, TopicPartition
from gengroup._config import GroupConfig
from gengroup.broker import BrokerSettings, FakeCluster
from gengroup.consumer.prefetch import Prefetcher
from gengroup.io.cluster import Cluster
from gengroup.producer import ProducerRecord
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

FAST = {
    "session_timeout": 6.0,
    "heartbeat_interval": 0.3,
    "rebalance_timeout": 10.0,
    "partition_watch_interval": 0.5,
    "commit_interval": 0.3,
    "join_backoff": 0.2,
    "fetch_max_wait": 0.2,
}

#: Group timings for the embedded broker in virtual time; a test file overrides
#: what it needs (``{**EMBEDDED_SETTINGS, "commit_interval": 0.0}``).
EMBEDDED_SETTINGS: dict[str, Any] = {
    "session_timeout": 10.0,
    "heartbeat_interval": 1.0,
    "rebalance_timeout": 20.0,
    "commit_interval": 1.0,
    "join_backoff": 0.5,
    "fetch_max_wait": 0.5,
    "request_timeout": 30.0,
}


def unstarted_prefetcher(positions: Mapping[TopicPartition, int]) -> Prefetcher:
    """The prefetcher of a generation made by hand: never run, it fetches
    nothing (so it knows of no offsets without records)."""

    async def no_reset(tp: TopicPartition) -> int:
        raise AssertionError(f"an unstarted prefetcher reset {tp}")

    address = "127.0.0.1:9092"
    return Prefetcher(
        Cluster(address), GroupConfig.create("g", ["t"], address), positions, no_reset
    )


async def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topics({topic: partitions})


async def produce_ids(bootstrap: str, topic: str, ids: Iterable[int]) -> None:
    """Produce one record per id, value b"id-<n>", spread round-robin by key."""
    async with Producer(bootstrap) as producer:
        await producer.send_many(
            topic,
            [ProducerRecord(value=f"id-{i}".encode(), key=f"k{i}".encode()) for i in ids],
        )


def embedded_broker_settings() -> BrokerSettings:
    """The embedded broker with no initial rebalance delay, and the consumer
    protocol's heartbeat interval and session those of :data:`EMBEDDED_SETTINGS`."""
    return BrokerSettings(
        group_initial_rebalance_delay_ms=0,
        group_consumer_heartbeat_interval_ms=int(EMBEDDED_SETTINGS["heartbeat_interval"] * 1000),
        group_consumer_session_timeout_ms=int(EMBEDDED_SETTINGS["session_timeout"] * 1000),
    )


async def wait_until(predicate: Callable[[], bool], what: str, timeout: float) -> None:
    """Poll ``predicate`` until it holds; an AssertionError naming ``what`` after
    ``timeout`` seconds (a hang guard, not a timing assertion)."""
    try:
        with anyio.fail_after(timeout):
            while not predicate():
                await anyio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def consume_and_mark(
    gen: Generation, tp: TopicPartition, processed: Counter[bytes]
) -> AsyncIterator[FetchedBatch]:
    """A test worker's loop over ``tp``: each batch's record values counted in
    ``processed`` and its end marked, then the batch handed on for the caller's
    own bookkeeping."""
    async for batch in gen.fetch(tp):
        for record in batch.records:
            assert record.value is not None
            processed[record.value] += 1
        gen.mark(tp, batch.next_offset)
        yield batch


async def span_workers(group: ConsumerGroup, processed: Counter[bytes]) -> None:
    """A member whose workers are partition-scoped (one per added partition,
    kept across generations where the protocol keeps partitions), each
    counting the values it processed in ``processed``."""

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        async for _ in consume_and_mark(gen, tp, processed):
            pass

    async for gen in group:
        for tp in gen.added:
            gen.start_soon(worker, gen, tp, partition=tp)


@dataclass
class MemberGenerations:
    """The generations handed to each member, the newest last."""

    generations: dict[str, list[Generation]] = field(default_factory=dict)

    def current(self) -> dict[str, Generation]:
        return {n: gens[-1] for n, gens in self.generations.items() if gens and not gens[-1].ending}

    def assigned(self, name: str) -> set[TopicPartition]:
        """The partitions of ``name``'s live generation (none without one)."""
        gen = self.current().get(name)
        return set(gen.assignments) if gen is not None else set()

    def stable(
        self, names: set[str], every: set[TopicPartition], same_generation: bool = True
    ) -> bool:
        """See :func:`shares_evenly`, for the live generations."""
        return shares_evenly(self.current(), names, every, same_generation)


@dataclass
class Ledger(MemberGenerations):
    """What every member's workers did, checked for the group's invariants."""

    #: Each partition's owner: member name and generation label (ids can repeat).
    owners: dict[TopicPartition, tuple[str, str]] = field(default_factory=dict)
    overlaps: list[str] = field(default_factory=list)
    processed: Counter[bytes] = field(default_factory=Counter)
    start_offsets: list[tuple[int, TopicPartition, int]] = field(default_factory=list)
    last_marks: dict[TopicPartition, int] = field(default_factory=dict)
    handover_gaps: list[str] = field(default_factory=list)
    #: (time, member, generation) of every generation handed to a member.
    formed: list[tuple[float, str, Generation]] = field(default_factory=list)
    changed: anyio.Event = field(default_factory=anyio.Event)

    def notify(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    async def worker(self, name: str, gen: Generation, tp: TopicPartition) -> None:
        if tp in self.owners:
            self.overlaps.append(f"{tp}: {name} gen {gen.label} while {self.owners[tp]} owns it")
        self.owners[tp] = (name, gen.label)
        start = gen.assignments[tp]
        self.start_offsets.append((gen.id, tp, start))
        previous = self.last_marks.get(tp)
        if previous is not None and previous != start:
            self.handover_gaps.append(
                f"{tp}: gen {gen.label} starts at {start}, last mark {previous}"
            )
        try:
            async for batch in consume_and_mark(gen, tp, self.processed):
                self.last_marks[tp] = batch.next_offset
                self.notify()
        finally:
            if self.owners.get(tp) == (name, gen.label):
                del self.owners[tp]

    async def member(self, name: str, group: ConsumerGroup) -> None:
        async for gen in group:
            self.formed.append((anyio.current_time(), name, gen))
            self.generations.setdefault(name, []).append(gen)
            self.notify()
            for tp in gen.assignments:
                gen.start_soon(self.worker, name, gen, tp, name=f"{name} {tp}")

    async def wait_for(self, predicate: object, what: str, timeout: float = 60.0) -> None:
        assert callable(predicate)
        await wait_until(predicate, what, timeout)


@dataclass
class Members:
    """Members of one group, each run as a task (``await tg.start(members.run, name)``)
    that hands its generations to ``ledger``; ``stop(name)`` closes one."""

    ledger: Ledger
    group_id: str
    topic: str
    bootstrap: str
    settings: Mapping[str, Any]
    groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    scopes: dict[str, anyio.CancelScope] = field(default_factory=dict)

    async def run(self, name: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with anyio.CancelScope() as scope:
            self.scopes[name] = scope
            async with ConsumerGroup(
                self.group_id, [self.topic], self.bootstrap, client_id=name, **self.settings
            ) as group:
                self.groups[name] = group
                task_status.started()
                await self.ledger.member(name, group)

    def stop(self, name: str) -> None:
        self.scopes[name].cancel()


@dataclass
class GroupRun:
    """A new group's members on a fresh topic, the ledger of what they did and the
    group's committed offsets as :func:`watch_commits` polls them into ``committed``."""

    topic: str
    group_id: str
    every: set[TopicPartition]
    ledger: Ledger
    members: Members
    committed: dict[TopicPartition, list[int]] = field(default_factory=dict)


async def start_group_run(
    bootstrap: str, prefix: str, partitions: int, records: int, settings: Mapping[str, Any]
) -> GroupRun:
    """A topic named after ``prefix`` with ``partitions``, created holding ``records``
    ids (``id-0`` on) from :func:`produce_ids`, and the members of a new group that
    run with ``settings`` (none started yet)."""
    topic, group_id = make_unique_name(prefix), make_unique_name("g")
    await create_topic(bootstrap, topic, partitions)
    await produce_ids(bootstrap, topic, range(0, records))
    ledger = Ledger()
    members = Members(ledger, group_id, topic, bootstrap, settings)
    return GroupRun(topic, group_id, all_partitions(topic, partitions), ledger, members)


def shares_evenly(
    current: Mapping[str, Generation],
    names: set[str],
    every: set[TopicPartition],
    same_generation: bool = True,
) -> bool:
    """``names`` (only) run generations covering ``every`` partition exactly once
    (in one generation id if ``same_generation``), evenly."""
    if set(current) != names or (same_generation and len({g.id for g in current.values()}) != 1):
        return False
    if not covers_exactly_once(current.values(), every):
        return False
    share = len(every) // len(names)
    # Uneven: a member still waits for partitions another one releases.
    return all(len(g.assignments) in (share, share + 1) for g in current.values())


def assert_processed_once(
    ledger: Ledger, expected: set[bytes], committed: Mapping[TopicPartition, list[int]]
) -> None:
    """No partition had two owners at once; every record of ``expected`` was
    processed exactly once, each handover starting exactly where the previous
    owner's marks ended (the final shielded commit); and the committed offsets
    polled into ``committed`` never went backwards."""
    assert not ledger.overlaps, ledger.overlaps
    assert set(ledger.processed) == expected
    assert not ledger.handover_gaps, ledger.handover_gaps
    duplicates = {v: n for v, n in ledger.processed.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} records processed twice"
    for tp, seq in committed.items():
        assert seq == sorted(seq), f"committed offset of {tp} went backwards: {seq}"


def covers_exactly_once(gens: Iterable[Generation], partitions: set[TopicPartition]) -> bool:
    seen: list[TopicPartition] = [tp for g in gens for tp in g.assignments]
    return len(seen) == len(set(seen)) and set(seen) == partitions


def all_partitions(topic: str, n: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(n)}


class Lines:
    """A member process's output lines, read by a thread as they come, with arrival times."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.seen: list[tuple[float, str]] = []
        self._proc = proc
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self.seen.append((time.monotonic(), line.strip()))

    async def wait_for_records(self, count: int) -> None:
        """Until the ``batch P NEXT`` lines account for ``count`` records (every
        partition read from offset 0: its newest NEXT is how many it handed out)."""
        with anyio.fail_after(60):  # a hang guard, not a timing assertion
            while True:
                newest = {}
                for _, line in list(self.seen):
                    if line.startswith("batch "):
                        _, partition, next_offset = line.split()
                        newest[partition] = int(next_offset)
                if sum(newest.values()) >= count:
                    return
                await anyio.sleep(0.05)

    async def wait_for(self, prefix: str, since: float = 0.0) -> list[str]:
        """The lines after ``since`` up to the first starting with ``prefix``."""
        with anyio.fail_after(60):  # a hang guard, not a timing assertion
            while True:
                after = [line for t, line in self.seen if t > since]
                for i, line in enumerate(after):
                    if line.startswith(prefix):
                        return after[: i + 1]
                await anyio.sleep(0.05)


async def watch_commits(
    bootstrap: str, group_id: str, history: dict[TopicPartition, list[int]]
) -> None:
    """Poll the group's committed offsets into ``history`` (to check they never go back)."""
    async with Admin(bootstrap) as admin:
        while True:
            # As members read them: a plain read may go back after a coordinator move.
            offsets = await admin.fetch_offsets(group_id, require_stable=True)
            for tp, off in offsets.items():
                history.setdefault(tp, []).append(off)
            await anyio.sleep(0.1)


@asynccontextmanager
async def broker_under_test(
    request: pytest.FixtureRequest, which: str, settings: BrokerSettings, brokers: int = 1
) -> AsyncIterator[str]:
    """The bootstrap address of the session's Apache Kafka (``which == "kafka"``) or
    of a fresh embedded cluster with ``settings``, checked for internal errors at
    the end."""
    if which == "kafka":
        kafka: KafkaBroker = request.getfixturevalue("kafka")
        yield kafka.bootstrap
        return
    async with FakeCluster(brokers=brokers, settings=settings) as cluster:
        yield cluster.bootstrap
        assert not cluster.state.errors, cluster.state.errors


class TaskSteps(trio.abc.Instrument):
    """Counts the task steps trio runs: a schedule point starts a new one."""

    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1
