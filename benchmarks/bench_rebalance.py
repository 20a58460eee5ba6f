"""Rebalance cost: the longest per-partition consumption gap when a group's membership changes.

A producer writes steadily to every partition of a topic (12 by default; each
record's timestamp is its produce time). Three members of the client under
test consume it as one group, each a process of its own, touching every
record's value. Once all partitions flow, a 4th member joins. Every member
reports each batch it consumed (partition, offsets, wall-clock time) and each
change of its assignment on stdout; from these the benchmark computes, per
partition, the longest gap between two consecutive consumptions (by any
member):

* **steady**: in the ``--steady`` seconds before the 4th member subscribes
  (the baseline: how often a partition is served with nothing happening);
* **retained** and **moved**: from that moment until one second after the new
  assignment is stable, for the partitions that stayed with their owner and
  those that moved to another member;
* **stable**: seconds from the 4th member's subscribe until the final
  assignment is in place and every moved partition has given its new owner a
  record.

The same figures, from the moment of the change, for the other cases
(``--case``, all three by default): **leave**, one of 4 members gets SIGTERM
and shuts down cleanly (each member closes its consumer, which leaves the
group) and the 3 others take its partitions; **kill**, one of 4 members is
SIGKILLed and the others take its partitions once the coordinator expires its
session (the moved gap and the time to stable are then the session timeout
plus a rebalance).

The change comes ``--steady`` seconds after every partition flows, then at a
*phase* of the heartbeat period that differs from run to run: run k of n
comes (k + 0.5) / n of a period after a heartbeat of the member the change
acts on (the killed one) or of the first member (a join, a leave). Members
learn of a rebalance at a heartbeat, and an expired session is timed from
the last one, so the phase decides much of a leave's or a kill's gap; with
phases spread evenly from each client's own heartbeats, every client meets
changes all across its interval alike. The heartbeats are read from the
request log of the broker this script starts (Kafka's request logger,
heartbeats only, each member named by its client id); with ``--bootstrap``
there is none, and the phase counts from the moment every partition flowed,
which favours a client whose heartbeats happen to fall early after it.

Each figure is the worst partition of a run; the table shows the median over
``--repeat`` runs (taken in rounds, every configuration once per round, after
a first run that is not counted: it warms a freshly started broker up) and
the ratio to the Java client under the same protocol. Clients: gengroup,
confluent-kafka (librdkafka) and the Java ``KafkaConsumer`` under the eager
(range), cooperative-sticky and KIP-848 consumer protocols, and aiokafka
(eager only). Equal settings: session timeout 10 s, heartbeat 1 s (for the
consumer protocol these are the broker's, set on the broker this script
starts), auto-commit (gengroup commits its marks every 5 s and at each
revocation), start at the earliest offset. The Java member
(``benchmarks/java/RebalanceMember.java``) is compiled against the harness's
cached kafka-clients jars.

Results go to ``benchmarks/results/rebalance.json``. Nothing is asserted.

Usage: python benchmarks/bench_rebalance.py [--repeat 3] [--partitions 12]
       [--rate 100] [--configs gengroup-eager,java-cooperative,...]
       [--case join,leave,kill]
       [--events DIR] [--bootstrap HOST:PORT]

With ``--bootstrap`` the broker's own consumer-protocol heartbeat and session
apply (Kafka's defaults: 5 s and 45 s) unless it has :data:`BROKER_PROPERTIES`.
From ``run_all.py``: :func:`run_suite` on its broker, :func:`table` to print.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROTOCOLS = ("eager", "cooperative", "consumer")
#: Client, protocol: every configuration measured (aiokafka speaks the eager protocol only).
CONFIGS = [
    f"{client}-{protocol}" for client in ("gengroup", "confluent", "java") for protocol in PROTOCOLS
] + ["aiokafka-eager"]
#: The broker settings giving KIP-848 members the classic members' session and heartbeat.
BROKER_PROPERTIES: dict[str, str | int | bool] = {
    "group.consumer.heartbeat.interval.ms": 1000,
    "group.consumer.min.heartbeat.interval.ms": 1000,
    "group.consumer.session.timeout.ms": 10000,
    "group.consumer.min.session.timeout.ms": 10000,
}
SESSION_MS, HEARTBEAT_MS = 10_000, 1_000
#: The membership changes measured: a 4th member joins 3; one of 4 leaves (SIGTERM: the
#: client's clean shutdown); one of 4 is SIGKILLed (the group waits out its session).
CASES = ("join", "leave", "kill")


# ----------------------------------------------------------------- members
# Each member runs in a process of its own and prints one event a line:
#   S <time>                                 subscribing
#   A <time> <p,p,...>                       its assignment now (after a change)
#   R <time> <partition> <first> <last> <ts> records first..last consumed; ts:
#                                            the first record's timestamp (ms)


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def member_gengroup(bootstrap: str, topic: str, group_id: str, client: str, protocol: str) -> None:
    """A gengroup member: one span-scoped worker per added partition."""
    import anyio

    from gengroup import ConsumerGroup, CooperativeStickyBalancer, Generation, TopicPartition
    from gengroup.membership.balancers import RangeBalancer

    if os.environ.get("BENCH_REBALANCE_LOG"):
        import logging

        logging.basicConfig(
            level=logging.INFO, format="%(created).6f %(name)s %(message)s", stream=sys.stderr
        )

    settings: dict[str, Any] = {
        "start_offset": "earliest",
        "commit_interval": 5.0,
        "client_id": client,
        # As the others: Java's max.poll.records, getmany(max_records=500), consume(500).
        "max_batch_records": 500,
    }
    if protocol == "consumer":
        settings["group_protocol"] = "consumer"
    else:
        settings["session_timeout"] = SESSION_MS / 1000
        settings["heartbeat_interval"] = HEARTBEAT_MS / 1000
        settings["balancers"] = [
            CooperativeStickyBalancer() if protocol == "cooperative" else RangeBalancer()
        ]

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        total = 0
        async for batch in gen.fetch(tp):
            records = batch.records
            if records:
                total += sum([len(r.value) for r in records if r.value is not None])
                _emit(
                    f"R {time.time():.6f} {tp.partition} {records[0].offset} "
                    f"{records[-1].offset} {records[0].timestamp}"
                )
            gen.mark(tp, batch.next_offset)

    async def close_on_signal(group: ConsumerGroup) -> None:
        # SIGTERM: close the group the way examples/graceful_shutdown.py does
        # (aclose: its default handover times the leave before the next heartbeat).
        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            async for _ in signals:
                await group.aclose()
                return

    async def run() -> None:
        _emit(f"S {time.time():.6f}")
        async with (
            ConsumerGroup(group_id, [topic], bootstrap, **settings) as group,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(close_on_signal, group)
            async for gen in group:
                owned = ",".join(str(tp.partition) for tp in sorted(gen.assignments))
                _emit(f"A {time.time():.6f} {owned}")
                for tp in gen.added:
                    gen.start_soon(worker, gen, tp, partition=tp)
            tg.cancel_scope.cancel()

    anyio.run(run, backend="trio")


def member_confluent(bootstrap: str, topic: str, group_id: str, client: str, protocol: str) -> None:
    """A confluent-kafka (librdkafka) member polling batches of up to 500 records."""
    import confluent_kafka

    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "client.id": client,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
    }
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf["session.timeout.ms"] = SESSION_MS
        conf["heartbeat.interval.ms"] = HEARTBEAT_MS
        conf["partition.assignment.strategy"] = (
            "cooperative-sticky" if protocol == "cooperative" else "range"
        )
    consumer = confluent_kafka.Consumer(conf)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    _emit(f"S {time.time():.6f}")
    consumer.subscribe([topic])
    owned: list[int] = []
    total = 0
    while not stopping.is_set():
        messages = consumer.consume(500, 0.05)
        now = time.time()
        runs: dict[int, list[Any]] = {}
        for msg in messages:
            if msg.error() is None:
                value = msg.value()
                total += len(value) if value is not None else 0
                runs.setdefault(msg.partition() or 0, []).append(msg)
        for p, msgs in runs.items():
            _emit(
                f"R {now:.6f} {p} {msgs[0].offset()} {msgs[-1].offset()} {msgs[0].timestamp()[1]}"
            )
        assigned = sorted(tp.partition for tp in consumer.assignment())
        if assigned != owned:
            owned = assigned
            _emit(f"A {now:.6f} {','.join(map(str, owned))}")
    consumer.close()


def member_aiokafka(bootstrap: str, topic: str, group_id: str, client: str, protocol: str) -> None:
    """An aiokafka member (eager; range) calling ``getmany``."""
    if protocol != "eager":
        raise SystemExit(f"aiokafka speaks the eager protocol only, not {protocol!r}")

    async def run() -> None:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group_id,
            client_id=client,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
        )
        stopping = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
        _emit(f"S {time.time():.6f}")
        consumer.subscribe([topic])
        await consumer.start()
        owned: list[int] = []
        total = 0
        while not stopping.is_set():
            batches = await consumer.getmany(timeout_ms=50, max_records=500)
            now = time.time()
            for tp, records in batches.items():
                if records:
                    total += sum([len(r.value) for r in records if r.value is not None])
                    _emit(
                        f"R {now:.6f} {tp.partition} {records[0].offset} "
                        f"{records[-1].offset} {records[0].timestamp}"
                    )
            assigned = sorted(tp.partition for tp in consumer.assignment())
            if assigned != owned:
                owned = assigned
                _emit(f"A {now:.6f} {','.join(map(str, owned))}")
        await consumer.stop()

    asyncio.run(run())


MEMBERS = {"gengroup": member_gengroup, "confluent": member_confluent, "aiokafka": member_aiokafka}


# ----------------------------------------------------------------- heartbeats

#: The requests the broker this script starts logs: every member's heartbeats.
HEARTBEAT_APIS = ("HEARTBEAT", "CONSUMER_GROUP_HEARTBEAT")


def client_id(group_id: str, n: int) -> str:
    """The client id of the group's member ``n``: its name in the broker's request log."""
    return f"{group_id}-m{n}"


class Heartbeats:
    """Each client id's heartbeats, when the coordinator received them, from the broker's log.

    The broker started with ``request_log=HEARTBEAT_APIS`` writes a line for
    each heartbeat it answered: the time it finished (ms since the epoch),
    then Kafka's JSON naming the client id and the request's total time, so
    the heartbeat arrived that long before.
    """

    def __init__(self, path: Path) -> None:
        self._file = path.open("rb")
        self._partial = b""
        self._beats: dict[str, list[tuple[float, int]]] = {}

    def close(self) -> None:
        self._file.close()

    def beats(self, client: str) -> list[tuple[float, int]]:
        """``client``'s heartbeats so far: arrival (s since the epoch), the answer's error code."""
        *lines, self._partial = (self._partial + self._file.read()).split(b"\n")
        for line in lines:
            stamp, _, text = line.partition(b" Completed request:")
            request = json.loads(text) if text else None
            if request and request["requestHeader"]["requestApiKeyName"] in HEARTBEAT_APIS:
                self._beats.setdefault(request["requestHeader"]["clientId"], []).append(
                    (
                        (int(stamp) - request["totalTimeMs"]) / 1000,
                        request["response"]["errorCode"],
                    )
                )
        return self._beats.get(client, [])

    def at_phase(self, client: str, phase: float, timeout: float = 10.0) -> float:
        """Sleep until ``phase`` of a heartbeat period after the next heartbeat of ``client``.

        The period is the client's own: the median gap between its heartbeats
        of the last 5 seconds, leaving out those under half the nominal
        interval (the early beats some clients send while an assignment
        settles); the nominal interval until there are such gaps. Each
        client's period differs a little (gengroup's is 1.005 s with a 10 s
        session and 1 s interval), and a change at a phase of the nominal one
        would meet a slower client's next beat later. A heartbeat read too
        late to meet its phase gives way to the one after it.

        Returns:
            The period.
        """
        nominal = HEARTBEAT_MS / 1000
        deadline = time.monotonic() + timeout
        after = time.time()
        while time.monotonic() < deadline:
            times = [t for t, _ in self.beats(client)]
            if times and times[-1] > after:
                beat = times[-1]
                gaps = [b - a for a, b in itertools.pairwise(times) if a > beat - 5]
                regular = [gap for gap in gaps if gap > nominal / 2]
                period = statistics.median(regular) if regular else nominal
                delay = beat + phase * period - time.time()
                if delay > 0.002:
                    time.sleep(delay)
                    return period
                after = beat
            time.sleep(0.002)
        raise TimeoutError(f"a heartbeat of {client}")


# ----------------------------------------------------------------- the run


@dataclass
class Member:
    """A member process and the events it reported."""

    name: int
    proc: subprocess.Popen[str]
    subscribed: float = 0.0
    assignments: list[tuple[float, frozenset[int]]] = field(default_factory=list)
    #: (time, partition, first offset, last offset, first record's timestamp in s)
    batches: list[tuple[float, int, int, int, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "R" and len(parts) == 6:
                self.batches.append(
                    (
                        float(parts[1]),
                        int(parts[2]),
                        int(parts[3]),
                        int(parts[4]),
                        int(parts[5]) / 1000,
                    )
                )
            elif parts[0] == "A":
                owned = (
                    frozenset(int(p) for p in parts[2].split(","))
                    if len(parts) > 2
                    else frozenset()
                )
                self.assignments.append((float(parts[1]), owned))
            elif parts[0] == "S":
                self.subscribed = float(parts[1])
            else:
                self.errors.append(line.rstrip())

    @property
    def owned(self) -> frozenset[int]:
        return self.assignments[-1][1] if self.assignments else frozenset()


def java_command(out: Path) -> list[str]:
    """Compile the Java member into ``out``; the command line running it."""
    from gengroup.testing.kafka import ensure_jars

    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        raise SystemExit("the Java member needs a JDK: javac and java on PATH")
    classpath = f"{ensure_jars()}/*"
    source = HERE / "java" / "RebalanceMember.java"
    subprocess.run(
        [javac, "-nowarn", "-d", str(out), "-cp", classpath, str(source)], check=True, timeout=300
    )
    return [
        java,
        "-Xmx256m",
        "-XX:TieredStopAtLevel=1",
        "-cp",
        f"{out}:{classpath}",
        "RebalanceMember",
    ]


def member_command(config: str, java: list[str], args: list[str]) -> list[str]:
    client, protocol = config.rsplit("-", 1)
    if client == "java":
        return [*java, *args, protocol]
    return [sys.executable, str(Path(__file__).resolve()), "--member", config, *args]


def keep_producing(
    bootstrap: str, topic: str, partitions: int, rate: int, stop: threading.Event
) -> None:
    """Write ``rate`` records a second to every partition until ``stop`` is set."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "acks": 1})
    value = b"v" * 100
    interval = 1.0 / rate
    next_at = time.monotonic()
    while not stop.is_set():
        for p in range(partitions):
            producer.produce(topic, value, partition=p)
        producer.poll(0)
        next_at += interval
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    producer.flush(10)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    import anyio

    from gengroup import Admin

    async def create() -> None:
        async with Admin(bootstrap) as admin:
            await admin.create_topics({topic: partitions})

    anyio.run(create)


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def flowing(members: list[Member], partitions: int, since: float) -> bool:
    """Every partition is owned by exactly one member, and each served it a record since then."""
    owned = [m.owned for m in members]
    if any(not o for o in owned) or sum(len(o) for o in owned) != partitions:
        return False
    if frozenset().union(*owned) != frozenset(range(partitions)):
        return False
    for m in members:
        changed = max(since, m.assignments[-1][0])
        served = {p for t, p, *_ in list(m.batches) if t > changed}
        if not m.owned <= served:
            return False
    return True


def one_run(
    config: str,
    bootstrap: str,
    java: list[str],
    partitions: int,
    rate: int,
    steady: float,
    logs: Path | None = None,
    case: str = "join",
    phase: float = 0.0,
    heartbeats: Heartbeats | None = None,
) -> dict[str, Any]:
    """One run of ``config`` and ``case``: 3 members and a 4th joining, or 4 and one leaving.

    The change comes ``steady`` seconds after every partition flows, then
    ``phase`` of its heartbeat period after a heartbeat of the member it acts
    on (a kill) or of the first member (a join or a leave), with
    ``heartbeats``; without, ``phase`` of the nominal interval later.

    With ``logs``, each member's stderr goes to ``logs-m<N>.log`` (gengroup members log at INFO).
    """
    topic, group_id = f"rb-{uuid.uuid4().hex[:8]}", f"rb-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions)
    stop = threading.Event()
    producer = threading.Thread(
        target=keep_producing, args=(bootstrap, topic, partitions, rate, stop), daemon=True
    )
    producer.start()
    members: list[Member] = []
    stack = ExitStack()
    exited: threading.Thread | None = None  # waits for the leaving member's exit
    gone_at: list[float] = []

    def spawn() -> Member:
        env, stderr = None, None
        if logs is not None:
            env = {**os.environ, "BENCH_REBALANCE_LOG": "1"}
            stderr = stack.enter_context(open(f"{logs}-m{len(members)}.log", "w"))  # noqa: SIM115
        proc = subprocess.Popen(
            member_command(
                config, java, [bootstrap, topic, group_id, client_id(group_id, len(members))]
            ),
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            text=True,
            bufsize=1,
        )
        m = Member(len(members), proc)
        threading.Thread(target=m.read, daemon=True).start()
        members.append(m)
        return m

    try:
        for _ in range(3 if case == "join" else 4):
            spawn()
        n = len(members)
        wait_until(lambda: flowing(members, partitions, 0.0), 90, f"{config}: {n} members flowing")
        time.sleep(steady)
        period = None
        if heartbeats is None:
            time.sleep(phase * HEARTBEAT_MS / 1000)
        else:
            reference = members[-1] if case == "kill" else members[0]
            period = heartbeats.at_phase(client_id(group_id, reference.name), phase)
        if case == "join":
            joined = spawn()
            wait_until(lambda: joined.subscribed > 0, 60, f"{config}: the 4th member subscribing")
            t_join = joined.subscribed
            staying = members
        else:
            gone = members[-1]
            t_join = time.time()
            gone.proc.send_signal(signal.SIGTERM if case == "leave" else signal.SIGKILL)
            if case == "leave":
                exited = threading.Thread(
                    target=lambda: (gone.proc.wait(), gone_at.append(time.time()))
                )
                exited.start()
            staying = members[:-1]
        wait_until(
            lambda: flowing(staying, partitions, t_join),
            90,
            f"{config}: {len(staying)} members flowing",
        )
        time.sleep(1.0)
        t_end = time.time()
        if exited is not None:
            exited.join(timeout=30)
    finally:
        for m in members:
            m.proc.kill()
        for m in members:
            m.proc.wait()
        stack.close()
        stop.set()
        producer.join()
    result = figures(members, partitions, t_join, t_end, steady)
    result["beat_period"] = period
    # How long the leaving member took to close: SIGTERM to its process's exit.
    result["close"] = gone_at[0] - t_join if gone_at else None
    result["events"] = {
        "group": group_id,
        "join": t_join,
        "members": [
            {
                "assignments": [(t, sorted(o)) for t, o in m.assignments],
                "batches": m.batches,
                "heartbeats": heartbeats.beats(client_id(group_id, m.name)) if heartbeats else [],
            }
            for m in members
        ],
    }
    return result


def figures(
    members: list[Member], partitions: int, t_join: float, t_end: float, steady: float
) -> dict[str, Any]:
    """The run's gaps (worst partition), time to stable, and which partitions moved."""
    events: dict[int, list[tuple[float, int, float]]] = {p: [] for p in range(partitions)}
    for m in members:
        for t, p, _first, _last, ts in m.batches:
            events[p].append((t, m.name, ts))
    for evs in events.values():
        evs.sort()

    def longest_gap(evs: list[tuple[float, int, float]], start: float, end: float) -> float:
        times = [t for t, _, _ in evs if t <= end]
        gaps = [b - a for a, b in itertools.pairwise(times) if b > start]
        return max(gaps, default=end - start)

    retained, moved, steady_gaps = [], [], []
    stable = max(t for m in members for t, _ in m.assignments) - t_join
    latency = 0.0
    for evs in events.values():
        # the owner a partition ended with (a member that left stays in ``evs`` before it went)
        before = [who for t, who, _ in evs if t < t_join]
        after = [(t, who) for t, who, _ in evs if t >= t_join]
        owner_before, owner_after = before[-1], after[-1][1]
        gap = longest_gap(evs, t_join, t_end)
        steady_gaps.append(longest_gap(evs, t_join - steady, t_join))
        latency = max([latency] + [t - ts for t, _, ts in evs if t_join <= t <= t_end])
        if owner_before == owner_after:
            retained.append(gap)
        else:
            moved.append(gap)
            first_served = min(t for t, who in after if who == owner_after)
            stable = max(stable, first_served - t_join)
    return {
        "retained_gap": max(retained, default=0.0),
        "moved_gap": max(moved, default=0.0),
        "steady_gap": max(steady_gaps),
        "stable": stable,
        "max_latency": latency,
        "moved": len(moved),
        "retained": len(retained),
    }


# ----------------------------------------------------------------- report


def table(results: dict[str, Any]) -> Iterator[str]:
    """The results as text rows, a table per case: medians and ratios to Java per protocol."""
    for case, configs in results["cases"].items():
        yield from _case_table(case, configs)


def _case_table(case: str, configs: dict[str, Any]) -> Iterator[str]:
    yield f"{case}:"
    yield (
        f"{'client':<22} {'retained ms':>11} {'moved ms':>9} {'steady ms':>9} {'stable s':>8} "
        f"{'latency ms':>10} {'moved':>5} {'close s':>7}   vs Java (retained, moved, stable)"
    )
    for config, r in configs.items():
        med = r["median"]
        close = f"{med['close']:.2f}" if "close" in med else "-"
        protocol = config.rsplit("-", 1)[1]
        java = configs.get(f"java-{protocol}", {}).get("median")
        vs = ""
        if java and not config.startswith("java"):
            vs = "   " + ", ".join(
                f"{med[k] / java[k]:.2f}x" if java[k] else "-"
                for k in ("retained_gap", "moved_gap", "stable")
            )
        yield (
            f"{config:<22} {med['retained_gap'] * 1000:>11.0f} {med['moved_gap'] * 1000:>9.0f} "
            f"{med['steady_gap'] * 1000:>9.0f} {med['stable']:>8.2f} "
            f"{med['max_latency'] * 1000:>10.0f} {med['moved']:>5.0f} {close:>7}{vs}"
        )


def run_suite(
    bootstrap: str,
    configs: list[str] | None = None,
    *,
    repeat: int = 3,
    partitions: int = 12,
    rate: int = 100,
    steady: float = 3.0,
    events: Path | None = None,
    cases: tuple[str, ...] = CASES,
    request_log: Path | None = None,
) -> dict[str, Any]:
    """Measure ``configs`` (all by default) in ``cases``, ``repeat`` rounds, on ``bootstrap``.

    For the consumer protocol to run with the classic members' session and
    heartbeat, the broker needs :data:`BROKER_PROPERTIES`. With its
    ``request_log`` of :data:`HEARTBEAT_APIS` (see :func:`broker`), each
    change comes at its phase of a member's own heartbeat period.

    Returns:
        The results: ``meta``, and per case and configuration its ``median`` and ``runs``.
    """
    configs = list(CONFIGS) if configs is None else configs
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {k: {c: [] for c in configs} for k in cases}
    load_before = os.getloadavg()
    with _tempdir() as classes, ExitStack() as stack:
        java = java_command(Path(classes))
        heartbeats = None
        if request_log is not None:
            heartbeats = Heartbeats(request_log)
            stack.callback(heartbeats.close)
        # A freshly started broker serves its first groups more slowly (the
        # first group's SyncGroup took 9 ms in the broker against about 1 ms
        # for later ones; the first run's steady gaps were 100 to 280 ms in
        # four trials, 20 to 40 ms in the later runs), which would count
        # against whichever configuration runs first. A first run, not
        # counted, takes that.
        try:
            one_run(configs[0], bootstrap, java, partitions, rate, steady, None, cases[0], 0.5)
        except TimeoutError as exc:
            print(f"  warm-up run: timed out waiting for {exc}", flush=True)
        print(f"  warm-up run ({cases[0]}, {configs[0]}): not counted", flush=True)
        for round_, case, config in itertools.product(range(repeat), cases, configs):
            logs = None
            if events is not None:
                events.mkdir(parents=True, exist_ok=True)
                logs = events / f"{case}-{config}-{round_ + 1}"
            try:
                phase = (round_ + 0.5) / repeat
                r = one_run(
                    config, bootstrap, java, partitions, rate, steady, logs, case, phase, heartbeats
                )
            except TimeoutError as exc:
                print(
                    f"  {case} {config} run {round_ + 1}: timed out waiting for {exc}", flush=True
                )
                continue
            r["phase"] = phase
            raw = r.pop("events")
            if logs is not None:
                logs.with_suffix(".json").write_text(json.dumps(raw))
            runs[case][config].append(r)
            print(
                f"  {case} {config} run {round_ + 1}: "
                f"retained {r['retained_gap'] * 1000:.0f} ms, "
                f"moved {r['moved_gap'] * 1000:.0f} ms, "
                f"steady {r['steady_gap'] * 1000:.0f} ms, "
                f"stable {r['stable']:.2f} s ({r['moved']} moved)",
                flush=True,
            )
    return {
        "meta": {
            "command": "",
            "partitions": partitions,
            "rate_per_partition": rate,
            "repeat": repeat,
            "phase_after": "a member's heartbeat" if heartbeats else "every partition flowing",
            "python": platform.python_version(),
            "machine": f"{platform.machine()}, {platform.system()}, {os.cpu_count()} cores",
            "load_average": [round(x, 1) for x in (*load_before, *os.getloadavg())],
        },
        "cases": {
            case: {
                c: {
                    "median": {
                        k: statistics.median(values)
                        for k in rs[0]
                        if (values := [r[k] for r in rs if r[k] is not None])
                    },
                    "runs": rs,
                }
                for c, rs in by_config.items()
                if rs
            }
            for case, by_config in runs.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--rate", type=int, default=100, help="records a second per partition")
    parser.add_argument("--steady", type=float, default=3.0, help="seconds of baseline")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset")
    parser.add_argument("--case", default=",".join(CASES), help="comma-separated: join,leave,kill")
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "rebalance.json")
    parser.add_argument(
        "--events", type=Path, help="write each run's raw events and members' logs here"
    )
    parser.add_argument("--member", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.member:
        client, protocol = args.member.rsplit("-", 1)
        if len(rest) != 4:
            parser.error("a member takes BOOTSTRAP TOPIC GROUP CLIENT_ID")
        MEMBERS[client](*rest, protocol)
        return
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    cases = tuple(args.case.split(","))
    if set(cases) - set(CASES):
        parser.error(f"unknown cases {sorted(set(cases) - set(CASES))}; choose from {CASES}")
    configs = args.configs.split(",")
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configurations {sorted(unknown)}; choose from {CONFIGS}")
    command = "python benchmarks/bench_rebalance.py " + " ".join(
        f"--{k} {v}"
        for k, v in vars(args).items()
        if k in ("repeat", "partitions", "rate", "steady", "configs", "case")
    )
    with broker(args.bootstrap) as (bootstrap, request_log):
        results = run_suite(
            bootstrap,
            configs,
            repeat=args.repeat,
            partitions=args.partitions,
            rate=args.rate,
            steady=args.steady,
            events=args.events,
            cases=cases,
            request_log=request_log,
        )
    results["meta"]["command"] = command
    report(table(results), results["meta"]["load_average"], results, args.json)


def report(lines: Iterable[str], load: object, results: dict[str, Any], path: Path) -> None:
    """Print a benchmark's table and the load average; write its results to ``path``."""
    print()
    for line in lines:
        print(line)
    print(f"load average before/after: {load}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {path}")


@contextmanager
def broker(bootstrap: str | None) -> Iterator[tuple[str, Path | None]]:
    """``bootstrap`` (no request log), or a broker of its own: its bootstrap and request log.

    The broker started has :data:`BROKER_PROPERTIES` and logs every
    heartbeat (:data:`HEARTBEAT_APIS`); :func:`run_suite` times each change
    from them.
    """
    if bootstrap is not None:
        yield bootstrap, None
        return
    from gengroup.testing.kafka import KafkaBroker

    with KafkaBroker(properties=BROKER_PROPERTIES, request_log=HEARTBEAT_APIS) as kafka:
        assert kafka.request_log_path is not None
        yield kafka.bootstrap, kafka.request_log_path


def _tempdir() -> Any:
    import tempfile

    return tempfile.TemporaryDirectory(prefix="bench-rebalance-")


if __name__ == "__main__":
    main()
