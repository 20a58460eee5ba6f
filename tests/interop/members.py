"""Group members running in another client's process, reporting as JSON lines."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc
from anyio.streams.text import TextReceiveStream

from gengroup import Balancer, ConsumerGroup, Generation, TopicPartition
from gengroup.testing.pytest_plugin import make_unique_name

from ..consumer.helpers import FAST, all_partitions, create_topic, produce_ids


class ProcessMember:
    """A member process and what it reported on stdout.

    Events: ``{"event": "assigned", "partitions": {topic: [p, ...]} or [p, ...]}``
    (a bare list is of ``topic``), ``{"event": "revoked", "partitions": ...}``,
    ``{"event": "record", "partition": p, "value": ...}`` and
    ``{"event": "error", "error": ...}``; its stderr goes to ``log``. ``name``
    says who it is in failure messages.
    """

    def __init__(self, argv: list[str], topic: str, log: Path, name: str = "the member") -> None:
        self.argv = argv
        self.topic = topic
        self.log = log
        self.name = name
        self.generations: list[dict[str, Any]] = []
        self.revocations: list[dict[str, Any]] = []
        self.records: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.process: anyio.abc.Process | None = None

    async def run(self) -> None:
        """Start the process and read its events until it exits."""
        with self.log.open("wb") as stderr:
            self.process = await anyio.open_process(self.argv, stderr=stderr)
            assert self.process.stdout is not None
            pending = ""
            async for chunk in TextReceiveStream(self.process.stdout):
                pending += chunk
                *lines, pending = pending.split("\n")
                for line in lines:
                    if line.startswith("{"):
                        self._event(json.loads(line))
            await self.process.wait()

    def _event(self, event: dict[str, Any]) -> None:
        if event["event"] == "assigned":
            self.generations.append(event)
        elif event["event"] == "revoked":
            self.revocations.append(event)
        elif event["event"] == "record":
            self.records.append(event)
        elif event["event"] == "error":
            self.errors.append(event["error"])

    def current(self) -> set[TopicPartition]:
        """The partitions of the newest assignment it reported."""
        if not self.generations:
            return set()
        latest = self.generations[-1]["partitions"]
        if isinstance(latest, list):
            return {TopicPartition(self.topic, p) for p in latest}
        return {TopicPartition(t, p) for t, parts in latest.items() for p in parts}

    def consumed(self) -> set[TopicPartition]:
        """The partitions it consumed records from."""
        return {TopicPartition(self.topic, r["partition"]) for r in self.records}

    def values(self) -> set[str]:
        """The values of the records it consumed."""
        return {r["value"] for r in self.records}

    async def wait_for(self, predicate: Callable[[], bool], what: str, timeout: float = 90) -> None:
        """Wait until ``predicate()``; a timeout fails with the end of this member's log."""
        try:
            with anyio.fail_after(timeout):  # a hang guard, not a timing assertion
                while not predicate():
                    await anyio.sleep(0.05)
        except TimeoutError:
            said = self.tail()
            raise AssertionError(
                f"timed out waiting for {what}; {self.name} said:\n{said}"
            ) from None

    async def stop(self) -> None:
        """SIGTERM: it leaves the group and exits 0."""
        if self.process is None or self.process.returncode is not None:
            return
        self.process.terminate()
        with anyio.fail_after(60):
            code = await self.process.wait()
        assert code in (0, 143), f"member exited {code}:\n{self.tail()}"

    def tail(self) -> str:
        if not self.log.exists():
            return "(no output)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


class MemberLedger(Protocol):
    """What records the generations of gengroup members and what they processed."""

    @property
    def processed(self) -> Iterable[bytes]: ...

    async def member(self, name: str, group: ConsumerGroup) -> None: ...

    def current(self) -> dict[str, Generation]: ...

    def assigned(self, name: str) -> set[TopicPartition]: ...


@dataclass
class MixedGroup:
    """A consumer group on a new topic: gengroup members (recorded in ``ledger``)
    and another client's member, ``peer`` (not started yet)."""

    bootstrap: str
    topic: str
    group_id: str
    every: set[TopicPartition]
    """Every partition of the topic."""
    peer: ProcessMember
    ledger: MemberLedger

    def gengroup_member(
        self, balancer: Callable[[], Balancer]
    ) -> Callable[[str], Coroutine[Any, Any, None]]:
        """A task running a gengroup member on ``balancer``, named by its argument."""

        async def member(name: str) -> None:
            async with ConsumerGroup(
                self.group_id, [self.topic], self.bootstrap, balancers=[balancer()], **FAST
            ) as group:
                await self.ledger.member(name, group)

        return member

    def share_one_generation(self, *names: str) -> bool:
        """Whether the gengroup members ``names`` and ``peer`` share a generation.

        They do when all are in the same generation, each owns some partitions,
        and together they own each partition of the topic exactly once.
        """
        cur = self.ledger.current()
        gens = [cur.get(n) for n in names]
        peer = self.peer
        if any(g is None for g in gens) or not peer.generations:
            return False
        ids = {g.id for g in gens if g is not None} | {peer.generations[-1]["generation"]}
        seen = [tp for g in gens if g is not None for tp in g.assignments] + list(peer.current())
        return (
            len(ids) == 1
            and len(seen) == len(set(seen))
            and set(seen) == self.every
            and all(g.assignments for g in gens if g is not None)
            and bool(peer.current())
        )

    async def start_one_then_the_other(
        self,
        tg: anyio.abc.TaskGroup,
        member: Callable[[str], Coroutine[Any, Any, None]],
        *,
        gengroup_first: bool,
    ) -> None:
        """Start ``member`` as ``gengroup`` or ``peer``, wait until it owns every
        partition, then start the other. The first one leads the group."""
        peer, every = self.peer, self.every
        if gengroup_first:
            tg.start_soon(member, "gengroup")
            await peer.wait_for(
                lambda: self.ledger.assigned("gengroup") == every, "gengroup to own every partition"
            )
            tg.start_soon(peer.run)
        else:
            tg.start_soon(peer.run)
            await peer.wait_for(
                lambda: peer.current() == every, f"{peer.name} to own every partition"
            )
            tg.start_soon(member, "gengroup")

    def owned(self) -> dict[str, set[TopicPartition]]:
        """What the gengroup member ``gengroup`` and ``peer`` own now."""
        return {"gengroup": self.ledger.assigned("gengroup"), "peer": self.peer.current()}

    def check_a_third_took_a_share(self, before: dict[str, set[TopicPartition]]) -> None:
        """A third member, ``gengroup-2``, joined after :meth:`owned` was ``before``:
        the others only gave partitions away, and each of the three owns a third."""
        after = self.owned()
        third = len(self.every) // 3
        for name in after:
            assert after[name] <= before[name], (name, before, after)
            assert len(after[name]) == third
        assert len(self.ledger.assigned("gengroup-2")) == third

    async def produce_and_consume(self, records: int) -> None:
        """Produce records ``id-0`` to ``id-<records - 1>`` and wait until the group
        consumed each: the gengroup members or ``peer``."""
        await produce_ids(self.bootstrap, self.topic, range(records))
        wanted = {f"id-{i}" for i in range(records)}

        def consumed() -> set[str]:
            return {v.decode() for v in self.ledger.processed} | self.peer.values()

        await self.peer.wait_for(lambda: wanted <= consumed(), "every record consumed")


async def new_mixed_group(
    bootstrap: str,
    program: Sequence[str],
    log: Path,
    ledger: MemberLedger,
    *,
    partitions: int,
    prefix: str,
    name: str,
    args: Sequence[str] = (),
) -> MixedGroup:
    """A new topic and group id, and the other client's member of that group, not started yet.

    Args:
        bootstrap: The Kafka cluster.
        program: The command line of the member program; ``BOOTSTRAP GROUP
            TOPIC`` and ``args`` follow.
        log: Where the program's stderr goes.
        ledger: Records the group's gengroup members.
        partitions: How many partitions the new topic has.
        prefix: Of the topic's name.
        name: Who the member is, in failure messages.
        args: More arguments of the program.
    """
    topic, group_id = make_unique_name(prefix), make_unique_name("g")
    await create_topic(bootstrap, topic, partitions)
    peer = ProcessMember([*program, bootstrap, group_id, topic, *args], topic, log, name)
    return MixedGroup(bootstrap, topic, group_id, all_partitions(topic, partitions), peer, ledger)
