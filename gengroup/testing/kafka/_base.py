"""What every part of the Kafka test harness shares: its error, defaults, node options,
log reader and async wrapper."""

from __future__ import annotations

import abc
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, Self, TypedDict

import anyio
import anyio.to_thread

from gengroup._errors import GengroupError

__all__ = [
    "DEFAULT_START_TIMEOUT",
    "DEFAULT_STOP_TIMEOUT",
    "INSTALL_HINT",
    "KAFKA_VERSION",
    "MIN_JAVA",
    "KafkaHarnessError",
    "NodeOptions",
    "StartedInBlock",
    "run_in_thread",
    "tail",
]

KAFKA_VERSION: Final = "4.3.1"
"""The Apache Kafka version the harness runs by default."""

INSTALL_HINT: Final = "apt-get install -y openjdk-17-jre-headless maven"
"""How to install what the harness needs on Debian/Ubuntu."""

DEFAULT_START_TIMEOUT: Final = 120.0
"""Seconds to wait for a started broker to answer ApiVersions."""

DEFAULT_STOP_TIMEOUT: Final = 20.0
"""Seconds to wait after SIGTERM before the broker's process group is SIGKILLed."""

MIN_JAVA: Final = 17
"""The oldest Java major version the broker runs on."""


class KafkaHarnessError(GengroupError):
    """The test broker could not be fetched, started, or kept running.

    The message says what failed and how to fix it: a missing ``java`` or
    ``mvn`` names the package to install, and a broker that died or never
    became ready is reported with the last lines of its log.
    """


def tail(path: Path, lines: int) -> str:
    """Return the last ``lines`` lines of a (log) file, or ``""`` if it cannot be read."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 256 * 1024))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


class NodeOptions(TypedDict, total=False):
    """Keyword options of every Kafka node: a :class:`~.broker.KafkaBroker` alone or
    each node of a :class:`~.cluster.KafkaCluster` (documented there)."""

    version: str
    java: str | os.PathLike[str] | None
    mvn: str | os.PathLike[str] | None
    cache_root: str | os.PathLike[str] | None
    lib_dir: str | os.PathLike[str] | None
    base_dir: str | os.PathLike[str] | None
    heap: str
    jvm_args: Sequence[str]
    properties: Mapping[str, str | int | bool] | None
    start_timeout: float
    stop_timeout: float
    keep: bool
    request_log: bool | Collection[str]


@contextlib.asynccontextmanager
async def run_in_thread(start: Callable[[], None], stop: Callable[[], None]) -> AsyncIterator[None]:
    """Call the blocking ``start`` on entry and ``stop`` on exit, each in a worker thread.

    The event loop (trio or asyncio) keeps running meanwhile; ``stop`` is
    shielded from cancellation and runs even when ``start`` fails.
    """
    try:
        await anyio.to_thread.run_sync(start)
        yield
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(stop)


class StartedInBlock(abc.ABC):
    """Started on entering a ``with`` block, shut down (:meth:`_shut_down`) on leaving it."""

    @abc.abstractmethod
    def start(self) -> None:
        """Start; a failure raises :class:`KafkaHarnessError`."""

    @abc.abstractmethod
    def _shut_down(self) -> None:
        """Stop and clean up, whatever state it is in."""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._shut_down()
