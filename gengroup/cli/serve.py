"""``gengroup serve``: run the embedded broker standalone (memory only).

Prints exactly ``bootstrap 127.0.0.1:PORT[,127.0.0.1:PORT...]`` on stdout,
flushed, once every broker listens, then serves until SIGINT or SIGTERM and
exits with status 0. A port that cannot be listened on (in use, an address
not on this machine) is one line on stderr and exit status 1. The brokers
take consecutive ports from ``--port``: one whose last broker's port would
pass 65535 is one line on stderr and exit status 2, before anything listens.

The listeners' security (``--security-protocol``, ``--ssl-*``, ``--sasl-*``)
becomes a :class:`~gengroup.broker.ServerSecurity`, checked (and its
certificate files loaded) before anything listens: an invalid combination or
an unreadable file is one line on stderr and exit status 2. While serving,
the broker's own log lines (a failed authentication, a connection closed for
a request out of turn or an expired session) go to stderr, one line each.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
from collections.abc import Callable
from typing import Final

import anyio

from .._errors import ConfigError
from ..broker import BrokerSettings, FakeCluster, ServerSecurity
from ..broker.log import topic_name_error
from ._common import bounded, command

__all__ = ["add_parser", "parse_topic", "parse_user", "run", "server_security"]

#: The highest TCP port: the last broker's port (``--port`` + ``--brokers`` - 1) may not pass it.
_MAX_PORT: Final = 65535


def parse_topic(text: str) -> tuple[str, int]:
    """Parse ``NAME:PARTITIONS`` (``NAME`` alone means one partition).

    Raises:
        argparse.ArgumentTypeError: the text is not of that form.
    """
    name, sep, count = text.rpartition(":")
    if not sep:
        name, count = text, "1"
    if not name or not count.isdigit() or int(count) < 1:
        raise argparse.ArgumentTypeError(f"expected NAME:PARTITIONS, got {text!r}")
    why = topic_name_error(name)
    if why is not None:
        raise argparse.ArgumentTypeError(f"{why}: {name!r}")
    return name, int(count)


def parse_user(text: str) -> tuple[str, str]:
    """Parse ``USER:PASSWORD`` (the password may hold colons).

    Raises:
        argparse.ArgumentTypeError: the text is not of that form.
    """
    user, sep, password = text.partition(":")
    if not sep or not user or not password:
        raise argparse.ArgumentTypeError("expected USER:PASSWORD")
    return user, password


def server_security(args: argparse.Namespace) -> ServerSecurity:
    """The listeners' security from the command's options.

    Raises:
        ConfigError: the options do not fit together, or a file cannot be loaded.
    """
    mechanisms = None
    if args.sasl_mechanisms is not None:
        mechanisms = [m.strip() for m in args.sasl_mechanisms.split(",") if m.strip()]
    security = ServerSecurity(
        security_protocol=args.security_protocol,
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
        ssl_cafile=args.ssl_cafile,
        sasl_mechanisms=mechanisms,
        users=dict(args.sasl_users),
        session_lifetime_ms=args.sasl_session_lifetime_ms,
    )
    security.tls_context()  # loads the certificate files now, before anything listens
    return security


def _repeatable(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    flag: str,
    dest: str,
    parse: Callable[[str], object],
    metavar: str,
    help: str,
) -> None:
    """Add an option that may be given several times: ``dest`` is the list of its values."""
    parser.add_argument(
        flag,
        dest=dest,
        action="append",
        type=parse,
        default=[],
        metavar=metavar,
        help=f"{help} (repeatable)",
    )


@command("serve", help="run the embedded Kafka-compatible broker", epilog=None)
def add_parser(parser: argparse.ArgumentParser) -> None:
    """Run the embedded Kafka-compatible broker in memory on loopback. Prints 'bootstrap
    HOST:PORT[,...]' once ready; stops on SIGINT/SIGTERM.
    """
    parser.add_argument(
        "--port",
        type=bounded(int, 0, _MAX_PORT),
        default=0,
        help=f"port of the first broker; the others take the next ones, up to {_MAX_PORT} "
        "(0: any free ports)",
    )
    parser.add_argument(
        "--brokers", type=bounded(int, 1), default=1, help="number of brokers (default 1)"
    )
    _repeatable(
        parser, "--topic", "topics", parse_topic, "NAME:PARTITIONS", "create a topic at start"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument(
        "--no-auto-create-topics",
        dest="auto_create_topics",
        action="store_false",
        help="do not create unknown topics on Metadata requests",
    )
    parser.add_argument(
        "--initial-rebalance-delay-ms",
        type=bounded(int, 0),
        default=3000,
        help="group.initial.rebalance.delay.ms (default 3000, as Kafka)",
    )
    parser.add_argument(
        "--offsets-topic-partitions",
        type=bounded(int, 1),
        default=50,
        help="offsets.topic.num.partitions (default 50, as Kafka)",
    )
    security = parser.add_argument_group("security (TLS and SASL)")
    security.add_argument(
        "--security-protocol",
        type=str.upper,
        choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
        default="PLAINTEXT",
        help="the listeners' protocol (default PLAINTEXT)",
    )
    security.add_argument(
        "--ssl-certfile", metavar="PEM", help="the brokers' certificate chain (and key)"
    )
    security.add_argument("--ssl-keyfile", metavar="PEM", help="the private key, if not in it")
    security.add_argument(
        "--ssl-cafile",
        metavar="PEM",
        help="CA of the client certificates: clients must present one (mutual TLS)",
    )
    security.add_argument(
        "--sasl-mechanisms",
        metavar="LIST",
        help="enabled mechanisms, comma-separated (default PLAIN,SCRAM-SHA-256,SCRAM-SHA-512)",
    )
    _repeatable(security, "--sasl-user", "sasl_users", parse_user, "USER:PASSWORD", "a SASL user")
    security.add_argument(
        "--sasl-session-lifetime-ms",
        type=int,
        metavar="MS",
        help="connections.max.reauth.ms: clients re-authenticate within it (default: never)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; return the exit code."""
    if args.brokers < 1:
        print("gengroup serve: --brokers must be at least 1", file=sys.stderr)
        return 2
    if args.port and args.port + args.brokers - 1 > _MAX_PORT:
        print(
            f"gengroup serve: --port {args.port} with --brokers {args.brokers} needs ports "
            f"{args.port} to {args.port + args.brokers - 1}, past {_MAX_PORT}: give --port at "
            f"most {_MAX_PORT - args.brokers + 1}, or 0 for any free ports",
            file=sys.stderr,
        )
        return 2
    names = [name for name, _ in args.topics or ()]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        print(f"gengroup serve: --topic {', '.join(twice)} given twice", file=sys.stderr)
        return 2
    try:
        security = server_security(args)
    except ConfigError as exc:
        print(f"gengroup serve: {_as_options(str(exc))}", file=sys.stderr)
        return 2
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("gengroup serve: %(message)s"))
    broker_log = logging.getLogger("gengroup.broker")
    broker_log.addHandler(handler)
    broker_log.setLevel(logging.INFO)
    try:
        anyio.run(_serve, args, security, backend="trio")
    except (OSError, BaseExceptionGroup) as exc:
        failure = _listen_failure(exc)
        if failure is None:
            raise
        port = args.port or "a free port"
        reason = (failure.strerror or str(failure)).lower()
        print(f"gengroup serve: cannot listen on {args.host}:{port}: {reason}", file=sys.stderr)
        return 1
    finally:
        broker_log.removeHandler(handler)
    return 0


#: ServerSecurity's settings, as the options that set them.
_OPTIONS: Final = {
    "security_protocol": "--security-protocol",
    "ssl_certfile": "--ssl-certfile",
    "ssl_keyfile": "--ssl-keyfile",
    "ssl_cafile": "--ssl-cafile",
    "sasl_mechanisms": "--sasl-mechanisms",
    "session_lifetime_ms": "--sasl-session-lifetime-ms",
    "users": "--sasl-user",
}
_SETTING: Final = re.compile(r"\b(" + "|".join(_OPTIONS) + r")\b")


def _as_options(message: str) -> str:
    """A ServerSecurity message naming the command's options instead of its settings."""
    return _SETTING.sub(lambda m: _OPTIONS[m.group(1)], message)


def _listen_failure(exc: BaseException) -> OSError | None:
    """The OSError of a listener that could not start (port in use, bad address), if any."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = _listen_failure(sub)
            if found is not None:
                return found
    return None


async def _serve(args: argparse.Namespace, security: ServerSecurity) -> None:
    settings = BrokerSettings(
        host=args.host,
        auto_create_topics=args.auto_create_topics,
        group_initial_rebalance_delay_ms=args.initial_rebalance_delay_ms,
        offsets_topic_num_partitions=args.offsets_topic_partitions,
    )
    ports = [args.port + i for i in range(args.brokers)] if args.port else None
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with FakeCluster(
            args.brokers, topics=args.topics, ports=ports, settings=settings, security=security
        ) as cluster:
            print(f"bootstrap {cluster.bootstrap}", flush=True)
            async for _ in signals:
                break
