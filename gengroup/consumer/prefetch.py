"""The generation's prefetcher: fetch loops per broker, bounded per-partition buffers.

Theory of operation:

A :class:`Prefetcher` runs as one task of the generation (under a
cooperative protocol, of the run loop's ownership registry, until the next
generation forms: :meth:`Prefetcher.close` then stops it). Inside it, one loop per
leader broker sends Fetch requests, each covering the assigned partitions that
broker leads *whose buffer has room and which are not already being fetched* --
never a request per partition by design. Up to two requests per broker are in
flight at a time (over disjoint partitions: a partition's next position is only
known from the previous answer), and the answer to one is handed out while the
next is on its way, so the socket stays busy while workers process. The task
that sent a request sends the next one due as its answer is handed out (a
task and a pass through the loop less per round trip); the loop starts a task
for a request that falls due otherwise (room freed by a worker, a partition
added).

Memory is bounded per partition, and so for the member
(:mod:`gengroup.consumer.fetch_budget`). Each partition has a *share*:
``partition_buffer_bytes``, or its equal part of the member's budget
(``fetch_buffer_bytes``, 32 MiB by default, in effect once the partitions' own
bounds add up to more) if that is less. Counted against it: its buffered
batches, and the batch its worker was handed last, until the worker's next
step asks for another. A partition goes into a request when nothing is in
flight for it and it holds nothing or has room for one more step (half its
share, or its largest recent batch if larger, because Kafka answers a
partition whose next batch exceeds its limit with nothing unless it comes
first in the answer: the order rotates). So a slow worker holds its share
and applies backpressure to its own partition only, a partition whose
worker waits with nothing buffered can always be fetched, and the member
holds at most the budget plus one batch per partition (Kafka sends the first
partition of an answer one batch whole even when it is larger than asked,
so that a batch larger than the limits can be consumed at all), however many
partitions it has. A request's response-wide ``max_bytes`` is at most half
the budget (so that two requests fit) and the room left in it: the budget
less the bytes buffered and what the requests in flight may bring (1 byte at
least for a partition holding nothing, which comes first in a full request;
under an incremental fetch session the broker keeps its session's order
instead, moving each partition that brought records to the end of it, so a
partition that brought nothing lately is ahead of those that did).
The batches in workers' hands count against their partitions' shares, not
against that room: workers holding batches larger than their shares would
otherwise leave no room, and each request would bring a single batch.
While one request is in flight, another goes out only once it is
worth a channel (a quarter of the budget, or of what all partitions ask if
that is less): a trickle of room freed by one consumed batch does not become
a trickle of one-partition round trips; and while another request brings
data, only partitions known to have data go (a long poll would take the
channel from the next request with data; they wait for that answer).
Requests in flight together use separate connections, as the broker answers
one connection in order and a long poll must not hold up an answer with data.
Nor may the long poll of an ended prefetcher, which stays in flight until the
broker answers it: a new prefetcher fetches on connections with no answer
still to come (four per broker to choose from, two in use).

Each of those connections carries its own incremental fetch session (KIP-227,
:mod:`gengroup.consumer.fetch_sessions`), so a request names only the
partitions whose position or ask changed since the connection's previous one
(a request goes on the free connection whose session holds most of its
partitions); the broker answers only for partitions with something new (one
missing from the answer got nothing). Positions are always the prefetcher's:
a session the broker loses or rejects only makes the next request full.

Records are not decoded by the fetch loop: the answer's batch headers are
checked there (lengths, magic, CRC-32C, codec, count -- damage is the
partition's error, raised from the worker's ``async for`` after the sound
batches before it), and
each :class:`FetchedBatch` keeps the raw batches until the worker first reads
``batch.records`` (or iterates it, or asks its length, or ``to_arrow()``).
Decoding then happens in the worker's task. A record batch whose records do
not add up under a correct CRC ends the FetchedBatch there (its sound records
are handed out, its ``next_offset`` drops to the damaged offset) and is told
to the prefetcher through the partition's :class:`Damage`: the partition stops
at that offset, its buffered batches dropped (and batches already handed out
past it end there too), and the worker's next step raises the
:class:`~gengroup.CorruptRecordError`, naming the partition and the offset,
as does every step until a seek; the generation is told (a span goes on from
the damaged offset). A partition's part of
an answer is one FetchedBatch, or, with ``max_batch_records``, several cut
between record batches (``split_batches``), so that a backlog is handed out
in steps and the member's other workers run between them. An answer that
moves a partition's position with no record to hand out (only transaction
markers, aborted or compacted records) is noted as a range without records
(:mod:`~gengroup.consumer.recordless`) and the generation told
(``on_gap``): a mark that reaches it passes it, and so does the start mark
of a partition started from its committed offset, once its worker asked
for a batch (told ``on_gap`` then too).

Each partition starts at the leader the cluster's metadata cache names (a
partition the cache lacks is looked up first), so a new generation's first
Fetch waits for no Metadata round trip. Fetch names topics by id (v13+,
:mod:`gengroup.io.fetch`): the id the metadata cache holds, until a partition
of the topic first gets records or an answer without error; from then on the
id of that request, for the prefetcher's life. So a topic deleted and created
again under the same name once the prefetcher read it is answered
UNKNOWN_TOPIC_ID, never read at the old topic's positions: once the refresh
that answer asks for shows another id, the generation is told
(``on_recreated``) and ends, whatever else watches the topics. A generation
that formed on metadata not yet showing the new topic (its positions are the
new topic's, as no offsets were read from the old one) takes the new id from
the refresh its first UNKNOWN_TOPIC_ID asks for. A leader moving is followed
at once when the broker refusing a Fetch names the new one (a leader hint,
KIP-951, Fetch v16: NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH with a newer
epoch than the cache's; each Fetch carries the cached leader epoch, KIP-320,
so a former leader refuses it instead of serving it as a follower): the
partition goes to that leader's loop with no backoff, while a Metadata refresh
is still asked for beside it. Only the first retry after such a move goes at
once (until the partition's next good answer), so that two brokers naming each
other cannot make a loop without backoff. Errors are handled where they are
understood, as :mod:`gengroup.consumer.fetch_errors` says from the client's
error table (:mod:`gengroup._error_table`): stale leadership (action
``refresh_metadata``, which a leader that moved since it was cached answers)
refreshes metadata (no more often than the cluster's retry backoff) and moves
the partition to its new leader's loop, as does a Fetch that fails as a whole
with such an error, a broken connection or an undecodable answer; a transient
error (``retry``, and UNKNOWN_SERVER_ERROR) is fetched again. Each waits a
backoff of :mod:`gengroup.io.retry` first: the broker's for a request that
failed as a whole, the partition's own for a partition's error (its broker's
other partitions are fetched meanwhile); every one is counted in
``fetch_errors`` and logged once per change of state. OFFSET_OUT_OF_RANGE
resets the position per ``start_offset`` or, with ``"error"``, is delivered to
the partition's worker, like any other non-retriable error, and like
CORRUPT_MESSAGE (the broker's log is damaged there), which the worker gets as
a :class:`~gengroup.CorruptRecordError` naming the partition and the offset,
as the Java consumer does: the worker's ``async for`` raises it after the
batches buffered before it, and at every step after until a seek; the worker
exits, and the generation ends with that exception. Nothing is swallowed.

Workers read through :meth:`Prefetcher.iterate`, an async iterator (not an async
generator, so there is nothing to finalise). Every step is a cancellation
point, and it hands out no batch once the generation is ending (checked when
the batch is taken from the buffer, not only when the buffer is empty): a
worker of the generation is cancelled there; one shielded from it sees the
iteration stop. :meth:`Prefetcher.seek` drops the partition's buffered batches,
and an answer to a request made before the seek is dropped when it arrives.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Final, NamedTuple
from uuid import UUID

import anyio
import anyio.abc
import anyio.lowlevel

from .._config import GroupConfig
from .._errors import BrokerError, KafkaConnectionError, ProtocolError
from .._types import TopicPartition
from ..io.cluster import Cluster
from ..io.fetch import cached_epochs, fetch_once
from ..io.retry import Backoff, backoff_delay
from ..protocol.fetch import PartitionFetch, split_batches
from .fetch_budget import FetchBudget
from .fetch_errors import FetchErrors, corrupt_message, id_refused, partition_action, request_action
from .fetch_sessions import FetchSessions
from .fetched import Damage, FetchedBatch
from .metrics import GroupMetrics
from .recordless import Gaps

__all__ = ["Prefetcher"]

log = logging.getLogger("gengroup")


class _Job(NamedTuple):
    """One Fetch a broker loop decided on: its connection, the positions it
    asks from, the bytes it asks per partition and in all, and whether it is
    a long poll (no partition known to have data)."""

    channel: str
    ready: dict[TopicPartition, int]
    asks: dict[TopicPartition, int]
    limit: int
    polling: bool


#: Fetch requests in flight per broker at most (over disjoint partitions).
_MAX_IN_FLIGHT: Final = 2
#: The broker connections fetch loops send their requests on. A loop uses
#: ``_MAX_IN_FLIGHT`` of them, one per request in flight, those with no answer
#: still to come first: an ended prefetcher's Fetch stays in flight on its
#: connection until the broker answers it (a long poll over partitions without
#: new data: ``fetch_max_wait``), and the broker answers a connection in order,
#: so the next generation's first Fetch there would wait for it.
FETCH_CHANNELS: Final = tuple(f"fetch-{i}" if i else "fetch" for i in range(2 * _MAX_IN_FLIGHT))
#: The fetch connections a member uses first (and opens while it joins).
FIRST_FETCH_CHANNELS: Final = FETCH_CHANNELS[:_MAX_IN_FLIGHT]


@dataclass(eq=False)
class _Partition:
    tp: TopicPartition
    position: int
    leader: int = -1
    queue: deque[FetchedBatch] = field(default_factory=deque)
    buffered: int = 0
    #: The bytes of the batch last handed to the worker, until its next step.
    held: int = 0
    error: BaseException | None = None
    wake: anyio.Event = field(default_factory=anyio.Event)
    #: The high watermark in the newest fetch answer for the partition (-1: none yet).
    high_watermark: int = -1
    #: Where the records readable under the isolation level end, as of the
    #: newest answer: the high watermark, or the last stable offset under
    #: read_committed (-1: none yet).
    end: int = -1
    #: A Fetch naming the partition is in flight.
    in_flight: bool = False
    #: The largest batch of the last answer, in bytes (a Fetch asks for at least that).
    largest: int = 0
    #: Where the records of its batches turned out damaged (the prefetcher's own, until a seek).
    damage: Damage = field(default_factory=Damage)
    #: When it may be fetched again, after an error (event-loop time; 0: now).
    not_before: float = 0.0
    #: Where the batches handed out so far end (the fetch's start before the first).
    handed: int = -1
    #: The ranges the position moved past with no record to hand out.
    gaps: Gaps = field(default_factory=Gaps)
    #: A leader hint moved it since its last good answer (the next move backs off).
    moved: bool = False


def _lagging(part: _Partition) -> bool:
    """Whether ``part`` is known to have readable records past its position
    (or where they end is not known yet)."""
    return part.end < 0 or part.position < part.end


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
        retired: dict[tuple[int, str], int] | None = None,
    ) -> None:
        """``retired``: the fetch sessions ended prefetchers left, by broker and
        connection; this one closes those it takes and leaves its own there."""
        self._cluster = cluster
        self._metrics = GroupMetrics() if metrics is None else metrics
        self._config = config
        # Each partition starts at its cached leader (a new generation's first
        # Fetch waits for no Metadata round trip); one not cached is looked up.
        self._parts = {
            tp: _Partition(tp, off, cluster.leader_for(tp)) for tp, off in positions.items()
        }
        for part in self._parts.values():
            part.damage = Damage(partial(self._damaged, part))
            part.handed = part.position
        #: The shares, asks and byte counts of the partitions (consumer/fetch_budget.py).
        self._budget = FetchBudget(config, len(self._parts))
        self._reset_offset = reset_offset
        #: Told of each OFFSET_OUT_OF_RANGE reset (partition, new position): the generation.
        self.on_reset: Callable[[TopicPartition, int], None] = lambda tp, offset: None
        #: Told of records a worker found damaged (partition, offset, error): the generation.
        self.on_damage: Callable[[TopicPartition, int, ProtocolError], None] = lambda *_: None
        #: Told of a partition's offsets moved past with no record to hand out: the generation.
        self.on_gap: Callable[[TopicPartition], None] = lambda tp: None
        #: Told of a topic created again since its kept id was read: the generation.
        self.on_recreated: Callable[[str], None] = lambda topic: None
        self._on_first_batch = on_first_batch
        self._loops: set[int] = set()
        self._space = anyio.Event()
        self._reroute = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False
        #: The failures of requests and partitions: backoffs, counts, logs.
        self._errors = FetchErrors(config.group_id, cluster.retry_backoff, self._metrics)
        self._metadata_failing = False
        #: When metadata was last refreshed for a leader (event-loop time).
        self._refreshed = -float("inf")
        #: The fetch session of each (broker, connection), kept across the
        #: broker loop's restarts; each connection sends one request at a time.
        self._sessions = FetchSessions(
            config.group_id, config.fetch_sessions, self._metrics, retired
        )
        #: The id each topic's positions belong to: that of its first good answer.
        self._topic_ids: dict[str, UUID] = {}
        #: Topics whose leaders a hint moved: their metadata is to be refreshed.
        self._hinted: set[str] = set()
        #: Topics whose kept id a Fetch refused: is it another id now? (the next refresh says)
        self._id_refused: set[str] = set()

    # ------------------------------------------------------------------ workers' side

    def iterate(self, tp: TopicPartition, ending: Callable[[], bool]) -> _PartitionIterator:
        """An async iterator over ``tp``'s batches; it hands out nothing once ``ending()``."""
        return _PartitionIterator(self, self._parts[tp], ending)

    def high_watermark(self, tp: TopicPartition) -> int:
        """``tp``'s high watermark in the newest fetch answer (-1: none yet)."""
        return self._parts[tp].high_watermark

    def position(self, tp: TopicPartition) -> int:
        """Where ``tp``'s next batch for the worker starts: past the batches
        handed out, and past the offsets without records after them."""
        part = self._parts[tp]
        return part.gaps.past(part.handed) if part.queue else part.position

    def past_gaps(self, tp: TopicPartition, mark: int) -> int:
        """``mark`` moved past ``tp``'s offsets without records that it reaches
        (:mod:`~gengroup.consumer.recordless`); the ranges below it are forgotten."""
        part = self._parts.get(tp)
        if part is None:
            return mark
        mark = part.gaps.past(mark)
        part.gaps.forget_below(mark)
        return mark

    def start_from(self, committed: Mapping[TopicPartition, int]) -> None:
        """The partitions whose position is their ``committed`` offset: a worker
        that asks for a batch there passes the range without records that
        starts there (:mod:`~gengroup.consumer.recordless`, start marks)."""
        for tp, offset in committed.items():
            part = self._parts.get(tp)
            if part is not None and part.position == part.handed == offset:
                part.gaps.start = offset

    def start_passed(self, tp: TopicPartition) -> int:
        """Where ``tp``'s start mark reaches (-1: nowhere yet; see :meth:`start_from`)."""
        part = self._parts.get(tp)
        return -1 if part is None else part.gaps.from_start()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Fetch ``tp`` from ``offset`` next: its buffered batches are dropped.

        A fetch already in flight for the old position is discarded when it
        arrives (answers are kept only for the position they were asked for).
        """
        part = self._parts[tp]
        self._stop(part, offset, None)
        part.damage = Damage(partial(self._damaged, part))

    def damaged(self, tp: TopicPartition, offset: int, error: ProtocolError) -> None:
        """Stop ``tp`` at ``offset`` with ``error``: a batch an earlier
        generation's prefetcher handed out found its records damaged there.

        The iterator raises ``error`` at its next step and every one after,
        until a seek; batches of ``tp`` handed out past ``offset`` end there.
        """
        part = self._parts.get(tp)
        if part is not None:
            if part.damage.error is None or offset < part.damage.offset:
                part.damage.offset, part.damage.error = offset, error
            self._stop(part, offset, error)

    def _damaged(self, part: _Partition, damage: Damage) -> None:
        """A worker found the records of ``part`` at ``damage.offset`` damaged:
        the partition stops there (see :meth:`damaged`); the generation is told."""
        if damage is not part.damage or damage.error is None:
            return  # found by a batch handed out before a seek
        log.warning(
            "group %s: %s: the records at offset %d cannot be decoded; "
            "the partition stops there until a seek: %s",
            self._config.group_id,
            part.tp,
            damage.offset,
            damage.error,
        )
        self._stop(part, damage.offset, damage.error)
        self.on_damage(part.tp, damage.offset, damage.error)

    def _stop(self, part: _Partition, offset: int, error: BaseException | None) -> None:
        """``part`` goes on from ``offset`` (an answer to a request made before
        is dropped when it arrives), its buffered batches dropped; ``error``:
        what its iterator raises from its next step on (None: it fetches)."""
        part.position = part.handed = offset
        part.error = error
        part.gaps.clear()
        self._budget.drop(part, sum(batch.size for batch in part.queue))
        part.queue.clear()
        part.wake.set()
        # A broker loop idle for lack of ready partitions fetches this one now.
        self._changed()

    def _changed(self) -> None:
        """Wake the broker loops: a buffer has room, or a request ended."""
        self._space.set()
        self._space = anyio.Event()

    def _consumed(self, part: _Partition, batch: FetchedBatch) -> None:
        part.handed = batch.next_offset
        part.gaps.start = -1  # the worker marks what it processes now
        # Held until the worker's next step (see _release), against the
        # partition's share only: the member's room has the bytes back now.
        if self._budget.hand_out(part, batch.size):
            self._changed()  # the member has room worth a request
        if self._on_first_batch is not None:
            callback, self._on_first_batch = self._on_first_batch, None
            callback()

    def _release(self, part: _Partition) -> None:
        """``part``'s worker asks for its next batch: the one it held no longer counts."""
        if self._budget.release(part):
            self._changed()  # the partition is ready again

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
            self.close()
            self._sessions.retire()

    def wake(self) -> None:
        """Make every waiting iterator check again whether it hands out nothing more."""
        for part in self._parts.values():
            part.wake.set()

    def close(self) -> None:
        """Hand out nothing more, buffered or not: each iterator stops at its next step.

        The buffered batches are dropped, each partition's position kept
        where its next batch would have started: a task that outlives the
        generation (a span task, under a cooperative protocol) keeps the
        generation, and so this prefetcher, alive, and must not keep its
        buffers too.
        """
        self._closed = True
        for part in self._parts.values():
            if part.queue:
                part.position = part.gaps.past(part.handed)
                self._budget.drop(part, sum(batch.size for batch in part.queue))
                part.queue.clear()
        self.wake()

    def _ids_for(self, partitions: Mapping[TopicPartition, int]) -> dict[str, UUID]:
        """The id a Fetch of ``partitions`` names each topic by: the one its
        positions belong to, or (none yet) the metadata cache's."""
        ids: dict[str, UUID] = {}
        cached = self._cluster.topics
        for tp in partitions:
            topic = tp.topic
            if topic not in ids:
                found = self._topic_ids.get(topic)
                if found is None and (info := cached.get(topic)) is not None:
                    found = info.topic_id
                if found is not None:
                    ids[topic] = found
        return ids

    async def _refresh(self, topics: set[str]) -> None:
        """Refresh the metadata of ``topics``; a failure is logged once, until one works."""
        try:
            await self._cluster.refresh_metadata(topics)
        except (KafkaConnectionError, BrokerError, ProtocolError) as exc:
            if not self._metadata_failing:
                self._metadata_failing = True
                log.warning("group %s: metadata refresh failed: %s", self._config.group_id, exc)
        else:
            if self._metadata_failing:
                self._metadata_failing = False
                log.info("group %s: metadata refresh works again", self._config.group_id)

    async def _assign_leaders(self) -> None:
        """Look up the leaders of the partitions without one (metadata is
        refreshed no more often than the cluster's retry backoff: partitions
        answered with stale leadership, one after the other, share a refresh),
        and start the loops of brokers that lead partitions now."""
        base = self._cluster.retry_backoff
        backoff = Backoff(base)
        while any(p.leader < 0 for p in self._parts.values()):
            wait = self._refreshed + backoff_delay(0, base) - anyio.current_time()
            if wait > 0:
                await anyio.sleep(wait)
            missing = [p for p in self._parts.values() if p.leader < 0]
            self._refreshed = anyio.current_time()
            await self._refresh({p.tp.topic for p in missing})
            self._find_recreated()
            for part in missing:
                part.leader = self._cluster.leader_for(part.tp)
            if all(p.leader >= 0 for p in self._parts.values()):
                break
            await backoff.sleep()
        assert self._tg is not None
        for node in {p.leader for p in self._parts.values()} - self._loops:
            self._loops.add(node)
            self._tg.start_soon(self._broker_loop, node, name=f"gengroup-fetch-{node}")
        if self._hinted:  # the refresh a leader hint still asks for, beside the move
            self._tg.start_soon(self._refresh, set(self._hinted))
            self._hinted.clear()
        self._changed()  # running loops pick up the partitions they lead now

    def _find_recreated(self) -> None:
        """Tell the generation of each topic whose kept id a Fetch refused and whose
        metadata shows another id now: created again, only a new generation reads it."""
        for topic in self._id_refused:
            info = self._cluster.topics.get(topic)
            if info is not None and info.topic_id not in (None, self._topic_ids[topic]):
                self.on_recreated(topic)
        self._id_refused.clear()

    def _follow_hint(self, part: _Partition, pf: PartitionFetch) -> bool:
        """Move ``part`` to the leader its refusal names, if newer than the cache's
        (KIP-951): at once, unless a hint moved it since its last good answer.
        Its metadata is refreshed beside it. Whether it moved."""
        # The result carries the hint and the response's endpoints both.
        if not self._cluster.take_leader_hint(part.tp, pf, pf):
            return False
        part.leader = self._cluster.leader_for(part.tp)
        if not part.moved:
            part.moved = True
            part.not_before = 0.0
        self._hinted.add(part.tp.topic)
        self._reroute.set()
        return True

    def _stale(self, part: _Partition) -> None:
        part.leader = -1
        self._reroute.set()

    def _ready(self, part: _Partition, node: int, now: float) -> bool:
        """Whether ``part`` goes into the next Fetch to ``node`` at ``now``."""
        return (
            part.leader == node
            and not part.in_flight
            and part.error is None
            and part.not_before <= now
            and self._budget.has_room(part)
        )

    async def _broker_loop(self, node: int) -> None:
        """Send Fetch requests to ``node`` for its ready partitions, two at most at a time.

        Ends when the broker leads none of the partitions and nothing is in
        flight; it leaves the loop set at that moment, so the manager starts a
        fresh loop should the broker lead a partition again.
        """
        # One connection per request that may be in flight at the same time:
        # the broker answers a connection's requests in order, and a long poll
        # for partitions without new data must not hold up an answer with data
        # -- nor one an ended prefetcher left in flight (see FETCH_CHANNELS).
        ordered = sorted(FETCH_CHANNELS, key=lambda c: self._cluster.awaiting(node, c) > 0)
        free = ordered[:_MAX_IN_FLIGHT]
        self._sessions.take_over(node, free, ordered[_MAX_IN_FLIGHT:])
        turn = 0
        budget = self._budget
        # Requests in flight that asked for data known to be there (the others
        # are long polls).
        productive = 0

        def plan() -> _Job | None:
            """The next request to send, its channel taken and its partitions
            marked in flight; None if none is due now."""
            nonlocal turn, productive
            if not free:
                return None
            # The first partition of a request is the one Kafka lets exceed
            # its limit: a different one each time.
            order = list(self._parts.values())
            turn += 1
            order = order[turn % len(order) :] + order[: turn % len(order)]
            now = anyio.current_time()
            # Partitions holding nothing first: what the broker puts in the
            # answer first is theirs, the ones whose workers are waiting. (A
            # full request; an incremental fetch session answers in the
            # broker's order, which puts the partitions that brought records
            # last behind the others.)
            parts = sorted(
                (p for p in order if self._ready(p, node, now)),
                key=lambda p: budget.holds(p) > 0,  # (stable: the rotation stays)
            )
            lagging = [p for p in parts if _lagging(p)]
            asks = budget.asks(lagging)
            # With data on its way in the other request, partitions without
            # data wait for it to end (a long poll would take the channel
            # from the next productive request); otherwise they wait in a
            # long poll, all of them (no partition waits for its turn to be
            # polled).
            calm = not productive
            if calm:
                asks.update({p.tp: budget.want(p) for p in parts if not _lagging(p)})
            polling = not lagging
            # A partition holding nothing is fetched whatever the others hold.
            spare = any(not budget.holds(p) for p in parts if p.tp in asks)
            limit = budget.request_limit(asks, spare, calm, polling) if asks else 0
            if not limit:
                return None
            ready = {tp: self._parts[tp].position for tp in asks}
            for tp in asks:
                self._parts[tp].in_flight = True
            budget.reserved += limit
            productive += not polling
            channel = self._channel(node, free, asks)
            free.remove(channel)
            return _Job(channel, ready, asks, limit, polling)

        def release(job: _Job) -> None:
            nonlocal productive
            free.append(job.channel)
            productive -= not job.polling
            budget.reserved -= job.limit
            for tp in job.ready:
                self._parts[tp].in_flight = False

        async def fetch(job: _Job | None) -> None:
            # As its request ends, a task sends the next one due itself, and
            # starts a task for a second one due at that moment, as the loop
            # would: a task and a pass through the loop less per Fetch. The
            # loop is woken when no request is due (it may have to end), or
            # when other brokers' loops share the budget.
            while job is not None:
                try:
                    await self._fetch(node, job.ready, job.asks, job.limit, job.channel)
                except BaseException:
                    release(job)
                    self._changed()
                    raise
                release(job)
                job = plan()
                if job is not None and free:
                    second = plan()
                    if second is not None:
                        tg.start_soon(fetch, second)
                if job is None or len(self._loops) > 1:
                    self._changed()

        try:
            async with anyio.create_task_group() as tg:
                while True:
                    idle = len(free) == _MAX_IN_FLIGHT
                    if idle and not any(p.leader == node for p in self._parts.values()):
                        self._loops.discard(node)
                        return
                    job = plan()
                    if job is not None:
                        tg.start_soon(fetch, job)
                        continue
                    space = self._space
                    # Until a partition waiting out its backoff after an error is due.
                    now = anyio.current_time()
                    due = min(
                        (
                            p.not_before
                            for p in self._parts.values()
                            if p.leader == node and p.not_before > now
                        ),
                        default=float("inf"),
                    )
                    with anyio.move_on_after(due - now):
                        await space.wait()
        except BaseException:
            self._loops.discard(node)
            raise

    def _channel(self, node: int, free: list[str], asks: Mapping[TopicPartition, int]) -> str:
        """The free connection whose fetch session holds most of ``asks`` (the
        newest freed one if none does better): a partition moving between the
        two sessions is forgotten by one and named again to the other."""
        if len(free) == 1:
            return free[0]
        return max(reversed(free), key=lambda channel: self._sessions.held(node, channel, asks))

    async def _fetch(
        self,
        node: int,
        ready: dict[TopicPartition, int],
        asks: dict[TopicPartition, int],
        limit: int,
        channel: str,
    ) -> None:
        """One Fetch to ``node`` for ``ready`` on ``channel``, asking ``asks`` per
        partition and ``limit`` in all; the answer goes to the buffers."""
        cfg = self._config
        session = self._sessions.session(node, channel)
        resets = session.resets
        ids = self._ids_for(ready)
        try:
            result = await fetch_once(
                self._cluster,
                node,
                ready,
                max_wait=cfg.fetch_max_wait,
                min_bytes=cfg.fetch_min_bytes,
                max_bytes=limit,
                partition_max_bytes=asks,
                isolation_level=cfg.isolation_level,
                decode=False,
                channel=channel,
                session=session,
                topic_ids=ids,
                leader_epochs=cached_epochs(self._cluster, ready),
            )
        except Exception as exc:
            # A top-level error code already dropped the connection's fetch
            # session (the next request is full).
            self._sessions.counted(node, session, resets)
            action = request_action(exc)
            if action not in ("refresh_metadata", "retry"):
                raise
            await self._errors.broker_failed(node, exc).sleep()
            if action == "refresh_metadata":
                # Every partition of the broker looks its leader up again (the
                # loop picks them up if the broker still leads them).
                for p in self._parts.values():
                    if p.leader == node:
                        self._stale(p)
            return
        self._sessions.counted(node, session, resets)
        self._metrics.fetches += 1
        self._errors.broker_ok(node)
        # What the answer left of its limit: a partition that got nothing
        # although it has data was held back by its own limit only if its
        # ask would have fitted in that.
        left = limit - sum(pf.size for pf in result.values())
        for tp, pf in result.items():
            if pf.error is None and tp.topic in ids:  # the positions are that topic's now
                self._topic_ids.setdefault(tp.topic, ids[tp.topic])
            part = self._parts.get(tp)
            if part is None or part.position != ready.get(tp):
                continue
            await self._deliver(node, part, pf, left >= asks[tp])
        if len(result) < len(ready) and session.last_answer_used:
            # An incremental answer leaves out the partitions with nothing new.
            for tp, position in ready.items():
                part = self._parts[tp]
                if tp not in result and part.position == position:
                    self._errors.partition_ok(tp)
                    part.moved = False
                    self._grow_if_held_back(part, part.position, left >= asks[tp])
        self._errors.flush(node)

    def _grow_if_held_back(self, part: _Partition, next_offset: int, room: bool) -> None:
        if room and next_offset <= part.position < part.end:
            # Data is there but not one batch came, though the answer had room
            # for the partition's ask: the next batch is larger than what was
            # asked for (Kafka lets only the first partition of an answer
            # exceed its limit), so ask for more next time.
            part.largest = self._budget.grown(part)

    async def _deliver(
        self, node: int, part: _Partition, pf: PartitionFetch, room: bool = True
    ) -> None:
        """Buffer ``part``'s share of an answer from ``node`` (or act on its error)."""
        if self._closed:  # an answer read just before the close: nothing is handed out
            return
        error = pf.error
        if error is not None:
            action = partition_action(error, self._config.start_offset)
            if action in ("refresh_metadata", "retry"):
                # Fetched again once its backoff has passed (stale leadership:
                # once its leader was looked up again, too, or at once on the
                # leader a hint names).
                delay = self._errors.partition_failed(node, part.tp, error)
                part.not_before = anyio.current_time() + delay
                if id_refused(error) and part.tp.topic in self._topic_ids:
                    self._id_refused.add(part.tp.topic)
                if action == "refresh_metadata" and not self._follow_hint(part, pf):
                    self._stale(part)
                return
            self._errors.partition_stopped(part.tp)
            if action == "reset":
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
                if not part.queue:  # the next batch handed out starts there
                    part.handed = new
                part.gaps.clear()
                self.on_reset(part.tp, new)
            else:
                # Its worker gets the error once the batches before it are
                # handed out, and at every step after, until a seek.
                part.error = corrupt_message(part.tp, part.position, error)
                if part.error is not error:
                    log.warning(
                        "group %s: %s: the broker found its log damaged at offset %d; "
                        "the partition stops there until a seek: %s",
                        self._config.group_id,
                        part.tp,
                        part.position,
                        error,
                    )
                part.wake.set()
            return
        self._errors.partition_ok(part.tp)
        part.moved = False
        part.high_watermark = max(part.high_watermark, pf.high_watermark)
        stable = pf.last_stable_offset
        committed = self._config.isolation_level == "read_committed"
        part.end = stable if committed and stable >= 0 else pf.high_watermark
        # parse_fetch_response already dropped control and aborted batches
        # and the records below the requested offset; the raw batches are
        # decoded by the worker.
        self._grow_if_held_back(part, pf.next_offset, room)
        before, part.position = part.position, max(part.position, pf.next_offset)
        batches, raw = pf.batches, pf.raw
        if not batches and not raw:
            if part.position > before:
                # Only markers, aborted or removed records: a mark that
                # reaches them passes them (consumer/recordless.py).
                part.gaps.add(before, part.position)
                self.on_gap(part.tp)
            return
        records = [r for b in batches for r in b.records]
        count = len(records) + sum(b.count for b in raw)
        if raw:
            part.largest = max(b.end - b.start for b in raw)
        # Charged at the size of the bytes received: decoded records take more
        # memory, but in proportion, and counting them would cost a pass over
        # every record.
        size = pf.size
        deserializers = (self._config.key_deserializer, self._config.value_deserializer)
        most = self._config.max_batch_records
        for piece in split_batches(records, raw, part.position, size, most):
            part.queue.append(
                FetchedBatch(
                    part.tp.topic,
                    part.tp.partition,
                    piece.records,
                    piece.next_offset,
                    pf.high_watermark,
                    piece.size,
                    deserializers,
                    piece.raw,
                    part.damage,
                    self._config.max_decompressed_bytes,
                )
            )
        self._budget.add(part, size)
        self._metrics.records += count
        self._metrics.bytes += size
        part.wake.set()


class _PartitionIterator:
    """Async iterator of one partition's batches; ends when the generation ends.

    Each step is a checkpoint (a cancellation point that also lets the
    member's other tasks run: a worker working through a buffered backlog
    without awaiting anything else would otherwise hold the event loop,
    heartbeat and other workers included, until its buffer ran dry), and the
    generation's state is checked when a batch is about to be handed out:
    once the generation is ending, a worker in it is cancelled there, and one
    shielded from that cancellation sees the iteration stop. Batches still
    buffered are never handed out.
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
        self._prefetcher._release(part)  # done with the batch it was handed last
        if not part.gaps.asked:
            part.gaps.asked = True
            if part.gaps.from_start() >= 0:  # found before the worker asked
                self._prefetcher.on_gap(part.tp)
        if part.queue:
            await anyio.lowlevel.checkpoint()  # a batch buffered: let the others run first
        else:
            await anyio.lowlevel.checkpoint_if_cancelled()  # the wait below yields
        while not part.queue:
            if part.error is not None:
                raise part.error
            if self._prefetcher._closed or self._ending():
                raise StopAsyncIteration
            part.wake = anyio.Event()
            await part.wake.wait()
        if self._prefetcher._closed or self._ending():
            raise StopAsyncIteration
        batch = part.queue.popleft()
        self._prefetcher._consumed(part, batch)
        return batch
