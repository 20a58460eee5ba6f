"""What every command that talks to a cluster shares: its options, and how it ends.

* :func:`add_command` registers a subcommand with its help, description and
  the exit-code epilog; :func:`command` makes a module's ``add_parser`` from
  the function that adds the subcommand's own arguments (its docstring is the
  description).
* :func:`add_connection_options` adds ``--bootstrap``, ``--client-id``,
  ``--config``, ``--json`` and ``--timeout``; :func:`connection` resolves the
  bootstrap address and client id: a flag, else the environment
  (``GENGROUP_BOOTSTRAP``, ``GENGROUP_CLIENT_ID``), else the config file,
  else the default (none for the bootstrap address: a usage error; each
  client's own for the client id).
* The config file is ``--config PATH``, else ``$GENGROUP_CONFIG``, else
  ``~/.config/gengroup/config.toml`` if it exists: TOML with the keys
  ``bootstrap`` (``"HOST:PORT[,...]"`` or a list of ``"HOST:PORT"``) and
  ``client_id``. A file named by the flag or the variable must exist; an
  unreadable file, invalid TOML or an unknown key is a usage error.
* :func:`run` runs a command's coroutine and turns its outcome into the exit
  code: 0 ok, 1 an error, 2 a usage error, 3 a group or topic that does not
  exist. An expected failure is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
import os
import sys
import tomllib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import trio

from .._errors import GengroupError, GroupIdNotFound, UnknownTopicOrPartition

__all__ = [
    "EPILOG",
    "EXIT_ERROR",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "DEFAULT_CONFIG",
    "Connection",
    "UsageError",
    "add_command",
    "add_connection_options",
    "command",
    "config_path",
    "connection",
    "exit_code",
    "leaf",
    "read_config",
    "run",
]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3

_CANCELLED = (trio.Cancelled, asyncio.CancelledError)

EPILOG = "exit codes: 0 ok, 1 error, 2 usage, 3 not found (group or topic)"

#: The config file read when neither --config nor GENGROUP_CONFIG names one.
DEFAULT_CONFIG = "~/.config/gengroup/config.toml"


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


def add_command(
    subparsers: Any, name: str, *, help: str, description: str | None, epilog: str | None = EPILOG
) -> argparse.ArgumentParser:
    """Register the subcommand ``name``; its parser, to add its own arguments to.

    Args:
        subparsers: what ``ArgumentParser.add_subparsers`` returned.
        name: the subcommand's name.
        help: its line in ``gengroup --help``.
        description: the text of ``gengroup NAME --help``.
        epilog: the text after its options (default: the exit codes).
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help, description=description, epilog=epilog
    )
    return parser


def command(
    name: str, *, help: str, epilog: str | None = EPILOG
) -> Callable[[Callable[[argparse.ArgumentParser], None]], Callable[[Any], None]]:
    """Make a subcommand's ``add_parser(subparsers)`` from the function adding its arguments.

    The decorated function takes the subcommand's parser; its docstring is the
    description (``gengroup NAME --help``).

    Args:
        name: the subcommand's name.
        help: its line in ``gengroup --help``.
        epilog: the text after its options (default: the exit codes).
    """

    def decorate(arguments: Callable[[argparse.ArgumentParser], None]) -> Callable[[Any], None]:
        description = inspect.cleandoc(arguments.__doc__) if arguments.__doc__ else None

        def add_parser(subparsers: Any) -> None:
            arguments(
                add_command(subparsers, name, help=help, description=description, epilog=epilog)
            )

        add_parser.__doc__ = f"Register the ``{name}`` subcommand."
        return add_parser

    return decorate


def add_connection_options(parser: argparse.ArgumentParser, *, timeout: float = 30.0) -> None:
    """Add ``--bootstrap``, ``--client-id``, ``--json`` and ``--timeout`` to ``parser``."""
    parser.add_argument(
        "--bootstrap", help="HOST:PORT[,...] (default: $GENGROUP_BOOTSTRAP)", default=None
    )
    parser.add_argument(
        "--client-id", help="client id to send (default: $GENGROUP_CLIENT_ID)", default=None
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help=f"TOML config file (default: $GENGROUP_CONFIG, else {DEFAULT_CONFIG})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "--timeout", type=float, default=timeout, help=f"seconds (default {timeout:g})"
    )


def connection(args: argparse.Namespace) -> Connection:
    """The bootstrap address and client id: a flag, else the environment, else the file.

    Raises:
        UsageError: no bootstrap address anywhere, or a bad config file.
    """
    bootstrap = getattr(args, "bootstrap", None) or os.environ.get("GENGROUP_BOOTSTRAP")
    client_id = getattr(args, "client_id", None) or os.environ.get("GENGROUP_CLIENT_ID")
    if not bootstrap or not client_id:
        path, source = config_path(getattr(args, "config", None))
        if path is not None:
            found = read_config(path, source)
            bootstrap = bootstrap or found.get("bootstrap")
            client_id = client_id or found.get("client_id")
    if not bootstrap:
        raise UsageError(
            "give --bootstrap, set GENGROUP_BOOTSTRAP, or set bootstrap in the config file "
            f"({DEFAULT_CONFIG})"
        )
    return Connection(bootstrap, client_id or None)


def config_path(flag: str | None) -> tuple[Path | None, str]:
    """The config file to read and where its name came from (None: no file)."""
    if flag:
        return Path(flag).expanduser(), "--config"
    env = os.environ.get("GENGROUP_CONFIG")
    if env:
        return Path(env).expanduser(), "GENGROUP_CONFIG"
    default = Path(DEFAULT_CONFIG).expanduser()
    return (default if default.is_file() else None), "default"


def read_config(path: Path, source: str = "--config") -> dict[str, str]:
    """The settings of a config file: ``bootstrap`` and ``client_id``, as strings.

    Raises:
        UsageError: the file cannot be read, is not TOML, or holds an unknown
            key or a value of the wrong type.
    """
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise UsageError(f"config file {path} (from {source}): {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path}: not valid TOML ({exc})") from None
    unknown = sorted(set(data) - {"bootstrap", "client_id"})
    if unknown:
        raise UsageError(
            f"config file {path}: unknown key {', '.join(map(repr, unknown))} "
            "(known: bootstrap, client_id)"
        )
    out: dict[str, str] = {}
    bootstrap = data.get("bootstrap")
    if isinstance(bootstrap, list) and all(isinstance(a, str) for a in bootstrap):
        bootstrap = ",".join(bootstrap)
    if bootstrap is not None:
        if not isinstance(bootstrap, str):
            raise UsageError(f"config file {path}: bootstrap must be a string or list of strings")
        out["bootstrap"] = bootstrap
    client_id = data.get("client_id")
    if client_id is not None:
        if not isinstance(client_id, str):
            raise UsageError(f"config file {path}: client_id must be a string")
        out["client_id"] = client_id
    return out


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
