"""``gengroup produce TOPIC``: send lines from stdin (or a file) as records.

Each line is one record. ``--format raw`` (the default) takes the line as the
value (with ``--key-separator SEP``, the text before the first ``SEP`` is the
key and a line without it is an error); ``--format json`` takes one object per
line, ``{"key": ..., "value": ..., "headers": [[name, value], ...], "partition":
N}`` (or headers as an object ``{name: value}``), every
field optional (strings are sent as UTF-8, ``{"base64": "..."}`` as the bytes
it encodes, other JSON values as their compact JSON text, null as null; blank
lines are skipped; other fields are ignored, so ``gengroup consume --format
json`` output is sent again byte for byte).

The partition is the line's ``partition``, else ``--partition``, else chosen
by the key (murmur2, as the Java client) or, for null keys, the sticky
partitioner. Input is read in chunks while earlier records are in flight, so
``tail -f log | gengroup produce T`` sends as lines arrive; SIGINT (Ctrl-C)
or SIGTERM ends the input there, and the lines read are sent.

When every record is acknowledged, one line on stderr says how many records
went to which partitions (``--json``: a JSON object on stdout instead). A
record the broker refuses, or an input line that cannot be read, ends the
command with exit code 1 (records before it were sent: an unreadable line
ends the input, and the lines before it are sent and acknowledged before it
is said). Input without a
record still asks the cluster whether the topic exists (without creating it),
so that a wrong address or topic is said as with input (not when Ctrl-C or
SIGTERM ended it: the command ends at once). On a terminal, stderr
shows the records sent and acknowledged so far and the rate while it runs
(:mod:`._progress`).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import sys
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Iterable
from contextlib import aclosing
from functools import partial
from typing import Any, BinaryIO

import anyio

from ..producer import Compression, Producer, ProducerRecord
from ._common import (
    EXIT_USAGE,
    add_connection_options,
    command,
    connection,
    run,
    stream_closed,
)
from ._metadata import topic_metadata
from ._progress import View, wanted

__all__ = ["add_parser", "parse_json_line", "parse_raw_line"]

_CHUNK = 64 * 1024
_MAX_RECORDS_PER_SEND = 1000


@command("produce", help="send lines from stdin or a file as records")
def add_parser(parser: argparse.ArgumentParser) -> None:
    """Send each line of stdin (or --file) as a record: the line is the value (--format raw, with
    --key-separator KEY SEP VALUE) or a JSON object {"key", "value", "headers", "partition"}
    (--format json). A one-line summary goes to stderr once every record is acknowledged
    (--json: JSON on stdout).
    """
    parser.add_argument("topic")
    parser.add_argument("--file", help="read this file instead of stdin")
    parser.add_argument("--format", choices=("raw", "json"), default="raw")
    parser.add_argument(
        "--key-separator", metavar="SEP", help="raw lines are KEY SEP VALUE (split at the first)"
    )
    parser.add_argument("--partition", type=int, help="send every record to this partition")
    parser.add_argument(
        "--compression",
        choices=[c.name.lower() for c in Compression],
        default="none",
        help="codec of every batch (default none)",
    )
    parser.add_argument(
        "--acks", choices=("0", "1", "all"), default="all", help="default all (every replica)"
    )
    # --timeout is the producer's delivery_timeout and max_block: inf is no limit.
    add_connection_options(parser, infinite=True)
    parser.set_defaults(func=_run)


def parse_raw_line(line: bytes, separator: bytes | None, number: int) -> ProducerRecord:
    """The record of one raw line (without its line ending).

    Raises:
        ValueError: ``separator`` is given and the line does not contain it.
    """
    if separator is None:
        return ProducerRecord(line)
    key, found, value = line.partition(separator)
    if not found:
        raise ValueError(f"line {number}: no key separator {separator.decode()!r}")
    return ProducerRecord(value, key=key)


def _utf8(text: str, number: int, field: str) -> bytes:
    """``text`` as UTF-8; JSON's ``\\ud800`` (a lone surrogate) has no UTF-8 form."""
    try:
        return text.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"line {number}: {field}: not UTF-8 text ({exc.reason}: "
            f"{text[exc.start : exc.end]!r} at character {exc.start})"
        ) from None


def _field_bytes(value: Any, number: int, field: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return _utf8(value, number, field)
    if isinstance(value, dict) and value.keys() == {"base64"}:
        encoded = value["base64"]
        try:
            if not isinstance(encoded, str):
                raise ValueError("not a string")
            return base64.b64decode(encoded, validate=True)
        except ValueError as exc:  # binascii.Error is one
            raise ValueError(f"line {number}: {field}: base64 expected ({exc})") from None
    # ensure_ascii: a lone surrogate inside a list or object is escaped.
    return json.dumps(value, separators=(",", ":")).encode()


def _header_pairs(headers: Any, number: int) -> list[tuple[str, Any]]:
    """The ``headers`` field as (name, value) pairs: a list of ``[name, value]``
    pairs (what consume prints: names may repeat), or an object."""
    if isinstance(headers, dict):
        return [(str(k), v) for k, v in headers.items()]
    if isinstance(headers, list) and all(
        isinstance(h, list) and len(h) == 2 and isinstance(h[0], str) for h in headers
    ):
        return [(h[0], h[1]) for h in headers]
    raise ValueError(f"line {number}: headers must be a list of [name, value] pairs or an object")


def parse_json_line(line: bytes, number: int) -> ProducerRecord | None:
    """The record of one JSON line (None for a blank line).

    A key, value or header value is a string (sent as UTF-8), ``{"base64":
    "..."}`` (sent as the bytes it encodes), null, or another JSON value (sent
    as its compact JSON text).

    Raises:
        ValueError: the line is not a JSON object of the documented fields
            (the message starts with ``line N:``), for instance a
            ``partition`` that is not a non-negative integer (``true``
            included) or a string with no UTF-8 form (a lone surrogate such
            as ``"\\ud800"``).
    """
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"line {number}: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"line {number}: expected a JSON object")
    headers = _header_pairs(obj.get("headers") or [], number)
    partition = obj.get("partition")
    # true is a Python bool, an int: not a partition.
    if partition is not None and (
        isinstance(partition, bool) or not isinstance(partition, int) or partition < 0
    ):
        raise ValueError(
            f"line {number}: partition must be a non-negative integer, got {json.dumps(partition)}"
        )
    for name, _ in headers:
        _utf8(name, number, f"header name {name!r}")
    return ProducerRecord(
        _field_bytes(obj.get("value"), number, "value"),
        key=_field_bytes(obj.get("key"), number, "key"),
        headers=[(k, _field_bytes(v, number, f"header {k!r}")) for k, v in headers],
        partition=partition,
    )


class _Input:
    """The lines of a stream, in the groups a read returned them, until its end or :meth:`stop`."""

    def __init__(self, stream: BinaryIO) -> None:
        try:
            fd = stream.fileno()
        except (OSError, ValueError):  # io.UnsupportedOperation is both
            self._read: Callable[[int], bytes] = getattr(stream, "read1", stream.read)
        else:
            # The descriptor, not the buffered reader: a read abandoned at
            # Ctrl-C would hold the reader's lock, and the interpreter would
            # abort at exit.
            self._read = partial(os.read, fd)
        self._stopped = False
        self._reading: anyio.CancelScope | None = None

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` ended the input (a signal), not its end."""
        return self._stopped

    def stop(self) -> None:
        """End the input: a read under way is abandoned; what was read is still handed out."""
        self._stopped = True
        if self._reading is not None:
            self._reading.cancel()

    def chunks(self) -> AsyncGenerator[list[bytes], None]:
        """The complete lines (and a last one without its newline), a list per read."""
        return _lines(self._reads())

    async def _reads(self) -> AsyncGenerator[bytes, None]:
        while not self._stopped:
            data = b""
            with anyio.CancelScope() as self._reading:
                data = await anyio.to_thread.run_sync(self._read, _CHUNK, abandon_on_cancel=True)
            self._reading = None
            if data:
                yield data
            elif not self._stopped:
                return


async def _lines(reads: AsyncGenerator[bytes, None]) -> AsyncGenerator[list[bytes], None]:
    """Lines (without their newline and a carriage return before it) of the data read."""
    rest = b""
    async with aclosing(reads):
        async for data in reads:
            lines = (rest + data).split(b"\n")
            rest = lines.pop()
            if lines:
                yield [ln.removesuffix(b"\r") for ln in lines]
    if rest:
        yield [rest.removesuffix(b"\r")]


def _records(
    lines: Iterable[bytes], args: argparse.Namespace, first: int
) -> tuple[list[ProducerRecord], ValueError | None]:
    """The records of ``lines`` (numbered from ``first``) up to the first unreadable
    one, and that line's error (None: every line was read)."""
    separator = args.key_separator.encode() if args.key_separator else None
    out: list[ProducerRecord] = []
    for number, line in enumerate(lines, first):
        try:
            rec = (
                parse_json_line(line, number)
                if args.format == "json"
                else parse_raw_line(line, separator, number)
            )
        except ValueError as exc:
            return out, exc
        if rec is None:
            continue
        if rec.partition is None and args.partition is not None:
            rec = ProducerRecord(rec.value, rec.key, rec.headers, args.partition)
        out.append(rec)
    return out, None


async def _produce(args: argparse.Namespace, stream: BinaryIO) -> Counter[int]:
    """Send the records of ``stream``; how many went to each partition.

    Raises:
        ValueError: an unreadable line (the message names it), once every
            record of the lines before it was sent and acknowledged.
        OSError: reading the input failed, once what was read before was sent.
    """
    conn = connection(args)
    settings: dict[str, Any] = {
        "acks": "all" if args.acks == "all" else int(args.acks),
        "compression": Compression[args.compression.upper()],
        "delivery_timeout": args.timeout,
        "max_block": args.timeout,
        **conn.settings(),
    }
    per_partition: Counter[int] = Counter()
    send, receive = anyio.create_memory_object_stream[list[ProducerRecord]](4)
    # An unreadable line (or a failed read) ends the input, not the sending:
    # the lines before it are sent and the producer flushed, then it is raised.
    # Raised inside the producer's block, it would cancel the sends under way
    # and close the producer without a flush, failing what was queued.
    failure: ValueError | OSError | None = None

    with View("records", enabled=wanted()) as view:
        task = view.add(f"produce {args.topic}")
        sent = 0
        async with Producer(conn.bootstrap, **settings) as producer:

            async def sender() -> None:
                nonlocal sent
                async with receive:
                    async for records in receive:
                        sent += len(records)
                        view.update(task, sent=sent)
                        acked = await producer.send_many(args.topic, records)
                        for meta in acked:
                            per_partition[meta.partition] += 1
                        view.update(task, advance=len(acked))

            async with anyio.create_task_group() as tg:
                tg.start_soon(sender)
                async with send, anyio.create_task_group() as watch:
                    # SIGINT or SIGTERM ends the input: every line read is
                    # sent, and the summary says what went where.
                    given = _Input(stream)
                    watch.start_soon(_stop_on_signal, given)
                    number = 1
                    try:
                        async with aclosing(given.chunks()) as chunks:
                            async for lines in chunks:
                                for i in range(0, len(lines), _MAX_RECORDS_PER_SEND):
                                    part = lines[i : i + _MAX_RECORDS_PER_SEND]
                                    records, failure = _records(part, args, number)
                                    if records:
                                        await send.send(records)
                                    if failure is not None:
                                        break
                                    number += len(part)
                                if failure is not None:
                                    break
                    except OSError as exc:
                        failure = exc
                    watch.cancel_scope.cancel()
            if not sent and failure is None and not given.stopped:
                # Nothing to send made no request: say nothing of a cluster
                # or topic that was never asked. (Stopped by Ctrl-C before any
                # record: the user wants out, not a wait for a cluster.)
                await topic_metadata(producer.cluster, [args.topic], args.timeout)
    if failure is not None:
        raise failure
    return per_partition


async def _stop_on_signal(given: _Input) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            given.stop()
            return


def _run(args: argparse.Namespace) -> int:
    if args.key_separator is not None and (args.format != "raw" or not args.key_separator):
        print("gengroup produce: --key-separator needs --format raw and a SEP", file=sys.stderr)
        return 2
    if args.partition is not None and args.partition < 0:
        print("gengroup produce: --partition must be >= 0", file=sys.stderr)
        return 2

    if args.file is None:
        if stream_closed("gengroup produce", "stdin"):
            return EXIT_USAGE
        return _run_on(args, sys.stdin.buffer)
    try:
        with open(args.file, "rb") as stream:
            return _run_on(args, stream)
    except OSError as exc:
        print(f"gengroup produce: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2


def _run_on(args: argparse.Namespace, stream: BinaryIO) -> int:
    async def main() -> int:
        counts = await _produce(args, stream)
        total = sum(counts.values())
        if args.json:
            summary = {
                "topic": args.topic,
                "records": total,
                "partitions": {str(p): n for p, n in sorted(counts.items())},
            }
            print(json.dumps(summary, sort_keys=True))
        else:
            spread = ", ".join(f"{p}: {n}" for p, n in sorted(counts.items())) or "none"
            records = f"{total} record" + ("" if total == 1 else "s")
            partitions = f"{len(counts)} partition" + ("" if len(counts) == 1 else "s")
            print(f"produced {records} to {args.topic} ({partitions}; {spread})", file=sys.stderr)
        return 0

    # The summary goes to stderr, unless --json: a closed stdout is fine then.
    return run("gengroup produce", main, streams=("stdout",) if args.json else ())
