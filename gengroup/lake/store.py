"""The lake's storage: staged writes made durable, atomic publishing, listing, clean-up.

Theory of operation:

Every path goes through ``pyarrow.fs``, so a lake URI may be a local folder,
``file://...``, ``s3://...``, ``gs://...`` or anything else pyarrow opens.
Two operations carry the exactly-once argument and differ by store:

* *durable write* -- on a local file system the staged file is written,
  ``fsync``-ed, and its folder ``fsync``-ed, so the file survives a crash of
  the machine once the call returns (the commit that names it comes after).
  On an object store an object exists, whole and durable, once its upload
  completed; there is nothing more to do.
* *publish* -- locally, ``rename`` of the staged file to its final name (one
  atomic step: the final name shows the complete file or nothing), then
  ``fsync`` of the folder. An object store has no rename: the object is
  copied to its final key (a new object becomes visible whole, at once) and
  the staged object deleted. A crash between the two leaves a staged object
  that the next owner of the partition deletes.

One lake belongs to one consumer group: the exactly-once argument rests on
that group's commits fencing every writer of a partition, and a second group
would land the same offsets again under other file boundaries (and delete
the first group's files as "ahead of its committed offset"). The sink
records its group (and topics) in the lake's ``_lake.json`` on first use
(:meth:`LakeStore.claim`) and refuses to run in a lake another group owns.

All calls block; the sink runs them in worker threads.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Sequence
from typing import Any

from .._errors import GengroupError
from .._types import TopicPartition
from .layout import (
    OWNER,
    STAGING,
    Landed,
    arrow_schema,
    parse_file_name,
    partition_dir,
    published_name,
    staged_name,
)

__all__ = ["LakeError", "LakeStore"]

#: A file's size and modification time (ns), as :meth:`LakeStore.identity` reads them.
Identity = tuple[int, int | None]


class LakeError(GengroupError):
    """The lake is not as the landing protocol left it, or storage failed."""


class LakeStore:
    """A lake's root on a ``pyarrow.fs`` file system.

    Args:
        uri: a local path or any URI ``pyarrow.fs.FileSystem.from_uri`` opens.
        compression: the Parquet codec of new files.
        create: create the lake's folder if missing (the sink); without it, a
            missing folder is a :class:`LakeError` (the readers).
    """

    def __init__(self, uri: str, *, compression: str = "zstd", create: bool = True) -> None:
        from pyarrow import fs

        if "://" in uri:
            self.fs, root = fs.FileSystem.from_uri(uri)
        else:
            self.fs, root = fs.LocalFileSystem(), os.path.abspath(uri)
        self.root = root.rstrip("/") or "/"
        self.uri = uri
        self.compression = compression
        self.local = isinstance(self.fs, fs.LocalFileSystem)
        if not create:
            if self.fs.get_file_info(self.root).type != fs.FileType.Directory:
                raise LakeError(f"no lake at {uri!r}: it is not a folder")
            return
        try:
            self.fs.create_dir(self.root, recursive=True)
        except OSError as exc:
            raise LakeError(f"cannot use {uri!r} as a lake: {exc}") from exc

    def __repr__(self) -> str:
        return f"LakeStore({self.uri!r})"

    # ------------------------------------------------------------------ paths

    def partition_dir(self, tp: TopicPartition) -> str:
        """The folder of ``tp``'s published files."""
        return partition_dir(self.root, tp)

    def published_path(self, tp: TopicPartition, landed: Landed) -> str:
        """Where ``landed`` is visible once published."""
        return f"{self.partition_dir(tp)}/{published_name(landed.base, landed.end)}"

    def staged_path(self, tp: TopicPartition, landed: Landed) -> str:
        """Where ``landed`` waits for its commit."""
        name = staged_name(landed.base, landed.end, landed.token)
        return f"{self.partition_dir(tp)}/{STAGING}/{name}"

    # ------------------------------------------------------------------ owner

    def owner(self) -> dict[str, Any] | None:
        """The lake's owner as ``_lake.json`` records it (``group``, ``topics``); None if unowned.

        Raises:
            LakeError: the file is not what :meth:`claim` writes, or storage failed.
        """
        path = f"{self.root}/{OWNER}"
        try:
            with self.fs.open_input_stream(path) as f:
                text = f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise LakeError(f"cannot read {path}: {exc}") from exc
        try:
            owner = json.loads(text)
        except ValueError:
            owner = None
        if (
            not isinstance(owner, dict)
            or not isinstance(owner.get("group"), str)
            or not isinstance(owner.get("topics"), list)
        ):
            raise LakeError(f"{path} does not name the lake's owning group: {text[:200]!r}")
        return owner

    def claim(self, group_id: str, topics: Sequence[str]) -> None:
        """Make ``group_id`` the lake's owner on first use; refuse if another group owns it.

        A lake holds what one consumer group landed: the group's commits are
        what make every offset land once. The first call records the group
        and ``topics`` in ``_lake.json``; later calls by the same group add
        topics it had not landed yet.

        Args:
            group_id: the group landing in the lake.
            topics: the topics it lands (names, or a pattern's text).

        Raises:
            LakeError: another group owns the lake, or storage failed.
        """
        try:
            for _ in range(4):  # another writer may write the file between two steps
                owner = self.owner()
                if owner is not None and owner["group"] != group_id:
                    raise LakeError(
                        f"the lake {self.uri!r} belongs to group {owner['group']!r} (topics "
                        f"{', '.join(map(str, owner['topics'])) or '-'}), not to group "
                        f"{group_id!r} (topics {', '.join(topics) or '-'}): a lake holds what "
                        "one group landed, and a second group would land the same offsets "
                        "again and delete the first group's files. Use another lake, or run "
                        f"the sink as group {owner['group']!r}"
                    )
                known = [] if owner is None else [str(t) for t in owner["topics"]]
                if owner is not None and set(topics) <= set(known):
                    return
                record = {"group": group_id, "topics": sorted({*known, *topics})}
                self._write_owner(record, replace=owner is not None)  # then read back
            raise LakeError(f"cannot record the owner of {self.uri!r}: it keeps changing")
        except OSError as exc:
            raise LakeError(f"cannot record the owner of the lake {self.uri!r}: {exc}") from exc

    def _write_owner(self, record: dict[str, Any], *, replace: bool) -> None:
        """Write ``_lake.json`` (unless ``replace`` is False and another writer created it)."""
        path = f"{self.root}/{OWNER}"
        data = json.dumps(record, indent=2).encode() + b"\n"
        if not self.local:
            # No atomic create on an object store: write, then read back whose it is.
            with self.fs.open_output_stream(path) as out:
                out.write(data)
            return
        temp = f"{path}.{secrets.token_hex(6)}.tmp"
        with open(temp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            if replace:
                os.replace(temp, path)
            else:
                try:
                    os.link(temp, path)  # fails if another writer created it first
                except FileExistsError:
                    return
        finally:
            if os.path.exists(temp):
                os.unlink(temp)
        _fsync_dir(self.root)

    # ------------------------------------------------------------------ writes

    def write_staged(self, tp: TopicPartition, landed: Landed, rows: Any) -> int:
        """Write ``rows`` as ``landed``'s staged Parquet file, durably; its size in bytes.

        ``rows`` is a ``pyarrow.Table`` of the lake's schema, or its columns
        as a dict of lists.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = arrow_schema()
        if isinstance(rows, dict):
            table = pa.Table.from_pydict(rows, schema=schema)
        elif rows.schema == schema:
            table = rows
        else:
            raise TypeError(f"rows do not have the lake's schema: {rows.schema}")
        path = self.staged_path(tp, landed)
        folder = path.rsplit("/", 1)[0]
        self.fs.create_dir(folder, recursive=True)
        if self.local:
            with open(path, "wb") as f:
                pq.write_table(table, f, compression=self.compression)
                f.flush()
                os.fsync(f.fileno())
                size = f.tell()
            _fsync_dir(folder)
            return size
        with self.fs.open_output_stream(path) as out:
            pq.write_table(table, out, compression=self.compression)
            return int(out.tell())

    def publish(self, tp: TopicPartition, landed: Landed) -> bool:
        """Make ``landed``'s staged file visible under its final name.

        Returns:
            True if this call published it; False if it was already published
            (by an earlier owner, or an earlier call).

        Raises:
            LakeError: neither the staged nor the published file exists: the
                lake lost a file whose offsets were committed.
        """
        from pyarrow import fs

        staged, final = self.staged_path(tp, landed), self.published_path(tp, landed)
        try:
            if self.local:
                os.replace(staged, final)
                _fsync_dir(final.rsplit("/", 1)[0])
            else:
                self.fs.copy_file(staged, final)
                self.fs.delete_file(staged)
            return True
        except FileNotFoundError:
            pass
        if self.fs.get_file_info(final).type == fs.FileType.File:
            return False
        raise LakeError(
            f"{tp}: offsets {landed.base}..{landed.end - 1} were committed, but neither "
            f"{staged} nor {final} exists"
        )

    def readable(self, tp: TopicPartition, landed: Landed, path: str) -> bool:
        """Whether the staged file at ``path`` reads back whole, as ``landed``'s records
        (see :meth:`offsets_in`).

        Raises:
            OSError: storage failed (the message names ``path``).
        """
        return self._offsets(tp, landed, path) is not None

    def offsets_in(
        self, tp: TopicPartition, landed: Landed, path: str, ranges: list[tuple[int, int]]
    ) -> list[tuple[int, int]] | None:
        """``ranges`` narrowed to the offsets the staged file at ``path`` has records at
        (from its first to its last record in each; a range holding none is left out),
        or None if the file does not read back whole.

        An offset holding no record (a transaction marker, an aborted or expired
        record) that the group committed past without a file lies in no range
        returned, even when a file staged across it covers it.

        Raises:
            OSError: storage failed (the message names ``path``).
        """
        offsets = self._offsets(tp, landed, path)
        if offsets is None:
            return None
        narrowed = []
        for lo, hi in ranges:
            inside = [o for o in offsets if lo <= o < hi]
            if inside:
                narrowed.append((inside[0], inside[-1] + 1))
        return narrowed

    def _offsets(self, tp: TopicPartition, landed: Landed, path: str) -> list[int] | None:
        """The offsets of the staged file's records, if it reads back whole, as
        ``landed``'s records.

        A writer killed while writing leaves a partial file (no Parquet footer);
        a complete one has the lake's schema and ``tp``'s rows, at offsets rising
        within ``[landed.base, landed.end)``.

        The file's bytes are read first, and only then decoded: a storage failure
        while reading is raised, while any failure to decode them (a damaged
        footer or page, which pyarrow raises as ``OSError`` too) makes the file
        unreadable.

        Raises:
            OSError: storage failed (the message names ``path``).
        """
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        try:
            with self.fs.open_input_stream(path) as f:
                data = f.read()
        except OSError as exc:
            raise _naming(exc, path) from exc
        try:
            table = pq.ParquetFile(pa.BufferReader(data)).read()
        except (OSError, pa.ArrowException, EOFError, ValueError):
            return None
        n = table.num_rows
        if not n or not table.schema.equals(arrow_schema(), check_metadata=False):
            return None
        offsets = table.column("offset").combine_chunks()
        rising = n == 1 or pc.all(pc.greater(offsets.slice(1), offsets.slice(0, n - 1))).as_py()
        whole = bool(
            rising
            and offsets[0].as_py() >= landed.base
            and offsets[n - 1].as_py() < landed.end
            and pc.all(pc.equal(table.column("topic"), tp.topic)).as_py()
            and pc.all(pc.equal(table.column("partition"), tp.partition)).as_py()
        )
        return offsets.to_pylist() if whole else None

    def identity(self, path: str) -> Identity | None:
        """What tells the file at ``path`` from another written under the same name later
        (its size and modification time); None if it is not there."""
        from pyarrow import fs

        info = self.fs.get_file_info(path)
        if info.type != fs.FileType.File:
            return None
        return info.size, info.mtime_ns

    def delete(self, path: str, identity: Identity | None = None, *, known: bool = False) -> bool:
        """Delete a file; False if it was not there.

        With ``known`` (``identity`` from :meth:`identity`, None if the file was
        gone then), only if the file is still that one: False, nothing deleted,
        if another was written under its name since, or if it was gone.
        """
        if known and (identity is None or self.identity(path) != identity):
            return False
        try:
            self.fs.delete_file(path)
            return True
        except FileNotFoundError:
            return False

    # ------------------------------------------------------------------ listing

    def published(self, tp: TopicPartition) -> list[tuple[Landed, str]]:
        """``tp``'s published files, by base offset."""
        return sorted(self._list(self.partition_dir(tp), staged=False), key=lambda e: e[0].base)

    def staged(self, tp: TopicPartition) -> list[tuple[Landed, str]]:
        """``tp``'s staged files (of any writer)."""
        return self._list(f"{self.partition_dir(tp)}/{STAGING}", staged=True)

    def _list(self, folder: str, *, staged: bool) -> list[tuple[Landed, str]]:
        from pyarrow import fs

        selector = fs.FileSelector(folder, allow_not_found=True)
        out = []
        for info in self.fs.get_file_info(selector):
            if info.type != fs.FileType.File:
                continue
            landed = parse_file_name(info.base_name, staged=staged)
            if landed is not None:
                out.append((landed, info.path))
        return out


def _naming(exc: OSError, path: str) -> OSError:
    """``exc`` (same type and errno) with a message that names ``path``, if it did not."""
    if path in str(exc):
        return exc
    if exc.errno is None:
        return type(exc)(f"{path}: {exc}")
    return type(exc)(exc.errno, f"{path}: {exc.strerror or exc}")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
