"""``python -m gengroup.testing.kafka``: run a broker until SIGINT or SIGTERM.

It prints exactly one line to stdout, ``bootstrap 127.0.0.1:PORT``, once the
broker is ready, so a script can read the address; everything else (where the
log is, why the broker failed) goes to stderr. With ``--brokers N`` it runs a
:class:`~.cluster.KafkaCluster` of N nodes instead and prints every node's
address, comma-separated, once the cluster is healthy.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from ._base import DEFAULT_START_TIMEOUT, KAFKA_VERSION, KafkaHarnessError
from .broker import KafkaBroker
from .cluster import KafkaCluster

__all__ = ["main"]


class _Interrupted(BaseException):
    """A stop signal arrived while the broker was starting."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run a broker until SIGINT or SIGTERM (``python -m gengroup.testing.kafka``).

    Prints exactly one line to stdout, ``bootstrap 127.0.0.1:PORT``, once the
    broker is ready; diagnostics go to stderr.

    Args:
        argv: Command-line arguments (``sys.argv[1:]`` when omitted).

    Returns:
        The exit code: 0 after a requested stop, 1 if the broker failed.
    """
    parser = argparse.ArgumentParser(
        prog="python -m gengroup.testing.kafka",
        description=f"Run a single-node Apache Kafka {KAFKA_VERSION} broker on loopback.",
    )
    parser.add_argument("--port", type=int, default=None, help="client port (default: free)")
    parser.add_argument(
        "--brokers",
        type=int,
        default=1,
        help="run a cluster of this many nodes, each on free ports (default: %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_START_TIMEOUT,
        help="seconds to wait for readiness (default: %(default)s)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the data directory and broker log"
    )
    args = parser.parse_args(argv)
    if args.brokers < 1 or (args.brokers > 1 and args.port is not None):
        parser.error("--brokers must be at least 1, and --port needs a single broker")

    stop_requested = threading.Event()
    starting = [True]

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()
        if starting[0]:
            starting[0] = False
            raise _Interrupted

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    broker: KafkaBroker | KafkaCluster
    if args.brokers > 1:
        broker = KafkaCluster(args.brokers, start_timeout=args.timeout, keep=args.keep)
    else:
        broker = KafkaBroker(port=args.port, start_timeout=args.timeout, keep=args.keep)
    try:
        try:
            broker.start()
        except _Interrupted:
            return 0
        except KafkaHarnessError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 1
        finally:
            starting[0] = False
        print(f"bootstrap {broker.bootstrap}", flush=True)
        nodes = broker.nodes if isinstance(broker, KafkaCluster) else [broker]
        where = ", ".join(f"pid {n.pid}, log {n.log_path}" for n in nodes)
        print(
            f"Kafka {nodes[0].version} ready ({where}); stop with SIGINT or SIGTERM",
            file=sys.stderr,
            flush=True,
        )
        while not stop_requested.wait(0.5):
            for node in nodes:
                if not node.running:
                    print(f"error: a broker died:\n{node.log_tail()}", file=sys.stderr, flush=True)
                    return 1
        return 0
    finally:
        if isinstance(broker, KafkaCluster):
            broker.close()
        else:
            broker.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
