"""Group members running in another client's process, reporting as JSON lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.text import TextReceiveStream

from gengroup import TopicPartition


class ProcessMember:
    """A member process and what it reported on stdout.

    Events: ``{"event": "assigned", "partitions": {topic: [p, ...]} or [p, ...]}``
    (a bare list is of ``topic``), ``{"event": "revoked", "partitions": ...}``,
    ``{"event": "record", "partition": p, "value": ...}`` and
    ``{"event": "error", "error": ...}``; its stderr goes to ``log``.
    """

    def __init__(self, argv: list[str], topic: str, log: Path) -> None:
        self.argv = argv
        self.topic = topic
        self.log = log
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
