"""A group's coordinator: found once, followed when it moves.

Theory of operation:

A :class:`CoordinatorClient` serves one coordinator key (a group id). It
finds the coordinator with FindCoordinator (:meth:`Cluster.find_coordinator
<gengroup.io.cluster.Cluster.find_coordinator>`, which retries until its
deadline) and remembers its node id. :meth:`CoordinatorClient.call` sends a
request there and hands the response to the caller's ``parse``, which reads
the error codes the caller understands and raises them typed. When the
request fails with a coordinator error (NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE: the error table's ``find_coordinator`` action) or
a broken connection (the coordinator's broker may be gone), the coordinator
is looked up again and the request is sent once more; a second failure is
the caller's to retry (the coordinator stays forgotten, so the next call
looks it up first).

Nothing else is retried by :meth:`CoordinatorClient.call`: the callers' own
deadlines (Admin's timeout, the consumer's session) bound how long they keep
trying, with :func:`gengroup.io.retry.retry`. :meth:`CoordinatorClient.call_until`
is that loop for a one-off operation (the Admin's): each attempt waits for
its answer the cluster's request timeout at most, or the time left if less,
and an attempt that timed out or that the deadline cut forgets the
coordinator. A coordinator whose broker hangs (a long GC pause, a network
black hole) is fenced by the cluster within seconds and the group moves; the
next attempt, or the next call, asks FindCoordinator and follows it, as the
Java AdminClient does, instead of queueing on the hung broker again. The
deadline's :class:`TimeoutError` names the coordinator an attempt still
waited for.

A coordinator that FindCoordinator finds but that refuses the group's
requests (JoinGroup, SyncGroup, OffsetFetch or ConsumerGroupHeartbeat
answered NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE: a broker whose view
of the offsets topic's leadership is stale or whose coordinator failed) is
as unavailable as one FindCoordinator cannot find, but every lookup
succeeds, so the cluster's count of FindCoordinator's refusals never grows.
A group counts those refusals here, one count per coordinator whichever
request was refused (:meth:`CoordinatorClient.refused`, ended by
:meth:`CoordinatorClient.accepted` once a generation forms or a heartbeat is
answered), logged as the cluster logs its own: one INFO when they start, one
WARNING :data:`LONG_UNAVAILABLE` later, one INFO when they end; once they
have lasted ``unreachable_timeout`` the error it returns is exhausted, for
the group to raise. A refusal that comes ``unreachable_timeout`` after the
previous one, or after the coordinator held the request a while (a JoinGroup
waiting for the members), starts a new count: the coordinator served the
group in between.
COORDINATOR_LOAD_IN_PROGRESS is logged alike but never exhausted (a large
group's state can take minutes to load), and restarts the count.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import anyio
from kio.schema.errors import ErrorCode

from .._errors import (
    BrokerError,
    CoordinatorError,
    CoordinatorUnavailable,
    KafkaConnectionError,
    RequestTimedOut,
)
from ..protocol.versions import ApiKey
from .cluster import LONG_UNAVAILABLE, Cluster
from .request import MakeRequest
from .retry import retry, seconds_left, unanswered

__all__ = ["REFUSALS", "CoordinatorClient"]

T = TypeVar("T")

#: The answers of a coordinator that FindCoordinator found but that does not
#: serve the group (yet), which :meth:`CoordinatorClient.refused` counts.
REFUSALS: Final = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
    }
)

log = logging.getLogger("gengroup")


#: A refused request answered this many seconds or more after it was sent
#: was held by the coordinator first (a JoinGroup waiting for the members):
#: it served the group until then, and the refusal starts a new count.
HELD: Final = 1.0


@dataclass(slots=True)
class _Refusals:
    """The coordinator's refusals of the group's requests since it last served one."""

    #: When the first came.
    since: float
    #: When the latest came.
    last: float
    #: The first since which no COORDINATOR_LOAD_IN_PROGRESS came (None: the
    #: latest was one); the exhausted count runs from it.
    not_loading_since: float | None = None
    #: Whether the WARNING was said.
    warned: bool = False


def _identity(resp: Any) -> Any:
    return resp


class CoordinatorClient:
    """Finds and follows the coordinator of one group.

    Args:
        cluster: an open cluster.
        key: the coordinator key (the group id).
        key_type: 0 for a group, 1 for a transactional id.
        timeout: seconds a lookup may retry (default: the cluster's request timeout).

    Example::

        coordinator = CoordinatorClient(cluster, "billing")
        resp = await coordinator.call(
            ApiKey.DESCRIBE_GROUPS,
            lambda mod: build(mod.DescribeGroupsRequest, groups=("billing",)),
        )
    """

    def __init__(
        self, cluster: Cluster, key: str, *, key_type: int = 0, timeout: float | None = None
    ) -> None:
        self.cluster = cluster
        self.key = key
        self.key_type = key_type
        self.timeout = timeout
        #: The coordinator's node id, once found (None: look it up on next use).
        self.node: int | None = None
        self._refusing: _Refusals | None = None

    async def find(self, *, refresh: bool = False) -> int:
        """The coordinator's node id, looked up if not known yet or if ``refresh``.

        Raises:
            BrokerError: a non-retriable FindCoordinator error (authorization ...),
                or :class:`~gengroup._errors.CoordinatorUnavailable` once
                FindCoordinator has answered COORDINATOR_NOT_AVAILABLE for the
                cluster's ``unreachable_timeout``.
            TimeoutError: no coordinator was found within the lookup timeout.
        """
        if self.node is None or refresh:
            self.node = None
            self.node = await self.cluster.find_coordinator(
                self.key, key_type=self.key_type, timeout=self.timeout
            )
        return self.node

    def forget(self) -> None:
        """Forget the coordinator: the next call looks it up again."""
        self.node = None

    def refused(
        self, error: BrokerError, request: str, node: int, sent_at: float
    ) -> CoordinatorUnavailable:
        """Count a coordinator error the coordinator found answered a group request with.

        NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE forget the coordinator
        (the next request looks it up again); each change of state is logged
        once (see the module's theory of operation). COORDINATOR_LOAD_IN_PROGRESS
        is said and waited for, never exhausted: the coordinator is the
        right one, and loading a large group may take minutes. The count
        starts anew when the previous refusal is ``unreachable_timeout`` old
        (nobody knows what happened in between) and when the refused request
        was held :data:`HELD` seconds or more first (the coordinator served it
        until then).

        Args:
            error: the answer (one of :data:`REFUSALS`, with the broker's message).
            request: the refused request's name, for messages.
            node: the broker that answered.
            sent_at: when the request was sent (``anyio.current_time()``).

        Returns:
            The error saying for how long the coordinator has not served the
            group; its ``exhausted`` is True once it has answered
            NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, with no load in
            progress between, for the cluster's ``unreachable_timeout`` or
            more (the caller raises it then).
        """
        loading = error.code == ErrorCode.coordinator_load_in_progress
        if not loading and self.node == node:
            self.node = None
        now = anyio.current_time()
        limit = self.cluster.unreachable_timeout
        said = f"node {node} answered {request}: {error}"
        refusals = self._refusing
        if refusals is not None and (
            now - sent_at >= HELD or (limit is not None and now - refusals.last > limit)
        ):
            refusals = None  # served (or not known) since the previous refusals
        if refusals is None:
            log.info(
                "coordinator of %r does not serve the group (%s); %s",
                self.key,
                said,
                "waiting" if loading else "looking it up again",
            )
            refusals = self._refusing = _Refusals(now, now)
        refusals.last = now
        if loading:
            refusals.not_loading_since = None
        elif refusals.not_loading_since is None:
            refusals.not_loading_since = now
        down = now - refusals.since
        if down >= LONG_UNAVAILABLE and not refusals.warned:
            refusals.warned = True
            log.warning(
                "coordinator of %r has not served the group for %.0f s (%s)",
                self.key,
                down,
                said,
            )
        since = refusals.not_loading_since
        exhausted = limit is not None and since is not None and now - since >= limit
        return CoordinatorUnavailable(self.key, down, exhausted=exhausted, message=said)

    def accepted(self) -> None:
        """The coordinator served the group (a generation formed, a
        ConsumerGroupHeartbeat was answered): the refusals counted so far end."""
        refusals, self._refusing = self._refusing, None
        if refusals is not None:
            log.info(
                "coordinator of %r serves the group again after %.1f s",
                self.key,
                anyio.current_time() - refusals.since,
            )

    async def call(
        self,
        key: ApiKey,
        make: MakeRequest,
        parse: Callable[[Any], T] = _identity,
        *,
        timeout: float | None = None,
        channel: str = "default",
    ) -> T:
        """Send a request to the coordinator and parse the response, following a move once.

        Args:
            key: the API.
            make: builds the request from the negotiated version's kio module.
            parse: reads the response, raising its errors typed (default:
                return it as it is).
            timeout: seconds to wait for the response.
            channel: which of the coordinator's connections (see
                :meth:`Cluster.connection <gengroup.io.cluster.Cluster.connection>`).

        Returns:
            What ``parse`` returned.

        Raises:
            CoordinatorError: the coordinator moved again after one re-lookup.
            KafkaConnectionError: the connection failed again after one re-lookup.
            BrokerError: whatever ``parse`` raised.
        """
        for again in (True, False):
            node = await self.find()
            try:
                return parse(
                    await self.cluster.call(node, key, make, timeout=timeout, channel=channel)
                )
            except (CoordinatorError, KafkaConnectionError):
                self.forget()
                if not again:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def call_until(
        self,
        what: str,
        key: ApiKey,
        make: MakeRequest,
        parse: Callable[[Any], T] = _identity,
        *,
        timeout: float,
    ) -> T:
        """:meth:`call`, retried with backoff until ``timeout`` (one-off operations).

        Each attempt waits for its answer at most the cluster's request
        timeout, or the seconds left if fewer; the request itself keeps the
        connection's request timeout (a connection shared with other callers
        is not failed because this caller stopped waiting: its own watch
        fails it if the broker never answers). An attempt that times out, or
        that the deadline cuts, forgets the coordinator and makes its broker
        silent (:meth:`Cluster.unanswered`): the next attempt, and the next
        call, look it up again on another broker (its broker may hang while
        the group moved on to another).

        Args:
            what: the operation, for the timeout message (``"DescribeGroups 'g'"``).
            key: the API.
            make: builds the request from the negotiated version's kio module.
            parse: reads the response, raising its errors typed.
            timeout: seconds for the whole operation, lookups included.

        Returns:
            What ``parse`` returned.

        Raises:
            BrokerError: a non-retriable error ``parse`` raised.
            TimeoutError: the deadline passed; the message names the
                coordinator (node and address) that an attempt was still
                waiting for (and the step of the connection's set-up, TCP,
                ApiVersions or SASL, if it was cut there), and the last error seen.
        """
        left = seconds_left(timeout)
        waited: int | None = None

        async def attempt() -> T:
            nonlocal waited
            bound = max(min(self.cluster.request_timeout, left()), 0.001)
            try:
                with anyio.move_on_after(bound):
                    return await self.call(key, make, parse)
            except anyio.get_cancelled_exc_class():
                if not left() and self.node is not None:  # the call's deadline cut the wait
                    waited = self.node
                    self.cluster.unanswered(waited)
                    self.forget()
                raise
            node = self.node
            if node is not None:
                waited = node
                self.cluster.unanswered(node)
            self.forget()
            who = "the coordinator lookup" if node is None else f"coordinator node {node}"
            raise RequestTimedOut(f"{what}: {who} did not answer within {bound:g} s")

        def timed_out(last: BaseException | None) -> TimeoutError:
            said = []
            if waited is not None:
                broker = self.cluster.brokers.get(waited)
                at = "" if broker is None else f" at {broker.host}:{broker.port}"
                setting_up = self.cluster.setting_up(waited)  # cut during the set-up
                step = "" if setting_up is None else f": {setting_up}"
                said.append(f"coordinator node {waited}{at} did not answer{step}")
            if last is not None:
                said.append(f"last error: {last}")
            detail = "; ".join(said) or unanswered(self.cluster.waiting_on())
            return TimeoutError(
                f"{what} did not complete within {round(timeout, 3):g} s ({detail})"
            )

        return await retry(
            what, attempt, timeout=timeout, backoff=self.cluster.retry_backoff, on_timeout=timed_out
        )
