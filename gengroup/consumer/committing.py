"""Sending a generation's commits: one OffsetCommit, and what the generation keeps of it.

Theory of operation:

:func:`send_offset_commit` is the request itself, sent by the group's
:class:`~gengroup.consumer.forming.GroupClient` (the generation's
:class:`~gengroup.consumer.commits.Committer`) through the coordinator
client: a broken connection, or every partition answered with a
coordinator error, is followed once to the coordinator looked up again.
It counts the commit in the member's metrics and returns each partition's
error code. Where the coordinator takes OffsetCommit v10, the commit names
each topic by the id the generation read its offsets under
(``GenerationCommits._opened_with``), so that a topic deleted and created
again under its name is refused the old topic's positions (UNKNOWN_TOPIC_ID,
then :meth:`GenerationCommits._gone`); a partition whose id is not known
makes it a v9 commit, by name.

:class:`GenerationCommits` is the part of
:class:`~gengroup.consumer.generation.Generation` that makes one commit
while the generation lives (``Generation._commit``): under the
generation's commit lock it works out what is due (marks, start marks or
the offsets given, never below what this member already committed), sends
it under the generation's identity, records what the coordinator stored
(offsets and their metadata) and types a refusal. It records the outcome on
the generation (``commit_error``, ``commits_ok``, ``commits_failed``) and
renews the local lease with an accepted commit. ``_commit_back`` lowers that
floor for one partition first: the lake sink commits the base of a range it
lands again, below its committed offset, before it deletes the range's files.

:meth:`GenerationCommits._retried` sends a commit again while it fails
with an error worth retrying (:func:`retriable_refusal`: a coordinator
loading, moving or not answering, REQUEST_TIMED_OUT, a broken connection),
with the client's backoff (:mod:`gengroup.io.retry`), for at most the
group's ``request_timeout``; a fencing answer or REBALANCE_IN_PROGRESS
(:data:`FENCED`) ends it at once. Each attempt works out what is due anew,
so marks made meanwhile go with it and a coordinator that moved is looked
up again. An explicit ``gen.commit()`` and the final commit of an ending
generation both run through it (an explicit one still retried when its
generation has ended goes under the holders of its spans,
:mod:`~gengroup.consumer.span_commits`); the periodic committer sends one commit
per interval (the next interval is its retry).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Protocol
from uuid import UUID

import anyio

from .._errors import (
    BrokerError,
    FencedInstanceId,
    GenerationEnded,
    KafkaConnectionError,
    MemberResetError,
    ProtocolError,
    RebalanceInProgress,
    RequestTimedOut,
    StaleMemberEpoch,
    TopicDeleted,
    error_for_code,
    is_retriable,
)
from .._types import GenerationIdentity, TopicPartition, show_partitions
from ..io.cluster import Cluster
from ..io.coordinator import CoordinatorClient
from ..io.retry import retry
from ..membership import requests
from ..membership.member import Outcome, outcome_for
from ..protocol.versions import ApiKey
from .commits import CommitCodes, Committer, OffsetMetadata, Offsets, TopicIds
from .metrics import GroupMetrics
from .recordless import to_commit
from .span_commits import commit_in_spans

if TYPE_CHECKING:
    from .span_commits import _Span

    class _OpenedSpan(Protocol):
        topic_id: UUID | None
        reset: int

        @property
        def gen(self) -> object: ...


__all__ = [
    "FENCED",
    "GenerationCommits",
    "commit_lock",
    "retriable_refusal",
    "send_offset_commit",
]

log = logging.getLogger("gengroup")

#: What OffsetCommit answers for a partition of a topic the coordinator does
#: not know (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID): dropped from the
#: attempt if the metadata does not know it either (:meth:`GenerationCommits._gone`).
_UNKNOWN_TOPIC: Final = frozenset({3, 100})

#: Answers that end a commit's retries at once: this member no longer owns the
#: generation's partitions (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID and
#: FENCED_MEMBER_EPOCH are MemberResetError; FENCED_INSTANCE_ID), or the group
#: is assigning them anew (REBALANCE_IN_PROGRESS).
FENCED = (MemberResetError, FencedInstanceId, RebalanceInProgress)


def retriable_refusal(exc: BaseException) -> bool:
    """Whether a commit that failed with ``exc`` is worth sending again.

    Yes for what the error table retries (COORDINATOR_LOAD_IN_PROGRESS,
    NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT, a broken
    connection, ...) and for a request that timed out; never for a
    :data:`FENCED` answer.
    """
    if isinstance(exc, FENCED):
        return False
    return is_retriable(exc) or isinstance(exc, TimeoutError)


def commit_lock() -> anyio.Lock:
    """A generation's commit lock: one commit at a time.

    Taken without a schedule point when free (``fast_acquire``): a commit
    that finds it free goes on to write its request at once (one with
    nothing to send passes a schedule point of its own, as every async call
    must: a loop of such commits would otherwise hold the event loop). The final
    commit's first pass is sent the moment a rebalance is heard of, before
    the generation's cancelled tasks (fetches, workers) run their way out;
    the task switch a plain acquire makes would let them run first.
    """
    return anyio.Lock(fast_acquire=True)


async def send_offset_commit(
    coordinator: CoordinatorClient,
    metrics: GroupMetrics,
    identity: GenerationIdentity,
    offsets: Offsets,
    metadata: OffsetMetadata | None = None,
    topic_ids: TopicIds | None = None,
) -> CommitCodes:
    """OffsetCommit under ``identity`` (with ``metadata`` per partition, if given);
    the error code of each partition (0 = stored).

    ``topic_ids`` names the topic each offset was read from: with an id for
    every partition, a coordinator that takes OffsetCommit v10 is sent ids,
    and refuses an id it no longer knows (UNKNOWN_TOPIC_ID) instead of
    storing the position on a topic created again under the same name.

    A broken connection, or every partition answered with a coordinator
    error, is followed once: the coordinator is looked up again and the
    commit sent there. The commit is counted in ``metrics``.

    Raises:
        CoordinatorError: the coordinator moved again.
        KafkaConnectionError: the connection failed again.
    """

    def parse(resp: Any) -> CommitCodes:
        results = requests.parse_offset_commit(resp, topic_ids)
        codes = set(results.values())
        if codes and all(outcome_for(code) is Outcome.FIND_COORDINATOR for code in codes):
            raise error_for_code(min(codes), f"OffsetCommit of {identity.group_id}")
        return results

    try:
        results = await coordinator.call(
            ApiKey.OFFSET_COMMIT,
            partial(
                requests.offset_commit_request,
                identity=identity,
                offsets=offsets,
                metadata=metadata,
                topic_ids=topic_ids,
            ),
            parse,
        )
    except BaseException:
        metrics.commits_failed += 1
        raise
    if any(results.values()):
        metrics.commits_failed += 1
    else:
        metrics.commits_ok += 1
    return results


class GenerationCommits:
    """A generation's commits while it lives (mixed into
    :class:`~gengroup.consumer.generation.Generation`, which holds the state)."""

    if TYPE_CHECKING:
        identity: GenerationIdentity
        assignments: Mapping[TopicPartition, int]
        revoked: frozenset[TopicPartition]
        retained: frozenset[TopicPartition]
        commit_error: BaseException | None
        commits_ok: int
        commits_failed: int
        end_outcome: Outcome | None
        _committer: Committer
        _commit_lock: anyio.Lock
        _marks: dict[TopicPartition, int]
        _start_marks: dict[TopicPartition, int]
        _committed: dict[TopicPartition, int]
        _committed_metadata: dict[TopicPartition, str]
        _request_timeout: float
        _retry_backoff: float

        @property
        def ended(self) -> bool: ...
        @property
        def label(self) -> str: ...
        @property
        def group_id(self) -> str: ...
        @property
        def member_id(self) -> str: ...
        def renew_lease(self, sent_at: float) -> None: ...

        @property
        def _spans(self) -> Mapping[TopicPartition, _OpenedSpan]: ...

        def end(self, outcome: Outcome, reason: str, *, release: bool = False) -> None: ...
        def _span(self, tp: TopicPartition) -> _Span | None: ...

    #: The cluster whose metadata tells whether a topic of the generation was
    #: deleted or re-created (None: never asked), and the ids its topics had
    #: as the generation formed (:meth:`know_topics`).
    _cluster: Cluster | None = None
    _topic_ids: Mapping[str, UUID] = MappingProxyType({})
    _span_ids: Mapping[TopicPartition, UUID] = MappingProxyType({})
    #: The partitions whose marks this generation said it left out (:meth:`_drop_gone`).
    _gone_said: frozenset[TopicPartition] = frozenset()
    #: Partitions it revoked that another member may own now (the consumer
    #: protocol, once the revocation is acknowledged): no commit names them.
    _released: frozenset[TopicPartition] = frozenset()

    def _offset_stored(self, tp: TopicPartition) -> None:
        """A commit of ``tp`` was stored: a reset its span carried is over."""
        if (span := self._spans.get(tp)) is not None and span.gen is self:
            span.reset = -1  # the coordinator holds an offset of the new log

    def know_topics(self, cluster: Cluster) -> None:
        """Remember the ids the generation's topics have in ``cluster``'s metadata
        now, as it forms, and ``cluster``, to find them deleted or re-created later.

        A partition whose span outlived its generation (retained, or being
        revoked) is checked against the id its span was opened with
        (:meth:`know_spans`), not this one.
        """
        self._cluster = cluster
        ids = {}
        for topic in {tp.topic for tp in self.assignments}:
            info = cluster.topics.get(topic)
            if info is not None and info.topic_id is not None:
                ids[topic] = info.topic_id
        self._topic_ids = ids

    def topic_recreated(self, topic: str) -> None:
        """The prefetcher found ``topic`` created again under its name (its Fetch
        by the id the positions belong to was refused, and the metadata shows
        another id): the generation ends, so that the next one reads the new
        topic from its start (said once, as a WARNING)."""
        if self.end_outcome is not None:
            return
        log.warning(
            "group %s generation %s member %s: topic %s was created again (another topic "
            "id): its positions are the old topic's; the generation ends",
            self.group_id,
            self.label,
            self.member_id,
            topic,
        )
        self.end(Outcome.REJOIN, f"topic(s) re-created: {topic}")

    def know_spans(self) -> None:
        """Remember the ids the spans this generation took over (retained, or
        being revoked) were opened with: their positions and marks are of that
        topic, whatever the metadata says now (the generation's spans are set)."""
        ids = {tp: s.topic_id for tp, s in self._spans.items() if s.topic_id is not None}
        self._span_ids = {
            tp: i for tp, i in ids.items() if tp in self.revoked or tp in self.retained
        }

    def _opened_with(self, tp: TopicPartition) -> UUID | None:
        """The id ``tp``'s topic had when this generation formed, or when the
        span it took ``tp`` over in was opened (None: not known)."""
        return self._span_ids.get(tp) or self._topic_ids.get(tp.topic)

    def _recreated(
        self, topic: str, topic_id: UUID | None, tps: Iterable[TopicPartition] = ()
    ) -> bool:
        """Whether ``topic_id`` is another id than ``topic`` had for this generation
        (for its partitions ``tps``, the ids their spans were opened with)."""
        known = {self._topic_ids.get(topic)} | {self._opened_with(tp) for tp in tps}
        return topic_id is not None and bool(known - {None, topic_id})

    async def _gone(
        self, due: Iterable[TopicPartition], *, refused: bool
    ) -> dict[TopicPartition, str]:
        """The partitions of ``due`` whose topic the cluster no longer has as the
        generation knew it, each with why: re-created (another topic id than the
        generation knew, certain), or, once the coordinator ``refused`` them as
        unknown, deleted (the metadata answers UNKNOWN_TOPIC_OR_PARTITION too).

        Without ``refused`` the cached metadata answers for a topic it has, and
        one it lacks (a refresh found it in error) is looked up; with it, every
        topic is. Unknown alone is no proof (the metadata may lag); a topic
        found with the same id (or none), in another error, or a lookup that
        fails, leaves the partitions live: a refusal of them is retried.
        """
        cluster = self._cluster
        topics: dict[str, list[TopicPartition]] = {}
        for tp in due:
            topics.setdefault(tp.topic, []).append(tp)
        if cluster is None or not topics:
            return {}
        gone: dict[str, str] = {}
        unsure: set[str] = set()
        for topic, tps in topics.items():
            # A partition being revoked is fetched no more: no fetch error
            # refreshed its metadata, so the cache may still show the old topic.
            look = refused or any(tp in self.revoked for tp in tps)
            info = None if look else cluster.topics.get(topic)
            if info is None:
                unsure.add(topic)
            elif self._recreated(topic, info.topic_id, tps):
                gone[topic] = "created again (another topic id)"
        if unsure:
            try:
                found = await cluster.refresh_metadata(unsure)
            except (BrokerError, KafkaConnectionError, ProtocolError, TimeoutError) as exc:
                log.debug("group %s: metadata of %s not found: %r", self.group_id, unsure, exc)
                found = {}
            for topic in unsure:
                if (info := found.get(topic)) is None:
                    continue
                if info.error_code == 0 and self._recreated(topic, info.topic_id, topics[topic]):
                    gone[topic] = "created again (another topic id)"
                elif refused and info.error_code in _UNKNOWN_TOPIC:
                    gone[topic] = "deleted (refused as unknown, and unknown to the metadata)"
        return {tp: gone[tp.topic] for tp in due if tp.topic in gone}

    def _drop_gone(self, gone: Mapping[TopicPartition, str]) -> None:
        """Say that the marks of ``gone`` are left out of this commit and end the
        generation. The marks stay: this generation's final commit looks again
        (and sends them if the topic turns out to be alive), as does the next.
        Partitions this generation said so of already are said again at DEBUG."""
        topics = ", ".join(sorted({f"{tp.topic} {why}" for tp, why in gone.items()}))
        said, self._gone_said = self._gone_said, self._gone_said | frozenset(gone)
        log.log(
            logging.DEBUG if said.issuperset(gone) else logging.WARNING,
            "group %s generation %s member %s: topic(s) %s: the topic as this generation "
            "knew it no longer exists (its committed offsets went with it), so the marks "
            "of partitions %s are dropped, not committed; the generation ends",
            self.group_id,
            self.label,
            self.member_id,
            topics,
            show_partitions(gone),
        )
        self.end(Outcome.REJOIN, f"topic(s) deleted or re-created: {topics}")

    async def _commit(
        self, offsets: Offsets | None, metadata: OffsetMetadata | None, *, forwarded: bool
    ) -> None:
        """One commit of a live generation (``Generation.commit``); ``forwarded``:
        ``offsets`` are marks (span_commits.py).

        Partitions whose topic is gone (:meth:`_gone`) are dropped from this
        attempt only; with ``offsets`` given by the application, the rest is
        committed, then :class:`~gengroup.TopicDeleted` names them.
        """
        async with self._commit_lock:
            explicit = offsets is not None and not forwarded  # the application decides alone
            wanted, carried = to_commit(
                offsets, forwarded, self._marks, self._start_marks, self._committed_metadata
            )
            if given := [tp for tp in wanted if tp in self._released]:
                if explicit:
                    raise KeyError(
                        f"{show_partitions(given)} revoked by generation {self.label}, whose "
                        "revocation is acknowledged: another member may own them and commit "
                        "their offsets now"
                    )
                wanted = {tp: o for tp, o in wanted.items() if tp not in self._released}
            for tp in wanted:
                if tp not in self.assignments and tp not in self.revoked:
                    raise KeyError(f"{tp} is not assigned in generation {self.label}")
                if explicit:
                    self._start_marks.pop(tp, None)
            due = {tp: o for tp, o in wanted.items() if o > self._committed.get(tp, -1)}
            gone = await self._gone(due, refused=False) if due else {}
            if gone:
                self._drop_gone(gone)
                due = {tp: o for tp, o in due.items() if tp not in gone}
            if due:
                await self._send(due, carried, metadata, gone)
            else:  # nothing sent: still a schedule point (the lock gave none)
                await anyio.lowlevel.checkpoint()
            if gone and explicit:
                why = "; ".join(sorted({f"{tp.topic} {w}" for tp, w in gone.items()}))
                raise TopicDeleted(
                    f"commit of group {self.group_id} generation {self.label}: the offsets "
                    f"of {show_partitions(gone)} were not stored, their topic is gone "
                    f"({why}); the generation ends",
                    gone,
                )

    async def _send(
        self,
        due: dict[TopicPartition, int],
        carried: OffsetMetadata,
        metadata: OffsetMetadata | None,
        gone: dict[TopicPartition, str],
    ) -> None:
        """Send ``due`` (:meth:`_commit`), record what was stored; partitions found
        gone after an UNKNOWN_TOPIC refusal are added to ``gone`` (not raised)."""
        sent_at = anyio.current_time()
        try:
            notes = {tp: m for tp, m in {**carried, **(metadata or {})}.items() if tp in due}
            ids = {tp: i for tp in due if (i := self._opened_with(tp)) is not None}
            results = await self._committer.commit_offsets(self.identity, due, notes or None, ids)
        except BaseException as exc:
            self.commits_failed += 1
            if isinstance(exc, Exception):  # a cancellation is no commit error
                self.commit_error = exc
            raise
        failed = {tp: code for tp, code in results.items() if code}
        # What was stored is recorded before anything else is awaited (a
        # cancellation there must not leave stored offsets unrecorded).
        for tp, off in due.items():
            if tp not in failed:
                self._offset_stored(tp)
                self._committed[tp] = max(off, self._committed.get(tp, -1))
                if tp in notes:
                    self._committed_metadata[tp] = notes[tp]
                else:  # the coordinator stored an empty string with it
                    self._committed_metadata.pop(tp, None)
        unknown = [tp for tp, code in failed.items() if code in _UNKNOWN_TOPIC]
        if unknown and (refused := await self._gone(unknown, refused=True)):
            # Refused for good in this attempt, not retried: the rest was stored.
            self._drop_gone(refused)
            gone.update(refused)
            failed = {tp: code for tp, code in failed.items() if tp not in refused}
        if not failed:
            self.commit_error = None
            self.commits_ok += 1
            self.renew_lease(sent_at)
        if failed:
            tp, code = next(iter(sorted(failed.items())))
            stored = sum(p in results and not results[p] for p in due)
            refusal = error_for_code(
                code,
                f"OffsetCommit of {self.group_id} generation {self.label} member "
                f"{self.member_id}: {len(failed)} partition(s) refused, e.g. {tp}"
                + (f" ({stored} other partition(s) stored)" if stored else ""),
            )
            self.commit_error = refusal
            self.commits_failed += 1
            raise refusal

    async def _commit_back(self, tp: TopicPartition, offset: int) -> None:
        """Commit ``offset`` for ``tp`` even below the offset committed so far (internal).

        ``Generation.commit`` never moves a committed offset backwards. A sink
        that lands a partition again from below its committed offset (the
        lake sink, once the group's offsets were reset into one of its files)
        commits the offset it lands from first, before it deletes anything,
        so that the partition's next owner starts there too, whenever this
        one stops. No metadata goes with it; retried as ``Generation.commit``.

        Raises:
            GenerationEnded: the generation has ended; nothing was sent.
            BrokerError, RequestTimedOut: as ``Generation.commit``.
        """
        if self.ended:
            raise GenerationEnded(
                f"commit: generation {self.label} of {self.group_id} has ended; "
                f"offset {offset} of {tp} was not sent"
            )
        self._committed[tp] = min(self._committed.get(tp, -1), offset - 1)
        await self._commit_retried({tp: offset}, None, forwarded=False)

    async def _commit_retried(
        self, offsets: Offsets | None, metadata: OffsetMetadata | None, *, forwarded: bool
    ) -> None:
        """:meth:`_commit`, its retriable refusals sent again (``Generation.commit``).

        Retried for the group's ``request_timeout`` (:meth:`_retried`), also while
        the generation is ending (the coordinator accepts its commits while the
        group rebalances). Once it has ended, each retry is sent under the
        generations holding its partitions' spans then (:func:`commit_in_spans`,
        one attempt each, within the same deadline); a partition without a span
        that outlived it raises :class:`~gengroup.GenerationEnded`.
        STALE_MEMBER_EPOCH is not retried here: the consumer protocol's
        committer already sent the commit again under the member's newer epoch
        if it had one.
        """
        what = f"commit of group {self.group_id} generation {self.label}"

        async def attempt() -> None:
            if not self.ended:
                await self._commit(offsets, metadata, forwarded=forwarded)
                return
            # A cooperative rebalance may have kept the spans: under their holders.
            where = f"generation {self.label} of {self.group_id}"
            if forwarded and offsets is not None:  # the spans' marks: as they are now
                await commit_in_spans(where, offsets, self._span, None, metadata, once=True)
            else:
                await commit_in_spans(
                    where, self.assignments, self._span, offsets, metadata, once=True
                )

        def retriable(exc: BaseException) -> bool:
            return not isinstance(exc, StaleMemberEpoch) and retriable_refusal(exc)

        await self._retried(attempt, what, retriable=retriable)

    async def _retried(
        self,
        attempt: Callable[[], Awaitable[None]],
        what: str,
        *,
        timeout: float | None = None,
        retriable: Callable[[BaseException], bool] = retriable_refusal,
    ) -> None:
        """Run ``attempt`` (one commit) until it succeeds, retrying its refusals.

        An error ``retriable`` accepts is retried with the client's backoff
        for at most ``timeout`` seconds in all; any other comes out as itself.

        Args:
            attempt: one commit (``Generation._commit_once``).
            what: the commit, for the timeout's message.
            timeout: seconds of retries (default: the group's ``request_timeout``).
            retriable: which errors are retried (default: :func:`retriable_refusal`).

        Raises:
            RequestTimedOut: the commit did not succeed within ``timeout``; its
                ``__cause__`` is the last error (also :attr:`commit_error`).
            Exception: what ``attempt`` raised that is not retried.
        """
        limit = self._request_timeout if timeout is None else timeout

        def timed_out(last: BaseException | None) -> BaseException:
            detail = "no attempt was answered" if last is None else f"last error: {last}"
            said = f"{what} did not complete within {round(limit, 3):g} s ({detail})"
            error = RequestTimedOut(said)
            error.__cause__ = last
            self.commit_error = error
            return error

        await retry(
            what,
            attempt,
            timeout=limit,
            backoff=self._retry_backoff,
            retriable=retriable,
            on_timeout=timed_out,
        )
