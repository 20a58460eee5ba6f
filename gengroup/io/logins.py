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
it logs the first refusal of a cause as a WARNING and the next ones of the
same cause at DEBUG; a refusal of another cause is a WARNING again, and the
first login accepted after refusals is one INFO. A cause is the refusal's
message without the broker's address: the same password refused by three
brokers is one cause.
"""

from __future__ import annotations

import logging

import anyio

from .._errors import AuthenticationError

__all__ = ["Logins"]

log = logging.getLogger("gengroup.connection")


class Logins:
    """The state of one client's logins: refused (since when, why) or not."""

    def __init__(self) -> None:
        #: The cause of the refusals since the last accepted login (None: none).
        self.cause: str | None = None
        #: How many logins were refused for it, and since when.
        self.refusals = 0
        self._since = 0.0

    def refused(self, error: AuthenticationError, context: str = "") -> None:
        """A login was refused with ``error``: a WARNING if its cause is new, else DEBUG.

        Args:
            error: the refusal.
            context: said before it (which connection, what it does about it).
        """
        cause = f"{type(error).__name__}: {str(error).replace(error.broker, '<broker>')}"
        if cause != self.cause:
            self.cause, self.refusals, self._since = cause, 1, anyio.current_time()
            log.warning("%s%s", context, error)
            return
        self.refusals += 1
        log.debug("%s%s (refused so %d times since its WARNING)", context, error, self.refusals)

    def accepted(self, broker: str) -> None:
        """``broker`` accepted a login: one INFO if logins were refused before."""
        if self.cause is None:
            return
        down = anyio.current_time() - self._since
        log.info(
            "login to %s accepted again, after %d refused over %.1f s",
            broker,
            self.refusals,
            down,
        )
        self.cause, self.refusals = None, 0
