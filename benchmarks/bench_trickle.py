"""CPU at a trickle: what one member costs while records arrive a few at a time.

Most services consume far below their client's top speed; what a client
costs them then is the CPU of each Fetch round trip, not of each record. A
producer writes ``--rate`` records a second (100 B) to each of
``--partitions`` partitions, each a record at a time as it comes. One member
of each client consumes them as a group of its own, in a process of its
own, touching every value (the members of ``bench_rebalance.py``: gengroup
on trio with a worker per partition, aiokafka's ``getmany``,
confluent-kafka's ``consume``). After ``--warmup`` seconds the script reads
the member process's CPU time (user and system, all threads, from
``/proc/<pid>/stat``) over ``--span`` seconds, and counts the Fetch requests
the broker logged from it over the same span (Kafka's request logger, on the
broker this script starts; with ``--bootstrap`` there is no log and no
count).

The clients run one after another, in ``--repeat`` rounds (every client
once a round, so the machine's load falls on all alike); the table shows
each figure's median. CPU per Fetch is the member's CPU time over its Fetch
requests: it holds everything the member did meanwhile, the handling of
records included. Nothing is asserted.

Usage: python benchmarks/bench_trickle.py [--repeat 3] [--partitions 4] [--rate 100]
       [--span 15] [--clients gengroup,aiokafka,confluent] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bench_rebalance as members

HERE = Path(__file__).resolve().parent
CLIENTS = ("gengroup", "aiokafka", "confluent")
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid``, all its threads."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / _TICK


def fetches(log: Path | None, client_id: str, start: float, end: float) -> int | None:
    """Fetch requests the broker logged from ``client_id`` between the wall times given."""
    if log is None:
        return None
    lo, hi = start * 1000, end * 1000
    count = 0
    with log.open(errors="replace") as lines:
        for line in lines:
            stamp = line[:13]
            if client_id in line and stamp.isdigit() and lo <= int(stamp) <= hi:
                count += 1
    return count


def one_run(
    client: str, bootstrap: str, log: Path | None, args: argparse.Namespace
) -> dict[str, float | None]:
    """One member of ``client`` on a fresh topic: its CPU and Fetch requests over the span."""
    topic, group_id = f"tr-{uuid.uuid4().hex[:8]}", f"tr-{uuid.uuid4().hex[:8]}"
    members.create_topic(bootstrap, topic, args.partitions)
    stop = threading.Event()
    producer = threading.Thread(
        target=members.keep_producing,
        args=(bootstrap, topic, args.partitions, args.rate, stop),
        daemon=True,
    )
    producer.start()
    client_id = members.client_id(group_id, 0)
    command = members.member_command(f"{client}-eager", [], [bootstrap, topic, group_id, client_id])
    member = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    consumed = 0
    counting = threading.Event()

    def count_records() -> None:
        nonlocal consumed
        assert member.stdout is not None
        for line in member.stdout:
            words = line.split()
            if words and words[0] == "R" and counting.is_set():
                consumed += int(words[4]) - int(words[3]) + 1

    reader = threading.Thread(target=count_records, daemon=True)
    reader.start()
    try:
        time.sleep(args.warmup)
        counting.set()
        cpu0, wall0, t0 = cpu_seconds(member.pid), time.monotonic(), time.time()
        time.sleep(args.span)
        cpu1, wall1, t1 = cpu_seconds(member.pid), time.monotonic(), time.time()
        counting.clear()
        if member.poll() is not None:
            raise SystemExit(f"the {client} member exited early ({member.returncode})")
    finally:
        member.terminate()
        member.wait(30)
        stop.set()
        producer.join()
    span = wall1 - wall0
    # The broker's request log is flushed by a background appender: give it a moment.
    time.sleep(1.0)
    sent = fetches(log, client_id, t0, t1)
    cpu = cpu1 - cpu0
    return {
        "records_per_s": consumed / span,
        "cpu_percent": 100 * cpu / span,
        "cpu_us_per_record": 1e6 * cpu / consumed if consumed else None,
        "fetches_per_s": None if sent is None else sent / span,
        "cpu_us_per_fetch": 1e6 * cpu / sent if sent else None,
    }


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _cell(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def table(results: dict[str, Any]) -> Iterator[str]:
    """The median figures of each client, and its CPU (% of a core) against gengroup's."""
    yield (
        f"{'client':<10} {'records/s':>10} {'CPU %':>7} {'CPU us/record':>14} "
        f"{'Fetch/s':>8} {'CPU us/Fetch':>13} {'CPU vs gengroup':>16}"
    )
    medians = {
        client: {key: _median([r[key] for r in runs]) for key in runs[0]}
        for client, runs in results["runs"].items()
    }
    base = medians.get("gengroup", {}).get("cpu_percent")
    for client, m in medians.items():
        ratio = m["cpu_percent"] / base if base and m["cpu_percent"] is not None else None
        yield (
            f"{client:<10} {_cell(m['records_per_s']):>10} {_cell(m['cpu_percent'], 1):>7} "
            f"{_cell(m['cpu_us_per_record'], 1):>14} {_cell(m['fetches_per_s']):>8} "
            f"{_cell(m['cpu_us_per_fetch']):>13} {_cell(ratio, 2) + 'x':>16}"
        )


@contextmanager
def broker(bootstrap: str | None) -> Iterator[tuple[str, Path | None]]:
    """``bootstrap`` (no request log), or a broker of its own logging every Fetch."""
    if bootstrap is not None:
        yield bootstrap, None
        return
    from gengroup.testing.kafka import KafkaBroker

    with KafkaBroker(properties=members.BROKER_PROPERTIES, request_log=("FETCH",)) as kafka:
        yield kafka.bootstrap, kafka.request_log_path


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate", type=int, default=100, help="records a second per partition")
    parser.add_argument("--warmup", type=float, default=6.0, help="seconds before measuring")
    parser.add_argument("--span", type=float, default=15.0, help="seconds measured")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--bootstrap", help="use this broker (no Fetch count) instead")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "trickle.json")
    args = parser.parse_args()
    clients = args.clients.split(",")
    if set(clients) - set(CLIENTS):
        parser.error(f"unknown clients {sorted(set(clients) - set(CLIENTS))}; from {CLIENTS}")
    load = [os.getloadavg()[0]]
    runs: dict[str, list[dict[str, float | None]]] = {c: [] for c in clients}
    with broker(args.bootstrap) as (bootstrap, log):
        for round_ in range(args.repeat):
            for client in clients:
                run = one_run(client, bootstrap, log, args)
                runs[client].append(run)
                print(f"round {round_ + 1} {client}: {json.dumps(run)}", flush=True)
    load.append(os.getloadavg()[0])
    results = {
        "meta": {
            "command": "python benchmarks/bench_trickle.py "
            + " ".join(
                f"--{k} {v}"
                for k, v in vars(args).items()
                if k in ("repeat", "partitions", "rate", "span", "clients")
            ),
            "load_average": load,
        },
        "runs": runs,
    }
    members.report(table(results), f"{load[0]:.2f} / {load[1]:.2f}", results, args.json)


if __name__ == "__main__":
    main()
