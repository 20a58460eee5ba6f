"""Where the lake keeps what: paths, file names, the Parquet schema, the commit note.

Theory of operation:

A partition's records land under ``<root>/topic=<T>/partition=<P>/`` (Hive
style, so Spark, DuckDB and pyarrow datasets discover ``topic`` and
``partition`` as columns). A published file is named by the offsets it covers,
``<base>-<end>.parquet`` with both numbers zero-padded to 20 digits: it holds
the partition's records at offsets ``base <= offset < end`` (fewer than
``end - base`` where compaction or transaction markers left gaps). The name is
a pure function of the range, so two writers landing the same range write the
same name with the same records, and publishing twice is harmless.

Before it is published a file is *staged* under the partition's hidden
``_staging/`` folder as ``<base>-<end>.<token>.parquet``, where the token is
unique to one writer (generation id, the member's generation sequence and
random bits: ids can repeat, the sequence cannot). Spark, pyarrow and Hive
skip paths whose name starts with ``_``, so a staged file is never read as
data. The commit that lands a file carries :func:`commit_note` as its Kafka
commit metadata; from it whoever owns the partition next finds the staged file
the newest commit refers to. ``docs/pipeline.md`` gives the protocol.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .._types import TopicPartition

__all__ = [
    "NOTE_PREFIX",
    "OWNER",
    "STAGING",
    "Landed",
    "arrow_schema",
    "commit_note",
    "parse_file_name",
    "parse_note",
    "partition_dir",
    "published_name",
    "staged_name",
]

#: The lake's owner record, at its root (:meth:`LakeStore.claim <gengroup.lake.LakeStore.claim>`).
OWNER = "_lake.json"
#: The hidden folder of a partition where files wait for their commit.
STAGING = "_staging"
#: Prefix of the commit metadata the sink writes (a version, for later formats).
NOTE_PREFIX = "gengroup-lake/1"

_WIDTH = 20
_PUBLISHED = re.compile(r"^(\d{20})-(\d{20})\.parquet$")
_STAGED = re.compile(r"^(\d{20})-(\d{20})\.([A-Za-z0-9_-]+)\.parquet$")
_NOTE = re.compile(r"^gengroup-lake/1 (\d+)-(\d+) ([A-Za-z0-9_-]+)$")


@dataclass(frozen=True, slots=True)
class Landed:
    """A range of offsets ``base <= offset < end``; ``token`` names a staged file's writer."""

    base: int
    end: int
    token: str = ""


def partition_dir(root: str, tp: TopicPartition) -> str:
    """The folder of a partition's published files (``root`` without a trailing slash)."""
    return f"{root}/topic={tp.topic}/partition={tp.partition}"


def published_name(base: int, end: int) -> str:
    """The file name of a published range."""
    return f"{base:0{_WIDTH}d}-{end:0{_WIDTH}d}.parquet"


def staged_name(base: int, end: int, token: str) -> str:
    """The file name of a staged range (inside ``_staging``)."""
    return f"{base:0{_WIDTH}d}-{end:0{_WIDTH}d}.{token}.parquet"


def parse_file_name(name: str, *, staged: bool) -> Landed | None:
    """The range a published (or staged) file name covers; None for any other name."""
    m = (_STAGED if staged else _PUBLISHED).match(name)
    if m is None:
        return None
    return Landed(int(m[1]), int(m[2]), m[3] if staged else "")


def commit_note(landed: Landed) -> str:
    """The commit metadata that lands ``landed`` (its staged file's range and token)."""
    return f"{NOTE_PREFIX} {landed.base}-{landed.end} {landed.token}"


def parse_note(note: str | None) -> Landed | None:
    """The staged file a commit's metadata names; None for metadata the sink did not write."""
    m = _NOTE.match(note or "")
    if m is None:
        return None
    return Landed(int(m[1]), int(m[2]), m[3])


def arrow_schema() -> Any:
    """The Parquet schema of landed records (``pyarrow.Schema``).

    ``timestamp`` is the record's Kafka timestamp; ``landed_at`` the time its
    file was written, so landing delay is ``landed_at - timestamp``.
    """
    import pyarrow as pa

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    return pa.schema(
        [
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("ms", tz="UTC")),
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("headers", pa.list_(header)),
            ("landed_at", pa.timestamp("ms", tz="UTC")),
        ]
    )
