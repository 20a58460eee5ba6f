"""What every command that talks to a cluster shares: its options, and how it ends.

* :func:`add_connection_options` adds ``--bootstrap``, ``--client-id``,
  ``--json`` and ``--timeout``; :func:`connection` resolves the bootstrap
  address and client id from them (a flag, else ``GENGROUP_BOOTSTRAP`` /
  ``GENGROUP_CLIENT_ID``).
* :func:`run` runs a command's coroutine and turns its outcome into the exit
  code: 0 ok, 1 an error, 2 a usage error, 3 a group or topic that does not
  exist. An expected failure is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import trio

from .._errors import GengroupError, GroupIdNotFound, UnknownTopicOrPartition

__all__ = [
    "EPILOG",
    "EXIT_ERROR",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "Connection",
    "UsageError",
    "add_connection_options",
    "connection",
    "exit_code",
    "leaf",
    "run",
]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3

_CANCELLED = (trio.Cancelled, asyncio.CancelledError)

EPILOG = "exit codes: 0 ok, 1 error, 2 usage, 3 not found (group or topic)"


class UsageError(Exception):
    """The command was given something it cannot use (exit code 2)."""


@dataclass(frozen=True)
class Connection:
    """Where a command connects, resolved from its flags and environment.

    Attributes:
        bootstrap: the bootstrap address(es), ``HOST:PORT[,HOST:PORT...]``.
        client_id: the client id to send, or None for each client's default.
    """

    bootstrap: str
    client_id: str | None = None


def add_connection_options(parser: argparse.ArgumentParser, *, timeout: float = 30.0) -> None:
    """Add ``--bootstrap``, ``--client-id``, ``--json`` and ``--timeout`` to ``parser``."""
    parser.add_argument(
        "--bootstrap", help="HOST:PORT[,...] (default: $GENGROUP_BOOTSTRAP)", default=None
    )
    parser.add_argument(
        "--client-id", help="client id to send (default: $GENGROUP_CLIENT_ID)", default=None
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "--timeout", type=float, default=timeout, help=f"seconds (default {timeout:g})"
    )


def connection(args: argparse.Namespace) -> Connection:
    """The bootstrap address and client id: a flag, else the environment.

    Raises:
        UsageError: no bootstrap address anywhere.
    """
    bootstrap = args.bootstrap or os.environ.get("GENGROUP_BOOTSTRAP")
    if not bootstrap:
        raise UsageError("give --bootstrap or set GENGROUP_BOOTSTRAP")
    client_id = args.client_id or os.environ.get("GENGROUP_CLIENT_ID") or None
    return Connection(bootstrap, client_id)


def leaf(exc: BaseException) -> BaseException:
    """The exception an exception group stands for: its first one that is not a cancellation."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, _CANCELLED)]
        exc = (inner or list(exc.exceptions))[0]
    return exc


def exit_code(exc: BaseException) -> int | None:
    """The exit code of an expected failure (None: a bug, to be raised)."""
    if isinstance(exc, UsageError):
        return EXIT_USAGE
    if isinstance(exc, GroupIdNotFound | UnknownTopicOrPartition):
        return EXIT_NOT_FOUND
    if isinstance(exc, GengroupError | TimeoutError | ValueError | OSError):
        return EXIT_ERROR
    return None


def run(
    where: str,
    main: Callable[[], Awaitable[int]],
    *,
    backend: str = "trio",
) -> int:
    """Run ``main`` (returning the exit code); say an expected failure in one line.

    Args:
        where: the command's name, the prefix of its error line.
        main: the command's coroutine function.
        backend: the anyio backend.

    Returns:
        The exit code.
    """
    # The command says what failed itself, once; the client's own warnings
    # (e.g. "cluster unreachable") would say it twice.
    logging.getLogger("gengroup").setLevel(logging.ERROR)
    try:
        return anyio.run(main, backend=backend)
    except Exception as raised:
        exc = leaf(raised)
        code = exit_code(exc)
        if code is None:
            raise
        print(f"{where}: {_one_line(exc)}", file=sys.stderr)
        return code


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())
