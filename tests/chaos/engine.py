"""A seeded schedule of faults over member processes: the shared chaos engine.

Theory of operation: :class:`Members` starts member processes (each with its
own log file, which survives a SIGKILL because the process writes straight to
it) from a command that the caller supplies. :func:`member_schedule` draws
from a :class:`random.Random` seeded by the caller, at random instants, one of

* ``kill``: SIGKILL a member and start a replacement (its uncommitted work is
  processed again by the partition's next owner);
* ``freeze``: SIGSTOP a member for longer than the session timeout, then
  SIGCONT it: it wakes up as a zombie whose generation was fenced;
* ``leave``: SIGTERM a member (a graceful leave: final commit, LeaveGroup)
  and start a replacement.

Only members that have run for a few seconds are hurt (a member SIGTERMed
while still importing dies of the signal instead of leaving). Every fault is
kept in :attr:`Members.timeline` with its wall-clock time, so that a checker
can attribute what went wrong or was processed twice to the fault that caused
it. :func:`stop_all` ends every member gracefully (SIGCONT then SIGTERM),
then SIGKILLs what is left.

The lake sink's chaos (``tests/lake/chaos.py``) and the consumer-group chaos
(``tests/chaos/consumer.py``) run on it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[2]
#: Seconds a member must have run before the schedule may hurt it.
SETTLE = 3.0


@dataclass(frozen=True)
class Fault:
    """One event of a schedule: ``action`` done to ``target`` at wall-clock ``at``."""

    at: float
    action: str
    target: str

    def __str__(self) -> str:
        return f"{self.action} {self.target}"

    @classmethod
    def now(cls, action: str, target: str) -> Fault:
        return cls(time.time(), action, target)


@dataclass
class Members:
    """Member processes of one group, started and hurt on command.

    A subclass says how to start member ``n`` (its index among every member
    started): :meth:`command` and :meth:`env`.

    Args:
        logs: the folder of the members' log files (``member-N.log``).
    """

    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    frozen: set[int] = field(default_factory=set)
    #: Members sent SIGTERM (not signalled again: a second SIGTERM could land after the
    #: member's handler is gone, while it exits).
    leaving: set[int] = field(default_factory=set)
    timeline: list[Fault] = field(default_factory=list)
    started: dict[int, float] = field(default_factory=dict)

    def command(self, n: int) -> list[str]:
        """The argv of member ``n``."""
        raise NotImplementedError

    def env(self, n: int) -> dict[str, str]:
        """Extra environment variables of member ``n``."""
        return {}

    def ready(self, n: int) -> bool:
        """Whether member ``n`` got going (by default: it ran for :data:`SETTLE` s)."""
        return True

    @property
    def events(self) -> list[str]:
        """The timeline as text, in order."""
        return [str(f) for f in self.timeline]

    def note(self, action: str, target: str) -> Fault:
        fault = Fault.now(action, target)
        self.timeline.append(fault)
        return fault

    def start(self) -> subprocess.Popen[bytes]:
        n = len(self.procs)
        env = {**os.environ, **self.env(n)}
        log = open(self.logs / f"member-{n}.log", "wb")  # noqa: SIM115 -- the child keeps it
        proc = subprocess.Popen(self.command(n), cwd=ROOT, env=env, stdout=log, stderr=log)
        log.close()
        self.procs.append(proc)
        self.started[proc.pid] = time.monotonic()
        self.note("start", f"member-{n}")
        return proc

    def live(self) -> list[subprocess.Popen[bytes]]:
        """Running members, neither frozen nor leaving."""
        return [
            p
            for p in self.procs
            if p.poll() is None and p.pid not in self.frozen and p.pid not in self.leaving
        ]

    def settled(self) -> list[subprocess.Popen[bytes]]:
        """Live members started at least :data:`SETTLE` s ago and :meth:`ready`."""
        now = time.monotonic()
        return [
            p
            for p in self.live()
            if now - self.started[p.pid] >= SETTLE and self.ready(self.procs.index(p))
        ]

    def name(self, proc: subprocess.Popen[bytes]) -> str:
        return f"member-{self.procs.index(proc)}"

    def log(self, i: int) -> str:
        """What member ``i`` wrote so far."""
        return (self.logs / f"member-{i}.log").read_text(errors="replace")

    def tails(self, chars: int = 3000) -> str:
        out = []
        for i in range(len(self.procs)):
            text = self.log(i)
            out.append(f"--- member-{i} (exit {self.procs[i].poll()}):\n{text[-chars:]}")
        return "\n".join(out)

    def graceful_exit_codes(self) -> list[int | None]:
        """Exit codes of members not SIGKILLed (a member SIGTERMed before it installed
        its handler, still importing, dies of the signal as of SIGKILL: left out)."""
        return [
            p.returncode
            for i, p in enumerate(self.procs)
            if p.returncode != -signal.SIGKILL
            and not (p.returncode == -signal.SIGTERM and not self.log(i).strip())
        ]


async def member_schedule(
    members: Members,
    rng: random.Random,
    seconds: float,
    session: float,
    gap: tuple[float, float] = (0.5, 2.0),
) -> None:
    """Hurt members on a schedule drawn from ``rng`` for ``seconds``, one fault every
    ``gap`` seconds (drawn uniformly); returns once every frozen member was woken up."""
    deadline = anyio.current_time() + seconds

    async def thaw(proc: subprocess.Popen[bytes], name: str) -> None:
        await anyio.sleep(session + rng.uniform(0.5, 2.0))
        proc.send_signal(signal.SIGCONT)
        members.frozen.discard(proc.pid)
        members.note("SIGCONT", f"{name} (a zombie wakes)")

    async with anyio.create_task_group() as tg:
        while anyio.current_time() < deadline:
            await anyio.sleep(rng.uniform(*gap))
            live, settled = members.live(), members.settled()
            if not settled:
                continue
            victim = rng.choice(settled)
            action = rng.choice(["kill", "freeze", "leave"] if len(live) > 1 else ["kill"])
            name = members.name(victim)
            members.note(action, name)
            if action == "kill":
                victim.send_signal(signal.SIGKILL)
                members.start()
            elif action == "freeze":
                victim.send_signal(signal.SIGSTOP)
                members.frozen.add(victim.pid)
                tg.start_soon(thaw, victim, name)
            else:
                victim.send_signal(signal.SIGTERM)
                members.leaving.add(victim.pid)
                members.start()


async def stop_all(members: Members, grace: float = 60.0) -> None:
    """SIGCONT and SIGTERM every member still running (once), then SIGKILL those left
    after ``grace`` seconds."""
    for proc in members.procs:
        if proc.poll() is None and proc.pid not in members.leaving:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
            members.leaving.add(proc.pid)
    with anyio.move_on_after(grace):
        while any(p.poll() is None for p in members.procs):
            await anyio.sleep(0.1)
    for proc in members.procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
