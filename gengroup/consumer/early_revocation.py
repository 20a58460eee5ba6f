"""A revocation begun before the generation revoking it formed (the consumer protocol).

Theory of operation:

Under the consumer protocol (KIP-848) the coordinator fences a member that
has not acknowledged a revocation (a heartbeat no longer naming the
partitions) within its ``rebalance_timeout``. The generation that revokes
them forms only once the coordinator answered OffsetFetch for the
partitions it keeps or adds; one that refuses it (loading) for longer would
get the member fenced, and its retained partitions' workers restarted.

So at the first failed attempt to form that generation
(:meth:`~gengroup.consumer.consumer_protocol.ConsumerProtocolMember.form_generation`)
the member releases the revoked spans at once (they are revoked whatever
happens): an :class:`EarlyRevocation` cancels their tasks, and its
:meth:`~EarlyRevocation.run`, beside the member's heartbeat, waits for them
to return, commits the marks they made (under the member's newest epoch,
through the ended generation that held them, its retriable refusals retried
until the revocation's deadline: timed from the first revocation while one
is unacknowledged, never later than Kafka's timer, which starts then or is
restarted later), then acknowledges: the heartbeat reported
the partitions as owned until then. Marks left unstored by the deadline are
dropped and named in one WARNING: the partitions' new owner processes their
records again. The member may have been fenced meanwhile (a task that took
longer than ``rebalance_timeout`` to return; past it, the member waits for
its next heartbeat's answer to know, and so does a generation forming
meanwhile before it takes the revocation over): then nothing is acknowledged nor said,
and the fencing revokes what is left. The retained partitions'
workers run on throughout.

Until then the revocation holds the spans (``Span.revoker``): offsets a task
gives for their partitions as it returns (``gen.commit({tp: offset})`` on
the ended generation) are sent through it at once (:meth:`EarlyRevocation.commit`,
under the newest epoch, by its deadline; past it still once: the
coordinator's member epoch check protects a new owner; refused then, they
raise the held generation's ``GenerationEnded``, so the task returns, and
are named in the WARNING), not after the generation revoking them formed;
a commit of marks leaves theirs to :meth:`~EarlyRevocation.run`
(:mod:`~gengroup.consumer.span_commits`).

If the generation forms first, it takes the revocation over
(:meth:`EarlyRevocation.hand_to`): it holds the spans (their tasks are
awaited under the teardown watchdog, timed from their cancellation) and
commits their marks with its own before acknowledging, as it does for the
spans it revokes itself (``running.py``). Either way the generation names
the partitions in ``revoked``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

import anyio

from .._config import GroupConfig
from .._errors import (
    BrokerError,
    GenerationEnded,
    KafkaConnectionError,
    ProtocolError,
    RequestTimedOut,
)
from .._types import TopicPartition, show_partitions
from .commits import OffsetMetadata
from .committing import retriable_refusal
from .generation import Generation, Span
from .ownership import Ownership

__all__ = ["EarlyRevocation"]

log = logging.getLogger("gengroup")


@dataclass(eq=False)
class EarlyRevocation:
    """Partitions revoked before the generation revoking them formed.

    Attributes:
        partitions: the partitions revoked.
        held_by: the ended generation that held their spans (its committer
            sends under the member's newest epoch).
        incarnation: the member's incarnation when they were released.
        spans: their spans, closed (their tasks cancelled) when released.
        deadline: when its commits must give up (``anyio.current_time()``
            terms; None: no revocation pending), so that the acknowledgement
            comes before the coordinator's ``rebalance_timeout``.
        acknowledged: the heartbeat no longer reports them.
        lost: the member was fenced before it acknowledged them.
    """

    partitions: frozenset[TopicPartition]
    held_by: Generation
    incarnation: int
    deadline: Callable[[], float | None]
    spans: list[Span] = field(default_factory=list)
    acknowledged: bool = False
    lost: bool = False
    #: Past ``rebalance_timeout``: the acknowledgement waits for the answer to a
    #: heartbeat sent from then on (so does a generation taking it over).
    awaiting: float = float("-inf")
    #: Offsets given for its partitions whose commit failed at its deadline
    #: (named in its WARNING), and why.
    given_up: dict[TopicPartition, int] = field(default_factory=dict)
    given_up_why: BaseException | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    @classmethod
    def release(
        cls,
        own: Ownership,
        partitions: frozenset[TopicPartition],
        held_by: Generation,
        incarnation: int,
        epoch: int,
        why: BaseException,
        deadline: Callable[[], float | None],
    ) -> EarlyRevocation:
        """Close the spans of ``partitions`` now (cancelling their tasks): forming
        the generation revoking them at member epoch ``epoch`` failed (``why``)."""
        log.info(
            "group %s member %s: forming the generation that revokes [%s] failed (%s): "
            "their tasks are cancelled now",
            held_by.group_id,
            held_by.member_id,
            show_partitions(partitions),
            why,
        )
        spans = own.release(sorted(partitions), why=f"revoked at member epoch {epoch}")
        revocation = cls(partitions, held_by, incarnation, deadline, spans)
        for span in spans:
            span.revoker = revocation  # its commits go through it (span_commits.py)
        return revocation

    def hand_to(self, gen: Generation) -> None:
        """``gen``, the generation revoking the partitions, formed before the
        revocation was acknowledged: it holds their spans from here (their
        marks, and those made as their tasks return, go into its commit).

        A partition ``gen`` assigns again (its topic deleted and created
        again: the coordinator assigns the new topic's partition while the
        old one's revocation is pending) is not handed over: its marks are the
        old topic's. Its span stays closed under the ended generation, which
        ``gen`` awaits before it starts the partition again as added, as
        running.py does for a topic created again under a kept span."""
        self.scope.cancel()
        revoked = [s for s in self.spans if s.tp in gen.revoked]
        for span in self.spans:
            span.revoker = None
            if span.gen is not gen and span in revoked:
                span.hand_to(gen)
        # Their commits name the topic ids the spans were opened with
        # (``gen.know_spans`` saw only those its host still had).
        ids = {s.tp: s.topic_id for s in revoked if s.topic_id is not None}
        gen._span_ids = {**ids, **gen._span_ids}

    async def run(
        self,
        own: Ownership,
        config: GroupConfig,
        acknowledge: Callable[[EarlyRevocation], Awaitable[int | None]],
    ) -> None:
        """Wait for the spans' tasks, commit their marks by :attr:`deadline`, acknowledge.

        ``acknowledge`` returns the member epoch, or None if the member was
        fenced since (then nothing is said): past the coordinator's
        ``rebalance_timeout`` it waits for a heartbeat's answer to tell.
        """
        gen = self.held_by
        with self.scope:
            for span in self.spans:
                await span.idle.wait()
            marks: dict[TopicPartition, int] = {}
            for span in self.spans:
                tp = span.tp
                if span.gen is not gen:
                    span.hand_to(gen)
                marks[tp] = max(span.pending, gen._marks.get(tp, -1))
                if marks[tp] > gen._marks.get(tp, -1):
                    gen._marks[tp] = marks[tp]
                span.pending = -1
                if own.spans.get(tp) is span:
                    del own.spans[tp]  # its tasks returned: the partition is free
            failure = await self._commit(marks, config)
            unstored = sorted(
                tp
                for tp in marks
                if max(gen._marks.get(tp, -1), gen._start_marks.get(tp, -1))
                > gen._committed.get(tp, -1)
            )
            epoch = await acknowledge(self)  # (past rebalance_timeout: after a heartbeat)
            # Acknowledged (or lost), another member may own them: nothing commits them from here.
            gen._released = gen._released | self.partitions
            for tp in self.partitions:
                gen._marks.pop(tp, None)
                gen._start_marks.pop(tp, None)
            if epoch is None:
                return  # fenced meanwhile: the fencing said it
            log.info(
                "group %s member %s: revoked [%s] at epoch %d, before the generation revoking "
                "them formed; acknowledging",
                gen.group_id,
                gen.member_id,
                show_partitions(self.partitions),
                epoch,
            )
            dropped = set(self.given_up) | (set(unstored) if failure is not None else set())
            if dropped:
                log.warning(
                    "group %s member %s: commit of revoked [%s] failed before the generation "
                    "revoking them formed: %s; their marks are dropped, as are offsets given "
                    "for them (their new owner processes their records since the last commit "
                    "again)",
                    gen.group_id,
                    gen.member_id,
                    show_partitions(dropped),
                    failure or self.given_up_why,
                )

    async def _commit(
        self,
        marks: dict[TopicPartition, int],
        config: GroupConfig,
    ) -> BaseException | None:
        """Commit ``marks`` (those not stored yet) until ``deadline()``; why it failed, or None."""
        gen = self.held_by
        # As marks: the generation's commit adds their start marks (consumer/recordless.py).
        due = {
            tp: m
            for tp, m in marks.items()
            if max(m, gen._start_marks.get(tp, -1)) > gen._committed.get(tp, -1)
        }
        if not due:
            return None
        by = self.deadline()
        left = config.request_timeout if by is None else by - anyio.current_time()
        left = min(left, config.request_timeout)
        if left < gen._retry_backoff:
            return RequestTimedOut(
                f"commit of group {gen.group_id} member {gen.member_id}: {max(left, 0.0):.3f} s "
                f"were left before the coordinator's rebalance_timeout="
                f"{config.rebalance_timeout} s for the revocation runs out, too little to "
                "send the revoked marks"
            )
        what = f"commit of revoked [{show_partitions(due)}] of group {gen.group_id}"
        try:
            await gen._retried(partial(gen._commit, due, None, forwarded=True), what, timeout=left)
        except (BrokerError, KafkaConnectionError, ProtocolError, TimeoutError) as exc:
            return exc
        return None

    def ended(self, given: str) -> GenerationEnded:
        """What a commit naming ``given`` of its partitions raises once :attr:`lost`:
        the held generation's own (a task raising it on its way out returned)."""
        return GenerationEnded(
            f"commit: {given} of group {self.held_by.group_id} were lost with the membership "
            "(fenced); nothing was sent",
            self.held_by.identity,
        )

    async def commit(
        self, offsets: Mapping[TopicPartition, int], metadata: OffsetMetadata | None, *, once: bool
    ) -> None:
        """Offsets given for its partitions while their tasks return (a task's
        ``gen.commit({tp: offset})`` on its way out: span_commits.py).

        Sent at once, under the member's newest epoch, without waiting for the
        generation revoking them; its retriable refusals retried until
        :attr:`deadline` (at most ``request_timeout``; ``once``: one attempt).

        Raises:
            KeyError: the revocation was acknowledged: another member may own
                the partitions.
            GenerationEnded: the member was fenced first (the held generation's
                own: a task raising it on its way out returned).
            GenerationEnded: its retriable refusals went on until the
                revocation's deadline (at least one attempt is made): the
                offsets are dropped as its marks would be, and named in its
                WARNING.
            BrokerError, KafkaConnectionError, RequestTimedOut: as
                ``Generation.commit``.
        """
        gen, given = self.held_by, show_partitions(offsets)
        if self.acknowledged:
            raise KeyError(
                f"{given} of group {gen.group_id} were revoked and their revocation "
                "acknowledged: another member may own them and commit their offsets now"
            )
        if self.lost:
            raise self.ended(given)
        attempt = partial(gen._commit, dict(offsets), metadata, forwarded=False)
        if once:
            await attempt()
            return
        by = self.deadline()
        left = gen._request_timeout
        if by is not None:
            left = min(left, by - anyio.current_time())
        what = f"commit of revoked [{given}] of group {gen.group_id}"
        once = left < gen._retry_backoff
        try:
            if once:
                # Past the deadline still one attempt: until the acknowledgement the
                # coordinator assigns the partitions to no other member, and once it
                # fenced this one its member epoch check refuses the commit.
                await attempt()
            else:
                await gen._retried(attempt, what, timeout=left)
        except (BrokerError, KafkaConnectionError, ProtocolError, TimeoutError) as exc:
            late = by is not None and (once or anyio.current_time() >= by)
            if not late or not (retriable_refusal(exc) or isinstance(exc, RequestTimedOut)):
                raise
            # As the revocation's marks left unstored: dropped, named in its WARNING;
            # the task returns (the held generation's own GenerationEnded).
            self.given_up.update(offsets)
            self.given_up_why = exc
            raise GenerationEnded(
                f"commit: {given} of group {gen.group_id} were revoked and their commit "
                f"failed by the revocation's deadline ({exc}); nothing was stored",
                gen.identity,
            ) from exc
