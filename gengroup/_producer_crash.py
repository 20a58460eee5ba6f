"""What a crash of one of the producer's background tasks does to the producer.

The sender loop, the metadata and InitProducerId tasks and each task sending
a Produce request run under :func:`crash_fails_all`: if one ends by anything
but the shutdown's own cancellation, the producer is shut down at once,
failing every record without an outcome, and the crash propagates. An
exception there is a bug (Kafka errors are settled per batch). A
KeyboardInterrupt or SystemExit is an interrupt: trio raises Ctrl-C in
whichever task runs, and without this the close would wait until
``delivery_timeout`` for records no task sends any more. The crash comes
out of ``async with Producer`` as itself (:func:`lone`), not inside the
exception group of the producer's task group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import cast

import anyio

from ._errors import ClosedInFlight, ConnectionClosed, GengroupError

__all__ = ["crash_fails_all", "lone"]


@contextmanager
def crash_fails_all(shutdown: Callable[..., None], what: str) -> Iterator[None]:
    """Shut the producer down (``shutdown(error[, in_flight_error])``) if the body
    crashes, then let the crash propagate; ``what`` says what failed."""
    try:
        yield
    except Exception as exc:
        err = GengroupError(f"{what}: {exc!r}")
        err.__cause__ = exc
        shutdown(err)
        raise
    except BaseException as exc:
        if not isinstance(exc, anyio.get_cancelled_exc_class()):  # not the shutdown's
            said = f"the Producer was interrupted ({exc!r}) before the"
            answer = f"{said} broker answered the Produce request carrying the record"
            closed = ConnectionClosed(f"{said} record was sent")
            shutdown(closed, ClosedInFlight(f"{answer}: it may have been written"))
        raise


def lone(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception ``group`` holds (in nested groups too), else ``group``."""
    found: BaseException = group
    while isinstance(found, BaseExceptionGroup) and len(found.exceptions) == 1:
        found = cast(BaseException, found.exceptions[0])
    return found
