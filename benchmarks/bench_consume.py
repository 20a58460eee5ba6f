"""Consumer throughput: gengroup vs aiokafka, confluent-kafka, kafka-python and Java, one case.

The quick version of ``run_all.py``, with its producer and its clients: starts
a real Apache Kafka broker (the test harness) unless ``--bootstrap`` names one,
produces N records of V bytes into a topic of P partitions once, then has each
client consume all of them as a single-member consumer group, touching every
value (the clients of ``run_all.py``: gengroup on trio, on asyncio and through
Arrow, aiokafka, confluent-kafka, kafka-python, and Apache Kafka's
``kafka-consumer-perf-test`` as the ceiling; ``--clients`` picks some). Two
times per client: from subscribing to the assignment (the join), and from
the assignment to the last record (the throughput printed as records/s and
MB/s, best of ``--repeat`` runs). Asserts nothing about time (the machines are
shared and noisy).

Usage: python benchmarks/bench_consume.py [--records 500000] [--value-size 100]
       [--partitions 8] [--repeat 2] [--codec none] [--clients a,b,...]
       [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import time
import uuid
from contextlib import ExitStack

from broker import real_broker
from options import benchmark_parser
from run_all import CLIENTS, check_clients, clients, produce


def main() -> None:
    parser = benchmark_parser(__doc__, records=500_000, repeat=2)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--codec", default="none", help="none, gzip, snappy, lz4 or zstd")
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--clients", help=f"comma-separated subset of: {','.join(CLIENTS)}")
    args = parser.parse_args()
    names = check_clients(args.clients.split(",") if args.clients else None)
    with ExitStack() as stack:
        bootstrap = real_broker(stack, args.bootstrap)
        topic = "bench-" + uuid.uuid4().hex[:8]
        n, size = args.records, args.value_size
        t0 = time.perf_counter()
        produce(bootstrap, topic, args.partitions, n, size, args.codec)
        print(f"produced {n:,} records of {size} B in {time.perf_counter() - t0:.1f} s")
        print(f"{'client':<20} {'join s':>7} {'best records/s':>16} {'MB/s':>8}")
        for name, run in clients(bootstrap, topic, n, size, names=names).items():
            runs = [run() for _ in range(args.repeat)]
            join = min(r[0] for r in runs)
            rate = n / min(r[1] for r in runs)
            print(f"{name:<20} {join:>7.2f} {rate:>16,.0f} {rate * size / 1e6:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
