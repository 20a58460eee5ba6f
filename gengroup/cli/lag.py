"""``gengroup lag GROUP``: a group's lag per partition, once or refreshed live.

Without ``--watch`` the table (partition, committed offset, end offset, lag,
and the total) is printed once. With ``--watch SECONDS`` it is refreshed
every SECONDS until SIGINT (Ctrl-C) or SIGTERM, which end the command with
exit code 0: in place on a terminal, and as one table per refresh when stdout
is not one. ``--json`` prints the report as JSON (with ``--watch``, one
compact JSON object per line per refresh). A group that does not exist is
exit code 3.
"""

from __future__ import annotations

import argparse
import datetime
import json
import signal
import sys
from typing import Any

import anyio

from ..admin import Admin
from ._admin import open_admin
from ._common import add_connection_options, bounded, command, run
from .groups import lag_report

__all__ = ["add_parser", "render"]


@command("lag", help="a group's lag per partition, once or refreshed live (--watch)")
def add_parser(parser: argparse.ArgumentParser) -> None:
    """Print a group's committed offset, end offset and lag per partition as a table (--json:
    JSON). --watch SECONDS refreshes it until Ctrl-C.
    """
    parser.add_argument("group")
    parser.add_argument(
        "--topic", action="append", default=None, help="include a topic's partitions (repeatable)"
    )
    parser.add_argument(
        "--watch",
        type=bounded(float, 0, above=True),
        metavar="SECONDS",
        help="refresh every SECONDS until Ctrl-C",
    )
    add_connection_options(parser)
    parser.set_defaults(func=_run)


def render(report: dict[str, Any], when: datetime.datetime | None = None) -> Any:
    """The rich table of a lag report (:func:`~gengroup.cli.groups.lag_report`).

    The title says the total, and why it is partial when it is: a group that is
    rebalancing, or partitions whose lag is not known (shown ``-``; end ``-``
    too for a commit left for a partition that no longer exists). The
    ``member`` and ``host`` columns, shown when a live member owns a
    partition, name its owner.
    """
    from rich.table import Table

    title = f"group {report['group']}: total lag {report['total_lag']}"
    if report.get("partial"):
        unknown = sum(row["lag"] is None for row in report["partitions"])
        gone = sum(row["end"] is None for row in report["partitions"])
        left = f", {gone} of them no longer existing" if gone else ""
        why = [f"lag unknown for {unknown} partition(s){left}"] if unknown else []
        if report.get("rebalancing"):
            why.append(f"group rebalancing ({report.get('state')}): owners unknown")
        title += f" (partial: {'; '.join(why)})"
    if when is not None:
        title += f" at {when.strftime('%H:%M:%S')}"
    table = Table(title=title, title_justify="left")
    table.add_column("partition")
    for name in ("committed", "end", "lag"):
        table.add_column(name, justify="right")
    owners = any(row.get("member_id") for row in report["partitions"])
    if owners:
        table.add_column("member", overflow="fold")
        table.add_column("host")
    for row in report["partitions"]:
        cells = ["-" if row[k] is None else str(row[k]) for k in ("committed", "end", "lag")]
        if owners:
            cells += [row.get("member_id") or "-", row.get("host") or "-"]
        table.add_row(row["partition"], *cells)
    return table


async def _watch(admin: Admin, args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.live import Live

    console = Console()
    live: Live | None = None
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as tg:

            async def stop() -> None:
                async for _ in signals:
                    tg.cancel_scope.cancel()

            tg.start_soon(stop)
            try:
                while True:
                    report = await lag_report(admin, args.group, args.topic)
                    now = datetime.datetime.now()
                    if args.json:
                        print(json.dumps(report, sort_keys=True), flush=True)
                    elif console.is_terminal:
                        if live is None:
                            live = Live(render(report, now), console=console, auto_refresh=False)
                            live.start()
                        live.update(render(report, now), refresh=True)
                    else:
                        console.print(render(report, now))
                        sys.stdout.flush()
                    await anyio.sleep(args.watch)
            finally:
                if live is not None:
                    live.stop()


def _run(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with open_admin(args) as admin:
            if args.watch is not None:
                await _watch(admin, args)
                return 0
            report = await lag_report(admin, args.group, args.topic)
        if args.json:
            print(json.dumps(report, indent=2, sort_keys=True))
        else:
            from rich.console import Console

            Console().print(render(report))
        return 0

    return run("gengroup lag", main)
