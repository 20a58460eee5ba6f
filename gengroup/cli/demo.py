"""The gengroup demo: a consumer group living through rebalances, shown live.

Theory of operation:

An embedded broker (:class:`~gengroup.broker.FakeCluster`, in this process, no
JVM) is seeded with one topic. A producer task writes numbered records at a
steady rate. A *script* task starts and stops group members on a timeline:
each start is a new :class:`~gengroup.ConsumerGroup` joining; each stop is a
member leaving. Every join or leave makes the coordinator rebalance, and every
rebalance gives each member a new :class:`~gengroup.Generation` whose workers
own a disjoint set of partitions.

A :class:`Scoreboard` records what the workers do: which member owns which
partition in which generation, records processed per second, marked and
committed positions. The view renders it as a live terminal table (rich) on a
TTY, or as plain lines otherwise. At the end the scoreboard checks that every
produced record was processed (none lost) and counts duplicates.

Ctrl-C (SIGINT) is received by the demo itself (:func:`run_until_interrupted`):
the first cancels the demo's tasks while the embedded broker still serves
(each member's last generation ends, its marks are committed and it leaves
the group), and only then does the command say ``interrupted``. A second
Ctrl-C during that teardown is said and otherwise ignored: left to asyncio, it
would raise KeyboardInterrupt out of the event loop, which then cancels every
task at once, shielded or not, so that the members' final commits are cut
short or find their connections closed. A third quits at once.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

from .._types import TopicPartition
from ..broker import FakeCluster
from ..consumer.generation import Generation
from ..consumer.group import ConsumerGroup
from ..producer import Producer, ProducerRecord
from ._common import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    add_command,
    bounded,
    interrupted,
    stream_closed,
)

__all__ = [
    "DemoConfig",
    "Scoreboard",
    "add_parser",
    "run_demo",
    "run_until_interrupted",
    "summarise",
]

TOPIC = "payments"

EXPLANATION = (
    "Members join and leave the group 'demo-billing' on the embedded broker. Each change "
    "makes the group rebalance into a new generation: a numbered membership in which every "
    "partition has exactly one owner. All of generation N's workers stop, and their positions "
    "are committed under N's id, before generation N+1 starts."
)


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """The demo's knobs (durations in seconds)."""

    partitions: int = 8
    rate: int = 2000
    duration: float = 30.0
    live: bool = True
    timeline: tuple[tuple[float, str, str], ...] = (
        (0.0, "join", "ada"),
        (3.0, "join", "bob"),
        (6.0, "join", "cyd"),
        (10.0, "join", "dee"),
        (15.0, "leave", "bob"),
        (19.0, "leave", "cyd"),
        (22.0, "join", "eve"),
    )


@dataclass(slots=True)
class GenerationView:
    """One generation as the demo shows it."""

    id: int
    formed_at: float
    leader: str | None = None
    owners: dict[str, list[int]] = field(default_factory=dict)
    rebalance_seconds: float = 0.0


@dataclass
class Scoreboard:
    """Everything the workers did, for the live view and the final summary."""

    started: float
    produced: int = 0
    processed: Counter[int] = field(default_factory=Counter)
    per_member: Counter[str] = field(default_factory=Counter)
    recent: dict[str, deque[tuple[float, int]]] = field(default_factory=dict)
    generations: dict[int, GenerationView] = field(default_factory=dict)
    members: dict[str, int] = field(default_factory=dict)
    events: deque[str] = field(default_factory=lambda: deque(maxlen=8))
    all_events: list[str] = field(default_factory=list)
    marks: dict[int, int] = field(default_factory=dict)

    def now(self) -> float:
        return anyio.current_time() - self.started

    def event(self, text: str) -> None:
        line = f"{self.now():5.1f}s  {text}"
        self.events.append(line)
        self.all_events.append(line)

    def generation(self, name: str, gen: Generation) -> None:
        view = self.generations.get(gen.id)
        if view is None:
            view = self.generations[gen.id] = GenerationView(gen.id, self.now())
            self.event(f"generation {gen.id} formed ({gen.protocol})")
        view.owners[name] = sorted(tp.partition for tp in gen.assignments)
        if gen.is_leader:
            view.leader = name
        t = gen.timings
        view.rebalance_seconds = max(view.rebalance_seconds, t.join + t.sync + t.offset_fetch)
        self.members[name] = gen.id

    def handled(self, name: str, partition: int, ids: list[int], next_offset: int) -> None:
        self.processed.update(ids)
        self.per_member[name] += len(ids)
        self.recent.setdefault(name, deque()).append((anyio.current_time(), len(ids)))
        self.marks[partition] = next_offset

    def rate(self, name: str) -> float:
        window = self.recent.get(name)
        if not window:
            return 0.0
        horizon = anyio.current_time() - 1.0
        while window and window[0][0] < horizon:
            window.popleft()
        return float(sum(n for _, n in window))


def _render(board: Scoreboard, cluster: FakeCluster, group_id: str) -> Any:
    from rich.console import Group as RichGroup
    from rich.panel import Panel
    from rich.table import Table

    latest = max(board.generations.values(), key=lambda g: g.id, default=None)
    title = "waiting for the first generation"
    members = Table(expand=True, title_justify="left")
    members.add_column("member")
    members.add_column("generation", justify="right")
    members.add_column("partitions it owns")
    members.add_column("records/s", justify="right")
    members.add_column("processed", justify="right")
    if latest is not None:
        leader = latest.leader or "?"
        title = (
            f"generation {latest.id}  ·  leader {leader}  ·  {len(latest.owners)} member(s)  ·  "
            f"formed in {latest.rebalance_seconds * 1000:.0f} ms"
        )
        for name, gen_id in sorted(board.members.items()):
            view = board.generations.get(gen_id)
            owned = view.owners.get(name, []) if view else []
            current = gen_id == latest.id
            members.add_row(
                f"[bold]{name}[/]" + (" (leader)" if view and view.leader == name else ""),
                str(gen_id) if current else f"[dim]{gen_id}[/]",
                " ".join(f"p{p}" for p in owned) or "[dim]none[/]",
                f"{board.rate(name):,.0f}",
                f"{board.per_member[name]:,}",
            )
    committed = cluster.committed_offsets(group_id)
    parts = Table(expand=True)
    parts.add_column("partition")
    parts.add_column("owner")
    parts.add_column("committed", justify="right")
    parts.add_column("end of log", justify="right")
    parts.add_column("lag", justify="right")
    owners = {}
    if latest is not None:
        owners = {p: n for n, ps in latest.owners.items() for p in ps}
    for p in sorted({tp.partition for tp in committed} | set(owners)):
        hw = cluster.high_watermark(TOPIC, p)
        c = committed.get(TopicPartition(TOPIC, p), 0)
        parts.add_row(f"p{p}", owners.get(p, "[dim]-[/]"), f"{c:,}", f"{hw:,}", f"{hw - c:,}")
    log = "\n".join(board.events) or "…"
    header = (
        f"[bold]gengroup demo[/]  ·  {board.now():4.1f}s  ·  produced {board.produced:,}  ·  "
        f"processed {len(board.processed):,} distinct\n[dim]{EXPLANATION}[/]"
    )
    return RichGroup(
        Panel(header),
        Panel(members, title=title),
        Panel(parts, title="committed positions (carry each generation's id)"),
        Panel(log, title="what happened"),
    )


async def _produce(
    cluster: FakeCluster,
    board: Scoreboard,
    cfg: DemoConfig,
    stop: anyio.Event,
    finished: anyio.Event,
) -> None:
    next_id = 0
    tick = 0.05
    per_tick = max(1, int(cfg.rate * tick))
    async with Producer(cluster.bootstrap, linger=0.005) as producer:
        deadline = anyio.current_time()
        while not stop.is_set():
            records = [
                ProducerRecord(value=str(i).encode(), key=f"k{i}".encode())
                for i in range(next_id, next_id + per_tick)
            ]
            await producer.send_many(TOPIC, records)
            next_id += per_tick
            board.produced = next_id
            deadline += tick
            await anyio.sleep_until(deadline)
    finished.set()


async def _member(
    name: str,
    cluster: FakeCluster,
    group_id: str,
    board: Scoreboard,
    *,
    task_status: anyio.abc.TaskStatus[anyio.CancelScope],
) -> None:
    async def worker(gen: Generation, tp: TopicPartition) -> None:
        async for batch in gen.fetch(tp):
            ids = [int(r.value or b"0") for r in batch.records]
            await anyio.sleep(0.002)  # pretend to do some work
            board.handled(name, tp.partition, ids, batch.next_offset)
            gen.mark(tp, batch.next_offset)

    with anyio.CancelScope() as scope:
        task_status.started(scope)
        async with ConsumerGroup(
            group_id,
            [TOPIC],
            cluster.bootstrap,
            client_id=name,
            session_timeout=6.0,
            heartbeat_interval=0.5,
            rebalance_timeout=5.0,
            commit_interval=0.5,
            fetch_max_wait=0.1,
        ) as group:
            async for gen in group:
                board.generation(name, gen)
                for tp in sorted(gen.assignments):
                    gen.start_soon(worker, gen, tp, name=f"{name} {tp}")
    board.members.pop(name, None)


async def run_demo(cfg: DemoConfig = DemoConfig(), stop: anyio.Event | None = None) -> Scoreboard:
    """Run the demo and return its scoreboard (the summary is printed by :func:`main`).

    Args:
        cfg: the demo's knobs.
        stop: once set, the demo's tasks are cancelled (the members close,
            with their final commits and leaves) and the scoreboard is
            returned; the embedded broker closes only after them.
    """
    group_id = "demo-billing"
    async with FakeCluster(
        brokers=3, topics={TOPIC: cfg.partitions}, initial_rebalance_delay_ms=300
    ) as cluster:
        board = Scoreboard(started=anyio.current_time())
        stop_producing, producer_finished = anyio.Event(), anyio.Event()
        scopes: dict[str, anyio.CancelScope] = {}
        async with anyio.create_task_group() as tg:
            if stop is not None:
                tg.start_soon(_cancel_on, stop, tg.cancel_scope)
            tg.start_soon(_produce, cluster, board, cfg, stop_producing, producer_finished)
            tg.start_soon(_view, board, cluster, group_id, cfg)
            for at, action, name in cfg.timeline:
                await anyio.sleep_until(board.started + at)
                if action == "join":
                    board.event(f"{name} joins the group")
                    scopes[name] = await tg.start(_member, name, cluster, group_id, board)
                else:
                    board.event(f"{name} leaves the group")
                    scopes.pop(name).cancel()
            await anyio.sleep_until(board.started + cfg.duration - 3.0)
            stop_producing.set()
            await producer_finished.wait()
            board.event("producer stops; the group drains what is left")
            with anyio.move_on_after(10.0):
                while len(board.processed) < board.produced:  # noqa: ASYNC110 (a UI poll)
                    await anyio.sleep(0.1)
            for name in list(scopes):
                board.event(f"{name} leaves the group")
                scopes.pop(name).cancel()
            await anyio.sleep(0.3)
            tg.cancel_scope.cancel()
        return board


async def run_until_interrupted(cfg: DemoConfig = DemoConfig()) -> Scoreboard:
    """:func:`run_demo`, stopped cleanly by Ctrl-C (SIGINT), which it receives itself.

    The first Ctrl-C stops the demo's tasks (see :func:`run_demo`'s ``stop``):
    the members close as leaving ``async with`` does (their final commits,
    their leaves) while the embedded broker still serves, then
    KeyboardInterrupt is raised. A second one meanwhile is said on stderr
    and ignored, and so is any after the members closed (SIGINT is left
    ignored: the process is ending); a third meanwhile ends the process at
    once, exit code 130, with the one line ``gengroup demo: interrupted``
    (the members' teardown is cut short: a KeyboardInterrupt raised here
    went out through asyncio's shutdown, which cancels every task, shielded
    or not, and printed their tracebacks).

    Raises:
        KeyboardInterrupt: Ctrl-C stopped the demo.
    """
    stop = anyio.Event()
    interrupts = 0
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        async with anyio.create_task_group() as tg:

            async def receive() -> None:
                nonlocal interrupts
                async for _ in signals:
                    interrupts += 1
                    if interrupts == 1:
                        stop.set()
                    elif interrupts == 2:
                        print(
                            "gengroup demo: stopping: the members commit and leave the group "
                            "(Ctrl-C again to quit at once)",
                            file=sys.stderr,
                            flush=True,
                        )
                    else:
                        print("gengroup demo: interrupted", file=sys.stderr, flush=True)
                        sys.stdout.flush()
                        os._exit(130)

            tg.start_soon(receive)
            board = await run_demo(cfg, stop)
            tg.cancel_scope.cancel()
    if interrupts:
        # The demo ends as interrupted: a Ctrl-C from here on (the receiver
        # gave SIGINT back to the interpreter) is ignored, not a KeyboardInterrupt
        # out of the event loop's shutdown.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt
    return board


async def _cancel_on(stop: anyio.Event, scope: anyio.CancelScope) -> None:
    await stop.wait()
    scope.cancel()


async def _view(board: Scoreboard, cluster: FakeCluster, group_id: str, cfg: DemoConfig) -> None:
    if cfg.live and sys.stdout.isatty():
        from rich.live import Live

        with Live(_render(board, cluster, group_id), refresh_per_second=8, screen=False) as live:
            while True:
                await anyio.sleep(0.125)
                live.update(_render(board, cluster, group_id))
    else:
        print(EXPLANATION, flush=True)
        shown = 0
        while True:
            await anyio.sleep(0.1)
            for line in board.all_events[shown:]:
                print(line, flush=True)
                if "formed" in line:
                    gen_id = int(line.split("generation ")[1].split()[0])
                    await anyio.sleep(0.3)
                    view = board.generations.get(gen_id)
                    if view is not None:
                        for name, parts in sorted(view.owners.items()):
                            leader = " (leader)" if view.leader == name else ""
                            print(
                                f"         {name}{leader}: " + " ".join(f"p{p}" for p in parts),
                                flush=True,
                            )
            shown = len(board.all_events)


def summarise(board: Scoreboard) -> str:
    """The closing summary: generations, rebalance times, records, losses."""
    lines = ["", "summary"]
    gens = sorted(board.generations.values(), key=lambda g: g.id)
    lines.append(
        f"  generations        {len(gens)} (ids {gens[0].id}..{gens[-1].id})"
        if gens
        else "  generations        0"
    )
    for g in gens:
        owners = ", ".join(f"{n}:{len(p)}" for n, p in sorted(g.owners.items()))
        lines.append(
            f"    generation {g.id:<3} at {g.formed_at:5.1f}s  leader {g.leader or '?':<4} "
            f"rebalance {g.rebalance_seconds * 1000:6.0f} ms  partitions {owners}"
        )
    produced = board.produced
    distinct = len(board.processed)
    duplicates = sum(n - 1 for n in board.processed.values() if n > 1)
    lost = sum(1 for i in range(produced) if i not in board.processed)
    lines.append(f"  records produced   {produced:,}")
    lines.append(f"  records processed  {distinct:,} distinct, {duplicates:,} processed twice")
    lines.append(f"  records lost       {lost:,}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's command-line options."""
    parser.add_argument(
        "--duration",
        type=bounded(float, 0, 86400, above=True),
        default=30.0,
        help="seconds (default 30)",
    )
    parser.add_argument(
        "--rate", type=bounded(int, 1), default=2000, help="records produced per second"
    )
    parser.add_argument(
        "--partitions", type=bounded(int, 1), default=8, help="partitions of the topic"
    )
    parser.add_argument("--plain", action="store_true", help="plain lines instead of a live table")


def run(args: argparse.Namespace) -> int:
    """Run the demo from parsed options; the exit code is 1 if a record was lost."""
    if stream_closed("gengroup demo", "stdout"):
        return EXIT_USAGE
    scale = args.duration / 30.0
    cfg = DemoConfig(
        partitions=args.partitions,
        rate=args.rate,
        duration=args.duration,
        live=not args.plain,
        timeline=tuple((t * scale, a, n) for t, a, n in DemoConfig().timeline),
    )
    try:
        board = anyio.run(run_until_interrupted, cfg)
    except BaseException as exc:
        if not interrupted(exc):
            raise
        print("gengroup demo: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(summarise(board))
    lost = sum(1 for i in range(board.produced) if i not in board.processed)
    return 1 if lost else 0


def add_parser(subparsers: Any) -> None:
    """Register the ``demo`` subcommand."""
    parser = add_command(
        subparsers,
        "demo",
        help="watch a consumer group rebalance through generations (embedded broker, no JVM)",
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog=None,
    )
    add_arguments(parser)
    parser.set_defaults(func=run)
