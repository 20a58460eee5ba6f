"""What a member says when the group is not as it expects: who sent what, who runs what.

The coordinator's answers name members and error codes, not why: a leader
that cannot read a member's subscription, or a JoinGroup refused as
INCONSISTENT_GROUP_PROTOCOL, is explained with a DescribeGroups of the group
(its members' client ids, the protocol it runs), asked briefly and never
raised from: a message that cannot say more says so.

DescribeGroups answers a group of the consumer group protocol (KIP-848) as
``Dead`` with no members (Kafka 4.x with GROUP_ID_NOT_FOUND): when it says
so, the refused member asks ConsumerGroupDescribe too, as
:meth:`Admin.describe_groups <gengroup.admin.Admin.describe_groups>` does,
and a group found there is named for what it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

import anyio

from .._config import GroupConfig
from .._errors import (
    BrokerError,
    KafkaConnectionError,
    ProtocolError,
    UnsupportedVersion,
    error_for_code,
)
from ..io.cluster import Cluster
from ..membership import requests
from ..membership.member import Joined
from ..protocol.consumer_protocol import PROTOCOL_TYPE
from ..protocol.versions import ApiKey

__all__ = ["describe_group", "explain_inconsistent", "report_unreadable"]

log = logging.getLogger("gengroup")

T = TypeVar("T")


async def _ask(
    cluster: Cluster,
    config: GroupConfig,
    node: int,
    what: tuple[ApiKey, str],
    make: Callable[..., Any],
    read: Callable[[Any], T],
    timeout: float,
) -> tuple[T | None, bool]:
    """Send ``what`` (its key and name) to ``node``, for messages: what ``read``
    made of the answer and True, or (None, False) if there was no readable
    answer within ``timeout`` (logged at DEBUG, never raised)."""
    key, name = what
    with anyio.move_on_after(timeout):
        try:
            return read(await cluster.call(node, key, make, timeout=timeout)), True
        except (
            KafkaConnectionError,
            ProtocolError,
            BrokerError,
            UnsupportedVersion,
            TimeoutError,
        ) as exc:
            log.debug("group %s: %s failed: %s", config.group_id, name, exc)
    return None, False


async def describe_group(
    cluster: Cluster, config: GroupConfig, node: int, timeout: float | None = None
) -> requests.GroupView | None:
    """DescribeGroups of this group at ``node``, for messages: None if it cannot say.

    Bounded by ``timeout`` (default: the request timeout); a connection
    failure, a broker error, a malformed answer or no answer in time is
    None, never raised.
    """
    view, _ = await _ask(
        cluster,
        config,
        node,
        (ApiKey.DESCRIBE_GROUPS, "DescribeGroups"),
        partial(requests.describe_request, group_id=config.group_id),
        partial(requests.parse_describe, group_id=config.group_id),
        config.request_timeout if timeout is None else timeout,
    )
    return view


async def report_unreadable(
    cluster: Cluster, config: GroupConfig, node: int, joined: Joined
) -> None:
    """Log (ERROR) once each member whose subscription the leader could not read."""
    if not joined.unreadable:
        return
    # The group waits for this leader's SyncGroup: ask briefly.
    view = await describe_group(cluster, config, node, timeout=config.heartbeat_interval)
    clients = view.clients if view is not None else {}
    for bad in joined.unreadable:
        client = clients.get(bad.member_id, "unknown (DescribeGroups did not say)")
        log.error(
            "group %s generation %d: member %s%s, client %s, sent a subscription this "
            "leader cannot read (%s); it is assigned no partitions",
            config.group_id,
            joined.generation_id,
            bad.member_id,
            f" (instance {bad.group_instance_id})" if bad.group_instance_id else "",
            client,
            bad.error,
        )


async def _consumer_group(
    cluster: Cluster, config: GroupConfig, node: int, timeout: float
) -> tuple[Any | None, bool]:
    """ConsumerGroupDescribe of this group at ``node``, for messages: (the
    group's entry or None, whether the coordinator answered), never raised."""
    return await _ask(
        cluster,
        config,
        node,
        (ApiKey.CONSUMER_GROUP_DESCRIBE, "ConsumerGroupDescribe"),
        partial(requests.consumer_group_request, group_id=config.group_id),
        partial(requests.read_consumer_group, group_id=config.group_id),
        timeout,
    )


def _members(clients: Sequence[str], counted: bool = False) -> str:
    """`` (members: a@h, ...)``, the first five; ``counted``: `` (2 members: ...)``."""
    shown = sorted(clients)
    more = f" and {len(shown) - 5} more" if len(shown) > 5 else ""
    label = f"{len(shown)} member{'' if len(shown) == 1 else 's'}" if counted else "members"
    return f" ({label}: {', '.join(shown[:5])}{more})" if shown else ""


async def explain_inconsistent(
    cluster: Cluster, config: GroupConfig, node: int, error: BrokerError, offered: Sequence[str]
) -> BrokerError:
    """INCONSISTENT_GROUP_PROTOCOL, saying what this member offered and what the group runs.

    DescribeGroups tells which protocol the group runs once a generation
    chose one. Where it answers ``Dead`` or not at all, ConsumerGroupDescribe
    tells whether the group uses the consumer group protocol (KIP-848);
    otherwise (or if neither can be asked) the message says so. Both are
    asked within one request timeout.
    """
    deadline = anyio.current_time() + config.request_timeout
    view = await describe_group(cluster, config, node)
    said = (
        f"JoinGroup {config.group_id}: this member offered protocol type "
        f"{PROTOCOL_TYPE!r} with the balancers [{', '.join(offered)}], and the group's "
        "members have none of them in common"
    )
    if view is None or view.state == "Dead":
        left = deadline - anyio.current_time()
        found, answered = (
            await _consumer_group(cluster, config, node, left) if left > 0 else (None, False)
        )
        if found is not None:
            return error_for_code(
                error.code,
                f"{said}; the group uses the consumer group protocol (KIP-848) and this member "
                'the classic one: set group_protocol="consumer" to join it, or use another '
                "group id"
                + _members([f"{m.client_id}@{m.client_host}" for m in found.members], True),
            )
        said += "; the group runs another protocol (DescribeGroups could not tell which" + (
            ")"
            if view is None
            else ": it answered 'Dead', as it does for a group of the consumer group protocol)"
        )
        said += (
            "; ConsumerGroupDescribe does not know it as a group of the consumer group "
            "protocol (KIP-848)"
            if answered
            else "; ConsumerGroupDescribe could not tell whether it uses the consumer "
            "group protocol (KIP-848)"
        )
    elif view.protocol_type not in ("", PROTOCOL_TYPE):
        said += (
            f"; the group runs protocol type {view.protocol_type!r}"
            + (f" ({view.protocol!r})" if view.protocol else "")
            + ": it is not a consumer group, or another application uses this group id"
        )
    elif not view.protocol:
        said += (
            "; the group runs another protocol (DescribeGroups could not tell which: "
            f"the group is {view.state or 'in an unknown state'} and names none)"
        )
    else:
        said += (
            f"; the group runs the protocol {view.protocol!r}, which this member does not "
            f"offer: add a balancer named {view.protocol!r} or use another group id"
        )
    if view is not None:
        said += _members(list(view.clients.values()))
    return error_for_code(error.code, said)
