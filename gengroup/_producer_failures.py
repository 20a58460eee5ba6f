"""The producer's log of failing Produce requests: a line per broker and change of state.

A broker restarting, or leadership moving off it, fails the Produce of every
partition it leads at once. Logged per partition, that is a line per
partition (a hundred, for one event of one broker); this module logs a line
per broker and change of state instead, as the Java producer and librdkafka
do, and the per-partition detail at DEBUG. Plain state, no I/O.

* A *wave* is the partitions starting to fail on broker N with one kind of
  error (retried) together. One WARNING names the broker, the error, how many
  partitions and a few of them (``Produce to 50 partitions (orders[0],
  orders[1], orders[2] and 47 more) on broker 0 failing``) and says that
  their records are retried. It waits until a retry of one of its partitions
  goes out (or ``retry_backoff`` passed, or one gave up): the partitions of
  every answer of the broker until then join it. Partitions starting to fail
  on N with that error after that WARNING start another wave, with its own
  WARNING, however long an earlier wave of N stays open; but a partition
  starting to fail alone joins the open wave with an INFO line (``now
  failing``), so partitions that a trickle of records brings to a failing
  broker one at a time are not a WARNING each.
* A partition whose records gave up and that fails again the same way (on
  the broker, with the error it gave up with) within :data:`REMEMBER`
  seconds, nothing of it written in between, is still failing: it joins the
  open wave of that broker and error (or one opened without a line) at
  DEBUG, and its records giving up again are not said again. A broker
  failing for minutes while each record of a partition expires is then a
  line when it starts, one when records first gave up, and one when
  partitions are written again, not two per record.
* A retry of a failing partition failing on a broker with an error it
  already failed with there is DEBUG. One failing on another broker, or with
  another kind of error, is one INFO line (``now failing``) for the
  partitions that did so within the longest retry backoff (so a broker's
  partitions, retried at jittered times, make one line); it waits no longer
  than until one of them is written again or gave up.
* A partition leaves its wave when a batch of it is written again, or when
  its records failed for good (delivery timeout, an error not retried) and
  nothing of it is left to send (a batch in flight past its delivery timeout
  counts as failed). A partition's records failing for good (or its giving
  up) is a WARNING (``gave up on ...``) at once, naming the partitions of
  the wave doing so together, with their own failed attempts (each ``send``
  raises its own error), once per partition and wave, whether the partition
  gave up or goes on failing with records sent after them; those of a wave
  doing so later are gathered into one such line at most every
  :data:`GAVE_UP_EVERY` seconds (or when the wave ends). Once the last
  partition left, the wave ends:
  INFO when partitions were written again (``50 partitions (...) written
  again on broker 1, after 100 failed attempt(s)``), the gave-up WARNING if
  some gave up unsaid. Closing the producer ends the waves still open, the
  partitions still failing said to give up.
* A partition whose records gave up keeps the time it last did so
  (refreshed at each give-up, also of a partition still failing), until a
  batch of it is written or that time is :data:`REMEMBER` seconds old. A
  batch of it written in a wave is said by the wave's end; one written
  outside any wave (its records all gave up, then a record of it goes
  through at once) is said by the all-clear of the broker it was written
  on: an INFO (``5 partitions (...) written again on broker 1 since their
  records gave up on broker 0``) at once for the first, then gathering
  those written since at most every :data:`GAVE_UP_EVERY` seconds, so that
  partitions coming back one record at a time are a line or two. A
  partition is named once for an outage (its state is dropped at the
  write); one whose records last gave up longer ago is named by none. Its
  all-clear waits, as long as an open wave has yet to say that it gave up,
  for that wave's gave-up WARNING (which keeps its own pace); a partition
  failing again before its all-clear is said (a Produce refused, or records
  failing while they wait for a leader: below) is dropped from it, and said
  by a later one when it is written again. A wave's held gave-up WARNING
  naming a partition is said early, out of the wave's pace, when a line
  about that partition's next state would come first (it fails in another
  wave, or another wave says it written again): the log stays in order.
* Records that waited for a leader (none known: the metadata names none, or
  the refresh fails) and expire unsent, their partition failing in no wave
  (:meth:`Failures.no_leader`), are never a failing Produce: no wave says
  them. A partition doing so is a WARNING (``gave up on 5 partitions (...)
  waiting for a leader: none known for 30.0 s (...)``) once until it is
  written again (or :data:`REMEMBER` seconds passed since its records last
  did so), not once per batch: the first at once, those doing so later
  gathered into one line at most every :data:`GAVE_UP_EVERY` seconds, as a
  wave's gave-up lines are. They are records giving up as above, so such a
  partition is dropped from a held all-clear, and its next write is said by
  an all-clear (``... since its records gave up waiting for a leader``),
  which waits for that WARNING if it is held; that WARNING is said early,
  out of its pace, when a line about the partition's next state would come
  first, and a wave's held gave-up WARNING naming the partition before it;
  closing the producer says it if held. Such a partition failing on a broker
  afterwards starts to fail anew (a wave's WARNING), even the way its records
  gave up there before: that is no longer its last state. A failing
  partition's records that give up waiting for a leader are said by their
  wave, and leave it in this state: its next records doing so outside the
  wave are DEBUG (a crashed leader is first a broken connection, then none).

A single partition is named as itself: ``Produce to t[0] on broker 0 failing
(1 attempt(s)) ...``, then ``t[0] written again on broker 0, after 6 failed
attempt(s)``.

The failures are collected as the answers come (:meth:`Failures.failed`) and
logged by :meth:`Failures.report`, which the sender calls at the end of each
drain, before the requests of the drain go out; it says when to call it
again for a line held.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from typing import Protocol

from ._types import TopicPartition

__all__ = [
    "GAVE_UP_EVERY",
    "NO_LEADER",
    "REMEMBER",
    "Failure",
    "Failures",
    "Queue",
    "Wave",
    "partitions_named",
]

log = logging.getLogger("gengroup")

#: How many partitions a line names before ``and N more``.
NAMED = 3

#: How long (seconds) a partition whose records gave up, failing again the
#: same way, is taken as still failing rather than as starting to fail.
REMEMBER = 300.0

#: The least time (seconds) between two gave-up WARNINGs of a wave.
GAVE_UP_EVERY = 60.0

#: Where records gave up that waited for a leader (none known), in place of a broker.
NO_LEADER = -1

#: A broker and a kind of error.
Key = tuple[int, object]

_FAILING = (
    "producer: Produce to %s on broker %d %s%s, retrying until each record's "
    "delivery_timeout: %s: %s"
)
_WRITTEN = "producer: %s written again on %s, after %d failed attempt(s)%s"
_BACK = "producer: %s written again on broker %d since %s records gave up%s"
_NO_LEADER = (
    "producer: gave up on %s waiting for a leader: none known for %.1f s (%s: %s); their "
    "records failed, each send raising its error (%s)"
)


def partitions_named(tps: Iterable[TopicPartition]) -> str:
    """``t[0]`` for one partition, ``5 partitions (t[0], t[1], t[2] and 2 more)`` for more."""
    names = [str(tp) for tp in sorted(tps)]
    if len(names) == 1:
        return names[0]
    if len(names) <= NAMED:
        listed = ", ".join(names[:-1]) + f" and {names[-1]}"
    else:
        listed = ", ".join(names[:NAMED]) + f" and {len(names) - NAMED} more"
    return f"{len(names)} partitions ({listed})"


def _brokers(nodes: Collection[int]) -> str:
    ids = [str(node) for node in sorted(nodes)]
    if len(ids) == 1:
        return f"broker {ids[0]}"
    return "brokers " + ", ".join(ids[:-1]) + f" and {ids[-1]}"


def _kind(error: BaseException) -> object:
    return getattr(error, "code", None) or type(error)


def _name(error: BaseException) -> str:
    return type(error).__name__


class Queue(Protocol):
    """What is logged of a partition's queue (:class:`gengroup._producer_queue.Queue`)."""

    tp: TopicPartition
    failing: Wave | None  # the wave it belongs to
    failures: int  # its failed attempts since it started failing
    in_flight: bool  # a Produce request carries a batch of it

    def idle(self) -> bool:
        """Nothing of the partition is left to send: queued, waiting for a
        retry, or in flight within its delivery timeout."""
        ...


#: A failure to log: the partition's queue, the error, its failed attempts then.
Failure = tuple[Queue, BaseException, int]


class Wave:
    """The partitions that started failing on one broker with one kind of
    error together, until each is written again or gave up."""

    __slots__ = (
        "announced",
        "errors",
        "failing",
        "first",
        "follows",
        "gave_up",
        "key",
        "node",
        "rejoined",
        "said",
        "said_at",
        "seen",
        "started",
        "unsaid",
        "written",
        "written_on",
    )

    def __init__(self, key: Key, started: float, follows: Wave | None = None) -> None:
        self.key = key  # the broker they started failing on, the kind of error
        self.node: int = key[0]
        self.started = started  # when
        self.first: list[Failure] = []  # the failure each started with
        self.announced = False  # its WARNING was logged
        self.follows = follows  # an announced wave of the key, open when it started
        # Its partitions that gave up before, still failing the same way.
        self.rejoined: set[TopicPartition] = set()
        self.failing: dict[TopicPartition, Queue] = {}  # the partitions still failing
        # The (broker, kind of error) each failing partition failed with.
        self.seen: dict[TopicPartition, set[Key]] = {}
        self.written: dict[TopicPartition, int] = {}  # their failed attempts
        self.written_on: set[int] = set()
        self.gave_up: dict[TopicPartition, int] = {}  # their failed attempts
        self.unsaid: dict[TopicPartition, int] = {}  # those not said yet
        self.said: set[TopicPartition] = set()  # those said
        self.said_at: float | None = None  # its last gave-up WARNING
        # The last error the records of a failing partition failed with for good.
        self.errors: dict[TopicPartition, BaseException] = {}


class _Shift:
    """Failing partitions failing on a broker, or with a kind of error, not
    seen before: one INFO line, held to gather them."""

    __slots__ = ("failed", "started")

    def __init__(self, started: float) -> None:
        self.started = started
        self.failed: list[Failure] = []


class Failures:
    """The waves of failing Produce requests, and their log lines.

    Args:
        hold: how long a wave's WARNING waits at most (``retry_backoff``).
        settle: how long a ``now failing`` line waits at most (the longest
            retry backoff, jitter included).
    """

    def __init__(self, hold: float, settle: float) -> None:
        self._hold = hold
        self._settle = settle
        self._open: list[Wave] = []  # in the order they started
        self._pending: dict[Key, Wave] = {}  # not announced yet
        self._shifts: dict[Key, _Shift] = {}
        # The partitions whose records gave up: how they failed, and when.
        self._gave_up: dict[TopicPartition, tuple[set[Key], float]] = {}
        self._pruned = 0.0  # when _gave_up was last rid of its old entries
        # The partitions whose records gave up, not written since: the broker
        # of the wave they last gave up in (NO_LEADER: waiting for a leader) and
        # when (None: since the last report, stamped then).
        self._down: dict[TopicPartition, tuple[int, float | None]] = {}
        self._unstamped: list[TopicPartition] = []
        # Per broker, the partitions written on it outside a wave after giving
        # up, not said yet: where each gave up (as in _down); its last such line.
        self._back: dict[int, dict[TopicPartition, int]] = {}
        self._back_at: dict[int, float] = {}
        # The partitions whose records gave up waiting for a leader, not said yet:
        # the error and how long they waited; the last such line.
        self._leaderless: dict[TopicPartition, tuple[BaseException, float]] = {}
        self._leaderless_at: float | None = None
        # The partitions of a wave whose records give up waiting for a leader
        # (no_leader), until records_failed says them given up.
        self._waited: set[TopicPartition] = set()
        self._now = 0.0  # the time of the last report

    def failed(self, queue: Queue, error: BaseException, node: int, now: float) -> None:
        """The Produce of ``queue``'s partition failed on broker ``node`` with
        ``error`` at ``now`` and is retried: logged now (DEBUG) or by :meth:`report`."""
        queue.failures += 1
        tp, key = queue.tp, (node, _kind(error))
        wave = queue.failing
        if wave is None:
            self._unheld(tp)
            keys, when = self._gave_up.pop(tp, (set(), 0.0))
            if key in keys and now - when <= REMEMBER:  # still failing
                wave = self._still_failing(key, now)
                wave.rejoined.add(tp)
                attempts = f" ({queue.failures} attempt(s))"
                log.debug(_FAILING, tp, node, "still failing", attempts, _name(error), error)
            else:
                wave = self._pending.get(key)
                if wave is None:
                    wave = self._pending[key] = Wave(key, now, self._latest(key))
                    self._open.append(wave)
                wave.first.append((queue, error, queue.failures))
                self._say_older(tp, wave, now)  # its gave-up before its new failing
            queue.failing = wave
            wave.failing[tp] = queue
            wave.seen[tp] = {key}
        elif key in wave.seen[tp]:
            attempts = f" ({queue.failures} attempt(s))"
            log.debug(_FAILING, tp, node, "still failing", attempts, _name(error), error)
        else:
            wave.seen[tp].add(key)
            shift = self._shifts.get(key)
            if shift is None:
                shift = self._shifts[key] = _Shift(now)
            shift.failed.append((queue, error, queue.failures))

    def records_failed(self, queue: Queue, error: BaseException) -> None:
        """Records of a failing partition failed for good with ``error``: said
        by :meth:`report` (once per partition and wave)."""
        wave, tp = queue.failing, queue.tp
        if wave is not None:
            wave.errors[tp] = error
            self._records_failed(wave, queue)
        elif (held := self._unheld(tp)) is not None:
            # (e.g. the Cluster closed): its held all-clear is no longer true,
            # and its next write outside a wave is said by one again.
            self._down[tp] = (held, self._now)

    def no_leader(self, queue: Queue, error: BaseException, waited: float, now: float) -> None:
        """Records of ``queue``'s partition failed for good with ``error`` at
        ``now`` (their delivery timeout), after waiting ``waited`` seconds for a
        leader, unsent since: if no wave says it (the partition is failing in
        none), said by :meth:`report`, once until the partition is written again."""
        if queue.failing is not None:  # said by its wave (records_failed, next)
            self._waited.add(queue.tp)  # as records that gave up waiting for a leader
            return
        tp = queue.tp
        self._unheld(tp)  # its held all-clear is no longer true
        self._gave_up.pop(tp, None)  # failing on a broker again is a change of state
        where, at = self._down.get(tp, (None, None))
        self._down[tp] = (NO_LEADER, now)  # its next write is said by an all-clear
        if where == NO_LEADER and at is not None and now - at <= REMEMBER:  # still without one
            log.debug("producer: %s still without a leader: %s: %s", tp, _name(error), error)
            return
        self._say_older(tp, None, now)  # its gave-up WARNING of a wave first
        self._leaderless[tp] = (error, waited)

    def _unheld(self, tp: TopicPartition) -> int | None:
        """Take ``tp`` out of the all-clear lines held (it fails again): where
        it gave up, if it was held."""
        for on, back in list(self._back.items()):
            if (where := back.pop(tp, None)) is not None:
                if not back:
                    del self._back[on]
                return where
        return None

    def _records_failed(self, wave: Wave, queue: Queue, now: float | None = None) -> None:
        tp = queue.tp
        # (Stamped by the next report, if not now.) Records that gave up while
        # waiting for a leader (no_leader, just before) leave the partition in
        # that state: its next records doing so are not a change of state.
        waited = tp in self._waited
        self._waited.discard(tp)
        if now is not None and not waited:  # it leaves the wave: as its records last gave up
            waited = self._down.get(tp, (None, None))[0] == NO_LEADER
        self._down[tp] = (NO_LEADER if waited else wave.node, now)
        if now is None:
            self._unstamped.append(tp)
        wave.gave_up[tp] = queue.failures
        # Not said again in the wave, nor for a partition said when it first gave up.
        if tp not in wave.said and tp not in wave.rejoined:
            wave.unsaid[tp] = queue.failures

    def written(self, queue: Queue, node: int) -> None:
        """A batch of ``queue``'s partition was written on broker ``node``: if
        its records gave up, said by its wave's end, or (outside a wave) by the
        broker's all-clear line, logged by :meth:`report`."""
        tp = queue.tp
        down = self._down.pop(tp, None) if self._down else None
        if down is not None and queue.failing is None:  # (in a wave: said by its end)
            where, at = down
            if at is None or self._now - at <= REMEMBER:  # else of an outage long over
                self._back.setdefault(node, {})[tp] = where
        if queue.failing is None:
            if self._gave_up:
                self._gave_up.pop(tp, None)
            return
        self._flush(tp)  # what it failed with is said before (its wave may change)
        wave = queue.failing
        # Its records that gave up, if not said yet, keep the wave's pace (at
        # most every GAVE_UP_EVERY): the wave's end says them before its own line.
        # An older wave that has yet to say it gave up there says it now: the
        # line saying it written again must not come first (a rare case: a
        # partition that gave up on one broker, then failed on another).
        self._say_older(tp, wave, self._now)
        failures, queue.failing, queue.failures = queue.failures, None, 0
        self._leave(wave, tp)
        wave.written[tp] = failures
        wave.written_on.add(node)
        if wave.failing or len(wave.first) > 1:
            log.debug(_WRITTEN, tp, _brokers((node,)), failures, "")
        if not wave.failing:
            self._close(wave)

    def report(self, now: float) -> float:
        """Log the lines due: the WARNING of each new wave, the ``now failing``
        lines, the end of the waves whose partitions all gave up, the
        all-clear of partitions written again after giving up.

        Returns:
            When to call it again at the latest, for a line held.
        """
        self._now = now
        for tp in self._unstamped:
            down = self._down.get(tp)
            if down is not None and down[1] is None:
                self._down[tp] = (down[0], now)
        self._unstamped.clear()
        for wave in list(self._pending.values()):
            due = now >= wave.started + self._hold
            if due or any(q.in_flight or q.idle() for q in wave.failing.values()):
                self._announce(wave)
        for key, shift in list(self._shifts.items()):
            if now >= shift.started + self._settle or any(q.idle() for q, _, _ in shift.failed):
                self._log_shift(key, shift)
        for wave in list(self._open):
            for queue in [queue for queue in wave.failing.values() if queue.idle()]:
                self._give_up(wave, queue, now)
            if not wave.failing:
                self._close(wave)
            elif not wave.announced:  # its failing is said first
                continue
            elif wave.unsaid and (wave.said_at is None or now >= wave.said_at + GAVE_UP_EVERY):
                self._say_gave_up(wave, now)
        if self._leaderless and (
            self._leaderless_at is None or now >= self._leaderless_at + GAVE_UP_EVERY
        ):
            self._say_leaderless(now)
        if now >= self._pruned + REMEMBER:
            self._pruned = now
            for tp in [tp for tp, (_, at) in self._gave_up.items() if now - at > REMEMBER]:
                del self._gave_up[tp]
            for tp, (_, at) in list(self._down.items()):
                if at is not None and now - at > REMEMBER:
                    del self._down[tp]
        for node in list(self._back):
            due = now >= self._back_at.get(node, -GAVE_UP_EVERY) + GAVE_UP_EVERY
            if due and self._say_back(node):
                self._back_at[node] = now
        held = self._leaderless_at if self._leaderless else None  # a line held
        return min(
            [wave.started + self._hold for wave in self._pending.values()]
            + [shift.started + self._settle for shift in self._shifts.values()]
            + [w.said_at + GAVE_UP_EVERY for w in self._open if w.unsaid and w.said_at is not None]
            + ([held + GAVE_UP_EVERY] if held is not None else [])
            # (one past due waits for a gave-up WARNING of a wave, whose time is above)
            + [
                a + GAVE_UP_EVERY
                for n, a in self._back_at.items()
                if n in self._back and now < a + GAVE_UP_EVERY  # (as "due" is decided)
            ],
            default=float("inf"),
        )

    def close(self, error: BaseException, unanswered: BaseException | None = None) -> None:
        """The producer closed: log what is held and the end of every wave,
        the records of its partitions failed with ``error`` (``unanswered``
        for those in flight)."""
        for wave in list(self._pending.values()):
            self._announce(wave)
        for key, shift in list(self._shifts.items()):
            self._log_shift(key, shift)
        for wave in list(self._open):
            for queue in list(wave.failing.values()):
                failed = unanswered if queue.in_flight and unanswered is not None else error
                wave.errors[queue.tp] = failed  # its records fail for another reason
                wave.rejoined.discard(queue.tp)
                wave.said.discard(queue.tp)
                self._give_up(wave, queue, -REMEMBER)
            self._close(wave)
        if self._leaderless:
            self._say_leaderless(None)
        for node in list(self._back):
            self._say_back(node)

    def _flush(self, tp: TopicPartition) -> None:
        """Log the lines held that name ``tp``."""
        for wave in list(self._pending.values()):
            if tp in wave.failing:
                self._announce(wave)
        for key, shift in list(self._shifts.items()):
            if any(queue.tp == tp for queue, _, _ in shift.failed):
                self._log_shift(key, shift)

    def _latest(self, key: Key) -> Wave | None:
        """The newest open wave of ``key``."""
        return next((wave for wave in reversed(self._open) if wave.key == key), None)

    def _still_failing(self, key: Key, now: float) -> Wave:
        """The wave a partition failing again with ``key`` after giving up joins:
        the newest open one of ``key``, or a new one without a line of its own."""
        wave = self._latest(key)
        if wave is None:
            wave = Wave(key, now)
            wave.announced = True  # said when its partitions first failed
            self._open.append(wave)
        return wave

    def _announce(self, wave: Wave) -> None:
        wave.announced = True
        if self._pending.get(wave.key) is wave:
            del self._pending[wave.key]
        joined = wave.follows
        if len(wave.first) == 1 and joined is not None and joined in self._open:
            # One partition starting to fail alone on a broker failing that way.
            self._open.remove(wave)
            for tp, queue in wave.failing.items():
                queue.failing = joined
                joined.failing[tp] = queue
                joined.seen[tp] = wave.seen[tp]
            joined.rejoined |= wave.rejoined
            joined.errors.update(wave.errors)
            joined.gave_up.update(wave.gave_up)
            joined.unsaid.update(wave.unsaid)
            joined.said |= wave.said
            _log_failing(logging.INFO, "now failing", wave.node, wave.first)
            return
        _log_failing(logging.WARNING, "failing", wave.node, wave.first)

    def _log_shift(self, key: tuple[int, object], shift: _Shift) -> None:
        del self._shifts[key]
        _log_failing(logging.INFO, "now failing", key[0], shift.failed)

    def _give_up(self, wave: Wave, queue: Queue, now: float) -> None:
        self._records_failed(wave, queue, now)
        self._gave_up[queue.tp] = (wave.seen[queue.tp], now)
        self._leave(wave, queue.tp)
        queue.failing, queue.failures = None, 0

    @staticmethod
    def _leave(wave: Wave, tp: TopicPartition) -> None:
        del wave.failing[tp]
        del wave.seen[tp]
        wave.rejoined.discard(tp)
        wave.said.discard(tp)

    def _close(self, wave: Wave) -> None:
        """Log the end of ``wave``: its partitions were written again or gave up."""
        if not wave.announced:  # every failure is said at WARNING
            self._announce(wave)
        self._open.remove(wave)
        written, gave_up = wave.written, wave.gave_up
        where = _brokers(wave.written_on) if written else ""
        if wave.unsaid:
            also = f"; {partitions_named(written)} written again on {where}" if written else ""
            self._say_gave_up(wave, None, also)
        elif written:
            since = (
                f" since failing on broker {wave.node}" if {wave.node} != wave.written_on else ""
            )
            if gave_up:
                since += f"; the records of {partitions_named(gave_up)} failed before"
            log.info(_WRITTEN, partitions_named(written), where, sum(written.values()), since)
        else:  # every partition gave up, said already
            log.debug("producer: the partitions failing on broker %d all gave up", wave.node)

    def _say_back(self, node: int) -> bool:
        """The all-clear of the partitions written on broker ``node`` after giving
        up, but those an open wave has yet to say gave up (said after it): whether
        a line was logged."""
        held = self._back.pop(node)
        back = {tp: where for tp, where in held.items() if not self._unsaid(tp)}
        if len(back) < len(held):
            self._back[node] = {tp: on for tp, on in held.items() if tp not in back}
        if not back:
            return False
        failed_on = set(back.values())
        brokers = failed_on - {NO_LEADER}
        said = [f" on {_brokers(brokers)}"] if brokers and failed_on != {node} else []
        if NO_LEADER in failed_on:
            said.append(" waiting for a leader")
        where = " or".join(said)
        log.info(_BACK, partitions_named(back), node, "its" if len(back) == 1 else "their", where)
        return True

    def _say_older(self, tp: TopicPartition, wave: Wave | None, now: float) -> None:
        """Say the held gave-up WARNING of every open wave but ``wave`` that has
        yet to say ``tp`` gave up (its pace restarts from ``now``): a line about
        ``tp``'s next state must not come before it."""
        # (Not a wave whose failing WARNING is held: that is said first, by report.)
        for older in [w for w in self._open if w is not wave and w.announced and tp in w.unsaid]:
            self._say_gave_up(older, now)
        if tp in self._leaderless:  # nor the line that it gave up waiting for a leader
            self._say_leaderless(now)

    def _unsaid(self, tp: TopicPartition) -> bool:
        """An open wave, or the line of partitions that gave up waiting for a
        leader, has yet to say that ``tp``'s records gave up."""
        return tp in self._leaderless or any(tp in wave.unsaid for wave in self._open)

    def _say_leaderless(self, now: float | None) -> None:
        """The WARNING of the partitions that gave up waiting for a leader since the last."""
        leaderless, self._leaderless = self._leaderless, {}
        self._leaderless_at = now if now is not None else self._leaderless_at
        error, _ = leaderless[min(leaderless)]
        why = error.__cause__ or error
        waited = max(waited for _, waited in leaderless.values())
        named = partitions_named(leaderless)
        log.warning(_NO_LEADER, named, waited, _name(why), why, _name(error))

    def _say_gave_up(self, wave: Wave, now: float | None, also: str = "") -> None:
        """The WARNING of ``wave``'s partitions that gave up since the last."""
        unsaid, wave.unsaid = wave.unsaid, {}
        wave.said_at = now if now is not None else wave.said_at
        wave.said |= unsaid.keys() & wave.failing.keys()
        error = next((wave.errors[tp] for tp in sorted(unsaid) if tp in wave.errors), None)
        if now is not None and wave.failing:
            also = f"; {partitions_named(wave.failing)} still failing"
        log.warning(
            "producer: gave up on %s failing since Produce to broker %d failed, after %d "
            "failed attempt(s): their records failed, each send raising its error (%s)%s",
            partitions_named(unsaid),
            wave.node,
            sum(unsaid.values()),
            "their delivery timeout, or an error not retried"
            if error is None
            else f"{_name(error)}: {error}",
            also,
        )


def _log_failing(level: int, said: str, node: int, failed: list[Failure]) -> None:
    """One line for the partitions of ``failed`` (each named, at DEBUG, if several)."""
    queue, error, attempts = min(failed, key=lambda failure: failure[0].tp)  # the first named
    if len(failed) == 1:
        counted = f" ({attempts} attempt(s))"
        log.log(level, _FAILING, queue.tp, node, said, counted, _name(error), error)
        return
    what = partitions_named(queue.tp for queue, _, _ in failed)
    log.log(level, _FAILING, what, node, said, "", _name(error), error)
    if log.isEnabledFor(logging.DEBUG):
        for queue, error, attempts in failed:
            counted = f" ({attempts} attempt(s))"
            log.debug(_FAILING, queue.tp, node, said, counted, _name(error), error)
