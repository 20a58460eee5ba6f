"""The lake sink: a consumer group whose partition workers land records as Parquet, exactly once.

Theory of operation:

Each generation starts one worker per assigned partition (:meth:`LakeSink.land`).
A worker owns its partition's folder for as long as the generation lives, and
does three things:

1. *Acquire* (:mod:`.acquire`). The commit the worker starts from carries,
   as its Kafka commit metadata, the name of the staged file it landed
   (``layout.commit_note``). If that file is still staged -- its writer died
   between commit and publish, or saw its commit fail although it was
   stored -- the worker publishes it. A staged file below the start offset
   that overlaps no published file (committed, and its note lost to an
   offsets reset, expiry or deletion) is published too, if it reads back
   whole. Every other staged file belongs to a writer whose commit was not
   stored (a crash, a failed commit, or a zombie fenced by the coordinator),
   and is deleted. A published file reaching past the start offset can only
   come from offsets reset backwards (or expired); it is deleted, and a file
   straddling the start offset makes the worker commit its base (backwards)
   and land from there. Nothing is deleted before every check passed: a file
   to delete holding offsets below the partition's log start that no kept
   file holds, records only the lake still has, makes the worker fail with
   :class:`LakeError` instead.
2. *Buffer and roll.* Records are buffered in memory -- as Arrow tables, each
   fetched batch decoded straight into columns (``FetchedBatch.to_arrow``),
   with no Python object per record -- until ``file_max_bytes``
   of keys and values or ``file_max_age`` seconds since the first one; then
   the buffer becomes a file covering ``[base, next_offset)``.
3. *Land one file:* write it staged and durable; commit its end offset under
   this generation with the note naming it; only after the coordinator stored
   that commit, publish it (atomic rename). The commit is the single point
   where the file becomes part of the lake: a zombie's commit is refused, so a
   zombie never publishes; a crash after the commit is repaired by the next
   owner's step 1. Files of one partition are landed one at a time, so only
   the newest commit can name an unpublished file. Offsets that hold no
   record (:mod:`gengroup.lake.gaps`) are committed without a note once the
   buffer stayed empty for ``file_max_age``.

When the generation ends, the worker lands what it has buffered (shielded, for
at most ``flush_timeout`` seconds) -- the coordinator still accepts commits of
the ending generation while it rebalances -- so a rebalance does not throw
work away. A commit that fails -- refused, or with an unknown outcome (a broken
connection, a timeout) -- ends the worker, so the generation ends and the
member rejoins rather than the sink failing. The writer never deletes its
staged file: a refusal may answer the client's second send of a commit whose
first send was stored, so only the next owner's step 1, reading the stored
commit, can tell whether the file is part of the lake. ``docs/pipeline.md``
argues why the lake then holds each offset of the committed range exactly once.
"""

from __future__ import annotations

import logging
import math
import secrets
import shlex
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import anyio

from .._config import IsolationLevel
from .._errors import (
    ConfigError,
    FencedInstanceId,
    GenerationEnded,
    MemberResetError,
    RebalanceInProgress,
    TopicDeleted,
    is_retriable,
)
from .._types import TopicPartition
from ..admin import Admin
from ..consumer.fetched import FetchedBatch
from ..consumer.generation import Generation
from ..consumer.group import ConsumerGroup
from ..io.cluster import Cluster
from ..protocol.arrow import arrow_schema as records_schema
from .acquire import Entry, Plan, plan, uncovered
from .gaps import empty_until
from .layout import Landed, arrow_schema, commit_note, parse_note
from .store import Identity, LakeError, LakeStore

__all__ = ["LakeConfig", "LakeSink", "PartitionProgress"]

log = logging.getLogger("gengroup.lake")

_T = TypeVar("_T")

#: Refusals of a commit that end the worker (and so the generation), not the sink.
_ENDS_WORKER = (
    GenerationEnded,
    MemberResetError,
    RebalanceInProgress,
    FencedInstanceId,
    TopicDeleted,
)


@dataclass(frozen=True, slots=True)
class LakeConfig:
    """Settings of a lake sink.

    Attributes:
        lake: where the lake is: a local folder or a ``pyarrow.fs`` URI
            (``s3://bucket/prefix``, ``file:///data/lake``, ...).
        file_max_bytes: a file is rolled once its records' keys and values
            reach this many bytes (default 64 MiB; a whole number).
        file_max_age: ... or once its first record waited this many seconds
            (default 60 s), so a quiet topic still lands. A worker whose buffer
            stayed empty this long looks for offsets without records
            (transaction markers, expired records) and commits past them.
            ``math.inf``: never by age (and no looking for such offsets).
        flush_timeout: how long a worker may take, once its generation ends,
            to land what it buffered (default 10 s); past it, the buffered
            records are left for the next owner to read again.
        compression: Parquet codec: zstd (default), snappy, gzip, lz4 or none.
        progress_interval: seconds between progress log lines on
            ``gengroup.lake`` (default 30; 0 turns them off).
    """

    lake: str
    file_max_bytes: int = 64 * 1024 * 1024
    file_max_age: float = 60.0
    flush_timeout: float = 10.0
    compression: str = "zstd"
    progress_interval: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.lake, str) or not self.lake:
            raise ConfigError(f"lake must be a non-empty path or URI, got {self.lake!r}")
        size = _number("file_max_bytes", self.file_max_bytes, above=0)
        if not size.is_integer():
            raise ConfigError(f"file_max_bytes must be a whole number of bytes, got {size!r}")
        object.__setattr__(self, "file_max_bytes", int(size))
        _number("file_max_age", self.file_max_age, above=0, infinite=True)
        _number("flush_timeout", self.flush_timeout, above=0)
        _number("progress_interval", self.progress_interval, least=0)
        if self.compression not in ("zstd", "snappy", "gzip", "lz4", "none"):
            raise ConfigError(
                f"compression must be zstd, snappy, gzip, lz4 or none, got {self.compression!r}"
            )


def _number(
    name: str,
    value: object,
    *,
    above: float | None = None,
    least: float | None = None,
    infinite: bool = False,
) -> float:
    """``value`` as a float, if it is a number within bounds; else ConfigError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    number = float(value)
    finite = "" if infinite else "finite "
    if math.isnan(number):
        raise ConfigError(f"{name} must be a {finite}number, not NaN")
    if math.isinf(number) and not (infinite and number > 0):
        raise ConfigError(f"{name} must be a {finite}number, got {value!r}")
    if above is not None and not number > above:
        raise ConfigError(f"{name} must be a {finite}number > {above:g}, got {value!r}")
    if least is not None and not number >= least:
        raise ConfigError(f"{name} must be a {finite}number >= {least:g}, got {value!r}")
    return number


@dataclass
class PartitionProgress:
    """Where the sink stands on one partition (this member's view).

    Attributes:
        tp: the partition.
        landed_offset: every offset below this one is in the lake.
        high_watermark: the partition's end, from the newest fetch (-1: not fetched yet).
        buffered: records fetched but not landed yet.
        records: records landed by this member.
        bytes: bytes of keys and values landed by this member.
        files: files published by this member.
        last_delay: seconds from the oldest record of the newest file to its
            publishing (None before the first file).
    """

    tp: TopicPartition
    landed_offset: int
    high_watermark: int = -1
    buffered: int = 0
    records: int = 0
    bytes: int = 0
    files: int = 0
    last_delay: float | None = None

    @property
    def lag(self) -> int:
        """Records between the landed offset and the high watermark (0 if unknown)."""
        return max(0, self.high_watermark - self.landed_offset)


@dataclass
class _Buffer:
    """The records of the file being filled, as Arrow tables (slices of fetched batches)."""

    tp: TopicPartition
    base: int
    end: int = -1
    nbytes: int = 0
    started: float = math.inf
    rows: int = 0
    tables: list[Any] = field(default_factory=list)

    def add(self, table: Any, next_offset: int, start: int, max_bytes: int) -> int:
        """Take ``table``'s rows from index ``start`` until the file is full; where it stopped.

        ``table`` is a fetched batch's ``to_arrow()``. A full file ends after
        its last record; otherwise the buffer ends where the batch does
        (``next_offset``, past any trailing gap).
        """
        import pyarrow.compute as pc

        if not self.rows:
            self.started = anyio.current_time()
        part = table.slice(start) if start else table
        sizes = pc.add(
            pc.fill_null(pc.binary_length(part.column("key")), 0).cast("int64"),
            pc.fill_null(pc.binary_length(part.column("value")), 0).cast("int64"),
        )
        totals = pc.cumulative_sum(sizes)
        room, take = max_bytes - self.nbytes, int(part.num_rows)
        if take and totals[take - 1].as_py() >= room:  # the file fills up in this batch
            take = int(pc.index(pc.greater_equal(totals, room), True).as_py()) + 1
            part = part.slice(0, take)
        self.tables.append(part)
        self.rows += take
        self.nbytes += totals[take - 1].as_py() if take else 0
        if self.nbytes >= max_bytes:
            self.end = part.column("offset")[take - 1].as_py() + 1
            return start + take
        self.end = next_offset
        return int(table.num_rows)

    def table(self, landed_at_ms: int) -> Any:
        """The file's rows, in the lake's schema."""
        import pyarrow as pa

        schema = arrow_schema()
        rows = pa.concat_tables(self.tables) if self.tables else records_schema().empty_table()
        n = rows.num_rows
        rows = rows.add_column(
            0, schema.field(1), pa.repeat(pa.scalar(self.tp.partition, pa.int32()), n)
        )
        rows = rows.add_column(
            0, schema.field(0), pa.repeat(pa.scalar(self.tp.topic, pa.string()), n)
        )
        landed_at = pa.repeat(pa.scalar(landed_at_ms, pa.int64()), n).cast(schema.field(7).type)
        return rows.append_column(schema.field(7), landed_at)

    def min_timestamp(self) -> int:
        """The smallest record timestamp buffered, in milliseconds (the buffer is not empty)."""
        import pyarrow.compute as pc

        lowest = min(
            pc.min(t.column("timestamp")).cast("int64").as_py() for t in self.tables if t.num_rows
        )
        return int(lowest)


class LakeSink:
    """Lands a consumer group's records in a Parquet lake, exactly once.

    Example::

        sink = LakeSink(LakeConfig("s3://bucket/lake"))
        async with ConsumerGroup("lake", topics=["events"], brokers=...) as group:
            await sink.run(group)

    Args:
        config: the sink's settings.
        store: the lake (default: opened from ``config.lake``).
    """

    def __init__(self, config: LakeConfig, store: LakeStore | None = None) -> None:
        self.config = config
        self.store = store or LakeStore(config.lake, compression=config.compression)
        self._progress: dict[TopicPartition, PartitionProgress] = {}
        self._cluster: Cluster | None = None
        #: The first storage failure (errno or message) raised as a LakeError.
        self._storage_failure: object = None
        self._isolation_level: IsolationLevel = "read_committed"
        #: Partitions whose worker is past step 1 (acquired) and landing.
        self._held: set[TopicPartition] = set()
        self.generations = 0

    def progress(self) -> list[PartitionProgress]:
        """The partitions this member landed or owns, by topic and partition."""
        return [self._progress[tp] for tp in sorted(self._progress)]

    def held(self) -> dict[TopicPartition, int]:
        """The partitions this member's workers hold now, past protocol step 1, each with
        its landed offset: the lake holds every offset below it that the group committed.
        """
        return {tp: self._progress[tp].landed_offset for tp in sorted(self._held)}

    async def run(self, group: ConsumerGroup, stop: anyio.Event | None = None) -> None:
        """Land the group's partitions until the group stops or ``stop`` is set.

        The lake must belong to ``group`` (one lake, one group): on first use
        the group is recorded as its owner (:meth:`LakeStore.claim`).

        Raises:
            LakeError: the lake belongs to another group, is inconsistent, or
                storage failed.
            GengroupError: what ``async for gen in group`` raises.
        """
        cfg = group.config
        pattern = cfg.topic_pattern
        topics = list(cfg.topics) if pattern is None else [f"pattern {pattern.pattern}"]
        await anyio.to_thread.run_sync(self.store.claim, cfg.group_id, topics)
        self._cluster = group.cluster
        self._isolation_level = cfg.isolation_level
        background: list[Callable[[], Coroutine[Any, Any, None]]] = []
        if self.config.progress_interval:
            background.append(partial(self._log_progress, group.config.group_id))
        if stop is not None:

            async def stop_group() -> None:
                await stop.wait()
                await group.aclose()

            background.append(stop_group)

        async def land_generations() -> None:
            async for gen in group:
                self.generations += 1
                for tp in gen.assignments:
                    gen.start_soon(self.land, gen, tp, name=f"land {tp}")

        self._storage_failure = None
        await run_beside(land_generations, *background)

    # ------------------------------------------------------------------ one partition

    async def land(self, gen: Generation, tp: TopicPartition) -> None:
        """Land ``tp`` for as long as ``gen`` owns it (a generation task).

        Raises:
            LakeError: the lake is inconsistent, or storage failed (from the ``OSError``).
        """
        try:
            # Before the first fetch: the consumer carries the note committed with
            # the start offset past offsets without records only once the worker
            # asks for a batch (consumer/recordless.py), so the file it names is
            # published, or the worker seeks back, first.
            start = await self._acquire(gen, tp)
            if start is None:
                return
            prog = self._progress.setdefault(tp, PartitionProgress(tp, start))
            prog.landed_offset, prog.buffered = start, 0
            filling = [_Buffer(tp, start)]
            self._held.add(tp)
            try:
                await self._fill(gen, tp, filling, prog)
            except anyio.get_cancelled_exc_class():
                await self._land_buffered(gen, filling[0], prog)
                raise
            finally:
                self._held.discard(tp)
        except _StorageFailedAgain as again:
            # Another worker already raised this storage failure, which ends the
            # generation and the sink: this one ends without raising it a second time.
            log.debug("%s: %s", tp, again)
        except GenerationEnded as ended:
            if not gen.ending:
                raise
            # The generation ended between two steps of the worker (its lease ran
            # out while the member was frozen, say): nothing is lost, the next
            # owner takes the partition and the staged file over.
            log.debug("%s: %s", tp, ended)
        # Anything else that ended the worker (a refused commit, a storage
        # failure, a fetch error) leaves the buffer to the next owner.

    async def _fill(
        self, gen: Generation, tp: TopicPartition, filling: list[_Buffer], prog: PartitionProgress
    ) -> None:
        """Buffer ``tp``'s batches into ``filling[0]``, landing each full or old file."""
        cfg = self.config
        batches = gen.fetch(tp)
        while True:
            buf = filling[0]
            batch: FetchedBatch | None = None
            # An empty buffer waits file_max_age too, then looks for offsets without records.
            wait = buf.started + cfg.file_max_age - anyio.current_time()
            with anyio.move_on_after(min(wait, cfg.file_max_age)):
                try:
                    batch = await batches.__anext__()
                except StopAsyncIteration:  # the generation ended; nothing more to land
                    await self._land_buffered(gen, buf, prog)
                    return
            if batch is None and not buf.rows:
                if not await self._pass_empty(gen, filling, prog):
                    return
                continue
            # Decoded straight into columns: no Record object per record.
            table = None if batch is None else batch.to_arrow()
            taken, count = 0, 0 if table is None else table.num_rows
            landed_to = max(buf.base, buf.end)  # buf.end is -1 while nothing is buffered
            first = table.column("offset")[0].as_py() if table is not None and count else None
            if first is not None and first < landed_to:
                raise LakeError(_reset_under(gen, tp, first, landed_to))
            while True:
                if batch is not None and taken < count:
                    taken = buf.add(table, batch.next_offset, taken, cfg.file_max_bytes)
                    prog.high_watermark = batch.high_watermark
                    prog.buffered = buf.rows
                due = anyio.current_time() >= buf.started + cfg.file_max_age
                if buf.rows and (buf.nbytes >= cfg.file_max_bytes or due):
                    if not await self._land_file(gen, buf, prog):
                        return
                    buf = filling[0] = _Buffer(tp, buf.end)
                if taken >= count:
                    break

    async def _pass_empty(
        self, gen: Generation, filling: list[_Buffer], prog: PartitionProgress
    ) -> bool:
        """Commit past offsets that hold no record to land, if there are any; False if
        that commit failed (the worker ends).

        Such offsets (transaction markers, aborted or expired records) move the fetch
        position without a batch, so no file would ever commit them. The commit
        carries no note: it names no file, and the previous file is published.
        """
        buf = filling[0]
        tp = buf.tp
        if self._cluster is None:  # land() called outside run(): no cluster to ask
            return True
        end = await empty_until(self._cluster, tp, buf.base, isolation_level=self._isolation_level)
        if end is None or end <= gen.committed.get(tp, -1):
            return True
        try:
            await gen.commit({tp: end})
        except Exception as exc:
            if not isinstance(exc, _ENDS_WORKER) and not is_retriable(exc):
                raise
            log.warning(
                "%s: the commit of offset %d failed (%s); ending generation %s",
                tp,
                end,
                exc,
                gen.label,
            )
            return False
        if end > buf.base:
            log.info(
                "%s: offsets %d..%d hold no record to land (transaction markers, aborted "
                "or expired records); committed offset %d",
                tp,
                buf.base,
                end - 1,
                end,
            )
            if not gen.ending:  # drops what a fetch from before these offsets still brings
                gen.seek(tp, end)
            filling[0] = _Buffer(tp, end)
        prog.landed_offset = end
        return True

    async def _land_buffered(self, gen: Generation, buf: _Buffer, prog: PartitionProgress) -> None:
        """Land what is buffered once the generation is ending (shielded, bounded)."""
        if not buf.rows:
            return
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + self.config.flush_timeout
            await self._land_file(gen, buf, prog)
        if scope.cancelled_caught:
            log.warning(
                "%s: landing %d buffered record(s) took over %.1f s after generation "
                "%s ended; the next owner reads them again from offset %d",
                buf.tp,
                buf.rows,
                self.config.flush_timeout,
                gen.label,
                buf.base,
            )

    async def _acquire(self, gen: Generation, tp: TopicPartition) -> int | None:
        """Repair ``tp``'s folder for this owner (protocol step 1, :mod:`.acquire`); the
        offset to land from, or None if committing it failed (the worker ends)."""
        start = gen.assignments[tp]
        note = parse_note(gen.committed_metadata.get(tp))
        if note is not None and note.end != gen.committed.get(tp):
            note = None  # not the note of the committed offset: not ours to act on
        store = self.store

        def survey() -> tuple[bool, list[Entry], Plan, dict[str, Identity | None]]:
            published = note is not None and store.publish(tp, note)
            files = store.published(tp)
            todo = plan(start, files, store.staged(tp), partial(store.readable, tp))
            seen = {path: store.identity(path) for _, path in [*todo.ahead, *todo.stale]}
            return published, files, todo, seen

        if self._lost_lease(gen, tp, "reading its folder"):
            return None
        published, files, todo, seen = await self._storage(f"{tp}: reading the folder", survey)
        if published:
            assert note is not None
            log.info(
                "%s: published %s, committed by the previous owner before it stopped",
                tp,
                store.published_path(tp, note),
            )
        # Nothing is deleted before every check passed: only files whose records the
        # topic still has, or that the lake holds elsewhere.
        lake = todo.lake(files)
        loose = [(f, holes) for f in todo.stale if (holes := uncovered(f[0].base, f[0].end, lake))]
        log_start = await self._log_start(tp) if todo.ahead or loose else 0
        lost = [(landed, path) for landed, path in todo.ahead if landed.base < log_start]
        if lost:
            raise LakeError(_would_lose(gen, tp, start, log_start, lost, todo.ahead))
        # A stale file holding offsets below the start offset (committed past) or the log
        # start that no kept file holds has the lake's only copy of them, if it reads back.
        limit = max(start, log_start)
        only = [(f, holes) for f, holes in loose if holes[0][0] < limit]
        if only:

            def holding() -> list[tuple[Entry, list[tuple[int, int]]]]:
                # The holes where the file has records: offsets committed past
                # without a file (markers, aborted records) are no loss.
                found = []
                for f, holes in only:
                    held = [h for h in store.offsets_in(tp, *f, holes) or () if h[0] < limit]
                    if held:
                        found.append((f, held))
                return found

            only = await self._storage(f"{tp}: reading staged files", holding)
            if only and only[0][1][0][0] < log_start:
                raise LakeError(_would_lose_staged(gen.group_id, tp, log_start, only, lake))
            if only:
                raise LakeError(_would_lose_committed(gen.group_id, tp, start, log_start, only))
        if todo.fillers:
            if self._lost_lease(gen, tp, "publishing staged files"):
                return None
            await self._storage(
                f"{tp}: publishing staged files below offset {start}",
                lambda: [store.publish(tp, landed) for landed, _ in todo.fillers],
            )
            log.warning(
                "%s: published %s: staged below the start offset %d, overlapping no published "
                "file (offsets committed past without a note naming it: an offsets reset, "
                "expiry or deletion after a writer stopped between its commit and its publish)",
                tp,
                ", ".join(store.published_path(tp, landed) for landed, _ in todo.fillers),
                start,
            )
        begin = start
        if todo.ahead:
            begin = max(log_start, min([start, *(landed.base for landed, _ in todo.ahead)]))
        if begin < start and not await self._commit_back(gen, tp, begin):
            return None

        def delete() -> list[str]:
            for _, path in todo.ahead:
                store.delete(path, seen[path], known=True)
            return [path for _, path in todo.stale if store.delete(path, seen[path], known=True)]

        if (todo.ahead or todo.stale) and self._lost_lease(gen, tp, "deleting files"):
            return None
        stale = await self._storage(f"{tp}: deleting files", delete)
        listed = {path for _, path in files}
        behind = [path for _, path in todo.ahead if path in listed]
        into = [path for _, path in todo.ahead if path not in listed]
        if behind:
            log.warning(
                "%s: the start offset %d is behind the lake (%s); "
                "deleted %s and landing again from offset %d",
                tp,
                start,
                _why_behind(gen, tp),
                ", ".join(behind),
                begin,
            )
        if into:
            log.warning(
                "%s: the start offset %d falls into %s, staged and overlapping no published "
                "file: the group's offsets were reset into its range (backwards, past its "
                "lost commit, or forwards, past a writer that stopped before its commit was "
                "stored); its records are kept: deleted it and landing again from offset %d",
                tp,
                start,
                ", ".join(into),
                begin,
            )
        if stale:
            log.info(
                "%s: deleted %d staged file(s) that no stored commit names (writers that "
                "crashed, were fenced, were cancelled or failed before their commit was stored)",
                tp,
                len(stale),
            )
        if begin != start:
            gen.seek(tp, begin)
        return begin

    @staticmethod
    def _lost_lease(gen: Generation, tp: TopicPartition, step: str) -> bool:
        """Whether ``gen`` is ending or its lease ran out (a member frozen past its session
        timeout, whose partitions may have a new owner): then ``tp``'s folder is left alone."""
        if not gen.ending and not gen.lease_expired():
            return False
        log.warning(
            "%s: generation %s is ending (%s); not %s: the folder is the next owner's",
            tp,
            gen.label,
            gen.end_reason or "its lease expired",
            step,
        )
        return True

    async def _commit_back(self, gen: Generation, tp: TopicPartition, begin: int) -> bool:
        """Move ``tp``'s committed offset back to ``begin`` before deleting the files from
        there, so that an owner stopping at any point later lands from ``begin`` too; False
        if that commit failed (the worker ends, nothing deleted)."""
        try:
            await gen._commit_back(tp, begin)
        except Exception as exc:
            if not isinstance(exc, _ENDS_WORKER) and not is_retriable(exc):
                raise
            log.warning(
                "%s: the commit of offset %d (landing again from there) failed (%s); "
                "ending generation %s, nothing deleted",
                tp,
                begin,
                exc,
                gen.label,
            )
            return False
        return True

    async def _storage(self, what: str, call: Callable[..., _T], *args: Any) -> _T:
        """``call(*args)`` in a worker thread; an ``OSError`` comes out as :class:`LakeError`.

        The first failure of a kind is raised as LakeError; the same failure in
        another worker afterwards is :class:`_StorageFailedAgain`, which
        :meth:`land` ends on quietly, so the failure is reported once.
        """
        try:
            return await anyio.to_thread.run_sync(partial(call, *args))
        except OSError as exc:
            kind = (type(exc), exc.errno) if exc.errno is not None else (type(exc), str(exc))
            if self._storage_failure == kind:
                raise _StorageFailedAgain(f"{what} failed again: {exc}") from exc
            self._storage_failure = kind
            raise LakeError(f"{what} failed: {exc}") from exc

    async def _log_start(self, tp: TopicPartition) -> int:
        """``tp``'s log start offset (ListOffsets earliest), through the group's cluster."""
        if self._cluster is None:
            raise LakeError(f"{tp}: LakeSink.land runs in the generations of LakeSink.run")
        async with Admin(self._cluster) as admin:
            return (await admin.list_offsets([tp], "earliest"))[tp]

    async def _land_file(self, gen: Generation, buf: _Buffer, prog: PartitionProgress) -> bool:
        """Stage, commit, publish one file (protocol step 3); False if the commit failed."""
        tp = buf.tp
        if gen.committed.get(tp, -1) >= buf.end:
            raise LakeError(f"{tp}: offset {buf.end} is already committed; refusing to land it")
        # The writer's token names the generation by id and sequence: ids can
        # repeat (KIP-848 epochs), the member's sequence does not.
        landed = Landed(buf.base, buf.end, f"g{gen.id}s{gen.sequence}-{secrets.token_hex(6)}")
        landed_at = time.time()
        table = buf.table(int(landed_at * 1000))
        path = self.store.staged_path(tp, landed)
        await self._storage(f"{tp}: writing {path}", self.store.write_staged, tp, landed, table)
        try:
            await gen.commit({tp: landed.end}, metadata={tp: commit_note(landed)})
        except Exception as exc:
            if not isinstance(exc, _ENDS_WORKER) and not is_retriable(exc):
                raise
            # Even a refusal does not prove that the commit was not stored: the client
            # sends a commit again after a timeout or a broken connection, and the
            # refusal may answer that second send while the first one was stored. So
            # the staged file stays, and the partition's next owner (this member, after
            # rejoining, or another) publishes it if the stored commit names it and
            # deletes it otherwise.
            log.warning(
                "%s: the commit of offsets %d..%d failed (%s); ending generation %s, "
                "the partition's next owner settles the staged file",
                tp,
                landed.base,
                landed.end - 1,
                exc,
                gen.label,
            )
            return False
        with anyio.CancelScope(shield=True):
            await self._storage(f"{tp}: publishing {path}", self.store.publish, tp, landed)
        prog.landed_offset = landed.end
        prog.records += buf.rows
        prog.bytes += buf.nbytes
        prog.files += 1
        prog.buffered = 0
        prog.last_delay = max(0.0, time.time() - buf.min_timestamp() / 1000)
        return True

    async def _log_progress(self, group_id: str) -> None:
        while True:
            await anyio.sleep(self.config.progress_interval)
            parts = self.progress()
            if parts:
                log.info("lake sink %s: %s", group_id, summarize(parts))


class _StorageFailedAgain(LakeError):
    """A storage failure that another worker of the sink already raised."""


def _reset_command(group_id: str, tp: TopicPartition, offset: int | str) -> str:
    """The ``gengroup groups reset-offsets`` command that sets ``group_id``'s committed
    offset of ``tp`` to ``offset``, quoted for a POSIX shell where need be (a group
    id that starts with ``-`` goes after ``--``, and the topic is joined to its
    option by ``=``, where neither is taken for an option)."""
    group = shlex.quote(group_id)
    topic = (
        shlex.quote(f"--topic={tp.topic}")
        if tp.topic.startswith("-")
        else (f"--topic {shlex.quote(tp.topic)}")
    )
    options = f"{topic} --partition {tp.partition} --offset {offset} --execute"
    if group_id.startswith("-"):
        return f"gengroup groups reset-offsets {options} -- {group}"
    return f"gengroup groups reset-offsets {group} {options}"


def _reset_under(gen: Generation, tp: TopicPartition, first: int, end: int) -> str:
    """Why a batch below the landed offsets is refused (a reset of the position)."""
    return (
        f"{tp}: a batch starts at offset {first}, below offset {end} where the lake's "
        f"landing stands in generation {gen.label}: the partition's position was reset "
        "(its committed offset lies outside the log: a truncated log, or an offset set "
        "past the end), and the lake does not follow a reset, which would land those "
        "offsets twice. Set the group's committed offset to where the lake should go on "
        f"({_reset_command(gen.group_id, tp, 'N')}), or move the partition's files out "
        "of the lake to land it again from the log"
    )


def _would_lose(
    gen: Generation,
    tp: TopicPartition,
    start: int,
    log_start: int,
    lost: list[tuple[Landed, str]],
    ahead: list[tuple[Landed, str]],
) -> str:
    """Why the sink refuses to delete files ahead of ``start`` (``lost`` hold records the
    topic no longer has), and how to go on."""
    lake_end = max(landed.end for landed, _ in ahead)
    first = min(landed.base for landed, _ in lost)
    return (
        f"{tp}: the start offset {start} is behind the lake ({_why_behind(gen, tp)}). "
        f"Landing again from there would first delete {len(ahead)} file(s), and the records "
        f"at offsets {first}..{log_start - 1} in {', '.join(path for _, path in lost)} are "
        f"no longer in the topic (its log starts at {log_start}): nothing was deleted. "
        "To keep the lake as it is, stop the sink and set the group's committed offset "
        f"to the lake's end ({_reset_command(gen.group_id, tp, lake_end)}). "
        f"To land the topic again from offset {log_start} and give those records up, "
        "move those files out of the lake first"
    )


def _would_lose_staged(
    group_id: str,
    tp: TopicPartition,
    log_start: int,
    only: list[tuple[Entry, list[tuple[int, int]]]],
    lake: list[tuple[int, int]],
) -> str:
    """Why the sink refuses to delete staged files that no stored commit names: they hold
    records that neither the lake's files nor the topic hold any more."""
    (landed, path), holes = only[0]
    first, last = holes[0][0], min(log_start, max(hi for _, hi in holes)) - 1
    others = f" (and {len(only) - 1} more staged file(s) like it)" if len(only) > 1 else ""
    if uncovered(landed.base, landed.end, lake) == [(landed.base, landed.end)]:
        keep = (
            "To keep them, stop the sink and set the group's committed offset to the "
            f"file's end ({_reset_command(group_id, tp, landed.end)}): a staged file "
            "below the committed offset that overlaps no published file is published"
        )
    else:
        keep = "It overlaps published files, so it cannot be published as it is"
    return (
        f"{tp}: {path}{others} is staged and no stored commit names it (a writer stopped "
        "before its commit was stored, or the group's offsets were reset, expired or were "
        f"deleted since), but it holds the records at offsets {first}..{last}, which no "
        f"published file holds and the topic no longer has (its log starts at {log_start}): "
        f"nothing was deleted. {keep}. To give them up, move the file out of the lake"
    )


def _would_lose_committed(
    group_id: str,
    tp: TopicPartition,
    start: int,
    log_start: int,
    only: list[tuple[Entry, list[tuple[int, int]]]],
) -> str:
    """Why the sink refuses to delete a staged file that overlaps files the lake keeps but
    holds offsets below ``start`` that none of them holds (the group committed past them)."""
    (_, path), holes = only[0]
    first, last = holes[0][0], min(start, max(hi for _, hi in holes)) - 1
    others = f" (and {len(only) - 1} more staged file(s) like it)" if len(only) > 1 else ""
    return (
        f"{tp}: {path}{others} is staged and no stored commit that is still the group's "
        "names it, but it holds the records at offsets "
        f"{first}..{last}, below the start offset {start}, which neither a published file "
        "nor a staged file published now holds: the group committed past them, and this "
        "file, which overlaps files the lake keeps, is the lake's only copy: nothing was "
        "deleted. To land them again from the topic (its log starts at "
        f"{log_start}), stop the sink and set the group's committed offset to {first} "
        f"({_reset_command(group_id, tp, first)}). To give them up, move the file out of "
        "the lake"
    )


def _why_behind(gen: Generation, tp: TopicPartition) -> str:
    """Why ``tp``'s start offset can be behind the lake the group landed."""
    if tp in gen.committed:
        return "the group's offsets were reset"
    return (
        "the group has no committed offset for it, so it starts where start_offset says: "
        "its offsets expired or were deleted"
    )


async def run_beside(
    main: Callable[[], Coroutine[Any, Any, None]],
    *background: Callable[[], Coroutine[Any, Any, None]],
) -> None:
    """Run ``main`` with ``background`` tasks beside it, cancelled once ``main`` returns.

    What ``main`` raises comes out as itself, not wrapped in an exception group,
    so callers can ``except LakeError``.
    """
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        for task in background:
            tg.start_soon(task)
        try:
            await main()
        except Exception as exc:
            failure = exc
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure


def summarize(parts: Iterable[PartitionProgress]) -> str:
    """One line about a sink's partitions: landed, lag, newest landing delay."""
    parts = list(parts)
    delays = [p.last_delay for p in parts if p.last_delay is not None]
    delay = f"{max(delays):.1f} s" if delays else "-"
    return (
        f"{len(parts)} partition(s), {sum(p.records for p in parts)} record(s) "
        f"({sum(p.bytes for p in parts) / 1e6:.1f} MB) in {sum(p.files for p in parts)} file(s), "
        f"lag {sum(p.lag for p in parts)}, buffered {sum(p.buffered for p in parts)}, "
        f"landing delay {delay}"
    )
