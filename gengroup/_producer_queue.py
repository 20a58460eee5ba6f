"""The producer's bookkeeping: a pending record, a batch, a partition's queue, a waiter.

Plain state, no I/O: :mod:`gengroup.producer` moves records between these.
A partition's queue says whether its Produce is failing (:attr:`Queue.failing`,
the wave it belongs to); :mod:`gengroup._producer_failures` logs that.
"""

from __future__ import annotations

import datetime
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.lowlevel

from ._errors import ClosedInFlight, ConnectionClosed, RequestTimedOut, copy_error
from ._producer_records import RecordMetadata
from ._types import TopicPartition
from .protocol.records import Compression, Header, encode_batch

if TYPE_CHECKING:
    from ._producer_failures import Wave

__all__ = [
    "BATCH_OVERHEAD",
    "Batch",
    "Pending",
    "Queue",
    "Requests",
    "Waiter",
    "copy_error",
    "epoch_ms",
    "in_flight_records",
    "outcomes",
    "wait_for",
]

#: The bytes of a record batch's header, counted against ``max_batch_bytes``.
BATCH_OVERHEAD = 61

_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_ONE_MS: Final = datetime.timedelta(milliseconds=1)


def epoch_ms(when: object) -> int | None:
    """Milliseconds since the epoch of a datetime (a log-append time), else None."""
    return (when - _EPOCH) // _ONE_MS if isinstance(when, datetime.datetime) else None


class Waiter:
    """Wakes one waiting task once ``remaining`` records have their outcome.

    One per ``send``, ``send_many`` or ``flush`` call rather than an event per
    record: a call waiting for a million records costs one event.
    """

    __slots__ = ("event", "remaining")

    def __init__(self, remaining: int) -> None:
        self.remaining = remaining
        self.event = anyio.Event()

    def one_done(self) -> None:
        self.remaining -= 1
        if not self.remaining:
            self.event.set()


@dataclass(slots=True, eq=False)
class Pending:
    """One record from ``send`` until its outcome is known (``done``)."""

    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp: int
    size: int
    created: float  # when its send call started: the delivery timeout counts from it
    done: bool = False
    # A Produce request carried it and no answer said whether it was written
    # (the connection broke or timed out): a retry may write it twice.
    maybe_written: bool = False
    waiters: list[Waiter] | None = None
    result: RecordMetadata | None = None
    error: BaseException | None = None

    def settle(self, result: RecordMetadata | None, error: BaseException | None) -> bool:
        """Give it its outcome and wake its waiters: whether it had none yet."""
        if self.done:
            return False
        self.result, self.error, self.done = result, error, True
        for waiter in self.waiters or ():
            waiter.one_done()
        return True


async def wait_for(pendings: Sequence[Pending]) -> None:
    """Return once every one of ``pendings`` has its outcome."""
    open_ = [pending for pending in pendings if not pending.done]
    if not open_:
        await anyio.lowlevel.checkpoint()
        return
    waiter = Waiter(len(open_))
    for pending in open_:
        if pending.waiters is None:
            pending.waiters = [waiter]
        else:
            pending.waiters.append(waiter)
    await waiter.event.wait()


def outcomes(
    pendings: Sequence[Pending],
    unqueued: BaseException | None,
    count: int,
    *,
    return_exceptions: bool,
) -> list[Any]:
    """The outcomes of ``send_many``'s ``count`` records, ``pendings`` the ones
    queued (each has its outcome), ``unqueued`` the error of the others.

    Raises:
        Exception: without ``return_exceptions``, the first record's error.
    """
    results: list[RecordMetadata | BaseException] = []
    for pending in pendings:
        if pending.error is not None:
            if not return_exceptions:
                raise copy_error(pending.error) from pending.error
            results.append(pending.error)
        else:
            assert pending.result is not None
            results.append(pending.result)
    if unqueued is not None:
        if not return_exceptions:
            raise unqueued
        results.extend(copy_error(unqueued) for _ in range(count - len(pendings)))
    return results


def in_flight_records(queues: Iterable[Queue]) -> set[Pending]:
    """The records of the batches in flight (a Produce request carries them) of ``queues``."""
    return {p for q in queues if q.sending is not None for p in q.sending.records}


class Requests:
    """The Produce requests of one drain: each a node and its batches.

    At most ``limit`` (``max_request_bytes``) a request, a larger batch alone: a
    broker closes the connection of a request past its socket.request.max.bytes.
    The rest go in requests beside it.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.requests: list[tuple[int, list[Batch]]] = []
        self._filling: dict[int, list[Batch]] = {}  # node -> the batches of its last request
        self._used: dict[int, int] = {}  # node -> the bytes of its last request

    def add(self, node: int, batch: Batch) -> None:
        """Add ``batch`` to the last request to ``node``, or to a new one if it does not fit."""
        size = BATCH_OVERHEAD + sum(p.size for p in batch.records)
        batch.node = node
        batches = self._filling.get(node)
        if batches is None or self._used[node] + size > self.limit:
            batches = self._filling[node] = []
            self._used[node] = 0
            self.requests.append((node, batches))
        batches.append(batch)
        self._used[node] += size


class Batch:
    """Records of one partition sent (and retried) together."""

    __slots__ = (
        "attempts",
        "base_sequence",
        "created",
        "encoded",
        "last_error",
        "leaderless",
        "moved",
        "node",
        "not_before",
        "producer_epoch",
        "producer_id",
        "records",
        "tp",
    )

    def __init__(self, tp: TopicPartition, records: list[Pending]) -> None:
        self.tp = tp
        self.records = records
        # A call that waited for buffer room may queue a record behind younger ones.
        self.created = min(p.created for p in records)
        self.encoded: bytes | None = None
        self.attempts = 0
        self.not_before = 0.0
        self.last_error: BaseException | None = None
        # Since when no leader is known for the partition, its records waiting
        # for one (None: they do not).
        self.leaderless: float | None = None
        self.node = -1  # the broker of its last request
        self.moved = False  # retried at once on a leader a refusal named
        # Idempotence (_producer_idempotence.py): what it is sent with, -1 if nothing.
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1

    def encode(self, compression: Compression) -> bytes:
        """The record batch to send (encoded once, unless its sequence changes)."""
        if self.encoded is None:
            self.encoded = encode_batch(
                [(p.key, p.value, p.headers, p.timestamp) for p in self.records],
                compression=compression,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=self.base_sequence,
            )
        return self.encoded

    def results(self, base_offset: int, append_time: object) -> list[RecordMetadata]:
        """Where its records were written, from ``base_offset`` (-1: unknown, each
        -1), with the log-append time if the topic stamps one."""
        append_ms = epoch_ms(append_time)
        tp = self.tp
        return [
            RecordMetadata(
                tp.topic,
                tp.partition,
                base_offset + index if base_offset >= 0 else -1,
                p.timestamp if append_ms is None else append_ms,
            )
            for index, p in enumerate(self.records)
        ]

    def at_once(self, moved: bool) -> bool:
        """Whether a retry goes without a backoff: the first after its leader moved
        (a refusal named a newer one) only, so that brokers naming each other
        with rising epochs cannot make a loop without backoff."""
        at_once = moved and not self.moved
        self.moved = self.moved or at_once
        return at_once

    def may_be_written(self) -> None:
        """A request carrying the batch may have written it (no answer, or an
        answer saying the leader wrote it anyway)."""
        for pending in self.records:
            pending.maybe_written = True

    def closed_error(self, error: BaseException) -> BaseException:
        """``error`` to fail the batch with, as :class:`ClosedInFlight` if it is a
        :class:`ConnectionClosed` (never sent this time) while an earlier Produce
        request carrying the batch got no answer: it may have been written."""
        if not isinstance(error, ConnectionClosed) or isinstance(error, ClosedInFlight):
            return error
        if not any(pending.maybe_written for pending in self.records):
            return error
        return ClosedInFlight(
            f"{self.tp}: {error}; an earlier Produce request carrying these "
            f"{len(self.records)} record(s) got no answer: they may have been written"
        )

    def closed_in_flight(self, node: int, closed: BaseException) -> ClosedInFlight:
        """The error of the batch whose Produce request was unanswered when the
        connection was closed (``closed``): it may have been written."""
        error = ClosedInFlight(
            f"{self.tp}: the connection to broker {node} was closed before it "
            f"answered the Produce request of {len(self.records)} record(s): "
            "they may have been written"
        )
        error.__cause__ = closed
        return error

    def unanswered_error(self, delivery_timeout: float) -> RequestTimedOut:
        """The error of the batch once its delivery timeout passed in flight."""
        error = RequestTimedOut(
            f"{self.tp}: {len(self.records)} record(s) not acknowledged within "
            f"delivery_timeout={delivery_timeout} s: the Produce request "
            "is still unanswered (the records may yet be written)"
        )
        error.__cause__ = self.last_error
        return error

    def timeout_error(self, delivery_timeout: float) -> RequestTimedOut:
        """The error of the batch once its delivery timeout passed: always
        :class:`RequestTimedOut`, whatever its last attempt failed with (its
        cause), saying how long no leader was known if it waits for one."""
        last, since = self.last_error, self.leaderless
        error = RequestTimedOut(
            f"{self.tp}: {len(self.records)} record(s) not delivered within "
            f"delivery_timeout={delivery_timeout} s"
            + (
                ""
                if since is None
                else f": no leader known for {self.created + delivery_timeout - since:.1f} s"
            )
            + ("" if last is None else f" (last error: {type(last).__name__}: {last})")
        )
        error.__cause__ = last
        return error


class Queue:
    """The records waiting for one partition."""

    __slots__ = (
        "bytes",
        "expire_at",
        "failing",
        "failures",
        "first_arrival",
        "in_flight",
        "leaderless",
        "records",
        "retry",
        "sending",
        "split_cap",
        "split_left",
        "tp",
        "unordered",
    )

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.records: deque[Pending] = deque()
        self.bytes = 0
        self.first_arrival = 0.0
        # No queued record expires before this (it may be earlier: then a scan
        # of the queue finds nothing and sets it right).
        self.expire_at = float("inf")
        self.retry: Batch | None = None
        self.in_flight = False
        self.sending: Batch | None = None  # the batch in flight, until it expires
        # After a batch the topic found too large was split: at most split_cap
        # records per batch for the next split_left records.
        self.split_cap = 0
        self.split_left = 0
        # A record was queued behind one created after it (it waited longer
        # for metadata or room; a split batch went back to the head): the
        # records are not in deadline order, and expiring them needs a scan.
        self.unordered = False
        # The wave of failing Produce requests it belongs to (None: it is
        # not failing), and how often it failed since it started failing.
        self.failing: Wave | None = None
        self.failures = 0
        # Since when no leader is known for it (None: one is): set by the first
        # metadata refresh or drain finding none, cleared by one finding a leader.
        self.leaderless: float | None = None

    def sent(self, batch: Batch) -> None:
        """A Produce request carries ``batch`` (to the leader known)."""
        self.in_flight = True
        self.sending = batch
        self.leaderless = batch.leaderless = None

    def leader(self, leader: int, now: float) -> None:
        """A metadata refresh at ``now`` names ``leader`` as the partition's
        (-1: none): since when none is known, whether or not records wait."""
        if leader >= 0:
            self.leaderless = None
            if self.retry is not None:  # (it is sent once its backoff ends)
                self.retry.leaderless = None
        elif self.leaderless is None:
            self.leaderless = now

    def no_leader(self, batch: Batch, error: BaseException, now: float) -> None:
        """``batch`` found no leader known at ``now`` (``error`` says why): it
        waits for one, as the partition did since none is known (its records
        may have been sent before: the time is the partition's, not theirs)."""
        batch.last_error = error
        if self.leaderless is None:
            self.leaderless = now
        batch.leaderless = self.leaderless

    def idle(self) -> bool:
        """Nothing of the partition is left to send: queued, waiting for a retry,
        or in flight within its delivery timeout (a batch in flight past it failed)."""
        return not self.records and self.retry is None and self.sending is None

    def append(self, pending: Pending) -> None:
        """Queue ``pending`` last (its bytes counted)."""
        if self.records and pending.created < self.records[-1].created:
            self.unordered = True
        self.records.append(pending)
        self.bytes += pending.size

    def take_expired(self, now: float, timeout: float) -> list[Pending]:
        """Remove and return the records whose ``timeout`` since creation passed by
        ``now``; :attr:`expire_at` becomes the next one's deadline.

        In deadline order (the usual case) the expired records are a prefix,
        taken from the head; otherwise the whole queue is scanned, and checked
        for order again.
        """
        records = self.records
        if self.unordered:
            expired = [p for p in records if p.created + timeout <= now]
            if expired:
                self.records = records = deque(p for p in records if p.created + timeout > now)
            self.unordered = any(a.created > b.created for a, b in pairwise(records))
            first = min((p.created for p in records), default=float("inf"))
        else:
            expired = []
            while records and records[0].created + timeout <= now:
                expired.append(records.popleft())
            first = records[0].created if records else float("inf")
        self.bytes -= sum(p.size for p in expired)
        self.expire_at = first + timeout
        return expired

    def expire_sending(self, now: float, timeout: float) -> tuple[Batch | None, float]:
        """The batch in flight, taken out, once its delivery ``timeout`` passed
        by ``now`` (as the Java producer's in-flight expiry: the caller learns
        within the bound), and when the next one will."""
        batch = self.sending
        if batch is None:
            return None, float("inf")
        deadline = batch.created + timeout
        if deadline > now:
            return None, deadline
        self.sending = None
        return batch, float("inf")

    def expire_queued(self, now: float, timeout: float) -> tuple[list[Pending], RequestTimedOut]:
        """The queued records whose ``timeout`` passed by ``now``, taken out
        (:meth:`take_expired`), and the error to fail them with (saying how
        long no leader was known, if none is)."""
        expired = self.take_expired(now, timeout)
        ahead = self.retry or self.sending  # what held them up, if known
        last = None if ahead is None else ahead.last_error
        why = " (the partition's previous batch is still unanswered)" if self.in_flight else ""
        if self.leaderless is not None and not self.in_flight and expired:  # (unsent)
            why = f": no leader known for {now - self.leaderless:.1f} s"
            why += "" if last is None else f" (last error: {type(last).__name__}: {last})"
        error = RequestTimedOut(
            f"{self.tp}: {len(expired)} record(s) not delivered within delivery_timeout={timeout} s"
            + why
        )
        error.__cause__ = last
        return expired, error

    def clear(self) -> list[Pending]:
        """Take out every queued record."""
        records = list(self.records)
        self.records.clear()
        self.bytes = 0
        self.expire_at = float("inf")
        return records

    def take_batch(self, max_batch_bytes: int) -> Batch:
        """Take the next batch from the head: records up to ``max_batch_bytes``
        (one at least), or the cap left by a split."""
        records: list[Pending] = []
        size = BATCH_OVERHEAD
        cap = self.split_cap if self.split_left else 0
        while self.records:
            nxt = self.records[0]
            if records and size + nxt.size > max_batch_bytes:
                break
            if cap and len(records) >= cap:
                break
            records.append(self.records.popleft())
            size += nxt.size
            self.bytes -= nxt.size
        self.split_left = max(0, self.split_left - len(records))
        if self.records:
            self.first_arrival = self.records[0].created
        else:
            self.expire_at = float("inf")
        return Batch(self.tp, records)

    def put_back(self, batch: Batch, delivery_timeout: float) -> None:
        """Put the records of a batch the topic found too large back, to go in halves.

        As the Java producer does on MESSAGE_TOO_LARGE: at the head of the
        queue, so their order is kept; no retry is counted.
        """
        records = [p for p in batch.records if not p.done]  # not expired meanwhile
        self.records.extendleft(reversed(records))
        self.unordered = True  # in deadline order? checked at the next expiry
        self.bytes += sum(p.size for p in records)
        self.split_cap = max(1, len(records) // 2)
        self.split_left += len(records)
        self.first_arrival = batch.created
        self.expire_at = min(self.expire_at, batch.created + delivery_timeout)
