"""Incremental fetch sessions (KIP-227), a sans-IO cache following Kafka's ``FetchSession``.

Theory of operation:

A Fetch request names a session with ``(session_id, session_epoch)``:

* epoch ``0`` or ``-1`` is a *full* request: any session it names is closed
  first; with epoch ``-1`` (FINAL) the request is answered without a session
  (session id 0), with epoch ``0`` (INITIAL) a new session is created once the
  response is known -- its partitions are the response's, in response order,
  each remembering the request's fetch parameters and the high watermark and
  log start offset it was answered with. When the cache is full and no
  session may be evicted, the full request is answered with session id 0.
* any other epoch is *incremental*: an unknown session id is
  FETCH_SESSION_ID_NOT_FOUND, an epoch other than the session's is
  INVALID_FETCH_SESSION_EPOCH, and a request naming topics by id (Fetch
  v13+) to a session created by name, or the other way round, is
  FETCH_SESSION_TOPIC_ID_ERROR (all answered with session id 0 and no
  partitions; the session is kept). Otherwise the request's partitions are
  added (at the end) or updated in place, ``forgotten_topics_data`` removed;
  a session left empty is closed and the request answered without a session;
  else the session's epoch advances and *every* cached partition is fetched,
  in cache order. The response keeps only the partitions that returned
  records, carry an error, or whose high watermark or log start offset
  differ from the ones last sent (an error resets the remembered high
  watermark to -1, so the partition is sent again once it recovers). A
  partition that returned records moves to the end of the session, so the
  next request's byte budget reaches the others first.

The request's epoch is checked once more when the response is built (the
answer may wait in a long poll while another connection uses the session):
a session that moved on meanwhile answers INVALID_FETCH_SESSION_EPOCH with
its id.

Eviction, as Kafka's ``FetchSessionCacheShard.tryEvict``: nothing times out
on its own; only when a new session needs a slot in a full cache
(``max.incremental.fetch.session.cache.slots``) is one evicted -- the least
recently used one if it has been idle for more than
``min.incremental.fetch.session.eviction.ms``, else the smallest session
that was already older than that at its last use, if the new session has
more partitions. Every session here is a consumer's (Kafka's *unprivileged*
sessions; the embedded broker has no followers).

Nothing here reads a clock or touches a socket: callers pass ``now_ms``.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

__all__ = [
    "DEFAULT_CACHE_SLOTS",
    "DEFAULT_EVICTION_MS",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "ContextKind",
    "FetchAnswer",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "PartitionOutcome",
    "PartitionRequest",
    "next_epoch",
]

T = TypeVar("T")

INVALID_SESSION_ID: Final = 0
"""The session id meaning "no session"."""

INITIAL_EPOCH: Final = 0
"""The epoch of a full request that asks for a new session."""

FINAL_EPOCH: Final = -1
"""The epoch of a full request that wants no session (and closes the one it names)."""

DEFAULT_CACHE_SLOTS: Final = 1000
"""Kafka's default ``max.incremental.fetch.session.cache.slots``."""

DEFAULT_EVICTION_MS: Final = 120_000
"""Kafka's default ``min.incremental.fetch.session.eviction.ms``."""

_INT32_MAX: Final = 2**31 - 1
_FETCH_SESSION_ID_NOT_FOUND: Final = 70
_INVALID_FETCH_SESSION_EPOCH: Final = 71
_FETCH_SESSION_TOPIC_ID_ERROR: Final = 106

TopicPartition = tuple[str, int]


def next_epoch(epoch: int) -> int:
    """The session epoch after ``epoch`` (FINAL stays FINAL; wraps to 1 after INT32_MAX)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


@dataclass(frozen=True, slots=True)
class PartitionRequest:
    """One partition of a Fetch request: what to read and from where.

    Attributes:
        topic: the topic name.
        partition: the partition index.
        fetch_offset: the offset to read from.
        max_bytes: the partition's byte budget.
        current_leader_epoch: the fetcher's leader epoch (-1: unknown).
        log_start_offset: the fetcher's log start offset (-1 for consumers).
        last_fetched_epoch: the epoch of the last fetched batch (-1: unknown).
    """

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1
    last_fetched_epoch: int = -1

    @property
    def key(self) -> TopicPartition:
        """``(topic, partition)``."""
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """What reading one partition gave: the parts a session compares.

    Attributes:
        error_code: the partition's error (0: none).
        high_watermark: the high watermark answered.
        log_start_offset: the partition's log start offset answered.
        records_size: bytes of records answered.
    """

    error_code: int
    high_watermark: int
    log_start_offset: int
    records_size: int


@dataclass(slots=True, eq=False)
class CachedPartition:
    """A partition of a session: its latest request and what was last answered for it.

    Attributes:
        request: the fetch parameters last given for it.
        high_watermark: the high watermark last answered (-1: none, or an error).
        log_start_offset: the log start offset last answered (-1: none).
    """

    request: PartitionRequest
    high_watermark: int = -1
    log_start_offset: int = -1

    def must_respond(self, outcome: PartitionOutcome, *, update: bool) -> bool:
        """Whether an incremental response must carry this partition (Kafka's rule).

        Records, an error, or a high watermark or log start offset other than
        the last answered. With ``update``, remembers the new values (an
        error resets the high watermark to -1).
        """
        respond = outcome.records_size > 0
        if self.high_watermark != outcome.high_watermark:
            respond = True
            if update:
                self.high_watermark = outcome.high_watermark
        if self.log_start_offset != outcome.log_start_offset:
            respond = True
            if update:
                self.log_start_offset = outcome.log_start_offset
        if outcome.error_code:
            respond = True
            if update:
                self.high_watermark = -1
        return respond


@dataclass(eq=False)
class FetchSession:
    """One incremental fetch session.

    Attributes:
        id: the session id (positive, unique in its cache).
        epoch: the epoch the next incremental request must carry.
        created_ms: when it was created.
        last_used_ms: when a request last used it.
        partitions: its partitions, in fetch order.
        cached_size: its size at its last use (the eviction order).
        evictable: whether it was older than the eviction time at its last use.
        by_id: whether its requests name topics by id (Fetch v13+): its
            partitions' topics are then topic ids' text.
    """

    id: int
    epoch: int
    created_ms: int
    last_used_ms: int
    partitions: dict[TopicPartition, CachedPartition] = field(default_factory=dict)
    cached_size: int = 0
    evictable: bool = False
    by_id: bool = False

    def update(
        self, fetch_data: Sequence[PartitionRequest], forgotten: Iterable[TopicPartition]
    ) -> None:
        """Add or update the request's partitions, then remove the forgotten ones."""
        for req in fetch_data:
            cached = self.partitions.get(req.key)
            if cached is None:
                self.partitions[req.key] = CachedPartition(req)
            else:
                cached.request = req
        for key in forgotten:
            self.partitions.pop(key, None)


class ContextKind(enum.Enum):
    """How a Fetch request relates to the session cache."""

    SESSIONLESS = "sessionless"
    """Answered without a session: every requested partition, session id 0."""
    FULL = "full"
    """Answered in full; a new session is created with the response."""
    INCREMENTAL = "incremental"
    """An existing session's partitions; only the changed ones are answered."""
    ERROR = "error"
    """A session error: nothing is fetched, the error is answered at top level."""


@dataclass(frozen=True, slots=True)
class FetchContext:
    """What :meth:`FetchSessionCache.new_context` decided for one request.

    Attributes:
        kind: the kind of answer.
        partitions: the partitions to read, in order.
        error_code: the session error (ERROR only).
        session: the session used (INCREMENTAL only).
        request_epoch: the request's session epoch.
        by_id: whether the request names topics by id.
    """

    kind: ContextKind
    partitions: tuple[PartitionRequest, ...] = ()
    error_code: int = 0
    session: FetchSession | None = None
    request_epoch: int = FINAL_EPOCH
    by_id: bool = False


@dataclass(frozen=True, slots=True)
class FetchAnswer(Generic[T]):
    """The top of a Fetch response and the partitions it carries.

    Attributes:
        error_code: the top-level error.
        session_id: the session id to answer.
        partitions: the partition answers to send, in order.
    """

    error_code: int
    session_id: int
    partitions: tuple[T, ...]


def _dedupe(fetch_data: Iterable[PartitionRequest]) -> tuple[PartitionRequest, ...]:
    """A request's partitions once each: the first position, the last parameters."""
    found: dict[TopicPartition, PartitionRequest] = {}
    for req in fetch_data:
        found[req.key] = req
    return tuple(found.values())


class FetchSessionCache:
    """One broker's fetch sessions.

    Args:
        max_slots: ``max.incremental.fetch.session.cache.slots``.
        eviction_ms: ``min.incremental.fetch.session.eviction.ms``.
        rng: the source of session ids (a seeded one makes tests repeatable).
    """

    def __init__(
        self,
        max_slots: int = DEFAULT_CACHE_SLOTS,
        eviction_ms: int = DEFAULT_EVICTION_MS,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._rng = rng if rng is not None else random.Random()
        self._sessions: dict[int, FetchSession] = {}
        #: Sessions evicted to make room or by :meth:`evict_all`.
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        """The session ``session_id``, if cached."""
        return self._sessions.get(session_id)

    @property
    def total_partitions(self) -> int:
        """Partitions cached over all sessions."""
        return sum(len(s.partitions) for s in self._sessions.values())

    # ------------------------------------------------------------------ requests

    def new_context(
        self,
        session_id: int,
        epoch: int,
        fetch_data: Iterable[PartitionRequest],
        forgotten: Iterable[TopicPartition],
        now_ms: int,
        *,
        by_id: bool = False,
    ) -> FetchContext:
        """Decide how to answer a Fetch request (Kafka's ``FetchManager.newContext``).

        Args:
            session_id: the request's session id.
            epoch: the request's session epoch.
            fetch_data: the request's partitions, in request order.
            forgotten: the request's ``forgotten_topics_data``, flattened.
            now_ms: the current time.
            by_id: the request names topics by id (Fetch v13+).

        Returns:
            The context: what to read, and how :meth:`respond` will answer.
        """
        data = _dedupe(fetch_data)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            kind = ContextKind.SESSIONLESS if epoch == FINAL_EPOCH else ContextKind.FULL
            return FetchContext(kind, data, request_epoch=epoch, by_id=by_id)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(
                ContextKind.ERROR, error_code=_FETCH_SESSION_ID_NOT_FOUND, request_epoch=epoch
            )
        if session.epoch != epoch:
            return FetchContext(
                ContextKind.ERROR, error_code=_INVALID_FETCH_SESSION_EPOCH, request_epoch=epoch
            )
        if session.by_id != by_id:
            return FetchContext(
                ContextKind.ERROR, error_code=_FETCH_SESSION_TOPIC_ID_ERROR, request_epoch=epoch
            )
        session.update(data, forgotten)
        if not session.partitions:
            self.remove(session.id)
            return FetchContext(ContextKind.SESSIONLESS, data, request_epoch=epoch, by_id=by_id)
        self._touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        parts = tuple(c.request for c in session.partitions.values())
        return FetchContext(
            ContextKind.INCREMENTAL, parts, session=session, request_epoch=epoch, by_id=by_id
        )

    def respond(
        self,
        context: FetchContext,
        results: Sequence[tuple[PartitionRequest, PartitionOutcome, T]],
        now_ms: int,
    ) -> FetchAnswer[T]:
        """The answer to a request once its partitions were read; updates the cache.

        Args:
            context: the request's context from :meth:`new_context`.
            results: each partition read, in response order, with its outcome
                and the caller's answer for it.
            now_ms: the current time.

        Returns:
            The top-level error, the session id and the answers to send.
        """
        if context.kind is ContextKind.ERROR:
            return FetchAnswer(context.error_code, INVALID_SESSION_ID, ())
        if context.kind is ContextKind.SESSIONLESS:
            return FetchAnswer(0, INVALID_SESSION_ID, tuple(r[2] for r in results))
        if context.kind is ContextKind.FULL:
            session_id = self._maybe_create(results, now_ms, context.by_id)
            return FetchAnswer(0, session_id, tuple(r[2] for r in results))
        session = context.session
        assert session is not None
        if session.epoch != next_epoch(context.request_epoch):
            return FetchAnswer(_INVALID_FETCH_SESSION_EPOCH, session.id, ())
        kept: list[T] = []
        for req, outcome, answer in results:
            cached = session.partitions.get(req.key)
            if cached is None:  # forgotten by a later request meanwhile
                continue
            if not cached.must_respond(outcome, update=True):
                continue
            kept.append(answer)
            if outcome.records_size > 0:
                del session.partitions[req.key]
                session.partitions[req.key] = cached
        return FetchAnswer(0, session.id, tuple(kept))

    # ------------------------------------------------------------------ the cache

    def remove(self, session_id: int) -> FetchSession | None:
        """Close a session; returns it if it was cached."""
        return self._sessions.pop(session_id, None)

    def evict_all(self) -> int:
        """Drop every session (a test's way to provoke FETCH_SESSION_ID_NOT_FOUND).

        Returns:
            The number of sessions dropped.
        """
        count = len(self._sessions)
        self._sessions.clear()
        self.evictions += count
        return count

    def _new_id(self) -> int:
        while True:
            candidate = self._rng.randrange(1, _INT32_MAX)
            if candidate not in self._sessions:
                return candidate

    def _maybe_create(
        self,
        results: Sequence[tuple[PartitionRequest, PartitionOutcome, object]],
        now_ms: int,
        by_id: bool,
    ) -> int:
        size = len({req.key for req, _, _ in results})
        if len(self._sessions) >= self.max_slots and not self._try_evict(size, now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(
            self._new_id(), next_epoch(INITIAL_EPOCH), now_ms, now_ms, by_id=by_id
        )
        for req, outcome, _ in results:
            session.partitions[req.key] = CachedPartition(
                req, outcome.high_watermark, outcome.log_start_offset
            )
        self._sessions[session.id] = session
        self._touch(session, now_ms)
        return session.id

    def _try_evict(self, size: int, now_ms: int) -> bool:
        """Make room for a new session of ``size`` partitions, if one may go."""
        if not self._sessions:
            return False
        lru = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - lru.last_used_ms > self.eviction_ms:
            victim = lru
        else:
            evictable = [s for s in self._sessions.values() if s.evictable]
            if not evictable:
                return False
            victim = min(evictable, key=lambda s: (s.cached_size, s.id))
            if (size, 0) < (victim.cached_size, victim.id):
                return False
        self.remove(victim.id)
        self.evictions += 1
        return True

    def _touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        session.cached_size = len(session.partitions)
        session.evictable = now_ms - session.created_ms > self.eviction_ms
