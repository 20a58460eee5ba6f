"""The producer's log of failing Produce requests: a line per broker and change of state.

A broker restarting, or leadership moving off it, fails the Produce of every
partition it leads at once. Logged per partition, that is a line per
partition (a hundred, for one event of one broker); this module logs a line
per broker and change of state instead, as the Java producer and librdkafka
do, and the per-partition detail at DEBUG. Plain state, no I/O.

* An *episode* starts when the Produce of a partition fails on broker N with
  an error that is retried while no episode of N is open: one WARNING names
  the broker, the error, how many partitions fail with it and a few of them
  (``Produce to 50 partitions (orders[0], orders[1], orders[2] and 47 more)
  on broker 0 failing``), and says that their records are retried. A
  partition failing on N later, while the episode is open, joins it (DEBUG).
* A retry failing with an error the episode already saw is DEBUG, wherever it
  was sent (leadership may have moved); one it had not seen is one INFO line
  (``now failing``) for all the partitions that failed with it together.
* A partition leaves the episode when a batch of it is written again, or when
  its records failed for good (delivery timeout, an error not retried) and
  nothing of it is left to send. Once the last one left, one line closes the
  episode: INFO when all were written again (``50 partitions (...) written
  again on broker 1, after 100 failed attempt(s)``), a WARNING naming those
  whose records failed otherwise (each ``send`` raises its own error).

A single partition is named as itself: ``Produce to t[0] on broker 0 failing
(1 attempt(s)) ...``, then ``t[0] written again on broker 0, after 6 failed
attempt(s)``.

The failures are collected as the answers come (:meth:`Failures.failed`) and
logged by :meth:`Failures.report`, which the sender calls at the end of each
drain, before the requests of the drain go out. The WARNING of an episode
waits until a retry of one of its partitions goes out (or ``retry_backoff``
passed, or one gave up): the partitions of every answer of the broker until
then are counted in it, so a broker's partitions answered in several
requests still make one line, with their count.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from typing import Protocol

from ._types import TopicPartition

__all__ = ["Episode", "Failures", "Queue", "partitions_named"]

log = logging.getLogger("gengroup")

#: How many partitions a line names before ``and N more``.
NAMED = 3

_FAILING = (
    "producer: Produce to %s on broker %d %s%s, retrying until each record's "
    "delivery_timeout: %s: %s"
)
_WRITTEN = "producer: %s written again on %s, after %d failed attempt(s)%s"


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


def _due(episode: Episode, now: float, hold: float) -> bool:
    """Whether the WARNING of ``episode`` is due: ``hold`` passed since it
    started, or a partition of it is in flight (retried) or gave up."""
    if now >= episode.started + hold:
        return True
    return any(queue.in_flight or queue.idle() for queue in episode.failing.values())


def _kind(error: BaseException) -> object:
    return getattr(error, "code", None) or type(error)


class Queue(Protocol):
    """What is logged of a partition's queue (:class:`gengroup._producer_queue.Queue`)."""

    tp: TopicPartition
    failing: Episode | None  # the episode it belongs to
    failures: int  # its failed attempts since it started failing
    in_flight: bool  # a Produce request carries a batch of it

    def idle(self) -> bool:
        """Nothing of the partition is queued, waiting for a retry or in flight."""
        ...


class Episode:
    """The partitions whose Produce started failing on one broker, until each
    is written again or gave up."""

    __slots__ = (
        "announced",
        "attempts",
        "errors",
        "failing",
        "gave_up",
        "kinds",
        "node",
        "started",
        "written",
        "written_on",
    )

    def __init__(self, node: int, started: float) -> None:
        self.node = node  # the broker it started failing on
        self.started = started  # when
        self.failing: dict[TopicPartition, Queue] = {}  # the partitions still failing
        self.kinds: set[object] = set()  # the kinds of errors logged
        self.announced = False  # its WARNING was logged
        self.attempts = 0  # the failed attempts of its partitions
        self.written: set[TopicPartition] = set()
        self.written_on: set[int] = set()
        self.gave_up: set[TopicPartition] = set()
        # The last error the records of a failing partition failed with for good.
        self.errors: dict[TopicPartition, BaseException] = {}


class Failures:
    """The episodes of failing Produce requests, and their log lines."""

    def __init__(self) -> None:
        self._open: dict[int, Episode] = {}  # by the broker each started on
        self._new: list[tuple[Episode, Queue, BaseException, int]] = []

    def failed(self, queue: Queue, error: BaseException, node: int, now: float) -> None:
        """The Produce of ``queue``'s partition failed on broker ``node`` with
        ``error`` at ``now`` and is retried: logged by :meth:`report`."""
        queue.failures += 1
        episode = queue.failing
        if episode is None:
            episode = self._open.get(node)
            if episode is None:
                episode = self._open[node] = Episode(node, now)
            queue.failing = episode
            episode.failing[queue.tp] = queue
            episode.written.discard(queue.tp)
            episode.gave_up.discard(queue.tp)
        episode.attempts += 1
        self._new.append((episode, queue, error, node))

    def records_failed(self, queue: Queue, error: BaseException) -> None:
        """Records of a failing partition failed for good with ``error`` (said
        if the partition gives up)."""
        if queue.failing is not None:
            queue.failing.errors[queue.tp] = error

    def written(self, queue: Queue, node: int) -> None:
        """A batch of ``queue``'s failing partition was written on broker ``node``."""
        episode, tp = queue.failing, queue.tp
        if episode is None:
            return
        failures, queue.failing, queue.failures = queue.failures, None, 0
        del episode.failing[tp]
        episode.errors.pop(tp, None)
        episode.written.add(tp)
        episode.written_on.add(node)
        if episode.failing or episode.gave_up or len(episode.written) > 1:
            log.debug(_WRITTEN, tp, _brokers((node,)), failures, "")
        if not episode.failing:
            self._close(episode)

    def report(self, now: float, hold: float) -> None:
        """Log the failures since the last call, a line per episode, broker and
        kind of error, and close the episodes whose partitions all gave up.

        The failures of an episode not announced yet wait (for the next call)
        while none of its partitions is in flight or gave up, for at most
        ``hold`` seconds since it started.
        """
        if not self._open:
            return
        new, self._new = self._new, []
        groups: dict[tuple[Episode, int, object], list[tuple[Queue, BaseException]]] = {}
        for episode, queue, error, node in new:
            groups.setdefault((episode, node, _kind(error)), []).append((queue, error))
        for (episode, node, kind), failed in groups.items():
            if not episode.announced and not _due(episode, now, hold):
                self._new.extend((episode, queue, error, node) for queue, error in failed)
                continue
            if not episode.announced:
                level, said = logging.WARNING, "failing"
                episode.announced = True
            elif kind in episode.kinds:
                level, said = logging.DEBUG, "still failing"
            else:
                level, said = logging.INFO, "now failing"
            episode.kinds.add(kind)
            self._log_failing(level, said, node, failed)
        for episode in list(self._open.values()):
            idle = [queue for queue in episode.failing.values() if queue.idle()]
            for queue in idle:
                del episode.failing[queue.tp]
                episode.gave_up.add(queue.tp)
                queue.failing, queue.failures = None, 0
            if idle and not episode.failing:
                self._close(episode)

    @staticmethod
    def _log_failing(
        level: int, said: str, node: int, failed: list[tuple[Queue, BaseException]]
    ) -> None:
        queue, error = min(failed, key=lambda failure: failure[0].tp)  # the first named
        if len(failed) == 1:
            attempts = f" ({queue.failures} attempt(s))"
            log.log(level, _FAILING, queue.tp, node, said, attempts, type(error).__name__, error)
            return
        if level > logging.DEBUG:
            what = partitions_named(queue.tp for queue, _ in failed)
            log.log(level, _FAILING, what, node, said, "", type(error).__name__, error)
        if log.isEnabledFor(logging.DEBUG):
            for queue, error in failed:
                said = "failing" if queue.failures == 1 else "still failing"
                attempts = f" ({queue.failures} attempt(s))"
                log.debug(_FAILING, queue.tp, node, said, attempts, type(error).__name__, error)

    def _close(self, episode: Episode) -> None:
        """Log the end of ``episode``: its partitions were written again or gave up."""
        if self._open.get(episode.node) is episode:
            del self._open[episode.node]
        written, gave_up = episode.written, episode.gave_up
        where = _brokers(episode.written_on) if written else ""
        if not gave_up:
            since = (
                f" since failing on broker {episode.node}"
                if {episode.node} != episode.written_on
                else ""
            )
            log.info(_WRITTEN, partitions_named(written), where, episode.attempts, since)
            return
        error = next((episode.errors[tp] for tp in sorted(gave_up) if tp in episode.errors), None)
        log.warning(
            "producer: gave up on %s failing since Produce to broker %d failed, after %d "
            "failed attempt(s): their records failed, each send raising its error (%s)%s",
            partitions_named(gave_up),
            episode.node,
            episode.attempts,
            "their delivery timeout, or an error not retried"
            if error is None
            else f"{type(error).__name__}: {error}",
            f"; {partitions_named(written)} written again on {where}" if written else "",
        )
