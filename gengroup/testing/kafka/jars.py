"""The broker's jars: fetched once per machine from Maven Central and cached.

:func:`ensure_jars` runs ``mvn dependency:copy-dependencies`` on the
``pom.xml`` shipped with :mod:`gengroup.testing` (``kafka_2.13`` plus
``log4j-slf4j-impl``) into ``<cache root>/kafka-<version>/lib``. An ``fcntl``
lock on ``kafka-<version>/.lock`` keeps concurrent processes from fetching
twice; Maven writes into a temporary directory that is renamed into place only
after a marker file listing every jar and its size was written, so ``lib`` is
either absent or complete (a listed jar gone or resized means fetch again).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Final

from ._base import KAFKA_VERSION, KafkaHarnessError, tail
from .process import run_logged
from .tools import find_mvn

__all__ = ["default_cache_root", "ensure_jars", "fetch_maven_jars", "jar_dir"]

_MAVEN_TIMEOUT: Final = 900.0
_MARKER: Final = ".gengroup-complete"
_POM_PACKAGE: Final = "gengroup.testing"


def default_cache_root() -> Path:
    """The directory holding the per-version jar caches.

    Returns:
        ``$GENGROUP_KAFKA_CACHE`` if set, else ``$XDG_CACHE_HOME/gengroup``,
        else ``~/.cache/gengroup``.
    """
    env = os.environ.get("GENGROUP_KAFKA_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "gengroup"


def jar_dir(version: str = KAFKA_VERSION, cache_root: str | os.PathLike[str] | None = None) -> Path:
    """Where the jars of a Kafka version are (or will be) cached.

    Args:
        version: The Apache Kafka version.
        cache_root: The cache root; :func:`default_cache_root` when omitted.

    Returns:
        ``<cache_root>/kafka-<version>/lib``.
    """
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    return root / f"kafka-{version}" / "lib"


def _required_jars(version: str) -> tuple[str, ...]:
    return (f"kafka_2.13-{version}.jar", f"kafka-clients-{version}.jar")


def _is_complete(lib: Path, required: tuple[str, ...]) -> bool:
    marker = lib / _MARKER
    try:
        lines = marker.read_text().splitlines()
    except OSError:
        return False
    listed = set()
    for line in lines:
        name, _, size = line.rpartition(" ")
        try:
            if (lib / name).stat().st_size != int(size):
                return False
        except (OSError, ValueError):
            return False
        listed.add(name)
    return all(name in listed for name in required)


@contextlib.contextmanager
def _file_lock(path: Path, timeout: float) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise KafkaHarnessError(
                        f"timed out after {timeout:.0f} s waiting for the lock {path} "
                        "(another process is fetching the same jars)"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def ensure_jars(
    version: str = KAFKA_VERSION,
    *,
    cache_root: str | os.PathLike[str] | None = None,
    mvn: str | os.PathLike[str] | None = None,
    timeout: float = _MAVEN_TIMEOUT,
) -> Path:
    """Return the directory of the broker's jars, fetching them with Maven if needed.

    Safe to call from concurrent processes: one fetches while the others wait on
    a lock file, and the directory appears only once it is complete.

    Args:
        version: The Apache Kafka version (``kafka_2.13`` artifact) to fetch.
        cache_root: The cache root; :func:`default_cache_root` when omitted.
        mvn: The Maven executable; see :func:`find_mvn`.
        timeout: Seconds allowed for Maven (and for waiting on another fetcher).

    Returns:
        The ``lib`` directory, to be used as the classpath ``<lib>/*``.

    Raises:
        KafkaHarnessError: Maven is missing, failed, or produced an incomplete set.
    """
    return fetch_maven_jars(
        jar_dir(version, cache_root),
        resources.files(_POM_PACKAGE).joinpath("pom.xml").read_bytes(),
        _required_jars(version),
        properties={"kafka.version": version},
        what=f"the Kafka {version} jars",
        mvn=mvn,
        timeout=timeout,
    )


def fetch_maven_jars(
    lib: Path,
    pom: bytes,
    required: tuple[str, ...],
    *,
    properties: dict[str, str] | None = None,
    what: str,
    mvn: str | os.PathLike[str] | None = None,
    timeout: float = _MAVEN_TIMEOUT,
) -> Path:
    """The runtime jars of a POM's dependencies in ``lib``, fetched with Maven once.

    ``mvn dependency:copy-dependencies`` runs into a temporary folder beside
    ``lib`` under a lock; the folder is renamed into place only after a marker
    listing every jar and its size was written, so ``lib`` is absent or complete.

    Args:
        lib: where the jars are kept (created).
        pom: the POM's bytes.
        required: jar names that must be there, or the fetch failed.
        properties: ``-Dname=value`` for Maven.
        what: what is fetched, for messages ("the Kafka 4.3.1 jars").
        mvn: the Maven executable; see :func:`find_mvn`.
        timeout: seconds allowed for Maven (and for waiting on another fetcher).

    Raises:
        KafkaHarnessError: Maven is missing, failed, or produced an incomplete set.
    """
    if _is_complete(lib, required):
        return lib
    home = lib.parent
    home.mkdir(parents=True, exist_ok=True)
    with _file_lock(home / ".lock", timeout + 60):
        if _is_complete(lib, required):
            return lib
        mvn_path = find_mvn(mvn)
        work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=home))
        try:
            (work / "pom.xml").write_bytes(pom)
            out = work / "lib"
            log_path = work / "mvn.log"
            command = [
                mvn_path,
                "-B",
                "-q",
                "-f",
                str(work / "pom.xml"),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={out}",
                "-DincludeScope=runtime",
                *(f"-D{k}={v}" for k, v in (properties or {}).items()),
            ]
            run_logged(
                command,
                cwd=work,
                output=log_path,
                timeout=timeout,
                doing=f"Maven fetching {what} from Maven Central",
                lines=40,
            )
            jars = sorted(p for p in out.glob("*.jar") if p.is_file()) if out.is_dir() else []
            names = {p.name for p in jars}
            missing = [name for name in required if name not in names]
            if missing:
                raise KafkaHarnessError(
                    f"Maven finished but {what} are incomplete "
                    f"(missing {', '.join(missing)}):\n{tail(log_path, 40)}"
                )
            (out / _MARKER).write_text("".join(f"{p.name} {p.stat().st_size}\n" for p in jars))
            if lib.exists():  # an incomplete leftover of an older layout or a crash
                shutil.rmtree(lib)
            os.replace(out, lib)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return lib
