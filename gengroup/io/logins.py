"""One client's logins to its brokers (TLS, SASL): refusals logged once per change of state.

Theory of operation:

A refused login (:class:`~gengroup._errors.AuthenticationError`, a
:class:`~gengroup._errors.TLSError` included) fails the connection attempt,
or the re-authentication, that made it, and its caller gets the error. One
cause -- a password changed on the brokers, a certificate that expired --
refuses every connection of the client, though: each broker's, each
channel's, each re-authentication. :class:`Logins` tells them apart from the
first: one per client (a :class:`~gengroup.io.cluster.Cluster` hands its own
to every connection it opens; a standalone connection has one of its own),
it keeps, per broker address, whether its logins are refused and why. A
cause is the refusal's message without the broker's address: the same
password refused by three brokers is one cause. The first refusal of a
cause that no broker refuses with yet is a WARNING; while any broker still
refuses with it, the next ones (from it or another broker) are DEBUG. A
broker that refused and accepts a login again is one INFO naming it; a
broker that never refused says nothing when it accepts, so a cause that
only some brokers refuse with (a password rotated broker by broker, one
broker's expired certificate) stays one WARNING however many logins the
others accept meanwhile. Once every broker that refused with a cause has
accepted again, a refusal with it is a WARNING again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import anyio

from .._errors import AuthenticationError

__all__ = ["Logins"]

log = logging.getLogger("gengroup.connection")


@dataclass(slots=True)
class _Refusing:
    """One broker refusing logins: why, since when, how many times."""

    cause: str
    since: float
    refusals: int = 0


@dataclass(slots=True)
class _Cause:
    """The brokers refusing logins with one cause, and how many refusals since its WARNING."""

    brokers: set[str] = field(default_factory=set)
    refusals: int = 0


class Logins:
    """The state of one client's logins, per broker: refused (since when, why) or not."""

    def __init__(self) -> None:
        #: Broker address -> its refusals since it last accepted a login.
        self.refusing: dict[str, _Refusing] = {}
        self._causes: dict[str, _Cause] = {}

    def refused(self, error: AuthenticationError, context: str = "") -> None:
        """``error.broker`` refused a login: a WARNING if no broker refuses with its cause yet.

        Args:
            error: the refusal.
            context: said before it (which connection, what it does about it).
        """
        broker = error.broker
        cause = f"{type(error).__name__}: {str(error).replace(broker, '<broker>')}"
        state = self.refusing.get(broker)
        if state is None:
            state = self.refusing[broker] = _Refusing(cause, anyio.current_time())
        elif state.cause != cause:
            self._leave(broker, state.cause)
            state.cause = cause
        state.refusals += 1
        known = self._causes.get(cause)
        if known is None:
            self._causes[cause] = _Cause({broker}, 1)
            log.warning("%s%s", context, error)
            return
        known.brokers.add(broker)
        known.refusals += 1
        log.debug("%s%s (refused so %d times since its WARNING)", context, error, known.refusals)

    def accepted(self, broker: str) -> None:
        """``broker`` accepted a login: one INFO if it refused logins before."""
        state = self.refusing.pop(broker, None)
        if state is None:
            return
        self._leave(broker, state.cause)
        others = len(self._causes.get(state.cause, _Cause()).brokers)
        log.info(
            "login to %s accepted again, after %d refused login(s) over %.1f s%s",
            broker,
            state.refusals,
            anyio.current_time() - state.since,
            f" ({others} other broker(s) still refuse with the same cause)" if others else "",
        )

    def _leave(self, broker: str, cause: str) -> None:
        known = self._causes[cause]
        known.brokers.discard(broker)
        if not known.brokers:
            del self._causes[cause]
