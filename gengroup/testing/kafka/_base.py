"""What every part of the Kafka test harness shares: its error, defaults and log reader."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from gengroup._errors import GengroupError

__all__ = [
    "DEFAULT_START_TIMEOUT",
    "DEFAULT_STOP_TIMEOUT",
    "INSTALL_HINT",
    "KAFKA_VERSION",
    "MIN_JAVA",
    "KafkaHarnessError",
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
