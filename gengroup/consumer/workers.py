"""The worker pool most applications want: one task per assigned partition."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from .._types import TopicPartition
from .generation import Generation
from .group import ConsumerGroup
from .prefetch import FetchedBatch

__all__ = ["Handler", "run_workers"]

Handler = Callable[[Generation, TopicPartition, FetchedBatch], Awaitable[None]]


async def _worker(gen: Generation, tp: TopicPartition, handler: Handler) -> None:
    async for batch in gen.fetch(tp):
        await handler(gen, tp, batch)
        gen.mark(tp, batch.next_offset)


async def run_workers(group: ConsumerGroup, handler: Handler) -> None:
    """Run ``handler`` over every batch of every partition this member is assigned.

    For each generation, one task per assigned partition iterates the
    partition's batches, awaits ``handler(gen, tp, batch)`` and marks the
    batch's ``next_offset`` once the handler returned, so only processed
    records are ever committed. Returns when the group is closed; a handler's
    exception ends the generation and propagates from here.

    Args:
        group: an open consumer group.
        handler: ``async def handler(gen, tp, batch)``.
    """
    async for gen in group:
        for tp in sorted(gen.assignments):
            gen.start_soon(_worker, gen, tp, handler, name=f"worker {tp}")
