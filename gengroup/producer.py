"""A batching Kafka producer: ``await send(...)`` resolves when the broker acknowledges.

Theory of operation:

``send()`` checks every field of the record first (``_producer_records.py``:
a record that could not be encoded fails its own call, never a batch it
would share), picks a partition (explicit, murmur2 of the key, or the null-key
strategy), appends a pending record to that partition's queue and waits on the
record's outcome (one wake-up per call, however many records it sent).
Nothing is sent from the caller's task.

One *sender* task owns all network scheduling. It wakes when a record lands in
an empty queue, a queue fills up, a flush starts, an in-flight request
finishes, metadata changes, or a linger/backoff deadline passes. Each wake it
*drains*: for every partition that is not waiting on a request of its own, it
takes either the batch due for a retry (once its backoff passed) or up to
``max_batch_bytes`` of queued records, once ``linger`` has passed since the
oldest queued record arrived, the batch is full, or a flush is in progress.
The drained batches are grouped by their leader's node id, and each group goes
out in Produce requests of at most ``max_request_bytes`` (a larger batch goes
alone), each in a task of its own: one request per broker carries every ready
partition as long as they fit, no request grows past what a broker accepts,
and a slow broker never delays another.

At most one batch per partition is in flight: that keeps records of a
partition in ``send`` order across retries. Without idempotence
(``idempotence=False``, or ``acks`` 0 or 1) a retry after a lost response may
write a batch twice, as with ``enable.idempotence=false`` in the Java client.
With idempotence (the default with ``acks="all"``) the sender first asks any
broker for a producer id (InitProducerId, retried with backoff; a refusal that
is not retried fails the records waiting, and the sends of a backoff after it,
without asking again; a record expiring meanwhile says it waited for the id,
the last InitProducerId error as its cause), and every batch carries it, its
epoch and the sequence of its first record, kept across retries: the broker
writes a batch once, however often it is sent. When the sequences become
uncertain (an answer UNKNOWN_PRODUCER_ID or OUT_OF_ORDER_SEQUENCE_NUMBER, a
batch sent that failed or expired without an answer) the epoch is bumped and
sequences restart at 0, as the Java producer does
(``_producer_idempotence.py``).

Every response is settled per partition: success resolves each record with
``base_offset + index``; a retriable error (Kafka's ``retriable`` flag, stale
metadata, a broken or timed-out connection) puts the batch back at the head of
its partition with an exponential backoff and, for leadership errors, asks the
metadata task for a refresh (logged per broker and change of state, not per
partition or retry: ``_producer_failures.py``); a NOT_LEADER_OR_FOLLOWER naming
a newer leader (KIP-951, ``io/metadata.py``) is retried there at once, without
the backoff or waiting for the refresh; MESSAGE_TOO_LARGE for a batch
of several records puts them back at the head of the queue, in batches of half
as many (as the Java producer splits); anything else fails them, typed.
``delivery_timeout`` counts from the start of a record's ``send`` call and is a
bound, neither crossed nor cut short: a backoff ending past it ends at it, and
the drain fails a batch, or queued records, whose time is up with
``RequestTimedOut`` (the last error as its cause); a batch whose Produce is unanswered
then fails with ``RequestTimedOut`` too (its answer, if it comes, is ignored).
Records whose leader is unknown wait for the metadata task
(``_producer_metadata.py``), which refreshes the producer's topics on demand
and every ``metadata_max_age``, at least a ``retry_backoff`` apart, growing
with jitter while a refresh leaves a partition without a leader; their
``RequestTimedOut`` says how long none was known (``Queue.leader``), the log
says such partitions once, not per batch (``Failures.no_leader``).

Null-key records use the *sticky* strategy by default (KIP-480): every null-key
record of a topic goes to one randomly chosen partition with a leader until a
batch for that partition is drained, then another partition is chosen; this
fills batches quickly. ``partitioner="round_robin"`` spreads them one by one.

``send`` blocks for at most ``max_block`` (the topic's metadata, then room in
the buffer: :class:`~gengroup._errors.BufferExhausted`); the sends waiting for
room are served in arrival order (``_producer_buffer.py``). Cancelling a ``send``
once its record is queued only stops waiting: the record is still delivered,
like a Java ``Future`` that nobody reads. ``flush()`` makes every
queued record ready at once and waits until each has an outcome.

Leaving the ``async with`` block, whatever ended it, or ``aclose()`` flushes
(as Java's ``close()``), refusing new sends, within ``delivery_timeout`` (which
ends every record by then), shielded from the cancellation that ended the
block: so are the background tasks and an owned Cluster, until the shutdown
cancels them (their shields only: ``aclose()`` inside the block does not
cancel its body), and waits for them to end. The close runs once: leaving
the block after ``aclose()`` only exits the task group.
A record the shutdown fails gets :class:`~gengroup._errors.ConnectionClosed`
if never sent, :class:`~gengroup._errors.ClosedInFlight` (it may have been
written) if a Produce request carrying it got no answer; so does one in flight
when the shared Cluster is closed under the producer.

Throttling hints (``throttle_time``) are ignored: the broker mutes the
connection itself.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AsyncExitStack, contextmanager
from typing import Any, Final, Literal, Self, Unpack, overload

import anyio
import anyio.abc
import anyio.lowlevel

from ._config import config_or_default
from ._errors import (
    BrokenConnection,
    BufferExhausted,
    ClosedInFlight,
    ConnectionClosed,
    GengroupError,
    ProtocolError,
    RequestTimedOut,
    is_retriable,
)
from ._producer_buffer import BufferPool
from ._producer_config import ProducerConfig, ProducerSettings
from ._producer_crash import crash_fails_all, lone
from ._producer_failures import Failures
from ._producer_idempotence import DUPLICATE_SEQUENCE, RESTART_CODES, Sequencer
from ._producer_metadata import ProducerMetadata
from ._producer_queue import (
    Batch,
    Pending,
    Queue,
    Requests,
    copy_error,
    in_flight_records,
    outcomes,
    wait_for,
)
from ._producer_records import (
    Checked,
    ProducerRecord,
    RecordMetadata,
    check_record,
    check_records,
    check_topic,
    produce_error,
    produce_request,
)
from ._types import TopicPartition
from .io.cluster import Cluster
from .io.retry import DEFAULT_CAP, ClientClosed, backoff_delay
from .io.shared import shared_or_own
from .partitioner import KeylessPartitioner, murmur2, partition_for_key
from .protocol.records import Compression, Header
from .protocol.versions import ApiKey

__all__ = [
    "Compression",
    "Producer",
    "ProducerConfig",
    "ProducerRecord",
    "ProducerSettings",
    "RecordMetadata",
    "murmur2",
    "partition_for_key",
]

# ---------------------------------------------------------------------------- values

_NOT_LEADER: Final = 6  # NOT_LEADER_OR_FOLLOWER, with a hint of the leader (v10+)
_MESSAGE_TOO_LARGE: Final = 10
#: NOT_ENOUGH_REPLICAS_AFTER_APPEND: retried, but the leader wrote the batch.
_WRITTEN_ANYWAY: Final = 20

log = logging.getLogger("gengroup")


#: Records ``send_many`` queues between two checkpoints.
_YIELD_EVERY: Final = 1000


class Producer:
    """An asynchronous, batching Kafka producer.

    Leaving ``async with``, however the block ended, first delivers what is
    queued or in flight (shielded from a cancellation), within
    ``delivery_timeout``; the block's exception then comes out unchanged.
    :meth:`aclose` closes the same way, inside the block or after it. A
    Producer is entered once: entering it again, or after :meth:`aclose`,
    raises :class:`~gengroup.GengroupError`.

    Args:
        cluster: an open :class:`Cluster` to share (not closed by the producer),
            or bootstrap addresses for a cluster the producer owns.
        config: the settings (default: :class:`ProducerConfig`'s defaults).
        **settings: settings to use instead of ``config``'s, by
            :class:`ProducerConfig` field name (``acks=1``, ``linger=0.02`` ...).

    Raises:
        ConfigError: an invalid setting, or a security setting a shared ``cluster`` lacks.
        TypeError: a setting :class:`ProducerConfig` does not have, or another class's ``config``.

    Example::

        async with Producer("127.0.0.1:9092", acks="all") as producer:
            meta = await producer.send("payments", b"42", key=b"account-7")
    """

    def __init__(
        self,
        cluster: Cluster | Sequence[str] | str,
        config: ProducerConfig | None = None,
        **settings: Unpack[ProducerSettings],
    ) -> None:
        config = config_or_default(ProducerConfig, config)
        self.config = cfg = dataclasses.replace(config, **settings) if settings else config
        self.cluster, self._owns_cluster = shared_or_own(
            cluster,
            client_id=cfg.client_id,
            request_timeout=cfg.request_timeout,
            connections_max_idle=cfg.connections_max_idle,
            security=cfg,
        )
        self._queues: dict[TopicPartition, Queue] = {}
        self._outstanding: set[Pending] = set()
        self._failures = Failures(cfg.retry_backoff, 1.2 * max(cfg.retry_backoff, DEFAULT_CAP))
        self._buffer = BufferPool(cfg.buffer_bytes)
        self._wakeup = anyio.Event()
        self._metadata = ProducerMetadata(self.cluster, cfg, self._refreshed)
        self._keyless = KeylessPartitioner(cfg.partitioner)
        self._idem = Sequencer(cfg.retry_backoff) if cfg.idempotent else None
        self._asking_id = False  # an InitProducerId task runs
        self._flushing = 0
        self._closing = False  # leaving the block: delivering, no new sends
        self._closed = False
        self._shields: set[anyio.CancelScope] = set()  # of the background tasks
        self._ended = anyio.Event()  # closed, and the background tasks ended
        self._started = False
        self._stack: AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        if self._started:
            raise GengroupError("a Producer can be entered only once")
        if self._closing:
            raise GengroupError(
                "the Producer was closed (aclose()) before it was entered; make a new Producer"
            )
        self._started = True
        async with AsyncExitStack() as stack:
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            try:
                if self._owns_cluster:  # shielded: a cancelled start would wait for it
                    with anyio.CancelScope(shield=True):
                        await self._tg.start(self._host_cluster)
                self._tg.start_soon(self._guarded, self._sender_loop, name="producer sender")
                self._tg.start_soon(self._guarded, self._metadata.loop, name="producer metadata")
            except BaseException:  # not opened: the shielded tasks must end too
                self._shutdown(ConnectionClosed("the Producer was not opened"))
                raise
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        stack, self._stack = self._stack, None
        if stack is None:
            if not self._started:
                raise GengroupError("the Producer was not entered (async with)")
            return None  # left already
        try:
            await self.aclose()  # nothing more if it ran already
        finally:  # also when the close is interrupted (KeyboardInterrupt, asyncio)
            # The body's exception is not handed to the task groups (they would wrap it):
            # it comes out unchanged; a background task's crash (Ctrl-C in it) as itself.
            crash = None
            try:
                await stack.aclose()
            except BaseExceptionGroup as group:
                crash = lone(group)
            if crash is not None:
                raise crash  # its cause kept; the body's exception its context
        return None

    async def aclose(self) -> None:
        """Deliver what is queued or in flight, within ``delivery_timeout``, and close.

        The close that leaving the ``async with`` block runs, shielded from
        cancellation as it is: from its start new sends (and those waiting
        for room in the buffer) raise :class:`~gengroup.ConnectionClosed`;
        it returns once every record queued or in flight has its outcome
        (each within its ``delivery_timeout``) and the background tasks
        ended, the producer's own :class:`Cluster` closed with them. Inside
        the block, the block goes on (only the producer is closed); leaving
        it afterwards does nothing more. Idempotent: a call while another
        runs returns when that one does, a later one at once. Called before
        the block, entering the Producer then raises
        :class:`~gengroup.GengroupError`.
        """
        if not self._started:
            self._closing = self._closed = True  # entering it later raises
            return
        with anyio.CancelScope(shield=True):  # a cancelled send's record too
            if not self._closing:
                await self._deliver_and_shut_down()
            await self._ended.wait()

    async def _deliver_and_shut_down(self) -> None:
        """Deliver what is queued or in flight within ``delivery_timeout``, then shut down.

        New sends (and those waiting for buffer room) are refused. Failures
        are logged once: the senders may have stopped waiting.
        """
        self._closing = True
        self._buffer.close()  # the sends waiting for room raise ConnectionClosed
        self._metadata.close()  # and those waiting for a topic's metadata
        waiting = list(self._outstanding)
        try:
            with anyio.move_on_after(self.config.delivery_timeout):
                await self.flush()
        finally:  # a KeyboardInterrupt too: else the background loops never end
            self._shutdown(
                ConnectionClosed("the Producer was closed before the record was sent"),
                ClosedInFlight(
                    "the Producer was closed before the broker answered the Produce "
                    "request carrying the record: it may have been written"
                ),
            )
        if failed := [pending.error for pending in waiting if pending.error is not None]:
            said = "the Producer closed with %d of its %d queued record(s) undelivered (their "
            said += "send calls may have been cancelled); the first failed with %r"
            log.warning(said, len(failed), len(waiting), failed[0])

    def _shutdown(self, error: BaseException, unanswered: BaseException | None = None) -> None:
        self._closed = True
        try:
            self._buffer.close()  # the sends waiting for room raise ConnectionClosed
            self._fail_outstanding(error, unanswered)
            for scope in self._shields:
                scope.cancel()
            if not self._shields:
                self._ended.set()
            if self._tg is not None and not self._closing:
                # A crash (or a failed entry) cancels the block's body too; a close
                # leaves it alone: aclose() may run inside it.
                self._tg.cancel_scope.cancel()
        finally:  # the log of failing Produce requests, last: a log filter that
            self._failures.close(error, unanswered)  # raises stops nothing above

    def _fail_outstanding(self, error: BaseException, unanswered: BaseException | None) -> None:
        """Fail every record without an outcome: with ``unanswered`` (if given)
        the records a Produce request may have written -- one is in flight, or
        an earlier one got no answer -- and with ``error`` the others."""
        in_flight = in_flight_records(self._queues.values())
        for pending in list(self._outstanding):
            maybe_written = pending.maybe_written or pending in in_flight
            self._settle(pending, None, unanswered if maybe_written and unanswered else error)
        self._freed()
        for queue in self._queues.values():
            queue.clear()
            queue.retry = None

    @contextmanager
    def _shielded(self) -> Iterator[None]:
        """Shield a background task from the cancellation of the scope around
        the block (the close still needs it) until :meth:`_shutdown`."""
        with anyio.CancelScope(shield=True) as scope:
            if self._closed:
                scope.cancel()
            self._shields.add(scope)
            try:
                yield
            finally:
                self._shields.discard(scope)
                if self._closed and not self._shields:
                    self._ended.set()

    async def _host_cluster(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Keep the producer's own Cluster open until the shutdown, out of reach
        of a cancellation of the block's scope: the close may need a connection."""
        with self._shielded():
            async with self.cluster:
                task_status.started()
                await anyio.sleep_forever()

    async def _guarded(self, loop: Any) -> None:
        """Run a background loop; if it crashes, fail every waiting sender, then re-raise."""
        with (
            self._shielded(),
            crash_fails_all(self._shutdown, "the producer's background task failed"),
        ):
            await loop()

    # ------------------------------------------------------------------ public API

    async def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Sequence[Header] = (),
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        """Send one record and wait until the broker acknowledges it.

        Every argument is checked before the record is queued: a bad one
        raises here and nothing is sent. The call has its outcome within
        ``delivery_timeout`` of its start (or ``max_block``, if longer and the
        topic's metadata is what it waited for).

        Cancelling the call only stops waiting once the record is queued: it
        is still delivered. Cancelled earlier (waiting for the topic's
        metadata or for room in the buffer), the record is not queued.

        Args:
            topic: the topic.
            value: the value (None: a tombstone).
            key: the key; non-null keys choose the partition by murmur2.
            headers: ``(name, value)`` pairs of a str (UTF-8) and bytes or None.
            partition: an explicit partition (an int).
            timestamp_ms: the create time in ms since the epoch, in ``[0, 2**63)``
                (a float's whole ms; default, None: now).

        Returns:
            Where the record was written.

        Raises:
            TypeError: an argument of the wrong type (a str value, a bool or
                float partition, headers that are not pairs ...).
            ValueError: a negative or out-of-range timestamp, a topic or
                header name that cannot be encoded as UTF-8.
            UnknownTopicOrPartition: the topic (or the explicit partition) does
                not exist within ``max_block``.
            BufferExhausted: no room in the buffer (``buffer_bytes``) within
                ``max_block`` of the call; the record was not queued. Sends
                waiting for room are served in arrival order: a record that
                would fit still waits behind an earlier one waiting for room
                (up to its own ``max_block``).
            BrokerError: the broker refused the record with an error that is
                not retried (e.g. MESSAGE_TOO_LARGE for a record larger than
                the topic allows), or, with ``idempotence``, refused the
                producer an id (``ClusterAuthorizationFailed``).
            RequestTimedOut: the record was not delivered within
                ``delivery_timeout``, whatever kept it (retried broker errors,
                broken connections, no leader): the last error is on its cause
                chain (``__cause__``). If a Produce request was still
                unanswered, the record may have been written.
            KafkaConnectionError: no broker answered the topic's metadata
                request within ``max_block``.
            ConnectionClosed: the producer (or the :class:`Cluster` it was
                given) was closed before the record was sent; a connection
                the broker dropped is retried instead.
            ClosedInFlight: a :class:`ConnectionClosed` for a record whose
                Produce request was unanswered when the :class:`Cluster` was
                closed: it may have been written.
        """
        start = anyio.current_time()
        rec = check_record(key, value, headers, partition, timestamp_ms)
        pending = await self._enqueue(check_topic(topic), rec, start)
        return await self._outcome(pending)

    @overload
    async def send_many(
        self,
        topic: str,
        records: Iterable[ProducerRecord | bytes | None],
        *,
        return_exceptions: Literal[False] = False,
    ) -> list[RecordMetadata]: ...

    @overload
    async def send_many(
        self,
        topic: str,
        records: Iterable[ProducerRecord | bytes | None],
        *,
        return_exceptions: Literal[True],
    ) -> list[RecordMetadata | BaseException]: ...

    async def send_many(
        self,
        topic: str,
        records: Iterable[ProducerRecord | bytes | None],
        *,
        return_exceptions: bool = False,
    ) -> list[RecordMetadata] | list[RecordMetadata | BaseException]:
        """Queue many records at once and wait for all of them.

        Every record is checked (as :meth:`send` checks its arguments) and the
        topic's metadata is fetched before any record is queued: a bad record
        or a missing topic raises and queues nothing. Records are then queued
        in order, each waiting for room in the buffer as a send of its own
        would (``max_block``, and its ``delivery_timeout``, count from when it
        began to wait); one that finds none gets :class:`BufferExhausted` as
        its outcome, as do the records after it, which are not queued either.

        Cancelling the call while it queues (waiting for room in the buffer)
        leaves the records queued so far -- a prefix of the list, in order --
        to be delivered, and queues none of the others; the call cannot say
        how many. A caller that must know bounds the wait with ``max_block``
        instead of cancelling, and gets each record's outcome.

        Args:
            topic: the topic.
            records: :class:`ProducerRecord` objects, or bare values (no key).
            return_exceptions: return each record's exception in its slot
                instead of raising.

        Returns:
            One :class:`RecordMetadata` per record, in order (or the exception
            of a record that failed, with ``return_exceptions``).

        Raises:
            TypeError, ValueError: a bad record (its index is in the message);
                nothing was queued.
            Exception: without ``return_exceptions``, the first record's error
                in order, after every record has an outcome.
        """
        start = anyio.current_time()
        topic = check_topic(topic)
        checked = check_records(records)
        if self._closed or self._closing or self._tg is None:
            raise ConnectionClosed("the Producer is not open")
        if not checked:
            return []
        count = await self._metadata.partition_count(topic)
        for c in checked:
            if c.partition is not None:
                count = await self._metadata.check_partition(topic, c.partition, count)
        pendings: list[Pending] = []
        unqueued: BaseException | None = None
        for c in checked:
            if self._buffer.must_wait(c.size):
                # Each record waits for room as a send of its own would: its
                # max_block (and delivery_timeout) count from here.
                start = anyio.current_time()
            try:
                pendings.append(await self._enqueue(topic, c, start))
            except BufferExhausted as exc:
                unqueued = exc
                break
            if not len(pendings) % _YIELD_EVERY:
                # Queueing does not yield while the buffer has room: let the
                # sender send the batches filled meanwhile.
                await anyio.lowlevel.checkpoint()
        await wait_for(pendings)
        return outcomes(pendings, unqueued, len(checked), return_exceptions=return_exceptions)

    async def flush(self) -> None:
        """Send every queued record now and wait until each has an outcome.

        Outcomes (including failures) are reported to the ``send`` callers;
        ``flush`` itself does not raise them.
        """
        waiting = list(self._outstanding)
        if not waiting:
            return
        self._flushing += 1
        self._wake()
        try:
            await wait_for(waiting)
            # The send calls waiting for those records were woken with this
            # task: one more turn lets them see their outcomes first.
            await anyio.lowlevel.checkpoint()
        finally:
            self._flushing -= 1

    # ------------------------------------------------------------------ enqueueing

    async def _outcome(self, pending: Pending) -> RecordMetadata:
        await wait_for((pending,))
        if pending.error is not None:
            raise copy_error(pending.error) from pending.error
        assert pending.result is not None
        return pending.result

    async def _enqueue(self, topic: str, rec: Checked, start: float) -> Pending:
        """Queue a checked record; ``start`` is when its call started."""
        if self._closed or self._closing or self._tg is None:
            raise ConnectionClosed("the Producer is not open")
        key, value, headers = rec.key, rec.value, rec.headers
        count = await self._metadata.partition_count(topic)
        partition = rec.partition
        if partition is None:
            partition = (
                partition_for_key(key, count)
                if key is not None
                else self._keyless.choose(topic, count, self._metadata.led(topic) or ())
            )
        else:
            await self._metadata.check_partition(topic, partition, count)
        await self._reserve(rec.size, start)
        now = anyio.current_time()
        # Record timestamps are wall-clock time by definition (not the event loop's clock).
        timestamp = time.time_ns() // 1_000_000 if rec.timestamp_ms is None else rec.timestamp_ms
        pending = Pending(key, value, headers, timestamp, rec.size, start)
        tp = TopicPartition(topic, partition)
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = Queue(tp)
        if not queue.records:
            queue.first_arrival = now
            queue.expire_at = float("inf")
        expire_at = start + self.config.delivery_timeout
        if expire_at < queue.expire_at:
            queue.expire_at = expire_at
        queue.append(pending)
        self._outstanding.add(pending)
        if len(queue.records) == 1 or queue.bytes >= self.config.max_batch_bytes:
            self._wake()
        return pending

    async def _reserve(self, size: int, start: float) -> None:
        """Count ``size`` bytes in the buffer, waiting for room (behind the sends
        that wait already) up to ``max_block`` from ``start``.

        (Or ``delivery_timeout``, if shorter: a record queued later would fail at once.)
        """
        limit = min(self.config.max_block, self.config.delivery_timeout)
        reserved = await self._buffer.reserve(size, start + limit)
        if self._closed or self._closing:
            if reserved:
                self._buffer.release(size)
            raise ConnectionClosed("the Producer was closed")
        if not reserved:
            raise BufferExhausted(
                f"no room for a record of {size} bytes in the buffer "
                f"(buffer_bytes={self.config.buffer_bytes}) within {limit} s"
            )

    # ------------------------------------------------------------------ sender

    def _wake(self) -> None:
        self._wakeup.set()

    def _refreshed(self) -> None:
        """A background metadata refresh: since when each partition has no leader, and a drain."""
        now = anyio.current_time()
        for queue in self._queues.values():
            queue.leader(self.cluster.leader_for(queue.tp), now)
        self._wakeup.set()

    async def _sender_loop(self) -> None:
        assert self._tg is not None
        while True:
            self._wakeup = anyio.Event()
            now = anyio.current_time()
            requests, wake_at = self._drain(now)
            for node, batches in requests:
                self._tg.start_soon(self._send_batches, node, batches)
            with anyio.move_on_after(max(0.0, wake_at - now)):
                await self._wakeup.wait()

    def _drain(self, now: float) -> tuple[list[tuple[int, list[Batch]]], float]:
        """The Produce requests to send now, each a node and its batches, and
        when the sender must look again at the latest."""
        requests = Requests(self.config.max_request_bytes)
        wake_at = now + 3600.0
        closed = self._metadata.closed  # the Cluster: what waits for a leader fails now
        urgent = self._flushing > 0 or self._closed or closed is not None
        idem = self._idem
        if idem is not None:
            idem.bump_if_wanted(now)
            if idem.needs_id and (refused := idem.refused(now)) is not None:
                self._fail_unsent(refused)  # not asked again before a backoff
            elif idem.needs_id and not self._asking_id and self._outstanding:
                self._asking_id = True
                self._tg.start_soon(self._guarded, self._ask_producer_id)  # type: ignore[union-attr]
        for queue in self._queues.values():
            if queue.records and queue.expire_at <= now:
                self._expire_queued(queue, now)
            if queue.records:
                wake_at = min(wake_at, queue.expire_at)
            if queue.in_flight:
                expired, deadline = queue.expire_sending(now, self.config.delivery_timeout)
                if expired is not None:  # the answer may still come (and the records be written)
                    error = expired.unanswered_error(self.config.delivery_timeout)
                    if queue.failing is None:  # no attempt failed before: said as one failing
                        self._failures.failed(queue, error, expired.node, now)
                    self._fail_batch(expired, error)
                wake_at = min(wake_at, deadline)
                continue
            batch = queue.retry
            if batch is not None:
                if batch.not_before > now and closed is None:
                    wake_at = min(wake_at, batch.not_before)
                    continue
                queue.retry = None
            elif queue.records:
                due = queue.first_arrival + self.config.linger
                if not urgent and queue.bytes < self.config.max_batch_bytes and due > now:
                    wake_at = min(wake_at, due)
                    continue
                batch = queue.take_batch(self.config.max_batch_bytes)
                self._keyless.drained(
                    queue.tp.topic, queue.tp.partition, self._metadata.led(queue.tp.topic)
                )
            else:
                continue
            if batch.created + self.config.delivery_timeout <= now:  # (rounding: not rearranged)
                error = batch.timeout_error(self.config.delivery_timeout)
                error = error if idem is None else idem.waited_error(error, now)
                if batch.leaderless is not None:  # not sent since: said if no wave says it
                    self._failures.no_leader(queue, error, now - batch.leaderless, now)
                self._fail_batch(batch, error)
                wake_at = now
                continue
            if idem is not None and idem.needs_id:  # the InitProducerId task wakes the sender
                queue.retry, batch.leaderless = batch, None  # (it waits for the id now)
                wake_at = min(wake_at, batch.created + self.config.delivery_timeout)
                continue
            leader = self.cluster.leader_for(batch.tp)
            if leader < 0:
                queue.no_leader(batch, self._metadata.leader_error(batch.tp), now)
                if closed is not None:  # nothing reopens it: no use waiting for a leader
                    self._fail_batch(batch, closed)
                    wake_at = now
                    continue
                delay = backoff_delay(batch.attempts, self.config.retry_backoff)
                # Not past its deadline: then it fails here, on time.
                batch.not_before = min(now + delay, batch.created + self.config.delivery_timeout)
                batch.attempts += 1
                queue.retry = batch
                wake_at = min(wake_at, batch.not_before)
                self._metadata.want()
                continue
            if idem is not None:
                idem.assign(batch)
            queue.sent(batch)
            wake_at = min(wake_at, batch.created + self.config.delivery_timeout)
            requests.add(leader, batch)
        wake_at = min(wake_at, self._failures.report(now))  # before the requests go out
        return requests.requests, wake_at

    def _expire_queued(self, queue: Queue, now: float) -> None:
        """Fail the queued records of ``queue`` whose delivery timeout has passed."""
        expired, error = queue.expire_queued(now, self.config.delivery_timeout)
        if self._idem is not None and not queue.in_flight:  # waiting for a producer id?
            error = self._idem.waited_error(error, now)
        for pending in expired:
            self._settle(pending, None, error)
        self._freed()

    async def _ask_producer_id(self) -> None:
        """Ask for a producer id; a refusal that is not retried fails the
        records waiting (and, until its backoff passed, the later sends: the drain)."""
        assert self._idem is not None
        try:
            await self._metadata.producer_id(self._idem)
        except GengroupError as exc:  # logged once by init_failed
            self._fail_unsent(exc)
        finally:
            self._asking_id = False
            self._wake()

    def _fail_unsent(self, error: BaseException) -> None:
        """Fail every record queued or waiting for a retry (not those in flight) with ``error``."""
        for queue in self._queues.values():
            batch, queue.retry = queue.retry, None
            if batch is not None:
                self._fail_batch(batch, error)
            for pending in queue.clear():
                self._settle(pending, None, error)
        self._freed()

    async def _send_batches(self, node: int, batches: list[Batch]) -> None:
        with self._shielded():
            try:  # the crash's shutdown sees these batches in flight
                with crash_fails_all(
                    self._shutdown, f"sending to broker {node} failed unexpectedly"
                ):
                    await self._send_batches_once(node, batches)
            finally:
                for batch in batches:
                    queue = self._queues.get(batch.tp)
                    if queue is not None:
                        queue.in_flight = False
                        queue.sending = None
                self._wake()

    async def _send_batches_once(self, node: int, batches: list[Batch]) -> None:
        # Every record was checked at its send call (_producer_records.py): a
        # failure to encode is a bug, and _send_batches fails every record.
        sendable = {b.tp: (b, b.encode(self.config.compression)) for b in batches}
        try:
            response: Any = await self.cluster.call(
                node,
                ApiKey.PRODUCE,
                lambda mod: produce_request(
                    mod, {tp: data for tp, (_, data) in sendable.items()}, self.config
                ),
                timeout=self.config.request_timeout + 5.0,
                expect_response=self.config.acks != 0,
            )
        except (BrokenConnection, RequestTimedOut) as exc:
            self._metadata.want()
            for batch, _ in sendable.values():
                batch.may_be_written()  # the request may have reached the broker
                self._retry_or_fail(batch, exc, node)
            return
        except ConnectionClosed as exc:
            sent = not isinstance(exc, ClientClosed)  # (closed before: nothing was sent)
            for batch, _ in sendable.values():
                self._fail_batch(batch, batch.closed_in_flight(node, exc) if sent else exc)
            return
        except (ProtocolError, GengroupError) as exc:
            for batch, _ in sendable.values():
                self._fail_batch(batch, exc)
            return
        if self.config.acks == 0:
            for batch, _ in sendable.values():
                self._complete(batch, -1, None, node)
            return
        for topic_resp in response.responses:
            for part in topic_resp.partition_responses:
                tp = TopicPartition(topic_resp.name, int(part.index))
                entry = sendable.pop(tp, None)
                if entry is None:
                    continue
                batch = entry[0]
                code = int(part.error_code)
                if code == 0 or (code == DUPLICATE_SEQUENCE and self._idem is not None):
                    # A duplicate was written before (its offset is unknown then: -1).
                    self._complete(batch, int(part.base_offset), part.log_append_time, node)
                    continue
                if code == _WRITTEN_ANYWAY:
                    batch.may_be_written()
                if code == _MESSAGE_TOO_LARGE and len(batch.records) > 1:
                    self._queues[batch.tp].put_back(batch, self.config.delivery_timeout)
                    continue
                err = produce_error(part, f"Produce to {tp} on broker {node}")
                if err.action == "refresh_metadata":
                    self._metadata.want()
                # To a new leader the broker names, the retry goes at once.
                moved = code == _NOT_LEADER and self.cluster.take_leader_hint(tp, part, response)
                if self._idem is not None and code in RESTART_CODES:
                    self._idem.restart(batch)  # again under a bumped epoch, from sequence 0
                    self._retry_or_fail(batch, err)
                elif is_retriable(err):
                    self._retry_or_fail(batch, err, node, at_once=moved)
                else:
                    self._fail_batch(batch, err)
        for batch, _ in sendable.values():
            self._fail_batch(
                batch, ProtocolError(f"broker {node} did not answer for {batch.tp} in Produce")
            )

    # ------------------------------------------------------------------ outcomes

    def _settle(
        self, pending: Pending, result: RecordMetadata | None, error: BaseException | None
    ) -> None:
        """Give ``pending`` its outcome; the caller then calls :meth:`_freed`."""
        if pending.settle(result, error):
            self._outstanding.discard(pending)
            self._buffer.release(pending.size)

    def _freed(self) -> None:
        """Wake the ``send`` calls waiting for room in the buffer (once per batch)."""
        self._buffer.serve()

    def _complete(self, batch: Batch, base_offset: int, append_time: Any, node: int) -> None:
        if self._idem is not None:
            self._idem.acknowledged(batch)
        queue = self._queues.get(batch.tp)
        if queue is not None and not batch.records[0].done:  # not failed in flight before
            self._failures.written(queue, node)
        results = batch.results(base_offset, append_time)
        for pending, result in zip(batch.records, results, strict=True):
            self._settle(pending, result, None)
        self._freed()

    def _fail_batch(self, batch: Batch, error: BaseException) -> None:
        if self._idem is not None:
            self._idem.failed(batch)
        error = batch.closed_error(error)
        if (queue := self._queues.get(batch.tp)) is not None:
            self._failures.records_failed(queue, error)
        for pending in batch.records:
            self._settle(pending, None, error)
        self._freed()

    def _retry_or_fail(
        self, batch: Batch, error: BaseException, node: int = -1, *, at_once: bool = False
    ) -> None:
        """Retry ``batch`` after ``error`` (logged for the partition if on broker
        ``node``), after a backoff unless ``at_once`` (its leader moved: :meth:`Batch.at_once`)."""
        now = anyio.current_time()
        batch.last_error = error
        batch.attempts += 1
        if self._closed:
            self._fail_batch(batch, error)
            return
        deadline = batch.created + self.config.delivery_timeout
        if now >= deadline:
            self._fail_batch(batch, batch.timeout_error(self.config.delivery_timeout))
            return
        # A backoff ending past the deadline ends at it: the drain then fails the batch.
        delay = backoff_delay(batch.attempts - 1, self.config.retry_backoff)
        batch.not_before = now if batch.at_once(at_once) else min(now + delay, deadline)
        queue = self._queues[batch.tp]
        queue.retry = batch
        if node >= 0:
            self._failures.failed(queue, error, node, now)
