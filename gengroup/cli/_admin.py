"""The frame of the commands that ask the cluster through :class:`~gengroup.Admin`.

Each such command (``groups``, ``topics``) is a set of actions. An action is
an async function of an open Admin and the parsed arguments that returns
what to print; :class:`AdminCommand` registers it with the common options
(see :func:`~gengroup.cli._common.add_connection_options`) and runs it: JSON
or text on stdout, one line on stderr for an expected failure, and the exit
code (:mod:`gengroup.cli._common`).

An action that does several things (deleting several groups) and fails at
some of them raises :class:`PartlyFailed`: what succeeded is printed, each
failure is one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..admin import Admin
from ._common import (
    EPILOG,
    EXIT_ERROR,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    add_command,
    add_connection_options,
    connection,
    exit_code,
    run,
)

__all__ = [
    "EPILOG",
    "EXIT_ERROR",
    "EXIT_NOT_FOUND",
    "EXIT_USAGE",
    "Action",
    "AdminCommand",
    "PartlyFailed",
    "open_admin",
    "print_result",
]

#: One action: what it prints (as JSON or text), from an open Admin.
Action = Callable[[Admin, argparse.Namespace], Awaitable[Any]]


class PartlyFailed(Exception):
    """Some of an action's steps failed: print ``result``, then say each error.

    Attributes:
        result: what to print for the steps that succeeded.
        errors: the failures, each said in one line; the exit code is 3 when
            every one is "not found", else 1.
    """

    def __init__(self, result: Any, errors: Sequence[BaseException]) -> None:
        super().__init__(f"{len(errors)} failed")
        self.result = result
        self.errors = list(errors)


def open_admin(args: argparse.Namespace) -> Admin:
    """An Admin for the command's connection options (not entered yet)."""
    conn = connection(args)
    return Admin(conn.bootstrap, timeout=args.timeout, **conn.settings())


class AdminCommand:
    """A ``gengroup NAME ACTION`` command whose actions ask the cluster."""

    def __init__(self, subparsers: Any, name: str, help: str) -> None:
        self.name = name
        parser = add_command(subparsers, name, help=help, description=None)
        self._sub = parser.add_subparsers(dest=f"{name}_action", metavar="ACTION", required=True)
        #: Each action's parser, by action name.
        self.actions: dict[str, argparse.ArgumentParser] = {}

    def action(self, name: str, help: str, func: Action) -> argparse.ArgumentParser:
        """Register an action; its parser, to add the action's own arguments to."""
        p = add_command(self._sub, name, help=help, description=None)
        add_connection_options(p)
        p.set_defaults(func=lambda args: self._run(args, func))
        self.actions[name] = p
        return p

    def _run(self, args: argparse.Namespace, func: Action) -> int:
        where = f"gengroup {self.name}"

        async def main() -> int:
            try:
                async with open_admin(args) as admin:
                    result = await func(admin, args)
            except PartlyFailed as partly:
                if args.json or any(partly.result.values()):  # not an empty header
                    print_result(partly.result, args.json)
                codes = {exit_code(e) or EXIT_ERROR for e in partly.errors}
                for error in partly.errors:
                    print(f"{where}: {error}", file=sys.stderr)
                return EXIT_NOT_FOUND if codes == {EXIT_NOT_FOUND} else EXIT_ERROR
            print_result(result, args.json)
            return 0

        return run(where, main, backend="asyncio")


def print_result(result: Any, as_json: bool) -> None:
    """Print an action's result: indented JSON, or text (rows, or ``key: value`` lines)."""
    if as_json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return
    if isinstance(result, list):
        for row in result:
            print("  ".join(str(v) for v in row.values()))
        return
    for key, value in result.items():
        if isinstance(value, list):
            print(f"{key}:")
            for row in value:
                if isinstance(row, dict):
                    print("  " + "  ".join(f"{k}={v}" for k, v in row.items()))
                else:
                    print(f"  {row}")
        else:
            print(f"{key}: {value}")
