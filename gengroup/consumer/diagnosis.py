"""What a member says when the group is not as it expects: who sent what, who runs what.

The coordinator's answers name members and error codes, not why: a leader
that cannot read a member's subscription, or a JoinGroup refused as
INCONSISTENT_GROUP_PROTOCOL, is explained with a DescribeGroups of the group
(its members' client ids, the protocol it runs), asked briefly and never
raised from: a message that cannot say more says so.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial

import anyio

from .._config import GroupConfig
from .._errors import BrokerError, KafkaConnectionError, ProtocolError, error_for_code
from ..io.cluster import Cluster
from ..membership import requests
from ..membership.member import Joined
from ..protocol.consumer_protocol import PROTOCOL_TYPE
from ..protocol.versions import ApiKey

__all__ = ["describe_group", "explain_inconsistent", "report_unreadable"]

log = logging.getLogger("gengroup")


async def describe_group(
    cluster: Cluster, config: GroupConfig, node: int, timeout: float | None = None
) -> requests.GroupView | None:
    """DescribeGroups of this group at ``node``, for messages: None if it cannot say.

    Bounded by ``timeout`` (default: the request timeout); a connection
    failure, a broker error, a malformed answer or no answer in time is
    None, never raised.
    """
    limit = config.request_timeout if timeout is None else timeout
    view: requests.GroupView | None = None
    with anyio.move_on_after(limit):
        try:
            resp = await cluster.call(
                node,
                ApiKey.DESCRIBE_GROUPS,
                partial(requests.describe_request, group_id=config.group_id),
                timeout=limit,
            )
            view = requests.parse_describe(resp, config.group_id)
        except (KafkaConnectionError, ProtocolError, BrokerError, TimeoutError) as exc:
            log.debug("group %s: DescribeGroups failed: %s", config.group_id, exc)
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


async def explain_inconsistent(
    cluster: Cluster, config: GroupConfig, node: int, error: BrokerError, offered: Sequence[str]
) -> BrokerError:
    """INCONSISTENT_GROUP_PROTOCOL, saying what this member offered and what the group runs.

    DescribeGroups tells which protocol the group runs once a generation
    chose one; otherwise (or if it cannot be asked) the message says so.
    """
    view = await describe_group(cluster, config, node)
    said = (
        f"JoinGroup {config.group_id}: this member offered protocol type "
        f"{PROTOCOL_TYPE!r} with the balancers [{', '.join(offered)}], and the group's "
        "members have none of them in common"
    )
    if view is None:
        said += "; the group runs another protocol (DescribeGroups could not tell which)"
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
    if view is not None and view.clients:
        shown = sorted(view.clients.values())
        more = f" and {len(shown) - 5} more" if len(shown) > 5 else ""
        said += f" (members: {', '.join(shown[:5])}{more})"
    return error_for_code(error.code, said)
