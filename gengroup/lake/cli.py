"""``gengroup lake``: run the sink, verify the lake on Spark, compute analytics on Spark.

Usage::

    gengroup lake sink --bootstrap HOST:PORT --group G --topic T --lake DIR [--until-caught-up]
    gengroup lake verify --bootstrap HOST:PORT --topic T --lake DIR [--group G] [--master URL]
    gengroup lake analytics --lake DIR --out DIR [--master URL]

``sink`` and ``verify`` take the security options of every ``gengroup`` command
(``--security-protocol``, ``--sasl-*``, ``--ssl-*``, their ``GENGROUP_*``
variables and config file keys: :mod:`gengroup.cli._common`).

Also runnable as ``python -m gengroup.lake``. Exit status: 0 ok, 1 error (or,
for ``verify``, any missing, extra, duplicated or differing record; records
below a partition's log start, which retention removed from the topic, are
reported as archived and are fine), 2 usage (a bad option or setting, e.g.
``--file-max-age nan``, or ``--file-max-age inf`` with ``--until-caught-up``).
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import math
import os
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import anyio

from .._errors import ConfigError, GengroupError
from .._types import TopicPartition
from ..admin import Admin
from ..cli._common import (
    UsageError,
    add_security_options,
    bounded,
    leaf,
    security,
    security_settings,
)
from ..consumer.group import ConsumerGroup
from .acquire import unsettled
from .sink import LakeConfig, LakeSink, PartitionProgress, run_beside, summarize
from .store import LakeError, LakeStore

__all__ = ["add_commands", "main"]

log = logging.getLogger("gengroup.lake")


def add_commands(subparsers: Any) -> None:
    """Add ``sink``, ``verify`` and ``analytics`` to an argparse subparsers object."""
    bootstrap = os.environ.get("GENGROUP_BOOTSTRAP")
    sink = subparsers.add_parser("sink", help="land topics in a Parquet lake through a group")
    sink.add_argument("--bootstrap", default=bootstrap, required=bootstrap is None)
    sink.add_argument("--group", required=True, help="the consumer group")
    sink.add_argument("--topic", action="append", required=True, help="a topic (repeatable)")
    sink.add_argument("--lake", required=True, help="a folder or pyarrow.fs URI (s3://...)")
    sink.add_argument("--file-max-bytes", type=int, default=64 * 1024 * 1024)
    sink.add_argument("--file-max-age", type=float, default=60.0, help="seconds")
    sink.add_argument("--compression", default="zstd")
    sink.add_argument("--session-timeout", type=float, default=10.0, help="seconds")
    sink.add_argument("--client-id", default="gengroup-lake")
    sink.add_argument(
        "--until-caught-up",
        action="store_true",
        help="stop once the group's committed offsets reach the topics' ends and every file "
        "they commit is published (needs a finite --file-max-age)",
    )
    sink.add_argument(
        "--progress",
        type=bounded(float, 0),
        default=None,
        metavar="SECONDS",
        help="print a progress table this often (default or 0: a log line every 30 s)",
    )
    add_security_options(sink)
    sink.set_defaults(lake_func=_sink)

    verify = subparsers.add_parser(
        "verify", help="check the lake against the topic on Spark (Spark's own Kafka reader)"
    )
    verify.add_argument("--bootstrap", default=bootstrap, required=bootstrap is None)
    verify.add_argument("--topic", action="append", required=True)
    verify.add_argument("--lake", required=True)
    verify.add_argument(
        "--group", help="compare only up to this group's committed offsets (default: topic ends)"
    )
    verify.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    add_security_options(verify)
    verify.set_defaults(lake_func=_verify)

    analytics = subparsers.add_parser("analytics", help="aggregate the lake on Spark")
    analytics.add_argument("--lake", required=True)
    analytics.add_argument("--out", required=True, help="folder for Parquet, JSON and PNG")
    analytics.add_argument("--master", default="local[2]")
    analytics.set_defaults(lake_func=_analytics)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gengroup.lake``."""
    parser = argparse.ArgumentParser(prog="gengroup lake", description=__doc__.splitlines()[0])
    add_commands(parser.add_subparsers(dest="lake_command", required=True))
    args = parser.parse_args(argv)
    return run(args)


def run(args: argparse.Namespace) -> int:
    """Run a parsed ``lake`` command; its exit status."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        return int(args.lake_func(args))
    except KeyboardInterrupt:
        return 130
    except Exception as raised:
        exc = leaf(raised)  # an exception group from a task group: what it stands for
        if isinstance(exc, UsageError | ConfigError):  # a bad option or setting
            print(f"gengroup lake {args.lake_command}: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, GengroupError | OSError):
            print(
                f"gengroup lake {args.lake_command}: {type(exc).__name__}: {exc}", file=sys.stderr
            )
            return 1
        raise


# ---------------------------------------------------------------------- sink


def _sink(args: argparse.Namespace) -> int:
    args.security = security_settings(security(args))
    config = LakeConfig(
        args.lake,
        file_max_bytes=args.file_max_bytes,
        file_max_age=args.file_max_age,
        compression=args.compression,
        progress_interval=0.0 if args.progress else 30.0,
    )
    if args.until_caught_up and math.isinf(args.file_max_age):
        raise UsageError(
            "--until-caught-up needs a finite --file-max-age: with inf a file lands only once "
            "full, so a partition's last records may never land and its committed offset "
            "never reach the end"
        )
    sink = LakeSink(config)
    anyio.run(_run_sink, args, sink, backend=os.environ.get("GENGROUP_BACKEND", "trio"))
    print(f"lake sink {args.group}: {summarize(sink.progress())}", file=sys.stderr)
    return 0


async def _run_sink(args: argparse.Namespace, sink: LakeSink) -> None:
    stop = anyio.Event()
    async with ConsumerGroup(
        args.group,
        args.topic,
        args.bootstrap,
        session_timeout=args.session_timeout,
        heartbeat_interval=min(1.0, args.session_timeout / 3),
        client_id=args.client_id,
        start_offset="earliest",
        **args.security,
    ) as group:
        background = [partial(_stop_on_signal, stop)]
        if args.until_caught_up:
            background.append(partial(_stop_when_caught_up, args, sink, stop))
        if args.progress:
            background.append(partial(_show_progress, sink, args.progress))
        await run_beside(partial(sink.run, group, stop), *background)


async def _stop_on_signal(stop: anyio.Event) -> None:
    """SIGINT or SIGTERM: land what is buffered, commit, leave the group, exit 0."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("lake sink: %s, stopping", signal.Signals(signum).name)
            stop.set()
            return


async def _stop_when_caught_up(args: argparse.Namespace, sink: LakeSink, stop: anyio.Event) -> None:
    """Stop once every partition is caught up: its committed offset reached the end, and
    the lake holds what the group committed. A partition a worker of this member holds
    counts once the worker landed up to the committed offset; any other partition once no
    staged file holds offsets below its committed offset that no published file holds (a
    file committed and not published yet, which the partition's next owner publishes: its
    writer stopped between its commit and its publish). So each of several members
    running with ``--until-caught-up`` stops once the lake holds the group's whole range.
    """
    async with Admin(args.bootstrap, **args.security) as admin:
        while True:
            lags = await admin.group_lag(args.group, args.topic)
            # A lag below 0 (a commit past a truncated end) has nothing left to read either.
            if all(p.end == 0 or (p.lag is not None and p.lag <= 0) for p in lags.values()):
                held = sink.held()  # read after the offsets: a worker lands on from those
                committed = {
                    tp: p.committed
                    for tp, p in lags.items()
                    if p.end and p.committed is not None and held.get(tp, -1) < p.committed
                }
                pending = await anyio.to_thread.run_sync(_unsettled, sink.store, committed)
                if not pending:
                    log.info("lake sink %s: caught up with %s", args.group, ", ".join(args.topic))
                    stop.set()
                    return
                log.debug("lake sink %s: committed and not published yet: %s", args.group, pending)
            await anyio.sleep(1.0)


def _unsettled(store: LakeStore, committed: dict[TopicPartition, int]) -> list[str]:
    """The staged files of these partitions whose offsets below the committed offset no
    published file holds (:func:`~gengroup.lake.acquire.unsettled`)."""
    try:
        return [
            path
            for tp, offset in sorted(committed.items())
            for _, path in unsettled(store.published(tp), store.staged(tp), offset)
        ]
    except OSError as exc:
        raise LakeError(f"reading the lake {store.uri!r} failed: {exc}") from exc


async def _token(provider: Callable[[], Awaitable[str] | str]) -> str:
    """The token of an async provider, or of a plain function."""
    token = provider()
    return await token if inspect.isawaitable(token) else token


async def _show_progress(sink: LakeSink, every: float) -> None:
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    def table(parts: list[PartitionProgress]) -> Table:
        t = Table(title=f"lake sink: {summarize(parts)}")
        for col in ("partition", "landed", "end", "lag", "buffered", "files", "delay s"):
            t.add_column(col, justify="right")
        for p in parts:
            delay = "-" if p.last_delay is None else f"{p.last_delay:.1f}"
            t.add_row(
                str(p.tp),
                str(p.landed_offset),
                str(p.high_watermark),
                str(p.lag),
                str(p.buffered),
                str(p.files),
                delay,
            )
        return t

    with Live(table([]), console=Console(stderr=True), auto_refresh=False) as live:
        while True:
            live.update(table(sink.progress()), refresh=True)
            await anyio.sleep(every)


# ---------------------------------------------------------------------- Spark


def _verify(args: argparse.Namespace) -> int:
    from . import spark

    sec = security(args)
    args.security = security_settings(sec)
    # Before Spark starts: the cluster answers and the topics exist (Spark's reader would
    # retry an absent broker for minutes, then fail deep in a Java stack trace).
    ends, starts = anyio.run(_offsets, args)
    spark.check_files(args.lake)
    with tempfile.TemporaryDirectory(prefix="gengroup-verify-") as private:
        token_file = None
        if sec.sasl_oauth_token_provider is not None:
            # The Java client reads the token from a file (asked for once, here).
            token_file = os.path.join(private, "token")
            with open(token_file, "w", opener=lambda p, f: os.open(p, f, 0o600)) as fh:
                fh.write(anyio.run(_token, sec.sasl_oauth_token_provider))
        options = spark.kafka_options(sec, oauth_token_file=token_file)
        with spark.session(args.master, "gengroup lake verify") as session:
            report = spark.verify(
                session, args.lake, args.bootstrap, args.topic, ends, options=options, starts=starts
            )
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.text())
    return 0 if report.ok else 1


async def _offsets(args: argparse.Namespace) -> tuple[dict[Any, int] | None, dict[Any, int]]:
    """Where the range verify compares ends and starts, per partition: the group's
    committed offsets (None without ``--group``: the topics' ends, Spark's "latest") and
    each partition's log start offset now (below it, the lake's records are archived).
    Also checks the cluster answers (``ClusterUnreachable`` after 30 s) and the topics
    exist."""
    async with Admin(args.bootstrap, timeout=30.0, **args.security) as admin:
        # A group that never committed reports every partition of the topics with its end.
        lags = await admin.group_lag(args.group or "gengroup-lake-verify", args.topic)
        starts = await admin.list_offsets(lags, "earliest")
    ends = {tp: p.committed or 0 for tp, p in lags.items()} if args.group else None
    return ends, starts


def _analytics(args: argparse.Namespace) -> int:
    from . import spark

    with spark.session(args.master, "gengroup lake analytics") as session:
        summary = spark.analytics(session, args.lake, args.out)
    print(json.dumps(summary, indent=2))
    return 0
