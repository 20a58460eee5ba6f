"""The generation's prefetcher: one fetch loop per broker, bounded per-partition buffers.

Theory of operation:

A :class:`Prefetcher` runs as one task of the generation. Inside it, one loop per
leader broker sends a single Fetch request covering every assigned partition
that broker leads *and whose buffer has room* -- never a request per partition.
Each partition has a bounded buffer (``partition_buffer_bytes`` of record
payload): when a worker falls behind, its partition drops out of the fetch
requests until the worker drains it, so memory stays bounded and a slow worker
applies backpressure to its own partition only.

Errors are handled where they are understood, as the client's error table
(:mod:`gengroup._error_table`) says: stale leadership (action
``refresh_metadata``) refreshes metadata and moves the partition to its new
leader's loop, as does a Fetch that fails as a whole with such an error, a
broken connection or an undecodable answer (after one backoff of
:mod:`gengroup.io.retry`); a transient error (``retry``) is fetched again;
OFFSET_OUT_OF_RANGE resets the position per ``start_offset`` or, with ``"error"``, is delivered to
the partition's worker, like any other non-retriable error: the worker's
``async for`` raises it, the worker exits, and the generation ends with that
exception. Nothing is swallowed.

Workers read through :meth:`Prefetcher.iterate`, an async iterator (not an async
generator, so there is nothing to finalise). Every step is a cancellation
point, and it hands out no batch once the generation is ending (checked when
the batch is taken from the buffer, not only when the buffer is empty): a
worker of the generation is cancelled there; one shielded from it sees the
iteration stop.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from .._config import GroupConfig
from .._error_table import Action
from .._errors import (
    BrokerError,
    DeserializationError,
    KafkaConnectionError,
    OffsetOutOfRange,
    ProtocolError,
)
from .._types import TopicPartition
from ..io.cluster import Cluster
from ..io.fetch import fetch_once
from ..io.retry import Backoff
from ..protocol.fetch import PartitionFetch
from ..protocol.records import Header, Record
from .metrics import GroupMetrics

__all__ = ["FetchedBatch", "Prefetcher"]

log = logging.getLogger("gengroup")


@dataclass(slots=True)
class FetchedBatch:
    """The records of one partition from one fetch, handed to a worker whole.

    Attributes:
        topic: the topic.
        partition: the partition.
        records: the records, in offset order (never empty).
        next_offset: the offset to mark once the batch is processed.
        high_watermark: the partition's high watermark when fetched (lag =
            ``high_watermark - next_offset``).
    """

    topic: str
    partition: int
    records: list[Record]
    next_offset: int
    high_watermark: int
    size: int = 0
    deserializers: Deserializers = field(default=(None, None), repr=False)

    @property
    def tp(self) -> TopicPartition:
        """The batch's topic and partition."""
        return TopicPartition(self.topic, self.partition)

    def __iter__(self) -> Iterator[Record]:
        """The records, in offset order: ``for record in batch``."""
        return iter(self.records)

    def __len__(self) -> int:
        """How many records the batch holds."""
        return len(self.records)

    def decoded(self) -> list[DecodedRecord]:
        """The records with key and value passed through the group's deserializers.

        Deserialization happens here, when asked for, on the worker's side
        (``key_deserializer`` / ``value_deserializer`` settings; without one,
        the bytes pass through).

        Raises:
            DeserializationError: a deserializer raised; it names the topic,
                partition, offset and whether key or value, with the
                deserializer's exception as its cause.
        """
        key_of, value_of = self.deserializers
        out: list[DecodedRecord] = []
        for r in self.records:
            key = _apply(key_of, r.key, self, r.offset, "key")
            value = _apply(value_of, r.value, self, r.offset, "value")
            out.append(DecodedRecord(r.offset, r.timestamp, key, value, r.headers))
        return out


#: The ``(key_deserializer, value_deserializer)`` of a group.
Deserializers = tuple[Callable[[bytes | None], Any] | None, Callable[[bytes | None], Any] | None]


@dataclass(frozen=True, slots=True)
class DecodedRecord:
    """A record whose key and value went through the deserializers (``FetchedBatch.decoded()``)."""

    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: tuple[Header, ...]


def _apply(
    fn: Callable[[bytes | None], Any] | None,
    data: bytes | None,
    batch: FetchedBatch,
    offset: int,
    what: str,
) -> Any:
    if fn is None:
        return data
    try:
        return fn(data)
    except Exception as exc:
        raise DeserializationError(
            f"{what} of {batch.topic}[{batch.partition}] offset {offset}: "
            f"{getattr(fn, '__qualname__', fn)!r} raised {exc!r}"
        ) from exc


@dataclass(eq=False)
class _Partition:
    tp: TopicPartition
    position: int
    leader: int = -1
    queue: deque[FetchedBatch] = field(default_factory=deque)
    buffered: int = 0
    error: BaseException | None = None
    wake: anyio.Event = field(default_factory=anyio.Event)
    #: The high watermark in the newest fetch answer for the partition (-1: none yet).
    high_watermark: int = -1


def _request_action(exc: BaseException) -> Action:
    """What a broker loop does about its Fetch request failing with ``exc``: the
    error table's action for a broker error; a broken connection or an
    undecodable answer counts as stale leadership (look the leader up again);
    anything else fails."""
    if isinstance(exc, BrokerError):
        return exc.action
    if isinstance(exc, KafkaConnectionError | ProtocolError):
        return "refresh_metadata"
    return "fail"


class Prefetcher:
    """Fetches a generation's partitions (one loop per broker) into bounded buffers."""

    def __init__(
        self,
        cluster: Cluster,
        config: GroupConfig,
        positions: Mapping[TopicPartition, int],
        reset_offset: Callable[[TopicPartition], Awaitable[int]],
        on_first_batch: Callable[[], None] | None = None,
        metrics: GroupMetrics | None = None,
    ) -> None:
        self._cluster = cluster
        self._metrics = GroupMetrics() if metrics is None else metrics
        self._config = config
        self._parts = {tp: _Partition(tp, off) for tp, off in positions.items()}
        self._reset_offset = reset_offset
        self._on_first_batch = on_first_batch
        self._loops: set[int] = set()
        self._space = anyio.Event()
        self._reroute = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False
        # One backoff per broker, kept across the loop restarts that a failed
        # fetch causes, so a broker that stays down is retried less and less
        # often; reset by the broker's next successful fetch. The failing set
        # lets each broker's failure and recovery be logged once.
        self._backoffs: dict[int, Backoff] = {}
        self._failing: set[int] = set()
        self._metadata_failing = False

    # ------------------------------------------------------------------ workers' side

    def iterate(self, tp: TopicPartition, ending: Callable[[], bool]) -> _PartitionIterator:
        """An async iterator over ``tp``'s batches; it hands out nothing once ``ending()``."""
        return _PartitionIterator(self, self._parts[tp], ending)

    def high_watermark(self, tp: TopicPartition) -> int:
        """``tp``'s high watermark in the newest fetch answer (-1: none yet)."""
        return self._parts[tp].high_watermark

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Fetch ``tp`` from ``offset`` next: its buffered batches are dropped.

        A fetch already in flight for the old position is discarded when it
        arrives (answers are kept only for the position they were asked for).
        """
        part = self._parts[tp]
        part.position = offset
        part.error = None
        dropped = sum(batch.size for batch in part.queue)
        part.queue.clear()
        self._release(part, dropped)
        part.wake.set()
        # A broker loop idle for lack of ready partitions fetches this one now.
        self._space.set()
        self._space = anyio.Event()

    def _release(self, part: _Partition, size: int) -> None:
        """``size`` bytes of ``part`` left the buffer: wake fetching if it has room again."""
        before = part.buffered
        part.buffered -= size
        limit = self._config.partition_buffer_bytes
        if before >= limit > part.buffered:
            self._space.set()
            self._space = anyio.Event()

    def _consumed(self, part: _Partition, batch: FetchedBatch) -> None:
        self._release(part, batch.size)
        if self._on_first_batch is not None:
            callback, self._on_first_batch = self._on_first_batch, None
            callback()

    # ------------------------------------------------------------------ loops

    async def run(self) -> None:
        """Run the fetch loops until cancelled (a task of the generation)."""
        if not self._parts:
            await anyio.sleep_forever()
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                while True:
                    await self._assign_leaders()
                    event = self._reroute
                    await event.wait()
                    self._reroute = anyio.Event()
        finally:
            self._closed = True
            for part in self._parts.values():
                part.wake.set()

    async def _assign_leaders(self) -> None:
        backoff = Backoff(self._cluster.retry_backoff)
        while True:
            missing = [p for p in self._parts.values() if p.leader < 0]
            if not missing:
                break
            try:
                await self._cluster.refresh_metadata({p.tp.topic for p in missing})
            except (KafkaConnectionError, BrokerError, ProtocolError) as exc:
                if not self._metadata_failing:
                    self._metadata_failing = True
                    log.warning("group %s: metadata refresh failed: %s", self._config.group_id, exc)
            else:
                if self._metadata_failing:
                    self._metadata_failing = False
                    log.info("group %s: metadata refresh works again", self._config.group_id)
            for part in missing:
                part.leader = self._cluster.leader_for(part.tp)
            if all(p.leader >= 0 for p in self._parts.values()):
                break
            await backoff.sleep()
        assert self._tg is not None
        for node in {p.leader for p in self._parts.values()} - self._loops:
            self._loops.add(node)
            self._tg.start_soon(self._broker_loop, node, name=f"gengroup-fetch-{node}")

    def _stale(self, part: _Partition) -> None:
        part.leader = -1
        self._reroute.set()

    async def _broker_loop(self, node: int) -> None:
        cfg = self._config
        try:
            while True:
                mine = [p for p in self._parts.values() if p.leader == node]
                if not mine:
                    return
                ready = {
                    p.tp: p.position
                    for p in mine
                    if p.error is None and p.buffered < cfg.partition_buffer_bytes
                }
                if not ready:
                    space = self._space
                    await space.wait()
                    continue
                try:
                    result = await fetch_once(
                        self._cluster,
                        node,
                        ready,
                        max_wait=cfg.fetch_max_wait,
                        min_bytes=cfg.fetch_min_bytes,
                        max_bytes=cfg.fetch_max_bytes,
                        partition_max_bytes=cfg.partition_buffer_bytes,
                        isolation_level=cfg.isolation_level,
                    )
                except Exception as exc:
                    if _request_action(exc) != "refresh_metadata":
                        raise
                    self._metrics.fetch_errors += 1
                    if node not in self._failing:
                        self._failing.add(node)
                        log.info(
                            "group %s: fetch from broker %d failed: %s", cfg.group_id, node, exc
                        )
                    backoff = self._backoffs.setdefault(node, Backoff(self._cluster.retry_backoff))
                    await backoff.sleep()
                    # Leave the loop set before asking for a re-route, so
                    # the manager starts a fresh loop for this broker if it
                    # still leads these partitions.
                    self._loops.discard(node)
                    for p in mine:
                        self._stale(p)
                    return
                self._metrics.fetches += 1
                if node in self._failing:
                    self._failing.discard(node)
                    log.info("group %s: fetching from broker %d again", cfg.group_id, node)
                self._backoffs.pop(node, None)
                for tp, pf in result.items():
                    part = self._parts.get(tp)
                    if part is None or part.position != ready.get(tp):
                        continue
                    await self._deliver(part, pf)
        finally:
            self._loops.discard(node)

    async def _deliver(self, part: _Partition, pf: PartitionFetch) -> None:
        error = pf.error
        if error is not None:
            action = error.action if isinstance(error, BrokerError) else "fail"
            if action == "refresh_metadata":
                self._stale(part)
            elif isinstance(error, OffsetOutOfRange) and self._config.start_offset != "error":
                new = await self._reset_offset(part.tp)
                log.warning(
                    "group %s: %s offset %d out of range, reset to %d (start_offset=%s)",
                    self._config.group_id,
                    part.tp,
                    part.position,
                    new,
                    self._config.start_offset,
                )
                part.position = new
            elif action == "retry":
                log.info(
                    "group %s: %s fetch error %s, retrying", self._config.group_id, part.tp, error
                )
            else:
                part.error = error
                part.wake.set()
            return
        part.high_watermark = max(part.high_watermark, pf.high_watermark)
        # parse_fetch_response already dropped control and aborted batches
        # and the records below the requested offset.
        batches = pf.batches
        if len(batches) == 1:
            records = batches[0].records
        else:
            records = [r for b in batches for r in b.records]
        part.position = max(part.position, pf.next_offset)
        if not records:
            return
        # Charged at the size of the bytes received: decoded records take more
        # memory, but in proportion, and counting them would cost a pass over
        # every record on the hot path.
        size = pf.size
        part.queue.append(
            FetchedBatch(
                part.tp.topic,
                part.tp.partition,
                records,
                part.position,
                pf.high_watermark,
                size,
                (self._config.key_deserializer, self._config.value_deserializer),
            )
        )
        part.buffered += size
        self._metrics.records += len(records)
        self._metrics.bytes += size
        part.wake.set()


class _PartitionIterator:
    """Async iterator of one partition's batches; ends when the generation ends.

    Each step is a cancellation point, and the generation's state is checked
    when a batch is about to be handed out: once the generation is ending, a
    worker in it is cancelled there, and one shielded from that cancellation
    sees the iteration stop. Batches still buffered are never handed out.
    """

    def __init__(
        self, prefetcher: Prefetcher, part: _Partition, ending: Callable[[], bool]
    ) -> None:
        self._prefetcher = prefetcher
        self._part = part
        self._ending = ending

    def __aiter__(self) -> _PartitionIterator:
        return self

    async def __anext__(self) -> FetchedBatch:
        part = self._part
        await anyio.lowlevel.checkpoint_if_cancelled()
        while not part.queue:
            if part.error is not None:
                raise part.error
            if self._prefetcher._closed or self._ending():
                raise StopAsyncIteration
            part.wake = anyio.Event()
            await part.wake.wait()
        if self._ending():
            raise StopAsyncIteration
        batch = part.queue.popleft()
        self._prefetcher._consumed(part, batch)
        return batch
