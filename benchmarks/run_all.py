"""Consume throughput of gengroup, aiokafka and confluent-kafka on a real broker.

One command for the whole comparison: it starts a single-node Apache Kafka
broker (:class:`gengroup.testing.kafka.KafkaBroker`), and for each value size
(100 B and 1 KB by default) and codec (uncompressed and lz4) creates a topic of
``--partitions`` partitions, produces the records once with confluent-kafka in
large batches, then lets every client consume all of them as the single member
of a fresh consumer group, ``--repeat`` times (in rounds: each client once per
round, so that load from other processes hits every client alike). Every
client touches every value (``total += len(record.value)``), so lazy decoding
cannot skip work.

The time measured runs from the moment the member learns its assignment to the
last record, so it includes each client's first fetches (the join before it is
reported separately); the rate is the median of the runs. Each run also counts the
CPU time the process used over the same span (every thread's: librdkafka decodes
in background threads), as records per CPU-second, the steadier measure on a
shared machine. Results go to a JSON file
(``--json``), a Markdown page (``--markdown``) that states each client's
ratio to aiokafka and to confluent-kafka, and PNG charts in ``docs/img``
(``charts.py``, which also draws them again from the JSON alone). Nothing
is asserted about time (the machines are shared and noisy).

Clients: ``gengroup-trio`` and ``gengroup-asyncio`` (one worker task per
partition, as ``run_workers`` runs them), ``gengroup-arrow`` (the same on
trio, each batch read as an Arrow record batch, ``FetchedBatch.to_arrow``, its
value lengths summed by ``pyarrow.compute``), ``aiokafka`` (``getmany``),
``confluent-kafka`` (``consume`` in batches of 1,000, 50 ms timeout),
``kafka-python`` (``poll``) and ``java``: Apache Kafka's own
``kafka-consumer-perf-test`` (``org.apache.kafka.tools.ConsumerPerformance``,
from the kafka-tools jars of the broker's version, fetched once from Maven
Central into the harness's jar cache), the ceiling every other client is
compared to. A client that is not installed fails the run, naming what is
missing; leave it out with ``--clients``.

Usage: ``.venv/bin/python benchmarks/run_all.py [--records 1000000]
[--records-1k 300000] [--repeat 3] [--partitions 8] [--codecs none,lz4]
[--sizes 100,1000] [--clients ...] [--bootstrap HOST:PORT] [--rebalance]
[--everything]``. With ``--everything`` it is the whole suite: consumer
throughput (P1), rebalance cost (P2), generation turnover (P3), peak memory
(P4), producer throughput and CPU at a trickle. Without ``--bootstrap``, the
rebalance and trickle benchmarks each start a broker of their own (which logs
the heartbeats, or the Fetch requests, they count); with it, everything runs
on the broker given.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
from bench_rebalance import BROKER_PROPERTIES, broker as rebalance_broker, run_suite, table
from charts import write_charts

from gengroup import Admin, ConsumerGroup, Generation, TopicPartition
from gengroup.testing.kafka import KafkaBroker

HERE = Path(__file__).resolve().parent

#: One consume run: (seconds from subscribing to the assignment, seconds
#: from the assignment to the last record, sum of the value lengths, CPU
#: seconds the process used from the assignment to the last record -- every
#: thread's, so librdkafka's background threads count for confluent-kafka;
#: None where it cannot be told apart from the process's start, as for the
#: Java tool).
Run = tuple[float, float, int, float | None]

#: Every client, in the order they run and appear in the results.
CLIENTS = (
    "gengroup-trio",
    "gengroup-asyncio",
    "gengroup-arrow",
    "aiokafka",
    "confluent-kafka",
    "kafka-python",
    "java",
)

#: The client the others are compared to as "vs Java ceiling".
CEILING = "java"


def values(size: int, count: int = 1024) -> list[bytes]:
    """``count`` text-like values of ``size`` bytes: words of a 2,000-word vocabulary.

    Compressible, not trivially: lz4 finds the repeated words of every value
    size, so a record batch of 1 KB values is smaller compressed than not and
    the producer really sends it compressed (librdkafka sends a batch
    uncompressed when compression does not make it smaller, which random
    1 KB values would not).
    """
    rng = random.Random(size)
    letters = b"abcdefghijklmnopqrstuvwxyz0123456789"
    vocabulary = [
        bytes(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(2000)
    ]
    out = []
    for _ in range(count):
        value = b" ".join(rng.choices(vocabulary, k=size // 3))
        out.append(value[:size])
    return out


def produce(bootstrap: str, topic: str, partitions: int, n: int, size: int, codec: str) -> None:
    """Create ``topic`` and produce ``n`` records of ``size`` bytes round-robin over partitions."""
    import confluent_kafka

    async def create() -> None:
        async with Admin(bootstrap) as admin:
            await admin.create_topics({topic: partitions})

    anyio.run(create)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": codec,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "acks": 1,
        }
    )
    confluent_produce(producer, topic, values(size), n, partitions)
    if producer.flush(120.0):
        raise SystemExit(f"producing to {topic}: records left unsent")


def confluent_produce(
    producer: Any, topic: str, pool: list[bytes], n: int, partitions: int = 0, **kwargs: Any
) -> None:
    """Queue ``n`` values of ``pool`` in a confluent-kafka ``producer``, round robin over
    ``partitions`` (0: its partitioner chooses), waiting whenever librdkafka's queue is
    full; ``kwargs`` go to each ``produce`` call. Flushing is the caller's."""
    for i in range(n):
        while True:
            try:
                producer.produce(
                    topic,
                    pool[i % len(pool)],
                    partition=i % partitions if partitions else -1,
                    **kwargs,
                )
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)


async def consume_gengroup(
    bootstrap: str,
    topic: str,
    n: int,
    settings: dict[str, Any] | None = None,
    arrow: bool = False,
) -> Run:
    """Consume ``n`` records, one worker task per partition; every value is touched.

    ``settings``: group settings other than the defaults (``--gengroup-setting``).
    ``arrow``: read each batch as an Arrow record batch (``FetchedBatch.to_arrow``)
    and sum its value lengths with ``pyarrow.compute``, instead of its records.
    """
    count = 0
    total = 0
    assigned = cpu = 0.0
    done = anyio.Event()

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        nonlocal count, total
        async for batch in gen.fetch(tp):
            records = batch.records
            total += sum([len(r.value) for r in records if r.value is not None])
            count += len(records)
            gen.mark(tp, batch.next_offset)
            if count >= n:
                done.set()

    async def arrow_worker(gen: Generation, tp: TopicPartition) -> None:
        import pyarrow.compute as pc

        nonlocal count, total
        async for batch in gen.fetch(tp):
            # No fallback to .records: a batch without to_arrow fails the run.
            table = batch.to_arrow()
            total += pc.sum(pc.binary_length(table.column("value"))).as_py() or 0
            count += table.num_rows
            gen.mark(tp, batch.next_offset)
            if count >= n:
                done.set()

    start = time.perf_counter()
    group_id = "bench-" + uuid.uuid4().hex
    async with ConsumerGroup(group_id, [topic], bootstrap, **(settings or {})) as group:
        async with anyio.create_task_group() as tg:

            async def generations() -> None:
                nonlocal assigned, cpu
                async for gen in group:
                    if not assigned:
                        assigned, cpu = time.perf_counter(), time.process_time()
                    for tp in sorted(gen.assignments):
                        gen.start_soon(arrow_worker if arrow else worker, gen, tp)

            tg.start_soon(generations)
            await done.wait()
            end, cpu = time.perf_counter(), time.process_time() - cpu
            tg.cancel_scope.cancel()
    return assigned - start, end - assigned, total, cpu


def consume_aiokafka(bootstrap: str, topic: str, n: int) -> Run:
    """Consume ``n`` records with aiokafka's ``getmany``; every value is touched."""

    async def run() -> Run:
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

        assigned = cpu = 0.0

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: object) -> None:
                pass

            async def on_partitions_assigned(self, assigned_: object) -> None:
                nonlocal assigned, cpu
                if not assigned:
                    assigned, cpu = time.perf_counter(), time.process_time()

        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id="bench-" + uuid.uuid4().hex,
            auto_offset_reset="earliest",
        )
        start = time.perf_counter()
        consumer.subscribe([topic], listener=Listener())
        await consumer.start()
        count = 0
        total = 0
        try:
            while count < n:
                batches = await consumer.getmany(timeout_ms=1000, max_records=10_000)
                for records in batches.values():
                    total += sum([len(r.value) for r in records if r.value is not None])
                    count += len(records)
            end, cpu = time.perf_counter(), time.process_time() - cpu
            return assigned - start, end - assigned, total, cpu
        finally:
            await consumer.stop()

    return asyncio.run(run())


def consume_confluent(bootstrap: str, topic: str, n: int) -> Run:
    """Consume ``n`` records with confluent-kafka in batches of 1,000; every value is touched."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-" + uuid.uuid4().hex,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
        }
    )
    assigned = cpu = 0.0

    def on_assign(consumer: object, partitions: object) -> None:
        nonlocal assigned, cpu
        if not assigned:
            assigned, cpu = time.perf_counter(), time.process_time()

    start = time.perf_counter()
    consumer.subscribe([topic], on_assign=on_assign)
    count = 0
    total = 0
    try:
        while count < n:
            # A short timeout: consume() waits for all 1,000 or the timeout,
            # which the last call, with fewer left, would always sit out.
            for msg in consumer.consume(1000, 0.05):
                if msg.error() is None:
                    value = msg.value()
                    if value is not None:
                        total += len(value)
                    count += 1
        end, cpu = time.perf_counter(), time.process_time() - cpu
        return assigned - start, end - assigned, total, cpu
    finally:
        consumer.close()


def consume_kafka_python(bootstrap: str, topic: str, n: int) -> Run:
    """Consume ``n`` records with kafka-python's ``poll``; every value is touched.

    Up to 10,000 records a poll, as aiokafka's ``getmany`` is asked for.
    """
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    assigned = cpu = 0.0

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: object) -> None:
            pass

        def on_partitions_assigned(self, assigned_: object) -> None:
            nonlocal assigned, cpu
            if not assigned:
                assigned, cpu = time.perf_counter(), time.process_time()

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id="bench-" + uuid.uuid4().hex,
        auto_offset_reset="earliest",
    )
    start = time.perf_counter()
    consumer.subscribe([topic], listener=Listener())
    count = 0
    total = 0
    try:
        while count < n:
            batches = consumer.poll(timeout_ms=1000, max_records=10_000)
            for records in batches.values():
                total += sum([len(r.value) for r in records if r.value is not None])
                count += len(records)
        end, cpu = time.perf_counter(), time.process_time() - cpu
        return assigned - start, end - assigned, total, cpu
    finally:
        consumer.close()


def kafka_tools_classpath() -> str:
    """The class path of Apache Kafka's tools, of the broker's version.

    Fetched once with Maven from Maven Central (``java/kafka-tools-pom.xml``)
    into the harness's jar cache, beside the broker's jars:
    ``~/.cache/gengroup/kafka-tools-<version>/lib``.
    """
    from gengroup.testing.kafka import KAFKA_VERSION, default_cache_root
    from gengroup.testing.kafka.jars import fetch_maven_jars

    lib = fetch_maven_jars(
        default_cache_root() / f"kafka-tools-{KAFKA_VERSION}" / "lib",
        (HERE / "java" / "kafka-tools-pom.xml").read_bytes(),
        (f"kafka-tools-{KAFKA_VERSION}.jar",),
        properties={"kafka.version": KAFKA_VERSION},
        what=f"the Kafka {KAFKA_VERSION} tools jars",
    )
    return f"{lib}/*"


#: ConsumerPerformance's result line: start.time, end.time, data.consumed.in.MB,
#: MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms,
#: fetch.MB.sec, fetch.nMsg.sec.
JAVA_FIELDS = 10


def consume_java(bootstrap: str, topic: str, n: int, size: int, classpath: str) -> Run:
    """Consume ``n`` records of ``size`` bytes with ``kafka-consumer-perf-test``.

    Apache Kafka's ``ConsumerPerformance`` in a JVM of its own, a member of a
    fresh group. Its join time is its ``rebalance.time.ms`` (from subscribing
    to the assignment) and its consume time its ``fetch.time.ms`` (from the
    assignment to the end of the last poll), the same span as the other
    clients'; its ``nMsg.sec`` would count the join too. It sums the lengths
    of every key and value, which it does not read further. The CPU time is
    unknown (None): the JVM's own start and the tool's set-up cannot be told
    apart from the consuming.
    """
    java = shutil.which("java")
    if java is None:
        raise SystemExit("the java client needs a JDK: java on PATH")
    command = [
        java,
        "-Xmx512m",  # as kafka-consumer-perf-test.sh gives it
        "-cp",
        classpath,
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--group",
        "bench-" + uuid.uuid4().hex,
        "--num-records",
        str(n),
        "--timeout",
        "60000",
        "--hide-header",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.count(",") == JAVA_FIELDS - 1]
    if done.returncode != 0 or len(lines) != 1:
        raise SystemExit(
            f"java ConsumerPerformance failed (exit status {done.returncode}):\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    fields = [field.strip() for field in lines[0].split(",")]
    megabytes, records = float(fields[2]), int(fields[4])
    join_ms, fetch_ms = int(fields[6]), int(fields[7])
    if records != n:
        raise SystemExit(f"java ConsumerPerformance read {records:,} records, not {n:,}")
    # It reports MiB with four decimals: the byte count is known to +-53 bytes.
    total = round(megabytes * 2**20)
    if abs(total - n * size) <= 0.00005 * 2**20 + 1:
        total = n * size
    return join_ms / 1000, fetch_ms / 1000, total, None


def arrow_missing() -> str | None:
    """Why the ``gengroup-arrow`` client cannot run, or None if it can."""
    try:
        import pyarrow.compute  # noqa: F401
    except ImportError:
        return "gengroup-arrow: pyarrow is not installed (pip install 'gengroup[bench]')"
    return None


def missing(name: str) -> str | None:
    """Why client ``name`` cannot run here (a package is missing), or None."""
    if name == "gengroup-arrow":
        return arrow_missing()
    module = {"aiokafka": "aiokafka", "confluent-kafka": "confluent_kafka", "kafka-python": "kafka"}
    if name in module:
        try:
            __import__(module[name])
        except ImportError:
            return f"{name}: not installed (pip install 'gengroup[bench]')"
    if name == "java" and shutil.which("java") is None:
        return "java: needs a JDK (java on PATH)"
    return None


def check_clients(names: list[str] | None) -> list[str]:
    """The clients ``names`` (all of :data:`CLIENTS` if None), each able to run here.

    Raises:
        SystemExit: an unknown name, or a client that cannot run here (its
            package missing): never skipped quietly.
    """
    chosen = list(CLIENTS) if names is None else names
    unknown = [name for name in chosen if name not in CLIENTS]
    if unknown:
        raise SystemExit(f"unknown clients {unknown}: choose among {', '.join(CLIENTS)}")
    problems = [problem for problem in map(missing, chosen) if problem]
    if problems:
        raise SystemExit(
            "cannot run every client asked for (leave them out with --clients):\n  "
            + "\n  ".join(problems)
        )
    return chosen


def clients(
    bootstrap: str,
    topic: str,
    n: int,
    size: int,
    settings: dict[str, Any] | None = None,
    names: list[str] | None = None,
) -> dict[str, Callable[[], Run]]:
    """The clients to measure, by name, in :data:`CLIENTS` order.

    Args:
        bootstrap: the broker.
        topic: the topic holding the records.
        n: how many records it holds.
        size: the size of each value.
        settings: group settings for gengroup's clients (the defaults if None).
        names: the clients to measure (all of :data:`CLIENTS` if None).

    Raises:
        SystemExit: an unknown name, or a client that cannot run here (its
            package missing): never skipped quietly.
    """
    chosen = check_clients(names)
    every: dict[str, Callable[[], Run]] = {
        "gengroup-trio": lambda: anyio.run(
            consume_gengroup, bootstrap, topic, n, settings, backend="trio"
        ),
        "gengroup-asyncio": lambda: anyio.run(
            consume_gengroup, bootstrap, topic, n, settings, backend="asyncio"
        ),
        "gengroup-arrow": lambda: anyio.run(
            consume_gengroup, bootstrap, topic, n, settings, True, backend="trio"
        ),
        "aiokafka": lambda: consume_aiokafka(bootstrap, topic, n),
        "confluent-kafka": lambda: consume_confluent(bootstrap, topic, n),
        "kafka-python": lambda: consume_kafka_python(bootstrap, topic, n),
    }
    if "java" in chosen:
        classpath = kafka_tools_classpath()
        every["java"] = lambda: consume_java(bootstrap, topic, n, size, classpath)
    return {name: every[name] for name in CLIENTS if name in chosen}


def markdown(results: dict[str, Any]) -> str:
    """The results as a Markdown page, with ratios to aiokafka, confluent-kafka and Java."""
    meta = results["meta"]
    lines = [
        "# Consumer throughput",
        "",
        "Produced by `benchmarks/run_all.py` (rerun it to refresh this page):",
        "",
        f"    {meta['command']}",
        "",
        f"One Apache Kafka broker on loopback (the test harness), {meta['partitions']} "
        "partitions, one consumer-group member per client, every value touched by the "
        "Python clients (`total += len(record.value)`, or its Arrow equivalent; the Java "
        "ceiling is described below). Rate: records over the time from the "
        "assignment to the last record, "
        f"median of {meta['repeat']} runs. Python {meta['python']}"
        + (f", Java {meta['java']}" if meta.get("java") else "")
        + f" on {meta['machine']} "
        "(a shared machine: absolute numbers vary from run to run, the ratios less). "
        + (
            f"gengroup ran with {meta['gengroup_settings']}; the other clients with their defaults."
            if meta.get("gengroup_settings")
            else "Every client runs with its default settings."
        ),
        "",
        "The values are text (words of a 2,000-word vocabulary), produced by librdkafka "
        "with `linger.ms=50` and `batch.size=1000000`: record batches of about 1 MB, "
        "which lz4 makes smaller at both value sizes. Records/CPU-s counts the CPU time "
        "the client's process used over the same span, all threads included "
        "(confluent-kafka decodes in librdkafka's background threads, the Python "
        "clients in the thread that consumes): on a loaded machine it is the steadier "
        "measure of a client's cost.",
        "",
        "Clients: `gengroup-trio` and `gengroup-asyncio` run one worker task per "
        "partition, each reading its batches' records; `gengroup-arrow` is the same on "
        "trio, each batch read as an Arrow record batch (`FetchedBatch.to_arrow()`) and "
        "its value lengths summed by `pyarrow.compute`; `aiokafka` calls `getmany` "
        "(up to 10,000 records), `kafka-python` calls `poll` (up to 10,000 records), "
        "`confluent-kafka` calls `consume` (1,000 records, 50 ms timeout).",
        "",
        "`java` is Apache Kafka's own `kafka-consumer-perf-test` "
        "(`org.apache.kafka.tools.ConsumerPerformance`, the kafka-tools jar of the broker's "
        "version) with its default options and the script's 512 MB heap, a member of a "
        "fresh group: the ceiling, the Java client with nothing else to do. It does not "
        "touch the values: it sums the lengths of the `byte[]` keys and values the client "
        "already copied out, and runs no handler. Its rate is its `fetch.nMsg.sec`, records "
        "over its `fetch.time.ms` (from the assignment to the end of the last poll, the "
        "span the other clients are timed over; its `nMsg.sec` would count the join as "
        "well), and its join time is its `rebalance.time.ms`. That span includes the JVM "
        "warming up (the first fetches run interpreted while the just-in-time compiler "
        "works in threads of its own, beside the broker's JVM on the same cores), which "
        "the Python clients do not pay: on short runs and a busy machine it weighs on the "
        "Java rate. Its CPU time is not known (-): the JVM's start and the compiler's work "
        'cannot be told apart from the consuming. "vs Java ceiling" is each client\'s '
        "records/s as a fraction of the `java` row's.",
        "",
        "| values | codec | records | client | records/s | MB/s | records/CPU-s | join s "
        "| vs aiokafka | vs confluent-kafka | vs Java ceiling |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in results["cases"]:
        rates = {name: r["rate"] for name, r in case["clients"].items()}
        for name, r in case["clients"].items():
            vs_aio, vs_conf, vs_java = (
                "" if rates.get(peer) is None else f"{r['rate'] / rates[peer]:.2f}"
                for peer in ("aiokafka", "confluent-kafka", CEILING)
            )
            cpu = "-" if r.get("cpu_rate") is None else f"{r['cpu_rate']:,.0f}"
            lines.append(
                f"| {case['value_size']} B | {case['codec']} | {case['records']:,} | {name} "
                f"| {r['rate']:,.0f} | {r['rate'] * case['value_size'] / 1e6:.1f} "
                f"| {cpu} | {r['join']:.2f} "
                f"| {vs_aio} | {vs_conf} | {vs_java} |"
            )
    lines += [
        "",
        "Ratios above 1 mean faster than the client in the column's title.",
        "",
        "![Consumer throughput of each client by value size and codec](img/consume.png)",
        "",
        "Where the time goes: gengroup and aiokafka decode records in the thread that "
        "consumes -- gengroup with "
        + (
            "its compiled record loop (`gengroup.protocol._speedups`, C, built by pip "
            "install; the pure-Python loop is the fallback)"
            if meta.get("record_loop", "compiled") == "compiled"
            else "its pure-Python record loop (`GENGROUP_PURE_PYTHON` was set, or the "
            "compiled one was not built)"
        )
        + ", aiokafka with its compiled (Cython) record reader -- while confluent-kafka "
        "decodes in librdkafka's C threads, which run beside the Python loop, so its "
        "records/s can exceed what one core does. `python benchmarks/bench_decode.py` "
        "measures the record loops alone. With 1 KB values most of gengroup's time "
        "goes to moving the bytes: receiving them (a large response straight into one "
        "buffer of its size, `gengroup/io/inplace.py`), making each value a `bytes` "
        "object, and lz4's decompression.",
        "",
    ]
    return "\n".join(lines)


def record_loop() -> str:
    """Which record loop gengroup's clients run: ``compiled`` or ``pure-python``."""
    from gengroup.protocol import records

    return "pure-python" if records._decode_records is records._decode_records_py else "compiled"


def java_version() -> str:
    """The version of the ``java`` on PATH, as ``java -version`` names it (``17.0.15``)."""
    out = subprocess.run(
        ["java", "-version"], capture_output=True, text=True, check=True, timeout=60
    ).stderr
    words = out.split('"')
    return words[1] if len(words) > 2 else out.strip().splitlines()[0]


def run_others(bootstrap: str, repeat: int, given: str | None) -> None:
    """The producer (P5), memory (P4) and turnover (P3) benchmarks, each in a
    process of its own on ``bootstrap``, and the trickle benchmark (CPU at a few
    records a second) on a broker of its own that logs its Fetch requests
    (their count is a column), unless the user ``given`` one; each one's output
    goes to ``results/<name>.txt``."""
    results = HERE / "results"
    own = ["--bootstrap", bootstrap]
    for script, extra in (
        (
            "bench_produce.py",
            [*own, "--repeat", str(repeat), "--json", str(results / "produce.json")],
        ),
        ("bench_memory.py", own),
        ("bench_turnover.py", own),
        (
            "bench_trickle.py",
            [
                *(["--bootstrap", given] if given else []),
                *("--repeat", str(repeat), "--json", str(results / "trickle.json")),
            ],
        ),
    ):
        print(f"running {script} ...", flush=True)
        out = subprocess.run(
            [sys.executable, str(HERE / script), *extra],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        (results / (script.removeprefix("bench_").removesuffix(".py") + ".txt")).write_text(out)
        print(out, flush=True)


def _setting(item: str) -> tuple[str, Any]:
    """``NAME=VALUE`` as a group setting, the value as an int or a float if it reads as one."""
    name, sep, text = item.partition("=")
    if not sep:
        raise SystemExit(f"--gengroup-setting wants NAME=VALUE, not {item!r}")
    value: Any = text
    for convert in (int, float):
        try:
            value = convert(text)
            break
        except ValueError:
            pass
    return name, value


def _options(args: argparse.Namespace) -> list[str]:
    """The command-line options that shape the results, as they would be typed."""
    out = []
    for name, value in vars(args).items():
        if name in ("json", "markdown", "bootstrap") or value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        if value is True:
            out.append(flag)
        elif isinstance(value, list):
            out += [f"{flag} {item}" for item in value]
        else:
            out.append(f"{flag} {value}")
    return out


def main() -> None:
    """Run the matrix and write the JSON and Markdown results."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records of 100-byte values")
    parser.add_argument("--records-1k", type=int, default=300_000, help="records of 1 KB values")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--sizes", default="100,1000", help="comma-separated value sizes")
    parser.add_argument("--codecs", default="none,lz4", help="comma-separated: none,lz4,...")
    parser.add_argument(
        "--clients", help=f"comma-separated subset of the clients: {','.join(CLIENTS)}"
    )
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument(
        "--gengroup-setting",
        action="append",
        metavar="NAME=VALUE",
        help="a group setting for gengroup's clients, e.g. partition_buffer_bytes=2097152 "
        "(repeatable; integers and decimals are converted)",
    )
    parser.add_argument(
        "--rebalance",
        action="store_true",
        help="also run the rebalance-cost suite (bench_rebalance.py) on the same broker",
    )
    parser.add_argument(
        "--everything",
        action="store_true",
        help="--rebalance, and the producer, memory, turnover and trickle benchmarks on the same "
        "broker (their output in benchmarks/results/*.txt)",
    )
    parser.add_argument("--json", type=Path, default=HERE / "results" / "run_all.json")
    parser.add_argument("--markdown", type=Path, default=HERE.parent / "docs" / "benchmarks.md")
    args = parser.parse_args()
    command = "python benchmarks/run_all.py " + " ".join(_options(args))
    names = check_clients(args.clients.split(",") if args.clients else None)
    settings = dict(_setting(item) for item in args.gengroup_setting or ())
    results: dict[str, Any] = {
        "meta": {
            "command": command,
            "partitions": args.partitions,
            "repeat": args.repeat,
            "python": platform.python_version(),
            "machine": f"{platform.machine()}, {platform.system()}",
            "gengroup_settings": settings,
            "record_loop": record_loop(),
            "java": java_version() if "java" in names else None,
        },
        "cases": [],
    }
    with ExitStack() as stack:
        bootstrap = args.bootstrap
        if bootstrap is None:
            # The properties only matter to consumer-protocol (KIP-848) members.
            broker = KafkaBroker(heap="1g", properties=BROKER_PROPERTIES)
            bootstrap = stack.enter_context(broker).bootstrap
        for size in (int(s) for s in args.sizes.split(",")):
            n = args.records if size <= 100 else args.records_1k
            for codec in args.codecs.split(","):
                topic = f"bench-{size}-{codec}-{uuid.uuid4().hex[:6]}"
                t0 = time.perf_counter()
                produce(bootstrap, topic, args.partitions, n, size, codec)
                print(
                    f"{n:,} records of {size} B, {codec}: produced in "
                    f"{time.perf_counter() - t0:.1f} s",
                    flush=True,
                )
                case: dict[str, Any] = {
                    "value_size": size,
                    "codec": codec,
                    "records": n,
                    "clients": {},
                }
                chosen = clients(bootstrap, topic, n, size, settings, names)
                # Round by round, every client once per round: load from other
                # processes on a shared machine then hits every client alike.
                all_runs: dict[str, list[Run]] = {name: [] for name in chosen}
                for _ in range(args.repeat):
                    for name, run in chosen.items():
                        all_runs[name].append(run())
                for name, runs in all_runs.items():
                    if any(run[2] != runs[0][2] for run in runs) or runs[0][2] < n * size:
                        raise SystemExit(f"{name}: not every value was read: {runs}")
                    rate = statistics.median(n / run[1] for run in runs)
                    cpus = [run[3] for run in runs if run[3] is not None]
                    cpu_rate = statistics.median(n / cpu for cpu in cpus) if cpus else None
                    case["clients"][name] = {
                        "rate": rate,
                        "cpu_rate": cpu_rate,
                        "join": statistics.median(run[0] for run in runs),
                        "runs": [n / run[1] for run in runs],
                    }
                    cpu_text = "-" if cpu_rate is None else f"{cpu_rate:,.0f}"
                    print(
                        f"  {name:<18} {rate:>12,.0f} records/s {cpu_text:>12} records/CPU-s",
                        flush=True,
                    )
                results["cases"].append(case)
        if args.everything:
            run_others(bootstrap, args.repeat, args.bootstrap)
        if args.rebalance or args.everything:
            # On a broker of its own that logs every member's heartbeats (unless --bootstrap).
            with rebalance_broker(args.bootstrap) as (where, request_log):
                rebalance = run_suite(where, repeat=args.repeat, request_log=request_log)
            rebalance["meta"]["command"] = command
            (HERE / "results" / "rebalance.json").write_text(json.dumps(rebalance, indent=2) + "\n")
            print("\n".join(table(rebalance)), flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    args.markdown.parent.mkdir(parents=True, exist_ok=True)
    args.markdown.write_text(markdown(results))
    # Beside the page that shows them: a --markdown elsewhere leaves docs/img alone.
    charts = write_charts(
        args.json,
        HERE / "results" / "rebalance.json" if args.rebalance or args.everything else None,
        args.markdown.parent / "img",
    )
    print(f"wrote {args.json}, {args.markdown} and {', '.join(map(str, charts))}")


if __name__ == "__main__":
    main()
