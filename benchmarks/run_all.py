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
partition, as ``run_workers`` runs them), ``aiokafka`` (``getmany``; skipped if not installed) and
``confluent-kafka`` (``consume`` in batches of 1,000, 50 ms timeout).

Usage: ``.venv/bin/python benchmarks/run_all.py [--records 1000000]
[--records-1k 300000] [--repeat 3] [--partitions 8] [--codecs none,lz4]
[--sizes 100,1000] [--clients ...] [--bootstrap HOST:PORT] [--rebalance]
[--everything]``. With ``--everything`` it is the whole suite: consumer
throughput (P1), rebalance cost (P2), generation turnover (P3), peak memory
(P4) and producer throughput, on one broker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
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
from bench_rebalance import BROKER_PROPERTIES, run_suite, table
from charts import write_charts

from gengroup import Admin, ConsumerGroup, Generation, TopicPartition
from gengroup.testing.kafka import KafkaBroker

HERE = Path(__file__).resolve().parent

#: One consume run: (seconds from subscribing to the assignment, seconds
#: from the assignment to the last record, sum of the value lengths, CPU
#: seconds the process used from the assignment to the last record -- every
#: thread's, so librdkafka's background threads count for confluent-kafka).
Run = tuple[float, float, int, float]


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
    bootstrap: str, topic: str, n: int, settings: dict[str, Any] | None = None
) -> Run:
    """Consume ``n`` records, one worker task per partition; every value is touched.

    ``settings``: group settings other than the defaults (``--gengroup-setting``).
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
                        gen.start_soon(worker, gen, tp)

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


def clients(
    bootstrap: str, topic: str, n: int, settings: dict[str, Any] | None = None
) -> dict[str, Callable[[], Run]]:
    """The clients to measure, by name (aiokafka only if it is installed).

    ``settings`` go to gengroup's group (the defaults if None).
    """
    out: dict[str, Callable[[], Run]] = {
        "gengroup-trio": lambda: anyio.run(
            consume_gengroup, bootstrap, topic, n, settings, backend="trio"
        ),
        "gengroup-asyncio": lambda: anyio.run(
            consume_gengroup, bootstrap, topic, n, settings, backend="asyncio"
        ),
    }
    try:
        import aiokafka  # noqa: F401
    except ImportError:
        print("aiokafka is not installed (pip install aiokafka): skipped")
    else:
        out["aiokafka"] = lambda: consume_aiokafka(bootstrap, topic, n)
    out["confluent-kafka"] = lambda: consume_confluent(bootstrap, topic, n)
    return out


def markdown(results: dict[str, Any]) -> str:
    """The results as a Markdown page, with ratios to aiokafka and confluent-kafka."""
    meta = results["meta"]
    lines = [
        "# Consumer throughput",
        "",
        "Produced by `benchmarks/run_all.py` (rerun it to refresh this page):",
        "",
        f"    {meta['command']}",
        "",
        f"One Apache Kafka broker on loopback (the test harness), {meta['partitions']} "
        "partitions, one consumer-group member per client, every value touched "
        "(`total += len(record.value)`). Rate: records over the time from the "
        "assignment to the last record, "
        f"median of {meta['repeat']} runs. Python {meta['python']} on {meta['machine']} "
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
        "| values | codec | records | client | records/s | MB/s | records/CPU-s | join s "
        "| vs aiokafka | vs confluent-kafka |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for case in results["cases"]:
        rates = {name: r["rate"] for name, r in case["clients"].items()}
        for name, r in case["clients"].items():
            vs_aio, vs_conf = (
                "" if rates.get(peer) is None else f"{r['rate'] / rates[peer]:.2f}"
                for peer in ("aiokafka", "confluent-kafka")
            )
            lines.append(
                f"| {case['value_size']} B | {case['codec']} | {case['records']:,} | {name} "
                f"| {r['rate']:,.0f} | {r['rate'] * case['value_size'] / 1e6:.1f} "
                f"| {r.get('cpu_rate', 0):,.0f} | {r['join']:.2f} "
                f"| {vs_aio} | {vs_conf} |"
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
        "goes to moving the bytes: receiving them, making each value a `bytes` object, "
        "and lz4's decompression.",
        "",
    ]
    return "\n".join(lines)


def record_loop() -> str:
    """Which record loop gengroup's clients run: ``compiled`` or ``pure-python``."""
    from gengroup.protocol import records

    return "pure-python" if records._decode_records is records._decode_records_py else "compiled"


def run_others(bootstrap: str, repeat: int) -> None:
    """The producer (P5), memory (P4) and turnover (P3) benchmarks, each in a process
    of its own on ``bootstrap``; each one's output goes to ``results/<name>.txt``."""
    results = HERE / "results"
    for script, extra in (
        ("bench_produce.py", ["--repeat", str(repeat), "--json", str(results / "produce.json")]),
        ("bench_memory.py", []),
        ("bench_turnover.py", []),
    ):
        print(f"running {script} ...", flush=True)
        out = subprocess.run(
            [sys.executable, str(HERE / script), "--bootstrap", bootstrap, *extra],
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
    parser.add_argument("--clients", help="comma-separated subset of the client names")
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
        help="--rebalance, and the producer, memory and turnover benchmarks on the same "
        "broker (their output in benchmarks/results/*.txt)",
    )
    parser.add_argument("--json", type=Path, default=HERE / "results" / "run_all.json")
    parser.add_argument("--markdown", type=Path, default=HERE.parent / "docs" / "benchmarks.md")
    args = parser.parse_args()
    command = "python benchmarks/run_all.py " + " ".join(_options(args))
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
                chosen = {
                    name: run
                    for name, run in clients(bootstrap, topic, n, settings).items()
                    if not args.clients or name in args.clients.split(",")
                }
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
                    cpu_rate = statistics.median(n / run[3] for run in runs)
                    case["clients"][name] = {
                        "rate": rate,
                        "cpu_rate": cpu_rate,
                        "join": statistics.median(run[0] for run in runs),
                        "runs": [n / run[1] for run in runs],
                    }
                    print(
                        f"  {name:<18} {rate:>12,.0f} records/s {cpu_rate:>12,.0f} records/CPU-s",
                        flush=True,
                    )
                results["cases"].append(case)
        if args.everything:
            run_others(bootstrap, args.repeat)
        if args.rebalance or args.everything:
            rebalance = run_suite(bootstrap, repeat=args.repeat)
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
