"""``gengroup groups``: list, describe and move consumer groups' offsets.

Every subcommand takes ``--bootstrap`` (or the ``GENGROUP_BOOTSTRAP``
environment variable) and ``--json`` for scripting. Exit codes: 0 ok, 1 an
error (the broker unreachable, a refused request: one line on stderr, no
traceback), 2 a usage error, 3 the group does not exist.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from kio.schema.errors import ErrorCode

from .._errors import GengroupError, GroupIdNotFound
from .._types import TopicPartition
from ..admin import Admin

__all__ = ["EXIT_ERROR", "EXIT_NOT_FOUND", "EXIT_USAGE", "add_parser"]

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3

_EPILOG = "exit codes: 0 ok, 1 error, 2 usage, 3 group not found"

#: One ``groups`` action: what it prints (as JSON or text), from an open Admin.
_Action = Callable[[Admin, argparse.Namespace], Awaitable[Any]]


def add_parser(subparsers: Any) -> None:
    """Register the ``groups`` subcommand and its own subcommands."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "groups", help="list and describe consumer groups, show lag, move offsets", epilog=_EPILOG
    )
    sub = parser.add_subparsers(dest="groups_command", metavar="ACTION", required=True)

    def action(name: str, help: str, func: _Action) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=help, epilog=_EPILOG)
        p.add_argument("--bootstrap", default=os.environ.get("GENGROUP_BOOTSTRAP"))
        p.add_argument("--json", action="store_true", help="print JSON instead of text")
        p.add_argument("--timeout", type=float, default=30.0, help="seconds (default 30)")
        p.set_defaults(func=lambda args: _run(args, func))
        return p

    action("list", "list the groups", _list)
    action("describe", "state, members and assignments of a group", _describe).add_argument("group")
    lag = action("lag", "committed offset, end offset and lag per partition", _lag)
    lag.add_argument("group")
    lag.add_argument("--topic", action="append", default=None, help="include a topic's partitions")
    reset = action("reset-offsets", "move a group's committed offsets (no live members)", _reset)
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    reset.add_argument("--partition", type=int, action="append", help="default: every partition")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to", help="earliest, latest, or a timestamp in ms")
    target.add_argument("--offset", type=int, help="an explicit offset (clamped to the log)")
    reset.add_argument("--dry-run", action="store_true", help="show the plan, commit nothing")


def _run(args: argparse.Namespace, func: _Action) -> int:
    if not args.bootstrap:
        print("gengroup groups: give --bootstrap or set GENGROUP_BOOTSTRAP", file=sys.stderr)
        return EXIT_USAGE

    # The command says what failed itself, once; the client's own warnings
    # (e.g. "cluster unreachable") would say it twice.
    logging.getLogger("gengroup").setLevel(logging.ERROR)

    async def main() -> Any:
        async with Admin(args.bootstrap, timeout=args.timeout) as admin:
            return await func(admin, args)

    try:
        result = anyio.run(main)
    except GroupIdNotFound as exc:
        print(f"gengroup groups: {exc}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except (GengroupError, TimeoutError, ValueError) as exc:
        print(f"gengroup groups: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        _print_text(result)
    return 0


def _print_text(result: Any) -> None:
    if isinstance(result, list):
        for row in result:
            print("  ".join(str(v) for v in row.values()))
    else:
        for key, value in result.items():
            if isinstance(value, list):
                print(f"{key}:")
                for row in value:
                    print("  " + "  ".join(f"{k}={v}" for k, v in row.items()))
            else:
                print(f"{key}: {value}")


async def _list(admin: Admin, args: argparse.Namespace) -> list[dict[str, Any]]:
    return [
        {"group": g.group_id, "protocol_type": g.protocol_type, "state": g.state}
        for g in await admin.list_groups()
    ]


async def _describe(admin: Admin, args: argparse.Namespace) -> dict[str, Any]:
    d = (await admin.describe_groups([args.group]))[args.group]
    if d.state == "Dead":
        raise GroupIdNotFound(ErrorCode.group_id_not_found, f"group {args.group!r} does not exist")
    return {
        "group": d.group_id,
        "state": d.state,
        "protocol_type": d.protocol_type,
        "protocol": d.protocol,
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "assignment": sorted(str(tp) for tp in m.partitions),
            }
            for m in d.members
        ],
    }


async def _lag(admin: Admin, args: argparse.Namespace) -> dict[str, Any]:
    lags = await admin.group_lag(args.group, args.topic)
    if not lags and (await admin.describe_groups([args.group]))[args.group].state == "Dead":
        raise GroupIdNotFound(ErrorCode.group_id_not_found, f"group {args.group!r} does not exist")
    rows = [
        {"partition": str(tp), "committed": p.committed, "end": p.end, "lag": p.lag}
        for tp, p in lags.items()
    ]
    total = sum(p.lag or 0 for p in lags.values())
    return {"group": args.group, "total_lag": total, "partitions": rows}


async def _reset(admin: Admin, args: argparse.Namespace) -> dict[str, Any]:
    partitions = args.partition
    if partitions is None:
        md = await admin.cluster.refresh_metadata([args.topic])
        info = md.get(args.topic)
        partitions = sorted(info.partitions) if info is not None and not info.error_code else []
        if not partitions:
            raise ValueError(f"topic {args.topic!r} does not exist")
    tps = [TopicPartition(args.topic, p) for p in partitions]
    to: Any = args.to
    if to is not None and to not in ("earliest", "latest"):
        if not to.isdigit():
            raise ValueError(f"--to must be earliest, latest or a timestamp in ms, not {to!r}")
        to = int(to)
    plan = await admin.reset_offsets(
        args.group, tps, to=to, offset=args.offset, dry_run=args.dry_run
    )
    return {
        "group": args.group,
        "dry_run": args.dry_run,
        "partitions": [{"partition": str(tp), "offset": o} for tp, o in plan.items()],
    }
