"""The embedded broker's APIs, one module per API key, and their registry.

Theory of operation:

Everything the broker knows about one API lives in its module: a "version
notes" docstring (which versions are served and what changes per version that
matters to the handler), and an :class:`~._base.ApiSpec` named ``SPEC`` with
the served version range, ``handle`` and ``error_response``. :data:`SPECS`
maps each API key to its spec; the server dispatches through it, ApiVersions
reports its ranges and the fault layer's ``Fail`` control answers with its
error shapes (:func:`error_response`), so adding an API is adding a module and
a line here.

Handlers receive a :class:`~._base.Context` (the cluster's state, the node id
of the broker that received the request, the client's host and id), the
decoded kio request and its version, and return a kio response -- or
:data:`~._base.NO_RESPONSE` (send nothing) or :data:`~._base.CLOSE` (close the
connection). They may wait (a long-poll Fetch, a parked JoinGroup). The group
APIs check that this broker coordinates the group (others answer
NOT_COORDINATOR) and translate the request into the coordinator's
version-independent input for :meth:`~gengroup.broker.state.ClusterState.group_call`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from ...protocol.versions import ApiKey
from . import (
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    create_partitions,
    create_topics,
    delete_groups,
    delete_records,
    delete_topics,
    describe_groups,
    fetch,
    find_coordinator,
    heartbeat,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
)
from ._base import CLOSE, NO_RESPONSE, ApiSpec, CloseAfter, Context

__all__ = [
    "CLOSE",
    "NO_RESPONSE",
    "SPECS",
    "SUPPORTED_VERSIONS",
    "ApiSpec",
    "CloseAfter",
    "Context",
    "error_response",
]

_specs: dict[ApiKey, ApiSpec] = {}
#: The spec of every API the embedded broker serves, by API key.
SPECS: Final[Mapping[ApiKey, ApiSpec]] = MappingProxyType(_specs)
for _module in (
    produce,
    fetch,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    find_coordinator,
    join_group,
    heartbeat,
    leave_group,
    sync_group,
    describe_groups,
    list_groups,
    create_topics,
    delete_topics,
    delete_records,
    create_partitions,
    delete_groups,
    offset_delete,
    init_producer_id,
    consumer_group_heartbeat,
    consumer_group_describe,
    sasl_handshake,
    sasl_authenticate,
):
    _specs[ApiKey(_module.SPEC.key)] = _module.SPEC
_specs[api_versions.KEY] = api_versions.spec(SPECS)

#: The versions the embedded broker implements, per API. Of the topic-id-only
#: versions, Fetch 13-16 and OffsetCommit 10 are served; Produce 13 and
#: OffsetFetch 10 are left out. The rest covers gengroup's client table (with
#: the KIP-848 APIs) and librdkafka 2.x.
SUPPORTED_VERSIONS: Final[Mapping[ApiKey, tuple[int, int]]] = MappingProxyType(
    {key: (s.min_version, s.max_version) for key, s in SPECS.items()}
)


def error_response(
    api_key: int, version: int, request: Any, code: int, message: str | None = None
) -> Any:
    """Build the response Kafka sends when a whole request fails with ``code``.

    The error is put where Kafka puts it for that API and version: in the
    top-level ``error_code`` when there is one, otherwise in every topic,
    partition, group or key the request named.

    Args:
        api_key: the request's API key.
        version: the request's version.
        request: the decoded kio request.
        code: the Kafka error code.
        message: an error message for responses that carry one.

    Returns:
        A kio response of the same API and version.

    Raises:
        ValueError: the API is not one the embedded broker serves.
    """
    spec = SPECS.get(ApiKey(api_key)) if api_key in _KEYS else None
    if spec is None:
        raise ValueError(f"no error response for api key {api_key}")
    return spec.error_response(version, request, code, message)


_KEYS: Final = frozenset(int(k) for k in ApiKey)
