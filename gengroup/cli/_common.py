"""What every command that talks to a cluster shares: its options, and how it ends.

* :func:`add_command` registers a subcommand with its help, description and
  the exit-code epilog; :func:`command` makes a module's ``add_parser`` from
  the function that adds the subcommand's own arguments (its docstring is the
  description).
* :func:`add_connection_options` adds ``--bootstrap``, ``--client-id``,
  ``--config``, ``--json``, ``--timeout`` and the security options
  (:func:`add_security_options`: ``--security-protocol``, ``--sasl-*``,
  ``--ssl-*``).
* :func:`connection` resolves every connection setting the same way: a flag,
  else the environment (``GENGROUP_BOOTSTRAP``, ``GENGROUP_CLIENT_ID``,
  ``GENGROUP_<SETTING>`` for each security setting, e.g.
  ``GENGROUP_SASL_PASSWORD``), else the config file, else the default (none for
  the bootstrap address: a usage error; each client's own for the client id;
  plaintext for security). The security settings become one
  :class:`~gengroup.io.security.Security`, checked before any I/O: a bad value
  or combination is a usage error naming the setting. OAUTHBEARER takes a
  static token (``sasl_oauth_token``) or a shell command printing one
  (``sasl_oauth_token_command``), run on every token request.
* The config file is ``--config PATH``, else ``$GENGROUP_CONFIG``, else
  ``~/.config/gengroup/config.toml`` if it exists: TOML with the keys
  ``bootstrap`` (``"HOST:PORT[,...]"`` or a list of ``"HOST:PORT"``),
  ``client_id`` and the security settings (:data:`SECURITY_SETTINGS`); a
  relative certificate path in it is relative to the file's folder. A file
  named by the flag or the variable must exist; an unreadable file, invalid
  TOML, an unknown key or a value of the wrong type is a usage error.
* :func:`run` runs a command's coroutine and turns its outcome into the exit
  code: 0 ok, 1 an error (an authentication or TLS failure among them), 2 a
  usage or configuration error, 3 a group or topic that does not exist. An
  expected failure is one line on stderr, never a traceback.
* :func:`stream_closed` says a standard stream the command needs that was
  closed when it started (``<&-``, ``>&-``): a usage error, before any I/O.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
import math
import os
import sys
import tomllib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final, Literal

import anyio
import trio

from .._errors import ConfigError, GengroupError, GroupIdNotFound, UnknownTopicOrPartition
from ..io.security import PLAINTEXT, Security

__all__ = [
    "EPILOG",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "DEFAULT_CONFIG",
    "SECURITY_SETTINGS",
    "Connection",
    "TokenCommand",
    "UsageError",
    "add_command",
    "bounded",
    "add_connection_options",
    "add_security_options",
    "command",
    "config_path",
    "connection",
    "exit_code",
    "interrupted",
    "leaf",
    "read_config",
    "run",
    "security",
    "security_settings",
    "stream_closed",
]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
#: Ended by Ctrl-C where the command has no use for it (128 + SIGINT, as shells say).
EXIT_INTERRUPTED = 130

_CANCELLED = (trio.Cancelled, asyncio.CancelledError)

EPILOG = "exit codes: 0 ok, 1 error, 2 usage or configuration, 3 not found (group or topic)"

#: The config file read when neither --config nor GENGROUP_CONFIG names one.
DEFAULT_CONFIG = "~/.config/gengroup/config.toml"


@dataclass(frozen=True)
class _Setting:
    flag: str
    kind: str  # "str", "path" or "bool"
    help: str


#: The security settings: config key -> its flag, kind and help. The variable of
#: each is ``GENGROUP_`` and the key in upper case.
SECURITY_SETTINGS: Final[dict[str, _Setting]] = {
    "security_protocol": _Setting(
        "--security-protocol", "str", "PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL"
    ),
    "sasl_mechanism": _Setting(
        "--sasl-mechanism", "str", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"
    ),
    "sasl_username": _Setting("--sasl-username", "str", "user name (PLAIN, SCRAM)"),
    "sasl_password": _Setting(
        "--sasl-password", "str", "password (PLAIN, SCRAM); better: $GENGROUP_SASL_PASSWORD"
    ),
    "sasl_oauth_token": _Setting(
        "--sasl-oauth-token", "str", "a bearer token for OAUTHBEARER (implies that mechanism)"
    ),
    "sasl_oauth_token_command": _Setting(
        "--sasl-oauth-token-command",
        "str",
        "a shell command printing a bearer token, run for every authentication (OAUTHBEARER)",
    ),
    "ssl_cafile": _Setting(
        "--ssl-cafile", "path", "PEM file of the CAs to trust (default: the system's)"
    ),
    "ssl_certfile": _Setting("--ssl-certfile", "path", "PEM file of the client certificate (mTLS)"),
    "ssl_keyfile": _Setting("--ssl-keyfile", "path", "PEM file of the client certificate's key"),
    "ssl_password": _Setting("--ssl-password", "str", "password of an encrypted client key"),
    "ssl_check_hostname": _Setting(
        "--ssl-no-check-hostname",
        "bool",
        "do not check that the broker's certificate names its host (it is still verified)",
    ),
}

_CONNECTION_KEYS: Final = ("bootstrap", "client_id")
#: The metavar of a setting, by the last word of its key (else PATH).
_METAVARS: Final = {
    "protocol": "PROTOCOL",
    "mechanism": "MECHANISM",
    "username": "USER",
    "password": "PASSWORD",
    "token": "TOKEN",
    "command": "COMMAND",
}
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


class UsageError(Exception):
    """The command was given something it cannot use (exit code 2)."""


@dataclass(frozen=True)
class Connection:
    """Where and how a command connects, resolved from its flags, environment and config file.

    Attributes:
        bootstrap: the bootstrap address(es), ``HOST:PORT[,HOST:PORT...]``.
        client_id: the client id to send, or None for each client's default.
        security: the TLS and SASL settings (default: plaintext).
    """

    bootstrap: str
    client_id: str | None = None
    security: Security = PLAINTEXT

    def settings(self) -> dict[str, Any]:
        """The keyword settings of a client (``Admin``, ``Producer``, ``ConsumerGroup``,
        ``Cluster``): the client id if given, and the security settings not at their default."""
        out: dict[str, Any] = {} if self.client_id is None else {"client_id": self.client_id}
        return out | security_settings(self.security)


def security_settings(settings: Security) -> dict[str, Any]:
    """The keyword settings of a client secured as ``settings`` says (those not at their
    default; none for plaintext)."""
    out: dict[str, Any] = {}
    for f in fields(Security):
        value = getattr(settings, f.name)
        if value != f.default:
            out[f.name] = value
    return out


class TokenCommand:
    """An OAUTHBEARER token provider running a shell command that prints the token.

    Args:
        command: the command line, run by the shell on every call; its standard
            output, stripped, is the token.
    """

    def __init__(self, command: str) -> None:
        self.command = command

    def __repr__(self) -> str:
        return f"TokenCommand({self.command!r})"

    async def __call__(self) -> str:
        """Run the command; the token it printed.

        Raises:
            RuntimeError: the command failed or printed nothing.
        """
        done = await anyio.run_process(self.command, check=False)
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip().splitlines()
            raise RuntimeError(
                f"sasl_oauth_token_command exited with status {done.returncode}"
                + (f": {said[-1]}" if said else "")
            )
        token = done.stdout.decode(errors="replace").strip()
        if not token:
            raise RuntimeError("sasl_oauth_token_command printed no token")
        return token


def _static_token(token: str) -> Callable[[], Awaitable[str]]:
    async def provider() -> str:
        return token

    return provider


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


def add_connection_options(
    parser: argparse.ArgumentParser, *, timeout: float = 30.0, infinite: bool = False
) -> None:
    """Add ``--bootstrap``, ``--client-id``, ``--config``, ``--json``, ``--timeout`` and the
    security options (:func:`add_security_options`) to ``parser``.

    ``--timeout`` takes a positive number of seconds, finite unless
    ``infinite`` (a command whose clients accept no limit: ``inf``).
    """
    parser.add_argument(
        "--bootstrap", help="HOST:PORT[,...] (default: $GENGROUP_BOOTSTRAP)", default=None
    )
    parser.add_argument(
        "--client-id", help="client id to send (default: $GENGROUP_CLIENT_ID)", default=None
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "--timeout",
        type=bounded(float, 0, above=True, infinite=infinite),
        default=timeout,
        help=f"seconds (default {timeout:g}{'; inf: no limit' if infinite else ''})",
    )
    add_security_options(parser)


def add_security_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and the security options (:data:`SECURITY_SETTINGS`) to ``parser``.

    Each option's default is None (not given), so that :func:`connection` falls
    back to the environment and the config file.
    """
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help=f"TOML config file (default: $GENGROUP_CONFIG, else {DEFAULT_CONFIG})",
    )
    group = parser.add_argument_group(
        "security",
        "TLS and SASL; each also GENGROUP_<KEY> and the config file key <key> (docs/cli.md)",
    )
    for key, setting in SECURITY_SETTINGS.items():
        if setting.kind == "bool":
            group.add_argument(
                setting.flag, dest=key, action="store_const", const=False, help=setting.help
            )
        else:
            metavar = _METAVARS.get(key.rpartition("_")[2], "PATH")
            group.add_argument(setting.flag, dest=key, metavar=metavar, help=setting.help)


class _Sources:
    """One setting's value: the flag, else the environment, else the config file (read once)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self._file: dict[str, Any] | None = None

    def file(self) -> dict[str, Any]:
        if self._file is None:
            path, source = config_path(getattr(self._args, "config", None))
            self._file = {} if path is None else read_config(path, source)
        return self._file

    def get(self, key: str) -> Any:
        flag = getattr(self._args, key, None)
        if flag is not None and flag != "":
            return flag
        variable = f"GENGROUP_{key.upper()}"
        env = os.environ.get(variable)
        if env:
            return _from_env(key, variable, env)
        return self.file().get(key)


def _from_env(key: str, variable: str, value: str) -> Any:
    setting = SECURITY_SETTINGS.get(key)
    if setting is None or setting.kind == "str":
        return value
    if setting.kind == "path":
        return os.path.expanduser(value)
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise UsageError(f"{variable} must be true or false, not {value!r}")


def connection(args: argparse.Namespace) -> Connection:
    """The bootstrap address, client id and security settings of a command.

    Each setting is taken from its flag, else the environment, else the
    config file.

    Raises:
        UsageError: no bootstrap address anywhere, a bad config file, or bad
            security settings.
    """
    sources = _Sources(args)
    bootstrap = sources.get("bootstrap")
    if not bootstrap:
        raise UsageError(
            "give --bootstrap, set GENGROUP_BOOTSTRAP, or set bootstrap in the config file "
            f"({DEFAULT_CONFIG})"
        )
    client_id = sources.get("client_id")
    return Connection(bootstrap, client_id or None, security(sources))


def security(args: argparse.Namespace | _Sources) -> Security:
    """The security settings of a command (flags, else environment, else config file).

    Raises:
        UsageError: a bad config file, or a bad value or combination of settings.
    """
    sources = args if isinstance(args, _Sources) else _Sources(args)
    given = {key: sources.get(key) for key in SECURITY_SETTINGS}
    settings = {k: v for k, v in given.items() if v is not None}
    path_flags = {k for k in settings if SECURITY_SETTINGS[k].kind == "path"}
    for key in path_flags:
        settings[key] = os.path.expanduser(settings[key])
    token = settings.pop("sasl_oauth_token", None)
    token_command = settings.pop("sasl_oauth_token_command", None)
    if token is not None and token_command is not None:
        raise UsageError("give sasl_oauth_token or sasl_oauth_token_command, not both")
    if token is not None or token_command is not None:
        settings.setdefault("sasl_mechanism", "OAUTHBEARER")
        settings["sasl_oauth_token_provider"] = (
            _static_token(token) if token is not None else TokenCommand(token_command)
        )
    try:
        return Security(**settings)
    except ConfigError as exc:
        raise UsageError(f"security settings: {exc}") from None


def config_path(flag: str | None) -> tuple[Path | None, str]:
    """The config file to read and where its name came from (None: no file)."""
    if flag:
        return Path(flag).expanduser(), "--config"
    env = os.environ.get("GENGROUP_CONFIG")
    if env:
        return Path(env).expanduser(), "GENGROUP_CONFIG"
    default = Path(DEFAULT_CONFIG).expanduser()
    return (default if default.is_file() else None), "default"


def read_config(path: Path, source: str = "--config") -> dict[str, Any]:
    """The settings of a config file: ``bootstrap``, ``client_id`` and the security settings.

    Values are strings, except ``ssl_check_hostname`` (a bool); certificate
    paths are absolute (a relative one is relative to the file's folder).

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
    known = (*_CONNECTION_KEYS, *SECURITY_SETTINGS)
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise UsageError(
            f"config file {path}: unknown key {', '.join(map(repr, unknown))} "
            f"(known: {', '.join(known)})"
        )
    out: dict[str, Any] = {}
    bootstrap = data.get("bootstrap")
    if isinstance(bootstrap, list) and all(isinstance(a, str) for a in bootstrap):
        bootstrap = ",".join(bootstrap)
    if bootstrap is not None:
        if not isinstance(bootstrap, str):
            raise UsageError(f"config file {path}: bootstrap must be a string or list of strings")
        out["bootstrap"] = bootstrap
    for key in ("client_id", *SECURITY_SETTINGS):
        value = data.get(key)
        if value is None:
            continue
        kind = SECURITY_SETTINGS[key].kind if key in SECURITY_SETTINGS else "str"
        wanted = bool if kind == "bool" else str
        if not isinstance(value, wanted):
            what = "true or false" if kind == "bool" else "a string"
            raise UsageError(f"config file {path}: {key} must be {what}")
        if kind == "path":
            value = str(path.parent / Path(str(value)).expanduser())
        out[key] = value
    return out


def leaf(exc: BaseException) -> BaseException:
    """The exception an exception group stands for: its first one that is not a cancellation."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, _CANCELLED)]
        exc = (inner or list(exc.exceptions))[0]
    return exc


def bounded(
    kind: type[int] | type[float],
    low: float,
    high: float = math.inf,
    *,
    above: bool = False,
    infinite: bool = False,
) -> Callable[[str], Any]:
    """An argparse ``type``: a number of ``kind`` from ``low`` (excluded: ``above``) to ``high``.

    A float is finite too: ``nan`` and ``inf`` are out of range, unless
    ``infinite`` (no ``high``): then ``inf`` is in range (no limit), ``nan``
    still is not. A value out of range is a usage error naming the option,
    as argparse says it.
    """

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        in_range = ((low < value) if above else (low <= value)) and value <= high
        if not in_range or not (math.isfinite(value) or (infinite and value == math.inf)):
            shown = f"{low}" if kind is int else f"{low:g}"
            least = f"above {shown}" if above else f"at least {shown}"
            top = f"{high}" if kind is int else f"{high:g}"
            most = f" and at most {top}" if high != math.inf else ""
            if high == math.inf and kind is float and not infinite:
                most = " and finite"
            raise argparse.ArgumentTypeError(f"must be {least}{most}, got {text}")
        return value

    return parse


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is Ctrl-C (a KeyboardInterrupt, alone or in an exception group)."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(KeyboardInterrupt) is not None
    return isinstance(exc, KeyboardInterrupt)


def exit_code(exc: BaseException) -> int | None:
    """The exit code of an expected failure (None: a bug, to be raised)."""
    if isinstance(exc, UsageError | ConfigError):
        return EXIT_USAGE
    if isinstance(exc, GroupIdNotFound | UnknownTopicOrPartition):
        return EXIT_NOT_FOUND
    if isinstance(exc, GengroupError | TimeoutError | ValueError | OSError):
        return EXIT_ERROR
    return None


def stream_closed(where: str, *names: Literal["stdin", "stdout"]) -> bool:
    """Whether one of the standard streams ``names`` was closed when the command started.

    A descriptor closed at start (``<&-``, ``>&-``, a supervisor that closes
    them) leaves Python without the stream (``sys.stdin`` or ``sys.stdout``
    is None). The first one closed is said in one line on stderr,
    ``WHERE: stdin is closed``.

    Args:
        where: the command's name, the prefix of the line.
        names: the streams the command reads or writes.
    """
    for name in names:
        if getattr(sys, name) is None:
            print(f"{where}: {name} is closed", file=sys.stderr)
            return True
    return False


def run(
    where: str,
    main: Callable[[], Awaitable[int]],
    *,
    backend: str = "trio",
    streams: Sequence[Literal["stdin", "stdout"]] = ("stdout",),
) -> int:
    """Run ``main`` (returning the exit code); say an expected failure in one line.

    Args:
        where: the command's name, the prefix of its error line.
        main: the command's coroutine function.
        backend: the anyio backend.
        streams: the standard streams the command reads or writes: one
            closed at start is a usage error (:func:`stream_closed`), said
            before ``main`` runs.

    Returns:
        The exit code.
    """
    if stream_closed(where, *streams):
        return EXIT_USAGE
    # The command says what failed itself, once; the client's own warnings
    # (e.g. "cluster unreachable") would say it twice.
    logging.getLogger("gengroup").setLevel(logging.ERROR)
    try:
        return anyio.run(main, backend=backend)
    except BaseException as raised:
        if interrupted(raised):
            print(f"{where}: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        if not isinstance(raised, Exception):
            raise
        exc = leaf(raised)
        code = exit_code(exc)
        if code is None:
            raise
        print(f"{where}: {_one_line(exc)}", file=sys.stderr)
        return code


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())
