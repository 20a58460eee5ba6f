"""``gengroup consume TOPIC...``: print records, as a group member or read directly.

Two ways to read:

* ``--group G``: as a member of consumer group ``G``, one task per assigned
  partition. Each new generation is one line on stderr (its id, the member
  id, the partitions assigned). Reading starts at the group's committed
  offsets (where there is none: the beginning with ``--from-beginning``, else
  the end), and only printed records are marked, so the committed offsets
  (periodic, and a final commit when the command ends) cover exactly what was
  printed (and the offsets without records right after it: transaction
  markers, aborted transactions).
* without a group: the partitions given by ``--partition`` (default: all) of
  each topic are read directly, from the beginning with ``--from-beginning``,
  else from the end. Nothing is committed.

``-n N`` stops after N records; ``--until-end`` stops once every partition
read reached the end offset it had when the command started (records written
since are not printed), showing each partition's position against that end on
stderr while it runs when stderr is a terminal and stdout is not
(:mod:`._progress`). Otherwise the command runs until SIGINT (Ctrl-C) or
SIGTERM, and then ends cleanly (group mode: final commit, leaving the group)
with exit code 0. A cluster unreachable for ``--timeout`` seconds (not up
yet at start, down, or a wrong address) ends it with exit code 1, in group
mode too, where a member would otherwise notice only when its session timed
out; until then it is asked again (:mod:`._metadata` at start).

Formats: ``raw`` writes each value as it is (``null`` for a null value; with
``--key-separator SEP``, ``KEY SEP VALUE``); ``json`` one object per line with
topic, partition, offset, timestamp, key, value and headers (a list of
``[name, value]`` pairs, in order: a name may repeat; UTF-8 bytes as a
string, other bytes as ``{"base64": "..."}``, so that ``gengroup produce
--format json`` sends them again unchanged); ``table`` a table (rich; bytes
that are not UTF-8 shown with backslash escapes).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import math
import os
import select
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import IO, Any, Literal, cast

import anyio
from kio.schema.errors import ErrorCode

from .._errors import ClusterUnreachable, UnknownTopicOrPartition
from .._types import TopicPartition
from ..admin import Admin
from ..consumer.generation import Generation
from ..consumer.group import ConsumerGroup
from ..io.cluster import Cluster
from ..io.fetch import PartitionFetch, fetch_partition
from ..io.retry import Backoff, retry
from ..protocol.records import Record
from ._common import add_connection_options, command, connection, run
from ._metadata import topic_metadata
from ._progress import View, wanted

__all__ = ["Printer", "add_parser", "json_bytes"]

_UNKNOWN_TOPIC = int(ErrorCode.unknown_topic_or_partition)
#: How often a member waiting for a batch with --until-end looks at its position, seconds.
_END_CHECK = 0.5


@command("consume", help="print records of topics, as a group member or read directly")
def add_parser(parser: argparse.ArgumentParser) -> None:
    """Print the records of TOPICs: as a member of --group G (committing only what was printed) or,
    without a group, reading --partition P (default: all) directly. Starts at the end (or
    the committed offsets) unless --from-beginning. Runs until -n N records, --until-end, or
    Ctrl-C/SIGTERM (a clean exit).
    """
    parser.add_argument("topics", nargs="+", metavar="TOPIC")
    parser.add_argument("--group", help="consume as a member of this consumer group")
    parser.add_argument(
        "--partition",
        type=int,
        action="append",
        help="without --group: read this partition of each topic (repeatable; default all)",
    )
    parser.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the beginning (with --group: where the group has no committed offset)",
    )
    parser.add_argument("-n", "--max-records", type=int, metavar="N", help="stop after N records")
    parser.add_argument(
        "--until-end",
        action="store_true",
        help="stop when every partition reached the end offset it had at start",
    )
    parser.add_argument(
        "--format",
        choices=("raw", "json", "table"),
        default=None,
        help="how records are printed (default raw; --json is --format json)",
    )
    parser.add_argument(
        "--key-separator", metavar="SEP", help="raw: print KEY SEP VALUE instead of the value"
    )
    add_connection_options(parser, timeout=60.0)
    parser.set_defaults(func=_run)


# ---------------------------------------------------------------------------- printing


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def json_bytes(data: bytes | None) -> str | dict[str, str] | None:
    """Bytes as the JSON format prints them, losslessly: UTF-8 text as a string,
    other bytes as ``{"base64": "..."}`` (what ``gengroup produce --format json``
    reads back), None as null."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


class Printer:
    """Writes records to stdout in one of the formats; counts them against ``-n``.

    Args:
        fmt: ``"raw"``, ``"json"`` or ``"table"``.
        key_separator: raw format: print ``KEY SEP VALUE``.
        limit: the most records to print (None: no limit).
        out: a binary stream (default: stdout's).
    """

    def __init__(
        self, fmt: str, key_separator: str | None, limit: int | None, out: Any = None
    ) -> None:
        self.fmt = fmt
        self.separator = None if key_separator is None else key_separator.encode()
        self.remaining = limit
        self.printed = 0
        self.out = out if out is not None else sys.stdout.buffer
        #: Set once the limit was reached or stdout was closed: stop reading.
        self.full = anyio.Event()
        self._console: Any = None

    def take(self) -> bool:
        """Whether one more record may be printed (then it counts as printed)."""
        if self.full.is_set() or self.remaining == 0:
            return False
        if self.remaining is not None:
            self.remaining -= 1
            if self.remaining == 0:
                self.full.set()
        self.printed += 1
        return True

    def record(self, tp: TopicPartition, record: Record) -> None:
        """Write one record (after :meth:`take` allowed it)."""
        try:
            if self.fmt == "raw":
                value = b"null" if record.value is None else record.value
                if self.separator is not None:
                    key = b"null" if record.key is None else record.key
                    value = key + self.separator + value
                self.out.write(value + b"\n")
            elif self.fmt == "json":
                obj = {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "offset": record.offset,
                    "timestamp": record.timestamp,
                    "key": json_bytes(record.key),
                    "value": json_bytes(record.value),
                    "headers": [[k, json_bytes(v)] for k, v in record.headers],
                }
                self.out.write(json.dumps(obj, ensure_ascii=False).encode() + b"\n")
            else:
                self._table_row(tp, record)
        except BrokenPipeError:
            self._closed()

    def flush(self) -> None:
        """Flush stdout (after each batch)."""
        try:
            self.out.flush()
        except BrokenPipeError:
            self._closed()

    async def watch(self, period: float = 0.5) -> None:
        """Notice a reader of stdout that went away while nothing is written.

        A write finds out (``BrokenPipeError``), but on an idle topic there
        is none: a pipe whose reader closed reports POLLERR.
        """
        try:
            fd = self.out.fileno()
        except (AttributeError, OSError, ValueError):  # not a file (a test's buffer)
            return
        if not hasattr(select, "poll"):  # Windows: a write finds out
            return
        poller = select.poll()
        poller.register(fd, 0)  # POLLERR and POLLHUP are reported whatever is asked
        while not self.full.is_set():
            if any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0)):
                self._closed()
                return
            await anyio.sleep(period)

    def _closed(self) -> None:
        # The reader went away (``| head``): stop quietly; the interpreter's own
        # flush at exit must not fail either.
        self.full.set()
        self.remaining = 0
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)

    def _table_row(self, tp: TopicPartition, record: Record) -> None:
        from rich.console import Console
        from rich.table import Table

        if self._console is None:
            self._console = Console(
                file=cast(IO[str], _TextOut(self.out)),
                # A pipe has no width: do not wrap values at 80 columns.
                width=None if sys.stdout.isatty() else 10_000,
            )
            self._console.print(self._table(Table, header=True))
        when = datetime.datetime.fromtimestamp(record.timestamp / 1000, datetime.UTC)
        table = self._table(Table, header=False)
        table.add_row(
            str(tp),
            str(record.offset),
            when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            _text(record.key) or "",
            "null" if record.value is None else _text(record.value),
        )
        self._console.print(table)

    @staticmethod
    def _table(table_type: Any, *, header: bool) -> Any:
        table = table_type(show_header=header, box=None, pad_edge=False, expand=False)
        table.add_column("partition", width=16, no_wrap=True)
        table.add_column("offset", width=10, justify="right")
        table.add_column("timestamp", width=24)
        table.add_column("key", width=16, overflow="fold")
        table.add_column("value", overflow="fold")
        return table


class _TextOut:
    """A text view of a binary stream, for rich."""

    def __init__(self, out: Any) -> None:
        self._out = out

    def write(self, text: str) -> int:
        self._out.write(text.encode())
        return len(text)

    def flush(self) -> None:
        self._out.flush()

    def isatty(self) -> bool:
        return sys.stdout.isatty()


# ---------------------------------------------------------------------------- reading


async def _partitions(
    cluster: Cluster, topics: Sequence[str], only: Sequence[int] | None, timeout: float
) -> list[TopicPartition]:
    """The partitions to read; a topic or partition that does not exist raises.

    A cluster not reachable yet is asked again until ``timeout`` (``--timeout``).
    """
    md = await topic_metadata(cluster, topics, timeout)
    tps: list[TopicPartition] = []
    for name, info in md.items():
        missing = sorted(set(only or ()) - set(info.partitions))
        if missing:
            raise UnknownTopicOrPartition(
                _UNKNOWN_TOPIC, f"topic {name!r} has no partition {', '.join(map(str, missing))}"
            )
        tps.extend(TopicPartition(name, p) for p in sorted(only or info.partitions))
    return tps


class _Ends:
    """The end offsets as of start (``--until-end``) and the partitions that reached them."""

    def __init__(self, ends: dict[TopicPartition, int] | None) -> None:
        self.ends = ends
        self.reached: set[TopicPartition] = set()
        self.all_reached = anyio.Event()

    def end(self, tp: TopicPartition) -> int | None:
        return None if self.ends is None else self.ends.get(tp, 0)

    def check(self, tp: TopicPartition, position: int, owned: Sequence[TopicPartition]) -> bool:
        """Note ``tp``'s position; whether it reached its end (then check all ``owned``)."""
        end = self.end(tp)
        if end is None or position < end:
            return False
        self.reached.add(tp)
        if set(owned) <= self.reached:
            self.all_reached.set()
        return True


class _Positions:
    """The ``--until-end`` view: each partition's position against its end offset."""

    def __init__(self, view: View) -> None:
        self.view = view
        self._tasks: dict[TopicPartition, tuple[Any, int, int]] = {}

    def track(self, tp: TopicPartition, start: int, end: int | None) -> None:
        """Show ``tp``, read from ``start`` up to ``end`` (once; None: no end, not shown)."""
        if end is None or tp in self._tasks or not self.view.enabled:
            return
        task = self.view.add(str(tp), total=max(end - start, 1), detail=f"{start}/{end}")
        self._tasks[tp] = (task, start, end)
        self.at(tp, start)

    def at(self, tp: TopicPartition, position: int) -> None:
        """``tp`` was read up to ``position``."""
        if tp not in self._tasks:
            return
        task, start, end = self._tasks[tp]
        position = min(position, end)
        done = position - start if end > start else 1
        self.view.update(task, completed=done, detail=f"{position}/{end}")


async def _read_directly(
    args: argparse.Namespace,
    printer: Printer,
    stop: anyio.Event,
    cluster: Cluster,
    positions: _Positions,
) -> None:
    admin = Admin(cluster, timeout=args.timeout)
    async with _until_stopped(stop):
        tps = await _partitions(cluster, args.topics, args.partition, args.timeout)
        starts = await admin.list_offsets(tps, "earliest" if args.from_beginning else "latest")
        ends = _Ends(
            await admin.list_offsets(tps, "latest", read_committed=True) if args.until_end else None
        )
    if stop.is_set():
        return

    async def follow(tp: TopicPartition) -> None:
        position = starts[tp]
        positions.track(tp, position, ends.end(tp))
        backoff = Backoff(cluster.retry_backoff)

        async def refresh() -> None:
            await cluster.refresh_metadata([tp.topic])

        async def step() -> PartitionFetch:
            return await fetch_partition(cluster, tp, position, isolation_level="read_committed")

        while not ends.check(tp, position, tps):
            pf = await retry(
                f"fetch {tp}", step, timeout=args.timeout, backoff=backoff, refresh_metadata=refresh
            )
            backoff.reset()
            end = ends.end(tp)
            for record in pf.records:
                if end is not None and record.offset >= end:
                    break
                if not printer.take():
                    return
                printer.record(tp, record)
            printer.flush()
            position = max(position, pf.next_offset)
            positions.at(tp, position)

    async with anyio.create_task_group() as tg:
        tg.start_soon(_stop_on, [stop, printer.full, ends.all_reached], tg.cancel_scope.cancel)
        async with anyio.create_task_group() as readers:
            for tp in tps:
                readers.start_soon(follow, tp)
        tg.cancel_scope.cancel()


async def _read_as_member(
    args: argparse.Namespace,
    printer: Printer,
    stop: anyio.Event,
    bootstrap: str,
    settings: Any,
    positions: _Positions,
) -> None:
    start_offset: Literal["earliest", "latest"] = "earliest" if args.from_beginning else "latest"
    group = ConsumerGroup(
        args.group,
        args.topics,
        bootstrap,
        start_offset=start_offset,
        unreachable_timeout=args.timeout,
        **settings,
    )
    async with group:
        async with _until_stopped(stop):
            tps = await _partitions(group.cluster, args.topics, None, args.timeout)
            admin = Admin(group.cluster, timeout=args.timeout)
            ends = _Ends(
                await admin.list_offsets(tps, "latest", read_committed=True)
                if args.until_end
                else None
            )
        if stop.is_set():
            return

        async def worker(gen: Generation, tp: TopicPartition) -> None:
            owned = list(gen.assignments)
            end = ends.end(tp)
            positions.track(tp, gen.assignments[tp], end)
            batches = aiter(gen.fetch(tp))
            # The position passes offsets without records (transaction markers,
            # aborted transactions) with no batch handed out: with an end to
            # reach, it is looked at between waits for a batch too.
            wait = math.inf if end is None else _END_CHECK
            while not ends.check(tp, gen.position(tp), owned):
                batch = None
                with anyio.move_on_after(wait):
                    try:
                        batch = await anext(batches)
                    except StopAsyncIteration:
                        break
                if batch is None:
                    positions.at(tp, gen.position(tp))
                    continue
                for record in batch:
                    if end is not None and record.offset >= end:
                        break
                    if not printer.take():
                        await anyio.sleep_forever()
                    printer.record(tp, record)
                    gen.mark(tp, record.offset + 1)
                else:  # all printed: past the offsets without records after them too
                    gen.mark(tp, batch.next_offset)
                printer.flush()
                positions.at(tp, batch.next_offset)
            here = gen.position(tp)
            if end is not None and here <= end:
                # Every batch handed out was printed whole (one cut at the end
                # ends past it): the offsets without records up to here are
                # committed too, also when the generation started before them.
                gen.mark(tp, here)
            # Returning would end the generation: a finished partition waits.
            await anyio.sleep_forever()

        async with anyio.create_task_group() as tg:
            # A command stops at once, without a handover (see ConsumerGroup.aclose).
            close = partial(group.aclose, handover=False)
            tg.start_soon(_stop_on, [stop, printer.full, ends.all_reached], close)
            tg.start_soon(_fail_when_unreachable, group.cluster)
            async for gen in group:
                owned = ", ".join(str(tp) for tp in sorted(gen.assignments)) or "nothing"
                print(
                    f"generation {gen.id} (member {gen.member_id}): assigned {owned}",
                    file=sys.stderr,
                    flush=True,
                )
                for tp in gen.assignments:
                    gen.start_soon(worker, gen, tp, name=f"consume {tp}")
                if args.until_end and set(gen.assignments) <= ends.reached:
                    ends.all_reached.set()
            tg.cancel_scope.cancel()


async def _fail_when_unreachable(cluster: Cluster, period: float = 1.0) -> None:
    """Raise once the cluster has been unreachable for its ``unreachable_timeout`` (--timeout).

    A member in a generation notices a dead cluster only when the generation
    ends (its session timeout, 45 s by default), whatever ``--timeout`` says;
    asking every ``period`` seconds for a connection to any broker (one
    already open while the cluster is up) says it once ``--timeout`` passed.

    Raises:
        ClusterUnreachable: the exhausted error, naming each address and why it failed.
    """
    while True:
        await anyio.sleep(period)
        try:
            await cluster.any_connection()
        except ClusterUnreachable as exc:
            if exc.exhausted:
                raise
            # Not for long enough yet: ask again after the period.


@asynccontextmanager
async def _until_stopped(stop: anyio.Event) -> AsyncIterator[None]:
    """Run the body until it ends or ``stop`` is set (then it is cancelled and
    the block exits quietly): the set-up before anything is read, which a
    cluster not reachable yet holds up to ``--timeout``. Nothing is read or
    committed there, so Ctrl-C ends it at once."""
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            await stop.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        yield
        tg.cancel_scope.cancel()


async def _stop_on(events: Sequence[anyio.Event], then: Any) -> None:
    """Wait for the first of ``events``, then call (or await) ``then``."""
    async with anyio.create_task_group() as tg:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(wait, event)
    result = then()
    if result is not None:
        await result


async def _signals(stop: anyio.Event) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            stop.set()


def _run(args: argparse.Namespace) -> int:
    where = "gengroup consume"
    if args.group is not None and args.partition:
        print(f"{where}: --partition is for reading without --group", file=sys.stderr)
        return 2
    if args.max_records is not None and args.max_records < 0:
        print(f"{where}: -n must be >= 0", file=sys.stderr)
        return 2
    if args.json and args.format not in (None, "json"):
        print(f"{where}: --json is --format json, not {args.format}", file=sys.stderr)
        return 2
    args.format = args.format or ("json" if args.json else "raw")
    if args.key_separator is not None and args.format != "raw":
        print(f"{where}: --key-separator is for --format raw", file=sys.stderr)
        return 2

    async def main() -> int:
        conn = connection(args)
        printer = Printer(args.format, args.key_separator, args.max_records)
        if args.max_records == 0:
            return 0
        stop = anyio.Event()
        settings = conn.settings()
        view = View("partitions", enabled=args.until_end and wanted(prints_records=True))
        positions = _Positions(view)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_signals, stop)
            tg.start_soon(printer.watch)
            with view:
                if args.group is None:
                    async with Cluster(
                        conn.bootstrap, unreachable_timeout=args.timeout, **settings
                    ) as cluster:
                        await _read_directly(args, printer, stop, cluster, positions)
                else:
                    await _read_as_member(args, printer, stop, conn.bootstrap, settings, positions)
            tg.cancel_scope.cancel()
        printer.flush()
        return 0

    return run(where, main)
