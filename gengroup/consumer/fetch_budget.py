"""The prefetcher's memory accounting: each partition's share, what a Fetch asks, the budget.

Theory of operation:

Each assigned partition has a *share*: ``partition_buffer_bytes``, or, under
the member's budget (``fetch_buffer_bytes``, in effect once the partitions'
own bounds add up to more), an equal part of the budget if that is less. What
counts against a partition is what it *holds*: the bytes of its buffered
batches, plus the batch its worker was handed last, until the worker's next
step asks for another (a worker busy with a batch still holds it; the
prefetcher cannot see it let go before). A partition goes into a Fetch when it
holds nothing, or when one more step fits in its share beside what it holds.

A partition is fetched in steps of half its share, so that one step is
buffered (or on its way) while its worker processes the other -- or of its
largest recent batch, if that is larger, because Kafka answers a partition
whose next batch exceeds its limit with nothing (unless it comes first in the
answer); a partition whose batches are larger than half its share holds one
at a time. So each partition holds at most its share, or one batch more than
what it held when it was fetched (Kafka sends the first partition of an
answer one batch whole even when it is larger than asked, so that a batch
larger than every limit can be consumed at all); the shares add up to the
budget at most, so the member holds at most the budget plus one batch per
partition, however slow its workers and however many partitions it has.

The member-wide accounting shapes the requests within that. Its *room* is
the budget less the bytes buffered (all partitions) and the ``max_bytes`` of
the requests in flight; the batches in workers' hands are not subtracted
from it. They count against their own partitions' shares only, which is what
keeps a slow worker's partition from being fetched again (and the bound
above holds through the shares alone); counted against the room as well,
with batches larger than the shares the batches held would take the whole
room, and every request would bring one batch. A request's response-wide
``max_bytes`` is at most half the budget (two requests fit) and the room.
While one request brings data, another goes out only once it is worth a
channel (a quarter of the budget, or of what all partitions ask if that is
less): a trickle of room freed by one consumed batch does not become a
trickle of one-partition round trips. Otherwise a request goes once the room
takes what it asks (or a quarter of the budget), or at once if one of its
partitions holds nothing: where buffered batches and requests in flight took
the room, the request goes with what room is left (1 byte at least), since
Kafka sends the first partition with data one batch whole however small the
limit (partitions holding nothing come first in a full request; under an
incremental fetch session the broker's own order puts the partitions that
brought records last behind the others). So a slow worker never stops the
fetching of a partition whose worker waits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from .._config import GroupConfig
from .._types import TopicPartition

__all__ = ["FetchBudget", "Holding"]


class Holding(Protocol):
    """What the accounting reads and keeps of one partition."""

    tp: TopicPartition
    #: Bytes of the batches buffered for the worker.
    buffered: int
    #: Bytes of the batch last handed to the worker, until its next step.
    held: int
    #: The largest batch of the last answer, in bytes (a Fetch asks for at least that).
    largest: int
    #: A Fetch naming the partition is in flight.
    in_flight: bool


class FetchBudget:
    """The shares, asks and byte counts of one prefetcher's partitions."""

    def __init__(self, config: GroupConfig, partitions: int) -> None:
        """``partitions``: how many partitions the prefetcher fetches."""
        total, bound = config.fetch_buffer_bytes, config.partition_buffer_bytes
        if total is not None and bound * partitions <= total:
            # The partitions' own bounds keep the member within the budget.
            total = None
        #: The member's bound (None: per partition only).
        self.total = total
        #: Each partition's bound: ``partition_buffer_bytes``, or its part of
        #: the budget if that is less.
        self.share = bound if total is None else max(1, min(bound, total // max(1, partitions)))
        #: What one Fetch asks for a partition at least: half its share.
        self.step = max(1, self.share // 2)
        #: What one Fetch asks for a partition at most: its share, or (a
        #: partition whose batches are larger) half the budget.
        self.ceiling = self.share if total is None else max(self.share, total // 2)
        #: Under a budget, the least a request sent while another brings data
        #: asks for: a quarter of the budget, or of what all partitions ask.
        self.worth = max(
            1, min((total or 0) // 4, config.fetch_max_bytes, partitions * self.step // 4)
        )
        self._fetch_max = config.fetch_max_bytes
        #: Bytes buffered, bytes held by workers, and the ``max_bytes`` of the
        #: requests in flight, over all partitions (the member's room counts
        #: the first and the last: see room()).
        self.buffered = 0
        self.held = 0
        self.reserved = 0

    # ------------------------------------------------------------------ one partition

    @staticmethod
    def holds(part: Holding) -> int:
        """The bytes counted against ``part``: buffered, and in its worker's hands."""
        return part.buffered + part.held

    def want(self, part: Holding) -> int:
        """The bytes one Fetch asks for ``part``: a step, or its largest
        recent batch if that is larger (within the ceiling)."""
        return min(self.ceiling, max(self.step, part.largest))

    def has_room(self, part: Holding) -> bool:
        """Whether ``part`` takes one more Fetch: it holds nothing, or one
        more step fits in its share beside what it holds."""
        held = self.holds(part)
        return held <= 0 or self.share - held >= self.want(part)

    def grown(self, part: Holding) -> int:
        """What to ask for ``part`` once held back by its ask (its next batch is larger)."""
        return min(self.ceiling, 2 * self.want(part))

    def add(self, part: Holding, size: int) -> None:
        """``size`` bytes of an answer buffered for ``part``."""
        part.buffered += size
        self.buffered += size

    def drop(self, part: Holding, size: int) -> None:
        """``size`` bytes buffered for ``part`` dropped (a seek, damage)."""
        part.buffered -= size
        self.buffered -= size

    def hand_out(self, part: Holding, size: int) -> bool:
        """A batch of ``size`` bytes handed to ``part``'s worker: held until
        its next step (against the partition's share; the member's room has
        it back now). Whether that makes a Fetch due (the member's room is
        worth a request)."""
        self.drop(part, size)
        part.held += size
        self.held += size
        return self.total is not None and self.room() >= self.worth

    def release(self, part: Holding) -> bool:
        """``part``'s worker asked for its next batch: the batch it held no
        longer counts against its share. Whether that makes a Fetch due (the
        partition has room again)."""
        if part.held <= 0:
            return False
        self.held -= part.held
        part.held = 0
        return not part.in_flight and self.has_room(part)

    # ------------------------------------------------------------------ requests

    def asks(self, parts: Iterable[Holding]) -> dict[TopicPartition, int]:
        """What one request asks for each of ``parts`` (partitions with data),
        in order. Under a budget, only the first partitions whose asks add up
        to the budget (the response-wide limit is at most half of it, and the
        broker fills an answer in the request's order): the others are left to
        a request on the other channel."""
        asks: dict[TopicPartition, int] = {}
        total = 0
        for p in parts:
            if self.total is not None and total >= self.total:
                break
            want = self.want(p)
            asks[p.tp] = want
            total += want
        return asks

    def room(self) -> int:
        """The bytes the member's budget leaves for new requests: what is
        buffered and what the requests in flight may bring subtracted. The
        batches workers hold are not: each counts against its partition's
        share, which is what keeps its partition from being fetched again."""
        assert self.total is not None
        return self.total - self.buffered - self.reserved

    def request_limit(
        self, asks: Mapping[TopicPartition, int], spare: bool, calm: bool, polling: bool = False
    ) -> int:
        """The response-wide ``max_bytes`` of a request asking ``asks``; 0: not now.

        ``spare``: one of its partitions holds nothing. Without a budget:
        ``fetch_max_bytes`` or the sum of the asks. Under a budget, also at
        most half of it (so that two requests may be in flight) and the room
        left in it; while another request brings data (not ``calm``), only a
        request worth a channel goes: one of a quarter of the budget at
        least, or of what all partitions ask if that is less (the room and
        the ready partitions grow as workers consume; a request per consumed
        batch would be a round trip per partition). Otherwise a request goes
        once the room takes its asks or that quarter, or at once if
        ``spare`` (with 1 byte at least: Kafka sends its first partition with
        data one batch whole). A long poll (``polling``: no partition known
        to have data) holds no more of the budget than that quarter while it
        waits.
        """
        asked = sum(asks.values())
        limit = min(self._fetch_max, asked)
        budget = self.total
        if budget is None:
            return limit
        room = self.room()
        worth = self.worth
        limit = min(limit, worth if polling else budget // 2, room)
        if calm:
            return max(1, limit) if spare or room >= min(asked, worth) else 0
        return limit if limit >= worth else 0
