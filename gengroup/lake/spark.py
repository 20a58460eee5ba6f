"""Spark jobs over the lake: ``verify`` against the topic, and ``analytics``.

Theory of operation:

``verify`` is an independent check of the sink: it reads the topic with
Spark's own Kafka source (``spark-sql-kafka-0-10``, built on the Java
client; :func:`connector_jars` fetches it with Maven once) and the lake with
Spark's Parquet reader, and joins the two on (topic, partition, offset). The
lake side is grouped first, so a record landed twice shows up as a duplicate
rather than disappearing in the join. Per partition it counts records in the
topic's range, records in the lake, offsets missing from the lake, offsets
in the lake but not in the range, extra copies, and records whose key,
value, headers or timestamp differ. The range is the whole topic, or, given
a group's committed offsets, each partition up to its committed offset --
what the sink claims to have landed. Records that retention (or
DeleteRecords) removed from the topic stay in the lake, which is what a lake
is for: given each partition's log start offset, the lake's records below it
that the topic no longer holds are counted as archived, not extra, and do
not fail the check (their extra copies still count as duplicates).

``analytics`` aggregates what landed: records and bytes per key and per
minute, landing delay percentiles (``landed_at - timestamp``), per-partition
counts and their skew; it writes Parquet tables, ``summary.json`` and
``analytics.png``.

Everything runs on any Spark master; ``local[2]`` by default.

A secured cluster: :func:`kafka_options` turns the client's
:class:`~gengroup.io.security.Security` into the Java client's settings
(``kafka.security.protocol``, ``kafka.sasl.jaas.config``, PEM trust and key
stores given inline), which ``verify`` hands to Spark's Kafka source.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._types import TopicPartition
from ..io.security import Security
from .store import LakeError

__all__ = [
    "KAFKA_PACKAGE",
    "SPARK_VERSION",
    "connector_jars",
    "kafka_options",
    "PartitionCheck",
    "VerifyReport",
    "analytics",
    "check_files",
    "session",
    "verify",
]

#: The Spark version of Spark's Kafka source; the ``spark`` extra pins pyspark to it.
SPARK_VERSION = "4.2.0"
#: Spark's Kafka source, as Maven coordinates.
KAFKA_PACKAGE = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}"


def connector_jars() -> list[str]:
    """The jars of Spark's Kafka source, fetched once with Maven into gengroup's jar cache.

    They sit beside the Kafka broker's jars (``~/.cache/gengroup``, or
    ``$GENGROUP_KAFKA_CACHE``) and are handed to Spark as local jars, so a
    session resolves nothing at run time.

    Raises:
        LakeError: Maven is missing or could not fetch them.
    """
    from importlib import resources

    from ..testing.kafka._base import KafkaHarnessError
    from ..testing.kafka.jars import default_cache_root, fetch_maven_jars

    pom = resources.files("gengroup.lake").joinpath("spark-kafka-pom.xml").read_bytes()
    lib = default_cache_root() / f"spark-kafka-{SPARK_VERSION}" / "lib"
    try:
        fetch_maven_jars(
            lib,
            pom,
            (f"spark-sql-kafka-0-10_2.13-{SPARK_VERSION}.jar",),
            properties={"spark.version": SPARK_VERSION},
            what=f"Spark's Kafka source {SPARK_VERSION}",
        )
    except KafkaHarnessError as exc:
        raise LakeError(f"cannot get Spark's Kafka source: {exc}") from exc
    import pyspark

    # Spark ships its own Scala, Hadoop client, compression codecs and logging: a second
    # copy of any of them on the class path would only shadow or clash.
    spark_has = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(str(p) for p in lib.glob("*.jar") if _artifact(p.name) not in spark_has)


def _artifact(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    m = re.match(r"^(.*?)-\d[^-]*(-[A-Za-z]\w*)?\.jar$", jar)
    return m[1] if m else jar


@contextmanager
def session(master: str = "local[2]", name: str = "gengroup lake") -> Iterator[Any]:
    """A SparkSession with the Kafka source on its class path, stopped on exit.

    Raises:
        LakeError: no Java runtime (Spark needs Java 17 or later), or the Kafka
            source's jars could not be fetched.
    """
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise LakeError("Spark needs a Java runtime (17 or later): no `java` on PATH, no JAVA_HOME")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName(name)
        .config("spark.jars", ",".join(connector_jars()))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "8")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


def _lake_path(lake: str) -> str:
    return lake if "://" in lake else os.path.abspath(lake)


def check_files(lake: str) -> int:
    """Read every published file's Parquet footer; how many files the lake holds.

    Raises:
        LakeError: no lake there (no folder, or no landed file in it), or
            files that are not readable Parquet, named (Spark would fail on
            the first one deep inside a job, or skip them silently with
            ``ignoreCorruptFiles``).
    """
    import pyarrow.parquet as pq
    from pyarrow import fs

    from .layout import parse_file_name
    from .store import LakeStore

    store = LakeStore(lake, create=False)
    infos = store.fs.get_file_info(fs.FileSelector(store.root, recursive=True))
    published = [
        i
        for i in infos
        if i.type == fs.FileType.File
        and "/_" not in i.path[len(store.root) :]
        and parse_file_name(i.base_name, staged=False) is not None
    ]
    corrupt = []
    for info in published:
        try:
            with store.fs.open_input_file(info.path) as f:
                pq.ParquetFile(f).metadata  # noqa: B018 -- reading the footer is the check
        except Exception as exc:
            corrupt.append(f"{info.path}: {exc}")
    if corrupt:
        raise LakeError(f"{len(corrupt)} corrupt file(s) in the lake: " + "; ".join(corrupt))
    if not published:
        raise LakeError(f"no lake at {lake!r}: the folder holds no landed file")
    return len(published)


def read_lake(spark: Any, lake: str) -> Any:
    """The lake as a DataFrame (topic and partition from the file, not the folder names)."""
    path = _lake_path(lake)
    return (
        spark.read.option("recursiveFileLookup", "true")
        .option("pathGlobFilter", "*.parquet")
        .parquet(path)
    )


@dataclass
class PartitionCheck:
    """What ``verify`` found in one partition.

    Attributes:
        topic: the topic.
        partition: the partition.
        topic_records: records in the topic's range.
        lake_records: records in the lake, every copy counted.
        missing: offsets of the range the lake does not hold.
        extra: offsets the lake holds outside the range, at or above the
            partition's log start.
        archived: offsets the lake holds below the partition's log start,
            which the topic no longer has (retention or DeleteRecords
            removed them): expected, not a failure.
        duplicates: copies beyond the first of an offset, archived or not.
        mismatched: records whose key, value, headers or timestamp differ.
        first_missing: the first five missing offsets.
    """

    topic: str
    partition: int
    topic_records: int = 0
    lake_records: int = 0
    missing: int = 0
    extra: int = 0
    archived: int = 0
    duplicates: int = 0
    mismatched: int = 0
    first_missing: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No missing, extra, duplicated or differing record (archived ones are fine)."""
        return not (self.missing or self.extra or self.duplicates or self.mismatched)


@dataclass
class VerifyReport:
    """The result of :func:`verify`, per partition."""

    partitions: list[PartitionCheck]

    @property
    def ok(self) -> bool:
        """Every partition is exactly the topic's range, once."""
        return all(p.ok for p in self.partitions)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``ok``, totals and partitions."""
        keys = (
            "topic_records",
            "lake_records",
            "missing",
            "extra",
            "archived",
            "duplicates",
            "mismatched",
        )
        return {
            "ok": self.ok,
            "totals": {k: sum(getattr(p, k) for p in self.partitions) for k in keys},
            "partitions": [asdict(p) for p in self.partitions],
        }

    def text(self) -> str:
        """A table, one line per partition, then a verdict."""
        head = f"{'partition':<24} {'topic':>9} {'lake':>9} {'missing':>8} {'extra':>6} "
        head += f"{'archived':>9} {'dups':>6} {'differ':>6}"
        lines = [head]
        for p in self.partitions:
            lines.append(
                f"{p.topic + '-' + str(p.partition):<24} {p.topic_records:>9} {p.lake_records:>9} "
                f"{p.missing:>8} {p.extra:>6} {p.archived:>9} {p.duplicates:>6} {p.mismatched:>6}"
                + (f"  first missing: {p.first_missing}" if p.first_missing else "")
            )
        archived = sum(p.archived for p in self.partitions)
        if not self.ok:
            lines.append("FAILED")
        elif archived:
            lines.append(
                "OK: the lake holds the topic's range exactly once, and "
                f"{archived} archived record(s) the topic no longer has"
            )
        else:
            lines.append("OK: the lake holds the topic's range exactly once")
        return "\n".join(lines)


_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}
_OAUTH_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"


def _jaas_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----\n?", re.S)


def _pem_blocks(text: str, kind: str) -> str:
    """The PEM blocks of ``text`` whose label ends with ``kind``."""
    return "".join(m[0] for m in _PEM_BLOCK.finditer(text) if m[1].endswith(kind))


def _pkcs8(text: str, password: str | None) -> str:
    """The private key of ``text`` as PKCS#8 PEM, the one form the Java client's PEM key
    store reads (``BEGIN PRIVATE KEY``, or ``BEGIN ENCRYPTED PRIVATE KEY`` with a password).

    Raises:
        LakeError: no private key in ``text``, or one in another form (PKCS#1 ``BEGIN RSA
            PRIVATE KEY``, SEC1 ``BEGIN EC PRIVATE KEY``) and ``cryptography`` is not
            installed to convert it.
    """
    key = _pem_blocks(text, "PRIVATE KEY")
    if not key:
        raise LakeError("the client certificate needs its private key (ssl_keyfile)")
    if key.startswith(("-----BEGIN PRIVATE KEY-----", "-----BEGIN ENCRYPTED PRIVATE KEY-----")):
        return key
    try:
        from cryptography.hazmat.primitives import serialization
    except ImportError as exc:
        raise LakeError(
            "Spark's Kafka source needs the client key in PKCS#8 (BEGIN PRIVATE KEY); convert "
            "it (openssl pkcs8 -topk8 -in KEY -out KEY.pk8) or install cryptography"
        ) from exc
    secret = None if password is None else password.encode()
    loaded = serialization.load_pem_private_key(key.encode(), password=secret)
    encryption: serialization.KeySerializationEncryption = (
        serialization.NoEncryption()
        if secret is None
        else serialization.BestAvailableEncryption(secret)
    )
    pem = loaded.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    return pem.decode()


def kafka_options(security: Security, *, oauth_token_file: str | None = None) -> dict[str, str]:
    """The options of Spark's Kafka source (``kafka.``-prefixed Java client settings) for
    connections secured as ``security`` says.

    TLS: the CA file becomes a PEM trust store (``ssl.truststore.type=PEM``); a
    client certificate and key become a PEM key store given inline; no host
    name check is an empty ``ssl.endpoint.identification.algorithm``. SASL: the
    mechanism's login module in ``sasl.jaas.config`` with the user and password.
    OAUTHBEARER: the Java client reads the token from ``oauth_token_file`` (a
    ``file:`` token endpoint, KIP-768).

    Args:
        security: the client's security settings.
        oauth_token_file: for OAUTHBEARER, a file holding the bearer token.

    Raises:
        LakeError: an ``ssl_context`` (the Java client cannot use it), or
            OAUTHBEARER without ``oauth_token_file``.
    """
    out: dict[str, str] = {"kafka.security.protocol": security.security_protocol}
    if security.uses_tls:
        if security.ssl_context is not None:
            raise LakeError("Spark's Kafka source needs the TLS files, not an ssl_context")
        if security.ssl_cafile is not None:
            out["kafka.ssl.truststore.type"] = "PEM"
            out["kafka.ssl.truststore.location"] = os.path.abspath(security.ssl_cafile)
        if security.ssl_certfile is not None:
            chain = _pem_blocks(Path(security.ssl_certfile).read_text(), "CERTIFICATE")
            key_pem = Path(security.ssl_keyfile or security.ssl_certfile).read_text()
            out["kafka.ssl.keystore.type"] = "PEM"
            out["kafka.ssl.keystore.certificate.chain"] = chain
            out["kafka.ssl.keystore.key"] = _pkcs8(key_pem, security.ssl_password)
            if security.ssl_password is not None:
                out["kafka.ssl.key.password"] = security.ssl_password
        if not security.ssl_check_hostname:
            out["kafka.ssl.endpoint.identification.algorithm"] = ""
    mechanism = security.sasl_mechanism
    if security.uses_sasl and mechanism is not None:
        out["kafka.sasl.mechanism"] = mechanism
        module = _LOGIN_MODULES[mechanism]
        if mechanism == "OAUTHBEARER":
            if oauth_token_file is None:
                raise LakeError("OAUTHBEARER for Spark's Kafka source needs a token file")
            out["kafka.sasl.jaas.config"] = f"{module} required;"
            out["kafka.sasl.login.callback.handler.class"] = _OAUTH_HANDLER
            out["kafka.sasl.oauthbearer.token.endpoint.url"] = (
                Path(oauth_token_file).resolve().as_uri()
            )
        else:
            user = _jaas_quote(security.sasl_username or "")
            password = _jaas_quote(security.sasl_password or "")
            out["kafka.sasl.jaas.config"] = (
                f"{module} required username={user} password={password};"
            )
    return out


def verify(
    spark: Any,
    lake: str,
    bootstrap: str,
    topics: Sequence[str],
    ends: Mapping[TopicPartition, int] | None = None,
    *,
    options: Mapping[str, str] | None = None,
    starts: Mapping[TopicPartition, int] | None = None,
) -> VerifyReport:
    """Compare the lake with the topics, read by Spark's Kafka source.

    Args:
        spark: a session from :func:`session`.
        lake: the lake's folder or URI.
        bootstrap: the Kafka cluster.
        topics: the topics the lake should hold.
        ends: per partition, the offset the range ends at (exclusive), e.g.
            a group's committed offsets; default: each partition's end. An
            end below the partition's start (a group that committed less than
            retention has since deleted) is taken as the start: an empty range.
        options: more options of Spark's Kafka source, e.g. a secured
            cluster's (:func:`kafka_options`).
        starts: per partition, its log start offset, looked up just before
            (``Admin.list_offsets(tps, "earliest")``): the lake's records
            below it that the topic no longer holds are archived, not extra.
            A partition left out starts at 0 (every record the topic lacks
            is extra). ``gengroup lake verify`` passes them.

    Returns:
        The report, one :class:`PartitionCheck` per partition found in the
        topic or the lake.

    Raises:
        LakeError: no lake, or corrupt files in it (see :func:`check_files`).
    """
    from pyspark.sql import functions as F

    check_files(lake)
    starts = dict(starts or {})
    if ends is not None:
        ends = {tp: max(off, starts.get(tp, 0)) for tp, off in ends.items()}
    reader = spark.read.format("kafka").options(**(options or {}))
    reader = (
        reader.option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(topics))
        .option("includeHeaders", "true")
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
    )
    if ends is not None:
        by_topic: dict[str, dict[str, int]] = {}
        for tp, off in ends.items():
            by_topic.setdefault(tp.topic, {})[str(tp.partition)] = off
        reader = reader.option("endingOffsets", json.dumps(by_topic))
    else:
        reader = reader.option("endingOffsets", "latest")
    header_type = "array<struct<key:string,value:binary>>"
    kafka = reader.load().select(
        "topic",
        "partition",
        "offset",
        F.col("key").alias("k_key"),
        F.col("value").alias("k_value"),
        F.coalesce(F.col("headers"), F.array().cast(header_type)).alias("k_headers"),
        F.col("timestamp").alias("k_ts"),
        F.lit(True).alias("in_topic"),
    )
    lake_df = read_lake(spark, lake).where(F.col("topic").isin(list(topics)))
    landed = lake_df.groupBy("topic", "partition", "offset").agg(
        F.count(F.lit(1)).alias("copies"),
        F.first("key").alias("l_key"),
        F.first("value").alias("l_value"),
        F.first(F.coalesce(F.col("headers"), F.array().cast(header_type))).alias("l_headers"),
        F.first("timestamp").alias("l_ts"),
    )
    log_starts = spark.createDataFrame(
        [(tp.topic, tp.partition, off) for tp, off in sorted(starts.items())],
        "topic string, partition int, log_start long",
    )
    joined = kafka.join(landed, ["topic", "partition", "offset"], "full_outer").join(
        F.broadcast(log_starts), ["topic", "partition"], "left"
    )
    in_topic = F.col("in_topic").isNotNull()
    in_lake = F.col("copies").isNotNull()
    archived = in_lake & ~in_topic & (F.col("offset") < F.coalesce("log_start", F.lit(0)))
    same = (
        F.col("k_key").eqNullSafe(F.col("l_key"))
        & F.col("k_value").eqNullSafe(F.col("l_value"))
        & F.col("k_headers").eqNullSafe(F.col("l_headers"))
        & F.col("k_ts").eqNullSafe(F.col("l_ts"))
    )
    rows = (
        joined.groupBy("topic", "partition")
        .agg(
            F.sum(in_topic.cast("long")).alias("topic_records"),
            F.sum(F.coalesce(F.col("copies"), F.lit(0))).alias("lake_records"),
            F.sum((in_topic & ~in_lake).cast("long")).alias("missing"),
            F.sum((in_lake & ~in_topic & ~archived).cast("long")).alias("extra"),
            F.sum(archived.cast("long")).alias("archived"),
            F.sum(F.greatest(F.coalesce(F.col("copies"), F.lit(0)) - 1, F.lit(0))).alias(
                "duplicates"
            ),
            F.sum((in_topic & in_lake & ~same).cast("long")).alias("mismatched"),
            F.slice(
                F.sort_array(F.collect_list(F.when(in_topic & ~in_lake, F.col("offset")))), 1, 5
            ).alias("first_missing"),
        )
        .orderBy("topic", "partition")
        .collect()
    )
    checks = [
        PartitionCheck(
            topic=r["topic"],
            partition=int(r["partition"]),
            topic_records=int(r["topic_records"]),
            lake_records=int(r["lake_records"]),
            missing=int(r["missing"]),
            extra=int(r["extra"]),
            archived=int(r["archived"]),
            duplicates=int(r["duplicates"]),
            mismatched=int(r["mismatched"]),
            first_missing=[int(o) for o in r["first_missing"]],
        )
        for r in rows
    ]
    return VerifyReport(checks)


def analytics(spark: Any, lake: str, out: str) -> dict[str, Any]:
    """Aggregate the lake; write Parquet tables, ``summary.json`` and ``analytics.png`` to ``out``.

    Returns:
        The summary (also in ``summary.json``): records, bytes, landing delay
        percentiles in seconds, per-topic partition skew (largest partition's
        records over the mean), the busiest keys.
    """
    from pyspark.sql import functions as F

    os.makedirs(out, exist_ok=True)
    check_files(lake)
    df = read_lake(spark, lake).select(
        "topic",
        "partition",
        "key",
        "timestamp",
        (F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))).alias(
            "bytes"
        ),
        ((F.unix_millis("landed_at") - F.unix_millis("timestamp")) / 1000.0).alias("delay_s"),
    )
    df.cache()
    per_key = df.groupBy("topic", "key").agg(
        F.count(F.lit(1)).alias("records"), F.sum("bytes").alias("bytes")
    )
    per_minute = (
        df.groupBy("topic", F.window("timestamp", "1 minute").alias("w"))
        .agg(F.count(F.lit(1)).alias("records"), F.sum("bytes").alias("bytes"))
        .select("topic", F.col("w.start").alias("minute"), "records", "bytes")
    )
    per_partition = df.groupBy("topic", "partition").agg(
        F.count(F.lit(1)).alias("records"), F.sum("bytes").alias("bytes")
    )
    for name, table in (
        ("per_key", per_key),
        ("per_minute", per_minute),
        ("per_partition", per_partition),
    ):
        table.write.mode("overwrite").parquet(os.path.join(os.path.abspath(out), name))

    totals = df.agg(
        F.count(F.lit(1)).alias("records"),
        F.sum("bytes").alias("bytes"),
        F.percentile_approx("delay_s", [0.5, 0.9, 0.99], 10000).alias("p"),
        F.max("delay_s").alias("max"),
    ).collect()[0]
    parts = per_partition.orderBy("topic", "partition").collect()
    skew: dict[str, float] = {}
    for topic in sorted({r["topic"] for r in parts}):
        counts = [r["records"] for r in parts if r["topic"] == topic]
        skew[topic] = round(max(counts) / (sum(counts) / len(counts)), 3)
    top = per_key.orderBy(F.desc("records"), "key").limit(10).collect()
    minutes = per_minute.orderBy("minute").collect()
    p = totals["p"] or [None, None, None]
    summary: dict[str, Any] = {
        "records": int(totals["records"]),
        "bytes": int(totals["bytes"] or 0),
        "landing_delay_s": {"p50": p[0], "p90": p[1], "p99": p[2], "max": totals["max"]},
        "partition_skew": skew,
        "partitions": [
            {"topic": r["topic"], "partition": r["partition"], "records": r["records"]}
            for r in parts
        ],
        "top_keys": [
            {
                "topic": r["topic"],
                "key": None if r["key"] is None else bytes(r["key"]).decode("utf-8", "replace"),
                "records": r["records"],
                "bytes": r["bytes"],
            }
            for r in top
        ],
        "minutes": len(minutes),
    }
    df.unpersist()
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2, default=str)
    _chart(minutes, parts, os.path.join(out, "analytics.png"))
    return summary


def _chart(minutes: list[Any], parts: list[Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    by_minute: dict[Any, int] = {}
    for r in minutes:
        by_minute[r["minute"]] = by_minute.get(r["minute"], 0) + r["records"]
    xs = sorted(by_minute)
    left.bar([x.strftime("%H:%M") for x in xs], [by_minute[x] for x in xs])
    left.set_title("records per minute (event time, UTC)")
    left.tick_params(axis="x", labelrotation=30)
    right.bar([f"{r['topic']}-{r['partition']}" for r in parts], [r["records"] for r in parts])
    right.set_title("records per partition")
    right.tick_params(axis="x", labelrotation=60)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
