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

Nothing else is retried here: the callers' own deadlines (Admin's timeout, the
consumer's session) bound how long they keep trying, with
:func:`gengroup.io.retry.retry`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .._errors import CoordinatorError, KafkaConnectionError
from ..protocol.versions import ApiKey
from .cluster import Cluster
from .request import MakeRequest

__all__ = ["CoordinatorClient"]

T = TypeVar("T")


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
