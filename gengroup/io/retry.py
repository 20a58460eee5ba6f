"""Backoff and retry-until-deadline: the client's one retry loop.

Theory of operation:

:func:`backoff_delay` is the client's one backoff formula: ``base * 2**attempt``
capped at ``cap`` (1 s by default), jittered by +-20 % so that clients that
failed together do not retry together. :class:`Backoff` counts the attempts
of one loop and sleeps that delay.

:func:`retry` runs an attempt until it succeeds or a deadline passes. What is
retried is the error table's decision (:func:`gengroup._errors.is_retriable`:
connection failures, and broker errors that Kafka marks retriable or whose
action comes before a retry); anything else propagates at once. Before the
backoff the table's action runs: a :class:`~gengroup._errors.StaleMetadataError`
calls ``refresh_metadata``, a :class:`~gengroup._errors.CoordinatorError` calls
``find_coordinator``, when given. A connection failure calls
``refresh_metadata`` too: only the callers of requests routed to a partition's
leader pass it, and a leader that cannot be reached has most likely died, its
partitions led elsewhere once the controller has noticed (as the Java client
asks for a metadata update on every disconnect). A refresh that fails to
connect is that attempt's failure, retried like it; an attempt that must stop on an error the
table would retry raises :class:`GiveUp` wrapping it, and a client closed by
this process (:class:`ClientClosed`) is never retried. When the deadline passes,
:class:`TimeoutError` names the operation and the last error seen (or the
caller's ``on_timeout`` builds the exception to raise). Retries nest (an
admin call retries a coordinator lookup that retries connections): the last
error of an inner loop counts as the outer loop's too, so a deadline never
says "last error: None" while something failed.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final, TypeVar

import anyio

from .._errors import BrokerError, ConnectionClosed, KafkaConnectionError, is_retriable

__all__ = [
    "DEFAULT_CAP",
    "Backoff",
    "ClientClosed",
    "GiveUp",
    "backoff_delay",
    "retry",
    "seconds_left",
    "unanswered",
]

T = TypeVar("T")

#: The error boxes of the :func:`retry` calls the current task is inside,
#: outermost first. A retried error is recorded in every one of them, so an
#: outer deadline that passes while an inner retry is still going names the
#: inner one's last error rather than none.
_LAST_ERRORS: ContextVar[tuple[list[BaseException | None], ...]] = ContextVar(
    "gengroup_retry_errors", default=()
)

#: The longest backoff between two attempts, in seconds.
DEFAULT_CAP: Final = 1.0


def backoff_delay(attempt: int, base: float, cap: float = DEFAULT_CAP) -> float:
    """Seconds to wait before retry ``attempt`` (0-based): exponential, capped, jittered.

    Args:
        attempt: how many retries came before this one.
        base: the delay of the first retry.
        cap: the longest delay before jitter.
    """
    # The exponent is bounded so that a loop retrying for days cannot overflow a float.
    delay: float = min(base * (2 ** min(attempt, 64)), cap)
    return delay * random.uniform(0.8, 1.2)


@dataclass(slots=True)
class Backoff:
    """The backoff of one retry loop: each :meth:`sleep` waits longer, up to the cap.

    Attributes:
        base: the first delay in seconds.
        cap: the longest delay before jitter.
        attempt: retries so far (reset to 0 by :meth:`reset` after a success).
    """

    base: float
    cap: float = DEFAULT_CAP
    attempt: int = 0

    def next_delay(self) -> float:
        """The delay before the next retry; counts the attempt."""
        delay = backoff_delay(self.attempt, self.base, self.cap)
        self.attempt += 1
        return delay

    async def sleep(self) -> None:
        """Sleep the next delay."""
        await anyio.sleep(self.next_delay())

    def reset(self) -> None:
        """Start again from the first delay (after a success)."""
        self.attempt = 0


def seconds_left(seconds: float) -> Callable[[], float]:
    """The seconds left until ``seconds`` from now, each time it is called (never negative)."""
    end = anyio.current_time() + seconds
    return lambda: max(0.0, end - anyio.current_time())


class ClientClosed(ConnectionClosed):
    """The client a request was made on was closed by this process (a
    :class:`~gengroup.io.cluster.Cluster` after ``aclose()``, and the clients
    sharing it). Nothing reopens it, so :func:`retry` never retries it,
    whatever its caller's ``retriable`` says: it propagates at once."""


class GiveUp(Exception):
    """Raised by an attempt to stop :func:`retry` with ``error``, retriable or not."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _action(failed: BaseException) -> str | None:
    """What runs before retrying ``failed``: the error table's action, and for
    a connection failure a metadata refresh (the leader asked may be gone)."""
    if isinstance(failed, BrokerError):
        return failed.action
    if isinstance(failed, KafkaConnectionError):
        return "refresh_metadata"
    return None


def unanswered(waiting: Mapping[str, str]) -> str:
    """The words for a deadline that passed with no error seen: what it waited
    on (``waiting``: address -> state, as ``Cluster.waiting_on`` says it)."""
    if not waiting:
        return "no attempt was answered"
    return "no attempt was answered; waiting on " + "; ".join(
        f"{address}: {state}" for address, state in waiting.items()
    )


async def retry(
    what: str,
    attempt: Callable[[], Awaitable[T]],
    *,
    timeout: float,
    backoff: Backoff | float,
    retriable: Callable[[BaseException], bool] = is_retriable,
    refresh_metadata: Callable[[], Awaitable[object]] | None = None,
    find_coordinator: Callable[[], Awaitable[object]] | None = None,
    on_timeout: Callable[[BaseException | None], BaseException] | None = None,
    waiting_on: Callable[[], Mapping[str, str]] | None = None,
) -> T:
    """Run ``attempt`` until it returns, retrying what the error table retries.

    Args:
        what: the operation, for the timeout message.
        attempt: one try.
        timeout: seconds before giving up.
        backoff: the loop's :class:`Backoff`, or the base delay of a new one.
        retriable: which exceptions are retried (default: the error table's).
        refresh_metadata: run before retrying an error whose action is
            ``refresh_metadata``, and a connection failure (pass it for a
            request routed to a partition's leader, whose leader may have
            moved).
        find_coordinator: run before retrying an error whose action is
            ``find_coordinator``.
        on_timeout: builds the exception to raise at the deadline from the
            last error (default: :class:`TimeoutError` naming ``what``).
        waiting_on: what the attempts wait on, by address (``Cluster.waiting_on``):
            the default TimeoutError of a deadline that passed with no error
            seen names it (a broker that accepts connections and never answers).

    Returns:
        What ``attempt`` returned.

    Raises:
        Exception: a non-retriable error of ``attempt``, or the error of a
            :class:`GiveUp` it raised.
        TimeoutError: the deadline passed (unless ``on_timeout`` says otherwise).
    """
    if not isinstance(backoff, Backoff):
        backoff = Backoff(backoff)
    box: list[BaseException | None] = [None]
    token = _LAST_ERRORS.set((*_LAST_ERRORS.get(), box))
    try:
        with anyio.move_on_after(timeout):
            while True:
                try:
                    return await attempt()
                except GiveUp as give_up:
                    raise give_up.error from None
                except ClientClosed:
                    raise
                except Exception as exc:
                    if not retriable(exc):
                        raise
                    failed: BaseException = exc
                    for enclosing in _LAST_ERRORS.get():
                        enclosing[0] = failed
                action = _action(failed)
                try:
                    if action == "refresh_metadata" and refresh_metadata is not None:
                        await refresh_metadata()
                    elif action == "find_coordinator" and find_coordinator is not None:
                        await find_coordinator()
                except KafkaConnectionError as exc:
                    # No broker answered the refresh: the next attempt is
                    # made on what is known, and this is its last error.
                    if not retriable(exc):
                        raise
                    for enclosing in _LAST_ERRORS.get():
                        enclosing[0] = exc
                await backoff.sleep()
    finally:
        _LAST_ERRORS.reset(token)
    last = box[0]
    if on_timeout is not None:
        raise on_timeout(last)
    if last is None:
        detail = unanswered({} if waiting_on is None else waiting_on())
    else:
        detail = f"last error: {last}"
    raise TimeoutError(f"{what} did not complete within {round(timeout, 3):g} s ({detail})")
