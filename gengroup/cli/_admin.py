"""The frame of the commands that ask the cluster through :class:`~gengroup.Admin`.

Each such command (``groups``, ``topics``) is a set of actions. An action is
an async function of an open Admin and the parsed arguments that returns
what to print; :class:`AdminCommand` registers it with the common options
(``--bootstrap`` or ``GENGROUP_BOOTSTRAP``, ``--json``, ``--timeout``) and
runs it: JSON or text on stdout, one line on stderr for an expected failure,
and the exit code.
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

from .._errors import GengroupError, GroupIdNotFound, UnknownTopicOrPartition
from ..admin import Admin

__all__ = ["EPILOG", "EXIT_ERROR", "EXIT_NOT_FOUND", "EXIT_USAGE", "Action", "AdminCommand"]

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3

EPILOG = "exit codes: 0 ok, 1 error, 2 usage, 3 not found (group or topic)"

#: One action: what it prints (as JSON or text), from an open Admin.
Action = Callable[[Admin, argparse.Namespace], Awaitable[Any]]


class AdminCommand:
    """A ``gengroup NAME ACTION`` command whose actions ask the cluster."""

    def __init__(self, subparsers: Any, name: str, help: str) -> None:
        self.name = name
        parser: argparse.ArgumentParser = subparsers.add_parser(name, help=help, epilog=EPILOG)
        self._sub = parser.add_subparsers(dest=f"{name}_action", metavar="ACTION", required=True)
        #: Each action's parser, by action name.
        self.actions: dict[str, argparse.ArgumentParser] = {}

    def action(self, name: str, help: str, func: Action) -> argparse.ArgumentParser:
        """Register an action; its parser, to add the action's own arguments to."""
        p: argparse.ArgumentParser = self._sub.add_parser(name, help=help, epilog=EPILOG)
        p.add_argument("--bootstrap", default=os.environ.get("GENGROUP_BOOTSTRAP"))
        p.add_argument("--json", action="store_true", help="print JSON instead of text")
        p.add_argument("--timeout", type=float, default=30.0, help="seconds (default 30)")
        p.set_defaults(func=lambda args: self._run(args, func))
        self.actions[name] = p
        return p

    def _run(self, args: argparse.Namespace, func: Action) -> int:
        where = f"gengroup {self.name}"
        if not args.bootstrap:
            print(f"{where}: give --bootstrap or set GENGROUP_BOOTSTRAP", file=sys.stderr)
            return EXIT_USAGE
        # The command says what failed itself, once; the client's own warnings
        # (e.g. "cluster unreachable") would say it twice.
        logging.getLogger("gengroup").setLevel(logging.ERROR)

        async def main() -> Any:
            async with Admin(args.bootstrap, timeout=args.timeout) as admin:
                return await func(admin, args)

        try:
            result = anyio.run(main)
        except (GroupIdNotFound, UnknownTopicOrPartition) as exc:
            print(f"{where}: {exc}", file=sys.stderr)
            return EXIT_NOT_FOUND
        except (GengroupError, TimeoutError, ValueError) as exc:
            print(f"{where}: {exc}", file=sys.stderr)
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
        return
    for key, value in result.items():
        if isinstance(value, list):
            print(f"{key}:")
            for row in value:
                print("  " + "  ".join(f"{k}={v}" for k, v in row.items()))
        else:
            print(f"{key}: {value}")
