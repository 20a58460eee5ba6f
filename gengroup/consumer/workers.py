"""The worker pool most applications want: one task per assigned partition.

Theory of operation:

:func:`run_workers` starts, in each generation, one task per assigned
partition. A task iterates its partition's batches, awaits the handler on
each and marks the batch's ``next_offset`` once the batch is dealt with, so
the committed offset never passes a batch that was neither processed nor
handed to the application's error policy. A handler that raises is retried
first (``retries`` times, with the client's jittered exponential backoff);
then ``on_error`` decides: ``"stop"`` lets the exception end the generation
and come out of :func:`run_workers`; ``"skip"`` logs it with its traceback
and moves past the batch; an async callable (a dead-letter hook) gets the
batch and the exception, and the batch counts as dealt with once the hook
returns (a hook that raises stops, as ``"stop"`` does).
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Literal, TypeAlias

from .._errors import ConfigError
from .._types import TopicPartition
from ..io.retry import Backoff
from .fetched import FetchedBatch
from .generation import Generation
from .group import ConsumerGroup

__all__ = ["DeadLetter", "ErrorPolicy", "Handler", "run_workers"]

log = logging.getLogger("gengroup")

Handler = Callable[[Generation, TopicPartition, FetchedBatch], Awaitable[None]]

#: A dead-letter hook: ``async def hook(gen, tp, batch, exc)``, e.g. producing
#: the batch to a dead-letter topic. The batch is marked once it returns.
DeadLetter = Callable[[Generation, TopicPartition, FetchedBatch, Exception], Awaitable[None]]

#: What :func:`run_workers` does with a batch whose handler kept raising.
ErrorPolicy: TypeAlias = Literal["stop", "skip"] | DeadLetter

#: The longest pause between two attempts at one batch, in seconds.
_RETRY_CAP = 30.0

#: What :func:`run_workers` takes as a handler or a hook, for its errors.
_ASYNC_FORMS = (
    "an async function (async def, a functools.partial or bound method of one, or an "
    "object whose __call__ is async def)"
)


def _is_async_callable(fn: object) -> bool:
    """Whether calling ``fn`` returns a coroutine by its definition (see :data:`_ASYNC_FORMS`).

    Checked at the call of :func:`run_workers`: a plain function would be
    called only once a batch comes (a hook: once a handler failed), run its
    side effects and then fail to be awaited.
    """
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    if inspect.isroutine(fn) or isinstance(fn, type):
        return False
    return callable(fn) and inspect.iscoroutinefunction(type(fn).__call__)


def _not_async(name: str, fn: object, signature: str) -> ConfigError:
    return ConfigError(
        f"{name} must be {_ASYNC_FORMS}, got {fn!r}; a plain function that returns an "
        f"awaitable goes inside one: `async def {name}({signature}): await f({signature})`"
    )


async def _handle(
    gen: Generation,
    tp: TopicPartition,
    batch: FetchedBatch,
    handler: Handler,
    on_error: ErrorPolicy,
    retries: int,
    retry_backoff: float,
) -> None:
    """Deal with one batch: the handler, its retries, then the policy."""
    backoff = Backoff(retry_backoff, cap=max(retry_backoff, _RETRY_CAP))
    for attempt in range(retries + 1):
        try:
            await handler(gen, tp, batch)
            return
        except Exception as exc:
            if attempt < retries:
                log.warning(
                    "%s batch %d..%d: handler raised %r; retry %d of %d",
                    tp,
                    batch.records[0].offset if batch.records else batch.next_offset,
                    batch.next_offset - 1,
                    exc,
                    attempt + 1,
                    retries,
                )
                await backoff.sleep()
                continue
            if on_error == "stop":
                raise
            if on_error == "skip":
                log.error(
                    "%s: skipping the batch before offset %d: handler raised",
                    tp,
                    batch.next_offset,
                    exc_info=exc,
                )
                return
            await on_error(gen, tp, batch, exc)
            return


async def run_workers(
    group: ConsumerGroup,
    handler: Handler,
    *,
    on_error: ErrorPolicy = "stop",
    retries: int = 0,
    retry_backoff: float = 1.0,
) -> None:
    """Run ``handler`` over every batch of every partition this member is assigned.

    One task per assigned partition (started when the partition is added, and
    ended when it is revoked: with an eager balancer, in every generation;
    with a cooperative one, a retained partition's task runs on) iterates the
    partition's batches, awaits ``handler(gen, tp, batch)`` and marks the
    batch's ``next_offset`` once the batch is dealt with, so only records
    that were processed (or handed to the dead-letter hook, or skipped by
    choice) are ever committed. Returns when the group is closed.

    Args:
        group: an open consumer group.
        handler: ``async def handler(gen, tp, batch)`` (or a
            ``functools.partial`` or bound method of one, or an object whose
            ``__call__`` is one).
        on_error: what to do with a batch whose handler raised (after the
            retries): ``"stop"`` (the default: the exception ends the
            generation and comes out of ``run_workers`` as itself; the
            group is closed with it -- records after the last processed
            batch are processed again by whoever owns the partition next),
            ``"skip"`` (log it with its traceback at ERROR and move past the
            batch), or an async dead-letter hook (in the forms ``handler``
            may take)
            ``hook(gen, tp, batch, exc)`` (the batch is marked once the hook
            returns; if the hook raises, that exception stops as with
            ``"stop"``).
        retries: how many times a raising handler is called again on the same
            batch before ``on_error`` applies (default 0).
        retry_backoff: the first pause between attempts in seconds, doubling,
            jittered, at most 30 s.

    Raises:
        ConfigError: at the call, before anything runs: a ``handler`` or an
            ``on_error`` hook that is not an async callable (a plain ``def``),
            another invalid ``on_error``, or an invalid ``retries`` or
            ``retry_backoff``.
        Exception: a handler's exception under ``"stop"``, or a hook's.
    """
    if not _is_async_callable(handler):
        raise _not_async("handler", handler, "gen, tp, batch")
    if isinstance(on_error, str):
        if on_error not in ("stop", "skip"):
            raise ConfigError(
                f"on_error must be 'stop', 'skip' or an async hook(gen, tp, batch, exc), "
                f"got {on_error!r}"
            )
    elif not _is_async_callable(on_error):
        raise _not_async("on_error", on_error, "gen, tp, batch, exc")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigError(f"retries must be an integer >= 0, got {retries!r}")
    if (
        isinstance(retry_backoff, bool)
        or not isinstance(retry_backoff, int | float)
        or not 0 < retry_backoff < math.inf
    ):
        raise ConfigError(f"retry_backoff must be a positive finite number, got {retry_backoff!r}")

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        async for batch in gen.fetch(tp):
            await _handle(gen, tp, batch, handler, on_error, retries, retry_backoff)
            gen.mark(tp, batch.next_offset)
            # Not held while waiting for the next one: a member with many
            # partitions would keep each one's last batch in memory.
            del batch

    async for gen in group:
        # Each worker lives as long as its partition stays assigned: under a
        # cooperative balancer a retained partition's worker runs on.
        for tp in sorted(gen.added):
            gen.start_soon(worker, gen, tp, name=f"worker {tp}", partition=tp)
