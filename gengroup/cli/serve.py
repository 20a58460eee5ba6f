"""``gengroup serve``: run the embedded broker standalone (memory only).

Prints exactly ``bootstrap 127.0.0.1:PORT[,127.0.0.1:PORT...]`` on stdout,
flushed, once every broker listens, then serves until SIGINT or SIGTERM and
exits with status 0. A port that cannot be listened on (in use, an address
not on this machine) is one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import signal
import sys

import anyio

from ..broker import BrokerSettings, FakeCluster
from ._common import command

__all__ = ["add_parser", "parse_topic", "run"]


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
    return name, int(count)


@command("serve", help="run the embedded Kafka-compatible broker", epilog=None)
def add_parser(parser: argparse.ArgumentParser) -> None:
    """Run the embedded Kafka-compatible broker in memory on loopback. Prints 'bootstrap
    HOST:PORT[,...]' once ready; stops on SIGINT/SIGTERM.
    """
    parser.add_argument(
        "--port",
        type=int,
        default=0,
        help="port of the first broker; the others take the next ones (0: any free ports)",
    )
    parser.add_argument("--brokers", type=int, default=1, help="number of brokers (default 1)")
    parser.add_argument(
        "--topic",
        dest="topics",
        action="append",
        type=parse_topic,
        default=[],
        metavar="NAME:PARTITIONS",
        help="create a topic at start (repeatable)",
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
        type=int,
        default=3000,
        help="group.initial.rebalance.delay.ms (default 3000, as Kafka)",
    )
    parser.add_argument(
        "--offsets-topic-partitions",
        type=int,
        default=50,
        help="offsets.topic.num.partitions (default 50, as Kafka)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; return the exit code."""
    if args.brokers < 1:
        print("gengroup serve: --brokers must be at least 1", file=sys.stderr)
        return 2
    try:
        anyio.run(_serve, args, backend="trio")
    except (OSError, BaseExceptionGroup) as exc:
        failure = _listen_failure(exc)
        if failure is None:
            raise
        port = args.port or "a free port"
        reason = (failure.strerror or str(failure)).lower()
        print(f"gengroup serve: cannot listen on {args.host}:{port}: {reason}", file=sys.stderr)
        return 1
    return 0


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


async def _serve(args: argparse.Namespace) -> None:
    settings = BrokerSettings(
        host=args.host,
        auto_create_topics=args.auto_create_topics,
        group_initial_rebalance_delay_ms=args.initial_rebalance_delay_ms,
        offsets_topic_num_partitions=args.offsets_topic_partitions,
    )
    ports = [args.port + i for i in range(args.brokers)] if args.port else None
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with FakeCluster(
            args.brokers, topics=args.topics, ports=ports, settings=settings
        ) as cluster:
            print(f"bootstrap {cluster.bootstrap}", flush=True)
            async for _ in signals:
                break
