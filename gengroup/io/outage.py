"""Whether a :class:`~gengroup.io.cluster.Cluster` is unreachable, and its log.

Theory of operation:

The cluster is unreachable from the first round of connection attempts in
which no address answered (or once every address closes its connections
unanswered, see ``Cluster._closed_unanswered``) until any broker answers
again. That change of state is logged once each way: a WARNING ``cluster
unreachable: ADDRESS: CAUSE; ...`` and an INFO ``cluster reachable again
after N s``, not a line per retry.

A broker that answers some requests and closes the connections of others
(a proxy, a broker failing one API) makes the cluster unreachable and
reachable again at each retry. So an outage beginning within
:data:`FLAPPING` seconds of the last one said at WARNING is said at DEBUG,
and so is its end; but one that then lasts :data:`LOUD_AFTER` seconds is
said at WARNING after all (``cluster unreachable for N s: ...``), so a
genuine outage soon after a short one is not left unsaid. The error each
request raises is the same either way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

import anyio

__all__ = ["FLAPPING", "LOUD_AFTER", "Outage"]

log = logging.getLogger("gengroup.cluster")

#: Seconds after an outage said at WARNING in which the next begins at DEBUG.
FLAPPING: Final = 60.0

#: Seconds after which an outage begun at DEBUG is said at WARNING.
LOUD_AFTER: Final = 10.0


class Outage:
    """A cluster's current outage, if any (plain state; the log's levels)."""

    def __init__(self) -> None:
        #: When the cluster was first found unreachable (None: reachable, or not tried yet).
        self.since: float | None = None
        self._said = -FLAPPING  # when an outage was last said at WARNING
        self._quiet = False  # the current one is not said at WARNING (yet)

    def began(self, since: float, causes: str) -> None:
        """The cluster is unreachable since ``since``, for ``causes``."""
        now = anyio.current_time()
        self.since = since
        self._quiet = now - self._said < FLAPPING
        if not self._quiet:
            self._said = now
        log.log(
            logging.DEBUG if self._quiet else logging.WARNING, "cluster unreachable: %s", causes
        )

    def lasts(self, causes: Callable[[], str]) -> float:
        """Seconds the current outage has lasted (said at WARNING once it
        lasted :data:`LOUD_AFTER`, if it began at DEBUG)."""
        assert self.since is not None
        now = anyio.current_time()
        down = now - self.since
        if self._quiet and down >= LOUD_AFTER:
            self._quiet, self._said = False, now
            log.warning("cluster unreachable for %.1f s: %s", down, causes())
        return down

    def ended(self) -> None:
        """A broker answered: the cluster is reachable (again)."""
        if self.since is not None:
            down, self.since = anyio.current_time() - self.since, None
            level = logging.DEBUG if self._quiet else logging.INFO
            log.log(level, "cluster reachable again after %.1f s", down)
