"""Fetch requests and responses, sans-IO: build the request, read the response,
skip what a consumer must not see.

Theory of operation:

:func:`build_fetch_request` makes a Fetch for a set of partition positions.
By default it is *full* and sessionless (``session_id=0``,
``session_epoch=-1``): it names every partition and the response answers for
each of them. A consumer fetching many partitions from one broker uses a
fetch session (KIP-227) instead: :mod:`gengroup.protocol.fetch_session`
decides which partitions a request names and which it forgets, and passes
the session id and epoch here; the broker then answers only for partitions
with something new.

:func:`parse_fetch_response` per partition turns the error code into a typed
exception (left on the result, not raised, so one bad partition does not hide
the others), decodes the record batches with :mod:`gengroup.protocol.records`,
and filters them the way the Java consumer does:

* control batches (transaction markers) are never returned;
* under ``read_committed``, batches of aborted transactions are dropped. The
  response lists each aborted transaction as ``(producer_id, first_offset)``.
  Walking the batches in order, before looking at a batch every aborted
  transaction whose ``first_offset`` is at or below the batch's last offset
  is *opened* (its producer id becomes "aborted"); a transactional batch of an
  aborted producer id is skipped; the ABORT control marker of that producer
  *closes* it again, so later batches of the same producer (a new
  transaction) are kept. This is Kafka's ``CompletedFetch`` algorithm;
* records below the requested offset (a compressed batch is returned whole
  even when the position is in its middle) are trimmed, and batches left empty
  are dropped.

``next_offset`` always moves past everything that was looked at, skipped
batches included, so a consumer never refetches a control or aborted batch.
A last batch cut short by the broker's size limit is not decoded; if nothing
complete came, ``truncated`` tells the caller to fetch with a larger
``partition_max_bytes``.

With ``decode=False`` the records are not decoded here: the batches are
checked by :func:`~gengroup.protocol.records.scan_batches` (length, magic,
CRC, codec, count) and left in ``raw`` for the consumer to decode when it
reads them. Only what the filtering needs is decoded at once: control
batches under ``read_committed`` (for their type) and a batch that starts
below the requested offset (trimmed into ``batches``).

Damage is the partition's ``error``, of its type (a
:class:`~gengroup._errors.CorruptRecordError` or
:class:`~gengroup._errors.ProtocolError`), naming the partition and the
damaged batch's offset, unless sound batches that reach the requested offset
came before it: those are the partition's result, ``next_offset`` is the
damaged batch's, and the next Fetch, starting there, gets the error (as the
Java consumer hands out the records before a corrupt batch). Nothing past
the damage is handed out, and nothing is skipped. This holds for damage a
batch's header shows (length, CRC and the rest of what
:func:`~gengroup.protocol.records.scan_batches` checks) and for damage found
only by decoding the records under a correct CRC (malformed records, a
payload that does not decompress), whichever of the batches this parse
decodes: every one with ``decode=True``, those above with ``decode=False``;
a batch left undecoded meets its damage when the consumer reads it
(:attr:`PartitionFetch.records`, ``FetchedBatch``).

Topic ids. From v13 a Fetch names each topic by its id, never by its name
(``topic_ids``: the ids the caller's Metadata gave), and the response
answers by id: :func:`parse_fetch_response` maps each id back to a name
through the ids the *request* used (``names``), not through a metadata cache
that may have changed while the request was out, so an answer for a topic
deleted and created again under the same name is never taken for the new
topic's. A topic id the request did not use is a :class:`ProtocolError`.

Leader hints (KIP-951, v16). A partition refused with NOT_LEADER_OR_FOLLOWER
or FENCED_LEADER_EPOCH may name its current leader and epoch
(``current_leader``) and the response that leader's address
(``node_endpoints``): both are left on the partition's result
(:attr:`PartitionFetch.current_leader`, :attr:`PartitionFetch.node_endpoints`)
for the consumer to move the partition at once.

Nothing here touches a socket or a clock; sending is :mod:`gengroup.io.fetch`'s.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, NamedTuple
from uuid import UUID

from .._errors import GengroupError, ProtocolError, error_for_code
from .._types import TopicPartition
from .framing import build, ms, request_module
from .records import (
    ControlType,
    RawBatch,
    Record,
    RecordBatch,
    decode_raw,
    scan_batches,
)
from .versions import ApiKey

__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "IsolationLevelArg",
    "PartitionFetch",
    "Piece",
    "build_fetch_request",
    "isolation_code",
    "parse_fetch_response",
    "split_batches",
]

#: ``"read_uncommitted"`` / ``"read_committed"``, or Kafka's codes 0 / 1.
IsolationLevelArg = Literal["read_uncommitted", "read_committed", 0, 1]

READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1
_INT32_MAX: Final = (1 << 31) - 1
#: A record batch's base offset (int64) and length (int32), before the length counts.
_LOG_PREFIX_SIZE: Final = 12


def isolation_code(level: IsolationLevelArg | int) -> int:
    """Kafka's isolation-level code (0 or 1) for a level name or code.

    Raises:
        ValueError: anything else.
    """
    if level in ("read_uncommitted", READ_UNCOMMITTED):
        return READ_UNCOMMITTED
    if level in ("read_committed", READ_COMMITTED):
        return READ_COMMITTED
    raise ValueError(f"isolation level must be 'read_committed' or 'read_uncommitted': {level!r}")


@dataclass(slots=True)
class PartitionFetch:
    """One partition's part of a Fetch response, filtered for a consumer.

    Attributes:
        error: the partition's error as a typed exception, or None.
        high_watermark: the partition's high watermark (-1 if unknown).
        last_stable_offset: the last stable offset (-1 if unknown).
        log_start_offset: the log start offset (-1 if unknown).
        batches: the data batches to hand out, in offset order (no control
            batches, no aborted batches under read_committed, no records
            below the requested offset, no empty batches).
        next_offset: the offset to fetch next: past the last complete batch
            received (skipped ones included), or the requested offset if
            nothing complete came (-1 if the requested offset is unknown).
        truncated: the data ended with an incomplete batch.
        size: bytes of record data the broker sent for the partition (what a
            consumer's buffer accounting charges for it).
        raw: with ``decode=False``, the data batches still undecoded, in
            offset order after those in ``batches`` (checked, filtered like
            them; none starts below the requested offset).
        current_leader: with an error, the answer's leader hint (``leader_id``,
            ``leader_epoch``; KIP-951, v16), or None.
        node_endpoints: with an error, the response's ``node_endpoints`` (the
            hinted leaders' addresses; v16), else empty.
    """

    error: GengroupError | None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    batches: list[RecordBatch] = field(default_factory=list)
    next_offset: int = -1
    truncated: bool = False
    size: int = 0
    raw: list[RawBatch] = field(default_factory=list)
    current_leader: Any = None
    node_endpoints: Sequence[Any] = ()

    @property
    def records(self) -> list[Record]:
        """Every record of :attr:`batches` and :attr:`raw`, in offset order.

        Raises:
            CorruptRecordError: a batch of :attr:`raw` cannot be decoded.
        """
        out = [r for b in self.batches for r in b.records]
        return out + decode_raw(self.raw) if self.raw else out


def build_fetch_request(
    version: int,
    positions: Mapping[TopicPartition, int],
    *,
    max_wait: float,
    min_bytes: int,
    max_bytes: int,
    partition_max_bytes: int | Mapping[TopicPartition, int],
    isolation_level: IsolationLevelArg | int,
    leader_epochs: Mapping[TopicPartition, int] | None = None,
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: Iterable[TopicPartition] = (),
    topic_ids: Mapping[str, UUID] | None = None,
) -> Any:
    """Build a Fetch request: full and sessionless unless a session is given.

    Args:
        version: the Fetch version (one of gengroup's supported range).
        positions: the offset to fetch from, per partition.
        max_wait: seconds the broker may wait for ``min_bytes``.
        min_bytes: bytes to accumulate before answering.
        max_bytes: response size limit (the first batch is returned even if larger).
        partition_max_bytes: size limit per partition: one for all, or one
            for each partition of ``positions``.
        isolation_level: ``"read_uncommitted"`` / ``"read_committed"`` (or 0 / 1).
        leader_epochs: the current leader epoch per partition, if the caller
            wants the broker to fence stale leaders (default: -1, no check).
        session_id: the fetch session (0: none; see
            :mod:`gengroup.protocol.fetch_session`).
        session_epoch: the session epoch (-1: sessionless, 0: a new session).
        forgotten: the partitions the session drops (incremental requests).
        topic_ids: each topic's id (v13+, which name topics by id only).

    Returns:
        A kio ``FetchRequest`` of that version.

    Raises:
        ValueError: from v13, a topic of the request has no id in ``topic_ids``.
    """
    mod = request_module(ApiKey.FETCH, version)
    ids = _ids(version, topic_ids)
    by_topic: dict[str, list[Any]] = defaultdict(list)
    epochs = leader_epochs or {}
    for tp, offset in positions.items():
        by_topic[tp.topic].append(
            build(
                mod.FetchPartition,
                partition=tp.partition,
                current_leader_epoch=epochs.get(tp, -1),
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=min(
                    partition_max_bytes
                    if isinstance(partition_max_bytes, int)
                    else partition_max_bytes[tp],
                    _INT32_MAX,
                ),
            )
        )
    return build(
        mod.FetchRequest,
        replica_id=-1,
        max_wait=ms(max_wait),
        min_bytes=min_bytes,
        max_bytes=min(max_bytes, _INT32_MAX),
        isolation_level=isolation_code(isolation_level),
        session_id=session_id,
        session_epoch=session_epoch,
        topics=tuple(
            build(mod.FetchTopic, topic=topic, topic_id=ids(topic), partitions=tuple(parts))
            for topic, parts in by_topic.items()
        ),
        forgotten_topics_data=_forgotten(mod, forgotten, ids),
        rack_id="",
    )


def _ids(version: int, topic_ids: Mapping[str, UUID] | None) -> Any:
    """The topic id of a topic name for a request of ``version`` (None before v13)."""
    if version < 13:
        return lambda topic: None
    found = topic_ids or {}

    def topic_id(topic: str) -> UUID:
        if topic not in found:
            raise ValueError(f"Fetch v{version} names topics by id: no id for {topic!r}")
        return found[topic]

    return topic_id


def _forgotten(mod: Any, forgotten: Iterable[TopicPartition], ids: Any) -> tuple[Any, ...]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in forgotten:
        by_topic[tp.topic].append(tp.partition)
    return tuple(
        build(mod.ForgottenTopic, topic=topic, topic_id=ids(topic), partitions=tuple(parts))
        for topic, parts in by_topic.items()
    )


def _is_abort_marker(batch: RecordBatch) -> bool:
    return batch.is_control and batch.control_type is ControlType.ABORT


class _AbortedTransactions:
    """Which transactional batches a ``read_committed`` read drops, batch by batch in order.

    The response lists each aborted transaction as its producer id and first
    offset: from that offset on, the producer's transactional batches are
    aborted until its abort marker (a control batch) ends the transaction.
    """

    __slots__ = ("_aborting", "_pending")

    def __init__(self, aborted: Any) -> None:
        self._pending = [(int(a.first_offset), int(a.producer_id)) for a in aborted or ()]
        heapq.heapify(self._pending)
        self._aborting: set[int] = set()

    def aborts(self, batch: RecordBatch | RawBatch, abort_marker: bool) -> bool:
        """Whether ``batch`` (of a producer, the next in the log) belongs to an aborted
        transaction; ``abort_marker``: it is its producer's abort marker."""
        pending = self._pending
        last = batch.last_offset
        while pending and pending[0][0] <= last:
            self._aborting.add(heapq.heappop(pending)[1])
        if abort_marker:
            self._aborting.discard(batch.producer_id)
            return False
        return batch.is_transactional and batch.producer_id in self._aborting


def _filter_batches(
    batches: list[RecordBatch],
    aborted: Any,
    read_committed: bool,
    start: int | None,
) -> list[RecordBatch]:
    """Drop control batches, aborted batches (read_committed) and records below ``start``."""
    transactions = _AbortedTransactions(aborted) if read_committed else None
    out: list[RecordBatch] = []
    for batch in batches:
        if (
            transactions is not None
            and batch.producer_id >= 0
            and transactions.aborts(batch, _is_abort_marker(batch))
        ):
            continue
        if batch.is_control:
            continue
        if start is not None and batch.base_offset < start:
            kept = [r for r in batch.records if r.offset >= start]
            if len(kept) != len(batch.records):
                batch = replace(batch, records=kept)
        if batch.records:
            out.append(batch)
    return out


def _filter_raw(
    batches: list[RawBatch],
    aborted: Any,
    read_committed: bool,
    start: int | None,
) -> tuple[list[RecordBatch], list[RawBatch], int]:
    """:func:`_filter_batches` on undecoded batches: what to hand out, as
    ``(decoded, raw, looked_at)``.

    A control batch is decoded for its type; a batch starting below ``start``
    is decoded and trimmed (it can only be the first); every other batch
    stays raw. A batch that cannot be decoded here ends the result as
    :func:`_decode_sound` says: ``looked_at`` counts the batches before it.
    """
    transactions = _AbortedTransactions(aborted) if read_committed else None
    decoded: list[RecordBatch] = []
    out: list[RawBatch] = []
    for i, batch in enumerate(batches):
        checked = transactions is not None and batch.producer_id >= 0
        below = start is not None and batch.base_offset < start
        try:
            marker = checked and batch.is_control and _is_abort_marker(batch.decode())
            trimmed = batch.decode() if below and batch.last_offset >= (start or 0) else None
        except ProtocolError:
            if not i or (start is not None and batches[i - 1].next_offset <= start):
                raise
            return decoded, out, i
        if checked and transactions is not None and transactions.aborts(batch, marker):
            continue
        if batch.is_control or not batch.count:
            continue
        if below:
            if trimmed is not None:
                decoded += _filter_batches([trimmed], None, False, start)
            continue
        out.append(batch)
    return decoded, out, len(batches)


def parse_fetch_response(
    resp: Any,
    *,
    isolation_level: IsolationLevelArg | int,
    positions: Mapping[TopicPartition, int] | None = None,
    decode: bool = True,
    names: Mapping[UUID, str] | None = None,
) -> dict[TopicPartition, PartitionFetch]:
    """Read a Fetch response into filtered, decoded per-partition results.

    Args:
        resp: a kio ``FetchResponse`` (v11 to v16).
        isolation_level: the level the request was made with.
        positions: the requested offsets; needed to trim records below them
            and to report ``next_offset`` for partitions that returned nothing.
        decode: False leaves the data batches undecoded in ``raw`` (checked;
            see the theory of operation).
        names: v13+, the topic name of each topic id the request used.

    Returns:
        A :class:`PartitionFetch` per partition in the response. A partition
        whose records cannot be decoded gets a :class:`ProtocolError` (or
        :class:`CorruptRecordError`) as its ``error``.

    Raises:
        BrokerError: the response's top-level error code is set.
        ProtocolError: the response names a topic id the request did not use.
    """
    if getattr(resp, "error_code", 0):
        raise error_for_code(int(resp.error_code), "Fetch")
    read_committed = isolation_code(isolation_level) == READ_COMMITTED
    out: dict[TopicPartition, PartitionFetch] = {}
    for topic in resp.responses:
        name = _topic_name(topic, names)
        for part in topic.partitions:
            tp = TopicPartition(name, int(part.partition_index))
            start = None if positions is None else positions.get(tp)
            result = PartitionFetch(
                error=None,
                high_watermark=int(part.high_watermark),
                last_stable_offset=int(part.last_stable_offset),
                log_start_offset=int(part.log_start_offset),
                next_offset=-1 if start is None else start,
            )
            out[tp] = result
            if part.error_code:
                result.error = error_for_code(int(part.error_code), f"Fetch {tp}")
                result.current_leader = getattr(part, "current_leader", None)
                result.node_endpoints = getattr(resp, "node_endpoints", ())
                continue
            data = part.records
            if not data:
                continue
            result.size = len(data)
            try:
                try:
                    raws, consumed = scan_batches(data)
                except ProtocolError as exc:
                    # The batches before the damaged one are handed out; the next
                    # Fetch starts at it, and its error is then the partition's.
                    good = _undamaged_length(data, start)
                    if not 0 < good < len(data):
                        raise exc  # the first batch: nothing sound comes before it
                    raws, consumed = scan_batches(data[:good])
                    data = data[:good]
                result.truncated = consumed < len(data)
                if decode:
                    batches = _decode_sound(raws, start)
                    if len(batches) < len(raws):
                        result.truncated = False  # ends at the damaged batch, complete
            except ProtocolError as damage:
                result.error = _named(tp, damage)
                continue
            if decode:
                if batches:
                    result.next_offset = _next(start, batches[-1].next_offset)
                    result.batches = _filter_batches(
                        batches, part.aborted_transactions, read_committed, start
                    )
                continue
            if raws:
                try:
                    result.batches, result.raw, looked_at = _filter_raw(
                        raws, part.aborted_transactions, read_committed, start
                    )
                except ProtocolError as damage:
                    result.error = _named(tp, damage)
                    continue
                result.next_offset = _next(start, raws[looked_at - 1].next_offset)
                if looked_at < len(raws):
                    result.truncated = False  # ends at the damaged batch, complete
    return out


def _topic_name(topic: Any, names: Mapping[UUID, str] | None) -> str:
    """The name of a response's topic: its own (v12-), or that of its id in ``names``."""
    name = getattr(topic, "topic", None)
    if name is not None:
        return str(name)
    topic_id = topic.topic_id  # v13+ (None: the nil id)
    name = None if names is None or topic_id is None else names.get(topic_id)
    if name is None:
        raise ProtocolError(f"Fetch answered for topic id {topic_id}, which it did not ask for")
    return name


def _named(tp: TopicPartition, damage: ProtocolError) -> ProtocolError:
    """``damage``, of its type, its message naming the partition."""
    error = type(damage)(f"Fetch {tp}: {damage}")
    error.__cause__ = damage
    return error


def _decode_sound(raws: list[RawBatch], start: int | None) -> list[RecordBatch]:
    """The batches of ``raws`` decoded, up to the first whose records cannot be.

    Like :func:`_undamaged_length`'s for header damage: the sound batches
    before the damaged one are the result, unless they hold nothing at or
    past ``start``; then the damage is raised (named by its batch's offset).
    """
    batches: list[RecordBatch] = []
    for raw in raws:
        try:
            batches.append(raw.decode())
        except ProtocolError:
            if not batches or (start is not None and batches[-1].next_offset <= start):
                raise
            break
    return batches


def _undamaged_length(data: bytes | bytearray | memoryview, start: int | None) -> int:
    """How many bytes of ``data`` the complete batches before the first damaged one
    hold; 0 if they hold nothing at or past ``start`` (the damage must be said)."""
    view = memoryview(data)
    pos, reached = 0, -1
    while len(view) - pos >= _LOG_PREFIX_SIZE:
        end = pos + _LOG_PREFIX_SIZE + int.from_bytes(view[pos + 8 : pos + 12], "big", signed=True)
        if end <= pos + _LOG_PREFIX_SIZE or end > len(view):
            break
        try:
            [batch], _ = scan_batches(view[pos:end])
        except ProtocolError:
            break
        pos, reached = end, batch.next_offset
    return pos if start is None or reached > start else 0


def _next(start: int | None, nxt: int) -> int:
    return nxt if start is None else max(start, nxt)


class Piece(NamedTuple):
    """A part of one partition's fetched data: decoded records (the first part only),
    the raw batches after them, the offset after it, and the bytes it counts for."""

    records: list[Record]
    raw: Sequence[RawBatch]
    next_offset: int
    size: int


def split_batches(
    records: list[Record],
    raw: Sequence[RawBatch],
    next_offset: int,
    size: int,
    most: int | None,
) -> list[Piece]:
    """One partition's fetched data in pieces of at most ``most`` records each.

    ``records`` (decoded already) come first, then the ``raw`` batches; a
    piece ends between two record batches, so one batch of more than ``most``
    records is a piece of its own, and the decoded records stay in the first
    piece. Each piece but the last ends at its last batch (``next_offset`` is
    past it); the last ends at ``next_offset``, which may lie past skipped
    batches. ``size`` is shared out by the raw batches' bytes, the rest (the
    decoded records' share, rounding) going to the first piece, so the
    pieces' sizes add up to it.
    """
    if most is None or len(records) + sum(b.count for b in raw) <= most:
        return [Piece(records, raw, next_offset, size)]
    # Greedy: a piece takes batches while they fit, and at least one.
    groups: list[list[RawBatch]] = [[]]
    held = len(records)
    for batch in raw:
        if held and held + batch.count > most:
            groups.append([])
            held = 0
        groups[-1].append(batch)
        held += batch.count
    raw_bytes = sum(b.end - b.start for b in raw)
    pieces: list[Piece] = []
    for i, group in enumerate(groups):
        if i == len(groups) - 1:
            ends = next_offset
        elif group:
            ends = group[-1].base_offset + group[-1].last_offset_delta + 1
        else:  # the decoded records alone
            ends = records[-1].offset + 1
        share = sum(b.end - b.start for b in group) * size // raw_bytes if raw_bytes else 0
        pieces.append(Piece(records if i == 0 else [], group, ends, share))
    pieces[0] = pieces[0]._replace(size=pieces[0].size + size - sum(p.size for p in pieces))
    return pieces
