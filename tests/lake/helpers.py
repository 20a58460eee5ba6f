"""Shared pieces of the lake tests: producing numbered records, reading the lake back."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from gengroup import Admin, Producer, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.lake import LakeStore
from gengroup.producer import ProducerRecord


def record(i: int) -> ProducerRecord:
    """Record number ``i``: a key among 17, a value naming ``i``, a header on every third."""
    headers = [("n", str(i).encode()), ("empty", None)] if i % 3 == 0 else []
    return ProducerRecord(
        key=f"key-{i % 17}".encode() if i % 11 else None,
        value=f"record-{i:08d}".encode() * (1 + i % 4),
        headers=headers,
    )


async def produce(bootstrap: str, topic: str, ids: Iterable[int]) -> None:
    async with Producer(bootstrap) as producer:
        await producer.send_many(topic, [record(i) for i in ids])


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[TopicPartition, int]:
    async with Admin(bootstrap) as admin:
        return await admin.list_offsets(
            [TopicPartition(topic, p) for p in range(partitions)], "latest"
        )


@dataclass
class LakeContents:
    """Every landed record of a lake, by (partition, offset)."""

    copies: Counter[tuple[int, int]]
    values: dict[tuple[int, int], tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]
    files: int

    def check_exactly_once(self, ends: dict[TopicPartition, int]) -> None:
        """Each offset below each partition's end landed exactly once, nothing else landed."""
        wanted = {(tp.partition, o) for tp, end in ends.items() for o in range(end)}
        dups = {k: n for k, n in self.copies.items() if n > 1}
        missing = sorted(wanted - set(self.copies))
        extra = sorted(set(self.copies) - wanted)
        assert not dups, f"landed more than once: {sorted(dups)[:10]}"
        assert not missing, f"{len(missing)} offsets missing, first {missing[:10]}"
        assert not extra, f"{len(extra)} offsets landed past the end, first {extra[:10]}"

    def check_values(self) -> None:
        """Every landed value is one produced record's, with its key and headers."""
        for (p, o), (key, value, headers) in self.values.items():
            assert value is not None and value.startswith(b"record-"), (p, o, value)
            want = record(int(value[7:15]))
            assert (key, value) == (want.key, want.value), (p, o)
            assert headers == [(k, v) for k, v in want.headers], (p, o, headers)


def read_lake(lake: Path | LakeStore, topic: str) -> LakeContents:
    """The published files of ``topic`` (staged ones are not part of the lake), from a local
    folder or any store (``pyarrow.fs``)."""
    store = lake if isinstance(lake, LakeStore) else LakeStore(str(lake))
    copies: Counter[tuple[int, int]] = Counter()
    values = {}
    files = 0
    tps = {landed_tp for landed_tp in _partitions(store, topic)}
    for tp in sorted(tps):
        for _, path in store.published(tp):
            files += 1
            table = pq.read_table(path, filesystem=store.fs)
            for row in table.to_pylist():
                assert (row["topic"], row["partition"]) == (tp.topic, tp.partition), path
                k = (row["partition"], row["offset"])
                copies[k] += 1
                headers = [(h["key"], h["value"]) for h in row["headers"]]
                values[k] = (row["key"], row["value"], headers)
    return LakeContents(copies, values, files)


def _partitions(store: LakeStore, topic: str) -> list[TopicPartition]:
    """The partitions with a folder in the lake."""
    from pyarrow import fs

    selector = fs.FileSelector(f"{store.root}/topic={topic}", allow_not_found=True)
    return [
        TopicPartition(topic, int(info.base_name.split("=", 1)[1]))
        for info in store.fs.get_file_info(selector)
        if info.type == fs.FileType.Directory and info.base_name.startswith("partition=")
    ]


def staged_files(lake: Path) -> list[Path]:
    """The files waiting in any partition's ``_staging`` folder."""
    return sorted(lake.rglob("_staging/*.parquet"))


def write_garbage(folder: Path, name: str) -> Path:
    """A file that is not Parquet, under a published file's name."""
    path = folder / name
    path.write_bytes(b"PAR1 this is not a parquet file")
    return path


def expire(cluster: FakeCluster, tp: TopicPartition, before: int) -> None:
    """Move ``tp``'s log start to ``before`` on the embedded broker, as retention does."""
    cluster._partition(tp.topic, tp.partition).log.delete_records(before)
