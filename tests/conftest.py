"""Shared fixtures: the real Apache Kafka broker (session-scoped) and helpers.

``kill -USR1 <pytest pid>`` writes the tree of trio tasks, with the line each
one is suspended at, to ``$TMPDIR/gengroup-tasks-<pid>.txt``: the tool for a
test that hangs.
"""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

from gengroup.testing.kafka import KafkaCluster

pytest_plugins = ["gengroup.testing.pytest_plugin"]


def _frames(coro: Any) -> list[str]:
    out = []
    while coro is not None and len(out) < 100:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            out.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return out


def _dump_trio_tasks(signum: int, frame: FrameType | None) -> None:
    import trio

    path = os.path.join(tempfile.gettempdir(), f"gengroup-tasks-{os.getpid()}.txt")
    lines: list[str] = []

    def walk(task: Any, depth: int) -> None:
        lines.append("  " * depth + f"task {task.name}")
        lines.extend("  " * depth + "    " + f for f in _frames(task.coro))
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child, depth + 1)

    try:
        walk(trio.lowlevel.current_root_task(), 0)
    except RuntimeError as exc:
        lines.append(f"not inside trio: {exc}")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


signal.signal(signal.SIGUSR1, _dump_trio_tasks)


@pytest.fixture
def healed_cluster(kafka_cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """The session's cluster with every node up and in sync, brought back afterwards."""
    kafka_cluster.heal()
    try:
        yield kafka_cluster
    finally:
        kafka_cluster.heal()
