"""The cluster a :class:`~gengroup.Producer` or an :class:`~gengroup.Admin` runs on:
an open :class:`~gengroup.io.cluster.Cluster` it was given (shared), or its own."""

from __future__ import annotations

from collections.abc import Sequence

from .cluster import Cluster
from .security import Security, check_shared

__all__ = ["shared_or_own"]


def shared_or_own(
    cluster: Cluster | Sequence[str] | str,
    *,
    client_id: str,
    security: Security,
    request_timeout: float = 30.0,
    connections_max_idle: float | None = 540.0,
) -> tuple[Cluster, bool]:
    """The cluster a client runs on, and whether the client owns it.

    A :class:`Cluster` is shared: whoever made it enters and closes it, and its
    security settings are the only ones (a ConfigError if ``security`` sets
    others; its client id and durations are its own too). Bootstrap addresses
    make a new one, with these settings, which the client owns: it enters it
    and closes it itself.
    """
    if isinstance(cluster, Cluster):
        check_shared(security, cluster.security)
        return cluster, False
    own = Cluster(
        cluster,
        client_id=client_id,
        request_timeout=request_timeout,
        connections_max_idle=connections_max_idle,
        security=security,
    )
    return own, True
