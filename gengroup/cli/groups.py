"""``gengroup groups``: list, describe and move consumer groups' offsets.

Every action takes ``--bootstrap`` (or the ``GENGROUP_BOOTSTRAP``
environment variable) and ``--json`` for scripting (see :mod:`._admin` for
the exit codes). On a terminal, ``reset-offsets`` shows each partition's
committed offset and its new one on stderr (:mod:`._progress`).

``reset-offsets`` only prints its plan unless ``--execute`` is given, as
Kafka's ``kafka-consumer-groups`` does; without ``--execute`` or ``--dry-run``
(an explicit preview) it says on stderr that nothing was committed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kio.schema.errors import ErrorCode

from .._errors import BrokerError, GroupIdNotFound, GroupsNotDeleted, UnknownTopicOrPartition
from .._types import TopicPartition
from ..admin import Admin
from ..admin_types import CONSUMER_GROUP, INT32_MAX, INT64_MAX
from ._admin import AdminCommand, PartlyFailed
from ._common import UsageError, bounded
from ._progress import View, wanted

__all__ = ["add_parser", "lag_report"]


def add_parser(subparsers: Any) -> None:
    """Register the ``groups`` subcommand and its actions."""
    command = AdminCommand(
        subparsers, "groups", "list and describe consumer groups, show lag, move offsets"
    )
    command.action("list", "list the groups", _list)
    command.action("describe", "state, members and assignments of a group", _describe).add_argument(
        "group"
    )
    lag = command.action("lag", "committed offset, end offset and lag per partition", _lag)
    lag.add_argument("group")
    lag.add_argument(
        "--topic", action="append", default=None, help="include a topic's partitions (repeatable)"
    )
    reset = command.action(
        "reset-offsets", "move a group's committed offsets (no live members)", _reset
    )
    reset.add_argument("group")
    reset.add_argument(
        "--topic", action="append", required=True, help="a topic to reset (repeatable)"
    )
    reset.add_argument(
        "--partition",
        type=bounded(int, 0, INT32_MAX),
        action="append",
        help="default: every partition (with one --topic only)",
    )
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to", help="earliest, latest, or a timestamp in ms")
    target.add_argument(
        "--offset",
        type=bounded(int, 0, INT64_MAX),
        help="an explicit offset (clamped to the log)",
    )
    commit = reset.add_mutually_exclusive_group()
    commit.add_argument(
        "--execute", action="store_true", help="commit the plan (without it: a preview)"
    )
    commit.add_argument(
        "--dry-run", action="store_true", help="show the plan, commit nothing (the default)"
    )
    delete = command.action(
        "delete", "delete groups and their committed offsets (no live members)", _delete
    )
    delete.add_argument("groups", nargs="+", metavar="group")


async def _list(admin: Admin, args: argparse.Namespace) -> list[dict[str, Any]]:
    return [
        {"group": g.group_id, "protocol_type": g.protocol_type, "state": g.state}
        for g in await admin.list_groups()
    ]


async def _describe(admin: Admin, args: argparse.Namespace) -> dict[str, Any]:
    """The group: ``group``, ``state``, ``group_protocol`` (``classic`` or
    ``consumer``), ``protocol_type``, ``protocol`` (the assignor), ``members``;
    a consumer-protocol group adds its ``group_epoch`` and ``assignment_epoch``,
    and each member its ``member_epoch`` and ``target_assignment``."""
    d = (await admin.describe_groups([args.group]))[args.group]
    if d.state == "Dead":
        raise GroupIdNotFound(ErrorCode.group_id_not_found, f"group {args.group!r} does not exist")
    consumer = d.group_protocol == CONSUMER_GROUP
    members = []
    for m in d.members:
        row: dict[str, Any] = {
            "member_id": m.member_id,
            "client_id": m.client_id,
            "host": m.client_host,
            "assignment": sorted(str(tp) for tp in m.partitions),
        }
        if consumer:
            row["member_epoch"] = m.member_epoch
            row["target_assignment"] = sorted(str(tp) for tp in m.target or ())
        members.append(row)
    epochs = {"group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch}
    return {
        "group": d.group_id,
        "state": d.state,
        "group_protocol": d.group_protocol,
        **(epochs if consumer else {}),
        "protocol_type": d.protocol_type,
        "protocol": d.protocol,
        "members": members,
    }


async def _lag(admin: Admin, args: argparse.Namespace) -> dict[str, Any]:
    return await lag_report(admin, args.group, args.topic)


async def lag_report(admin: Admin, group: str, topics: list[str] | None) -> dict[str, Any]:
    """``group``'s lag: ``{"group", "state", "total_lag", "partial", "rebalancing",
    "partitions": [...]}``.

    Each partition row has ``partition``, ``committed``, ``end`` and ``lag``
    (null where nothing is committed and the log is not empty; negative where
    the committed offset is past the end; ``end`` and ``lag`` null for a
    commit left for a partition that no longer exists, its topic deleted) and
    the live member it is assigned to: ``member_id``,
    ``client_id``, ``host`` (null when no member owns it). ``total_lag`` is
    the sum of the lags above 0; ``partial`` is true when it leaves something
    out: a lag that is not known, or a group that is ``rebalancing`` (then
    which member owns which partition is not known).

    Raises:
        GroupIdNotFound: the group has no committed offsets and does not exist.
    """
    lags = await admin.group_lag(group, topics)
    # With topics given, lags has their partitions whether or not the group
    # committed to them: a mistyped group is one that committed nothing.
    if lags.state == "Dead" and all(p.committed is None for p in lags.values()):
        raise GroupIdNotFound(ErrorCode.group_id_not_found, f"group {group!r} does not exist")
    rows = [
        {
            "partition": str(tp),
            "committed": p.committed,
            "end": p.end,
            "lag": p.lag,
            "member_id": p.member_id,
            "client_id": p.client_id,
            "host": p.host,
        }
        for tp, p in lags.items()
    ]
    return {
        "group": group,
        "state": lags.state,
        "total_lag": lags.total,
        "partial": lags.partial,
        "rebalancing": lags.rebalancing,
        "partitions": rows,
    }


async def _delete(admin: Admin, args: argparse.Namespace) -> dict[str, Any]:
    """The groups deleted: ``deleted``. Every group is tried; each one that was
    not deleted is a :class:`PartlyFailed` error line."""
    groups = list(dict.fromkeys(args.groups))
    try:
        await admin.delete_groups(groups)
    except GroupsNotDeleted as partly:
        raise PartlyFailed({"deleted": partly.deleted}, list(partly.errors.values())) from None
    except (BrokerError, TimeoutError) as exc:  # the one group's error
        raise PartlyFailed({"deleted": []}, [exc]) from None
    return {"deleted": groups}


async def _reset(admin: Admin, args: argparse.Namespace) -> dict[str, Any]:
    """The plan: ``group``, ``dry_run`` (true unless ``--execute``: nothing was
    committed) and ``partitions`` (``partition``, ``offset``), in (topic,
    partition) order."""
    to: Any = args.to
    if to is not None and to not in ("earliest", "latest"):
        if not to.isdigit() or int(to) > INT64_MAX:
            raise UsageError(
                f"--to must be earliest, latest or a timestamp in ms (at most {INT64_MAX}), "
                f"not {to!r}"
            )
        to = int(to)
    topics = list(dict.fromkeys(args.topic))
    if args.partition is not None and len(topics) > 1:
        raise UsageError(
            f"--partition takes one --topic, not {len(topics)}: reset the topics one at a time"
        )
    md = await admin.metadata(topics)
    tps: list[TopicPartition] = []
    for topic in sorted(topics):
        info = md.get(topic)
        known = sorted(info.partitions) if info is not None and not info.error_code else []
        if not known:
            raise UnknownTopicOrPartition(
                ErrorCode.unknown_topic_or_partition, f"topic {topic!r} does not exist"
            )
        partitions = known if args.partition is None else sorted(set(args.partition))
        missing = sorted(set(partitions) - set(known))
        if missing:
            raise UnknownTopicOrPartition(
                ErrorCode.unknown_topic_or_partition,
                f"topic {topic!r} has no partition {', '.join(map(str, missing))}",
            )
        tps += [TopicPartition(topic, p) for p in partitions]
    with View("partitions", enabled=wanted()) as view:
        tasks = {tp: view.add(str(tp), total=1, detail="resolving") for tp in tps}
        before: dict[TopicPartition, int] = {}
        if view.enabled:
            before = await admin.fetch_offsets(args.group, tps)
            for tp, task in tasks.items():
                view.update(task, detail=f"committed {before.get(tp, '-')}, resolving")
        plan = await admin.reset_offsets(
            args.group, tps, to=to, offset=args.offset, dry_run=not args.execute
        )
        outcome = "committed" if args.execute else "planned (dry run)"
        for tp, new in plan.items():
            was = before.get(tp, "-")
            view.update(tasks[tp], completed=1, detail=f"{was} -> {new} {outcome}")
    if not args.execute and not args.dry_run:
        print(
            "gengroup groups: a preview, nothing was committed: add --execute to apply this plan",
            file=sys.stderr,
        )
    return {
        "group": args.group,
        "dry_run": not args.execute,
        "partitions": [{"partition": str(tp), "offset": o} for tp, o in plan.items()],
    }
