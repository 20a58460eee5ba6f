"""Run a real Apache Kafka broker (KRaft, one node, loopback only) for tests.

Theory of operation:

1. **Jars.** The broker is assembled from Maven Central, not from a download
   site or Docker: :func:`ensure_jars` runs ``mvn dependency:copy-dependencies``
   on the ``pom.xml`` shipped next to this module (``kafka_2.13`` plus
   ``log4j-slf4j-impl``) once per machine, into
   ``~/.cache/gengroup/kafka-<version>/lib`` (the root is
   ``$GENGROUP_KAFKA_CACHE`` if set, else ``$XDG_CACHE_HOME/gengroup``). An
   ``fcntl`` lock on ``kafka-<version>/.lock`` keeps concurrent processes from
   fetching twice; Maven writes into a temporary directory that is renamed into
   place only after a marker file listing every jar and its size was written, so
   ``lib`` is either absent or complete.
2. **Start.** :meth:`KafkaBroker.start` makes a fresh temporary data directory,
   picks two free loopback ports (client listener and controller listener),
   writes ``server.properties`` and a log4j2 configuration (the broker logs to
   ``broker.log`` in the data directory), formats the KRaft storage with
   ``kafka.tools.StorageTool format --standalone`` and a new cluster id, then
   runs ``java -cp '<lib>/*' kafka.Kafka server.properties`` in its own process
   group. The broker is ready when its client port answers a real ApiVersions
   v0 request (:func:`probe_api_versions`); if the JVM exits first or the
   timeout passes, :class:`KafkaHarnessError` carries the end of the log. A
   port taken between picking and binding is retried with new ports.
3. **Stop.** :meth:`KafkaBroker.stop` sends SIGTERM to the process group, waits
   (20 s by default), then SIGKILLs it and removes the data directory.
   :meth:`KafkaBroker.kill` SIGKILLs at once (crash tests);
   :meth:`KafkaBroker.restart` relaunches on the same ports and data.
4. **No orphans.** Every live broker is killed by an ``atexit`` hook, and a
   tiny watchdog process per broker holds the read end of a pipe whose write
   end only this process has: if this process dies without stopping the broker
   (even by SIGKILL), the watchdog sees end-of-file and terminates the broker's
   process group. Each JVM also carries ``-Dgengroup.harness.owner=<pid>`` so a
   stray one can be traced to the process that started it.
5. **Async and CLI.** :func:`kafka_broker` wraps the blocking calls in
   ``anyio.to_thread.run_sync`` (trio and asyncio alike), and
   ``python -m gengroup.testing.kafka`` runs a broker until SIGINT/SIGTERM,
   printing ``bootstrap 127.0.0.1:PORT`` once it is ready.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import fcntl
import io
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from importlib import resources
from pathlib import Path
from types import FrameType, TracebackType
from typing import Final, Self, TypedDict, Unpack

import anyio
import anyio.to_thread
from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.api_versions.v0.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.primitive import i16, i32

from gengroup._errors import GengroupError

__all__ = [
    "DEFAULT_START_TIMEOUT",
    "DEFAULT_STOP_TIMEOUT",
    "INSTALL_HINT",
    "KAFKA_VERSION",
    "BrokerOptions",
    "KafkaBroker",
    "KafkaHarnessError",
    "MIN_JAVA",
    "default_cache_root",
    "ensure_jars",
    "find_java",
    "find_mvn",
    "jar_dir",
    "kafka_broker",
    "main",
    "new_cluster_id",
    "probe_api_versions",
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
_MAVEN_TIMEOUT: Final = 900.0
_MARKER: Final = ".gengroup-complete"
_LOG_TAIL_LINES: Final = 60
_API_VERSIONS_KEY: Final = 18
_MAX_RESPONSE: Final = 1 << 20
_BIND_ATTEMPTS: Final = 3
_OWNER_PROPERTY: Final = "gengroup.harness.owner"

# Close to what Kafka's kafka-server-start.sh passes, minus the heap (set apart).
_JVM_DEFAULTS: Final = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)

# Loggers that drown the interesting lines (group coordinator, requests) at INFO.
_QUIET_LOGGERS: Final = (
    "kafka.log",
    "kafka.server.metadata",
    "kafka.server.BrokerLifecycleManager",
    "kafka.server.ControllerServer",
    "kafka.server.SharedServer",
    "kafka.server.KafkaConfig",
    "kafka.server.ReplicaFetcherManager",
    "kafka.server.ReplicaAlterLogDirsManager",
    "kafka.network",
    "kafka.utils.Log4jControllerRegistration$",
    "org.apache.kafka.clients",
    "org.apache.kafka.common",
    "org.apache.kafka.controller",
    "org.apache.kafka.image",
    "org.apache.kafka.metadata",
    "org.apache.kafka.queue",
    "org.apache.kafka.raft",
    "org.apache.kafka.server",
    "org.apache.kafka.snapshot",
    "org.apache.kafka.storage",
    "state.change.logger",
    "kafka.request.logger",
    "kafka.authorizer.logger",
)

# The watchdog runs as `python -I -S -c _WATCHDOG_SOURCE PGID [DIR]`, stdin = the
# read end of a pipe. Data before end-of-file means "disarmed"; bare end-of-file
# means the owner died: terminate the broker's process group, then remove DIR.
_WATCHDOG_SOURCE: Final = """
import os, shutil, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
pgid = int(sys.argv[1])
if sys.stdin.buffer.read():
    sys.exit(0)
def gone():
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return True
    return False
if not gone():
    os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.2)
    if not gone():
        os.killpg(pgid, signal.SIGKILL)
        time.sleep(0.5)
if len(sys.argv) > 2 and sys.argv[2]:
    shutil.rmtree(sys.argv[2], ignore_errors=True)
"""


class KafkaHarnessError(GengroupError):
    """The test broker could not be fetched, started, or kept running.

    The message says what failed and how to fix it: a missing ``java`` or
    ``mvn`` names the package to install, and a broker that died or never
    became ready is reported with the last lines of its log.
    """


class BrokerOptions(TypedDict, total=False):
    """Keyword options of :class:`KafkaBroker` (and :func:`kafka_broker`)."""

    version: str
    port: int | None
    controller_port: int | None
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


# ---------------------------------------------------------------- tools and jars


def _missing_tool(what: str, detail: str) -> KafkaHarnessError:
    return KafkaHarnessError(
        f"{what} is required to run the Apache Kafka test broker, but {detail}. "
        f"Install Java {MIN_JAVA}+ and Maven 3, e.g. with: {INSTALL_HINT}"
    )


def _resolve_tool(
    name: str, what: str, explicit: str | os.PathLike[str] | None, home_var: str | None
) -> str:
    if explicit is not None:
        path = os.fspath(explicit)
        if os.sep in path or (os.altsep and os.altsep in path):
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
            raise _missing_tool(what, f"{path!r} does not exist or is not executable")
        found = shutil.which(path)
        if found is None:
            raise _missing_tool(what, f"{path!r} was not found on PATH")
        return found
    if home_var is not None and (home := os.environ.get(home_var)):
        candidate = os.path.join(home, "bin", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found is None:
        where = f"${home_var}/bin/{name} nor " if home_var else ""
        raise _missing_tool(what, f"neither {where}`{name}` on PATH was found")
    return found


def find_java(java: str | os.PathLike[str] | None = None) -> str:
    """Locate the ``java`` executable.

    Args:
        java: An explicit path or command name; when omitted, ``$JAVA_HOME/bin/java``
            and then ``java`` on ``PATH`` are tried.

    Returns:
        The path of the executable.

    Raises:
        KafkaHarnessError: No usable ``java`` was found.
    """
    return _resolve_tool("java", "Java (`java`)", java, "JAVA_HOME")


def find_mvn(mvn: str | os.PathLike[str] | None = None) -> str:
    """Locate the Maven executable (needed only to fetch the jars the first time).

    Args:
        mvn: An explicit path or command name; when omitted, ``$MAVEN_HOME/bin/mvn``
            and then ``mvn`` on ``PATH`` are tried.

    Returns:
        The path of the executable.

    Raises:
        KafkaHarnessError: No usable ``mvn`` was found.
    """
    return _resolve_tool("mvn", "Maven (`mvn`)", mvn, "MAVEN_HOME")


_java_majors: dict[str, int] = {}


def _check_java_version(java: str) -> None:
    major = _java_majors.get(java)
    if major is None:
        try:
            done = subprocess.run(
                [java, "-version"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise _missing_tool("Java (`java`)", f"{java!r} could not be run ({exc})") from exc
        text = (done.stderr + done.stdout).decode(errors="replace")
        match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
        if match is None:
            return  # an unknown format: let the broker itself complain if it must
        major = int(match.group(1))
        if major == 1 and match.group(2):  # "1.8.0_392" is Java 8
            major = int(match.group(2))
        _java_majors[java] = major
    if major < MIN_JAVA:
        raise _missing_tool(f"Java {MIN_JAVA}+", f"{java!r} is Java {major}")


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


def _is_complete(lib: Path, version: str) -> bool:
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
    return all(name in listed for name in _required_jars(version))


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
                        "(another process is fetching the Kafka jars)"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 256 * 1024))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


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
    lib = jar_dir(version, cache_root)
    if _is_complete(lib, version):
        return lib
    home = lib.parent
    home.mkdir(parents=True, exist_ok=True)
    with _file_lock(home / ".lock", timeout + 60):
        if _is_complete(lib, version):
            return lib
        mvn_path = find_mvn(mvn)
        work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=home))
        try:
            pom = work / "pom.xml"
            pom.write_bytes(resources.files("gengroup.testing").joinpath("pom.xml").read_bytes())
            out = work / "lib"
            log_path = work / "mvn.log"
            command = [
                mvn_path,
                "-B",
                "-q",
                "-f",
                str(pom),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={out}",
                "-DincludeScope=runtime",
                f"-Dkafka.version={version}",
            ]
            with log_path.open("wb") as log:
                try:
                    done = subprocess.run(
                        command,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=work,
                        timeout=timeout,
                        check=False,
                    )
                except subprocess.TimeoutExpired:
                    raise KafkaHarnessError(
                        f"Maven did not finish fetching the Kafka {version} jars within "
                        f"{timeout:.0f} s:\n{_tail(log_path, 40)}"
                    ) from None
            if done.returncode != 0:
                raise KafkaHarnessError(
                    f"Maven failed (exit code {done.returncode}) to fetch the Kafka "
                    f"{version} jars from Maven Central:\n{_tail(log_path, 40)}"
                )
            jars = sorted(p for p in out.glob("*.jar") if p.is_file()) if out.is_dir() else []
            names = {p.name for p in jars}
            missing = [name for name in _required_jars(version) if name not in names]
            if missing:
                raise KafkaHarnessError(
                    f"Maven finished but the Kafka {version} jars are incomplete "
                    f"(missing {', '.join(missing)}):\n{_tail(log_path, 40)}"
                )
            (out / _MARKER).write_text("".join(f"{p.name} {p.stat().st_size}\n" for p in jars))
            if lib.exists():  # an incomplete leftover of an older layout or a crash
                shutil.rmtree(lib)
            os.replace(out, lib)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return lib


# ---------------------------------------------------------------- wire probe


_write_header = entity_writer(ApiVersionsRequest.__header_schema__)
_write_request = entity_writer(ApiVersionsRequest)
_read_header = entity_reader(ApiVersionsResponse.__header_schema__)
_read_response = entity_reader(ApiVersionsResponse)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("the broker closed the connection mid-response")
        chunks += chunk
    return bytes(chunks)


def probe_api_versions(
    host: str = "127.0.0.1", port: int = 9092, *, timeout: float = 5.0
) -> dict[int, tuple[int, int]]:
    """Send one ApiVersions v0 request and return the broker's version table.

    Args:
        host: The broker's host.
        port: The broker's client port.
        timeout: Seconds allowed for connecting and for each socket operation.

    Returns:
        ``{api_key: (min_version, max_version)}`` for every API the broker accepts.

    Raises:
        OSError: The connection failed (refused, reset, timed out).
        KafkaHarnessError: The broker answered something that is not a successful
            ApiVersions response.
    """
    correlation_id = int.from_bytes(os.urandom(4), "big") & 0x7FFFFFFF
    buf = io.BytesIO()
    _write_header(
        buf,
        ApiVersionsRequest.__header_schema__(
            request_api_key=i16(_API_VERSIONS_KEY),
            request_api_version=i16(0),
            correlation_id=i32(correlation_id),
            client_id="gengroup-harness",
        ),
    )
    _write_request(buf, ApiVersionsRequest())
    payload = buf.getvalue()
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        if not 0 < size <= _MAX_RESPONSE:
            raise KafkaHarnessError(f"implausible ApiVersions response size {size}")
        data = _recv_exact(sock, size)
    try:
        header, offset = _read_header(data, 0)
        response, _ = _read_response(data, offset)
    except SerialError as exc:
        raise KafkaHarnessError(f"undecodable ApiVersions response: {exc!r}") from exc
    if header.correlation_id != correlation_id:
        raise KafkaHarnessError(
            f"ApiVersions response has correlation id {header.correlation_id}, "
            f"expected {correlation_id}"
        )
    if response.error_code != ErrorCode.none:
        raise KafkaHarnessError(f"ApiVersions failed with {response.error_code.name}")
    return {
        int(api.api_key): (int(api.min_version), int(api.max_version)) for api in response.api_keys
    }


# ---------------------------------------------------------------- the broker


def new_cluster_id() -> str:
    """Return a fresh KRaft cluster id.

    Returns:
        22 characters of URL-safe base64 of a random UUID, never starting with ``-``
        (which the Kafka tools would parse as an option).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode()[:22]
        if not cluster_id.startswith("-"):
            return cluster_id


def _free_ports(count: int, exclude: Sequence[int] = ()) -> list[int]:
    socks: list[socket.socket] = []
    try:
        ports: list[int] = []
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if port not in exclude and port not in ports:
                ports.append(port)
        return ports
    finally:
        for sock in socks:
            sock.close()


def _killpg(pgid: int, sig: signal.Signals) -> bool:
    """Signal a process group; return False if it no longer exists."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # the id now names a group that is not ours
        return False
    return True


class _PortConflict(Exception):
    """The broker exited because a picked port was taken meanwhile."""


_live: set[KafkaBroker] = set()
_live_lock = threading.Lock()
_atexit_registered = False


def _track(broker: KafkaBroker) -> None:
    global _atexit_registered
    with _live_lock:
        if not _atexit_registered:
            atexit.register(_stop_all_at_exit)
            _atexit_registered = True
        _live.add(broker)


def _untrack(broker: KafkaBroker) -> None:
    with _live_lock:
        _live.discard(broker)


def _stop_all_at_exit() -> None:
    with _live_lock:
        brokers = list(_live)
    for broker in brokers:
        with contextlib.suppress(Exception):
            broker._emergency_stop()


class KafkaBroker:
    """A single-node Apache Kafka broker (KRaft, combined mode) on loopback.

    Blocking API; see :func:`kafka_broker` for async code. Usable as a context
    manager (``with KafkaBroker() as broker:``). Thread-safe.

    Args:
        version: The Apache Kafka version; its jars are fetched by :func:`ensure_jars`.
        port: The client (PLAINTEXT) port; a free one is picked when omitted.
        controller_port: The KRaft controller port; picked when omitted.
        java: The ``java`` executable; see :func:`find_java`.
        mvn: The ``mvn`` executable, needed only for the first fetch of the jars.
        cache_root: The jar cache root; see :func:`default_cache_root`.
        lib_dir: A directory of broker jars to use instead of the Maven cache.
        base_dir: Where the temporary data directory is made (system temp dir by
            default).
        heap: The JVM heap size (``-Xms`` and ``-Xmx``).
        jvm_args: Extra JVM arguments.
        properties: ``server.properties`` entries overriding or adding to the
            harness defaults (e.g. ``{"offsets.topic.num.partitions": 8}``).
        start_timeout: Seconds :meth:`start` and :meth:`restart` wait for readiness.
        stop_timeout: Seconds :meth:`stop` waits after SIGTERM before SIGKILL.
        keep: Keep the data directory (storage and ``broker.log``) after :meth:`stop`.
    """

    def __init__(
        self,
        *,
        version: str = KAFKA_VERSION,
        port: int | None = None,
        controller_port: int | None = None,
        java: str | os.PathLike[str] | None = None,
        mvn: str | os.PathLike[str] | None = None,
        cache_root: str | os.PathLike[str] | None = None,
        lib_dir: str | os.PathLike[str] | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        heap: str = "512m",
        jvm_args: Sequence[str] = (),
        properties: Mapping[str, str | int | bool] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
        keep: bool = False,
    ) -> None:
        self.version: Final = version
        self._fixed_port = port
        self._fixed_controller_port = controller_port
        self._java_arg = java
        self._mvn_arg = mvn
        self._cache_root = cache_root
        self._lib_arg = Path(lib_dir) if lib_dir is not None else None
        self._base_dir = os.fspath(base_dir) if base_dir is not None else None
        self._heap = heap
        self._jvm_args = tuple(jvm_args)
        self._overrides = dict(properties or {})
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.keep = keep

        self._lock = threading.RLock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._watchdog_fd: int | None = None
        self._java: str | None = None
        self._lib: Path | None = None
        self._data_dir: Path | None = None
        self._port: int | None = None
        self._controller_port: int | None = None
        self._cluster_id: str | None = None

    # -- properties

    @property
    def port(self) -> int:
        """The client (PLAINTEXT) port.

        Raises:
            KafkaHarnessError: The broker was never started.
        """
        if self._port is None:
            raise KafkaHarnessError("the broker has not been started")
        return self._port

    @property
    def controller_port(self) -> int:
        """The KRaft controller port.

        Raises:
            KafkaHarnessError: The broker was never started.
        """
        if self._controller_port is None:
            raise KafkaHarnessError("the broker has not been started")
        return self._controller_port

    @property
    def host(self) -> str:
        """The host the broker listens on (always loopback)."""
        return "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        """The bootstrap address, ``"127.0.0.1:PORT"``."""
        return f"{self.host}:{self.port}"

    @property
    def cluster_id(self) -> str | None:
        """The KRaft cluster id of the current data directory, if started."""
        return self._cluster_id

    @property
    def data_dir(self) -> Path | None:
        """The temporary data directory (``None`` before start and after removal)."""
        return self._data_dir

    @property
    def log_path(self) -> Path | None:
        """The broker's log4j log file, inside :attr:`data_dir`."""
        return self._data_dir / "broker.log" if self._data_dir is not None else None

    @property
    def pid(self) -> int | None:
        """The JVM's process id (also its process group id) while it runs."""
        proc = self._proc
        return proc.pid if proc is not None else None

    @property
    def running(self) -> bool:
        """Whether the broker's JVM is alive."""
        proc = self._proc
        return proc is not None and proc.poll() is None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        where = f" {self.host}:{self._port}" if self._port is not None else ""
        return f"<KafkaBroker {self.version}{where} {state}>"

    # -- lifecycle

    def start(self) -> None:
        """Fetch the jars if needed, format fresh storage, start and await the broker.

        Raises:
            KafkaHarnessError: ``java``/``mvn`` missing, the fetch failed, or the
                broker exited or did not answer ApiVersions within
                :attr:`start_timeout` (the message ends with its log).
        """
        with self._lock:
            if self._proc is not None:
                raise KafkaHarnessError(f"{self!r} was already started")
            java = find_java(self._java_arg)
            _check_java_version(java)
            if self._lib_arg is not None:
                if not any(self._lib_arg.glob("kafka_2.13-*.jar")):
                    raise KafkaHarnessError(f"no kafka_2.13 jar in lib_dir {self._lib_arg}")
                lib = self._lib_arg
            else:
                lib = ensure_jars(self.version, cache_root=self._cache_root, mvn=self._mvn_arg)
            self._java, self._lib = java, lib
            _track(self)
            try:
                self._data_dir = Path(
                    tempfile.mkdtemp(prefix="gengroup-kafka-", dir=self._base_dir)
                )
                auto = self._fixed_port is None or self._fixed_controller_port is None
                attempts = _BIND_ATTEMPTS if auto else 1
                deadline = time.monotonic() + self.start_timeout
                for attempt in range(attempts):
                    self._pick_ports()
                    self._write_config()
                    self._format()
                    self._launch()
                    try:
                        self._await_ready(deadline, detect_conflict=attempt + 1 < attempts)
                        return
                    except _PortConflict:
                        self._terminate(kill=True)
                        shutil.rmtree(self._data_dir / "kraft", ignore_errors=True)
            except BaseException:
                self._terminate(kill=True)
                self._remove_data_dir(force=False)
                _untrack(self)
                raise

    def stop(self) -> None:
        """Stop the broker gracefully (SIGTERM, then SIGKILL after :attr:`stop_timeout`).

        Removes the data directory unless :attr:`keep`. Idempotent; also cleans up
        after :meth:`kill`.
        """
        with self._lock:
            try:
                self._terminate(kill=False)
            finally:
                self._remove_data_dir(force=False)
                _untrack(self)

    def kill(self) -> None:
        """SIGKILL the broker's process group now, as a crash would.

        The data directory is kept, so :meth:`restart` can bring the broker back;
        :meth:`stop` still cleans up.
        """
        with self._lock:
            self._terminate(kill=True)

    def restart(self) -> None:
        """Stop the broker if it runs, then start it again on the same ports and data.

        Raises:
            KafkaHarnessError: The broker was never started (or was stopped), or it
                did not come back within :attr:`start_timeout`.
        """
        with self._lock:
            if self._data_dir is None or self._java is None:
                raise KafkaHarnessError(f"{self!r} cannot restart: it was never started")
            self._terminate(kill=False)
            try:
                self._launch()
                self._await_ready(time.monotonic() + self.start_timeout, detect_conflict=False)
            except BaseException:
                self._terminate(kill=True)
                raise

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals

    def _pick_ports(self) -> None:
        fixed = [p for p in (self._fixed_port, self._fixed_controller_port) if p is not None]
        free = iter(_free_ports(2 - len(fixed), exclude=fixed))
        self._port = self._fixed_port if self._fixed_port is not None else next(free)
        self._controller_port = (
            self._fixed_controller_port if self._fixed_controller_port is not None else next(free)
        )

    def _properties(self) -> dict[str, str]:
        assert self._data_dir is not None
        port, cport = self.port, self.controller_port
        props: dict[str, str | int | bool] = {
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{cport}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": (self._data_dir / "kraft").as_posix(),
            "num.partitions": 1,
            "default.replication.factor": 1,
            "min.insync.replicas": 1,
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 1,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 1,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            "share.coordinator.state.topic.num.partitions": 1,
            "group.initial.rebalance.delay.ms": 0,
            "group.min.session.timeout.ms": 1000,
            # After a kill, the controller refuses the new incarnation's registration
            # until the old one's session expires (9 s by default): keep it short.
            "broker.session.timeout.ms": 3000,
            "broker.heartbeat.interval.ms": 500,
        }
        props.update(self._overrides)
        out: dict[str, str] = {}
        for key, value in props.items():
            out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    def _write_config(self) -> None:
        assert self._data_dir is not None
        data = self._data_dir
        lines = [f"{key}={_escape_property(value)}" for key, value in self._properties().items()]
        (data / "server.properties").write_text(
            "# written by gengroup.testing.kafka\n" + "\n".join(lines) + "\n"
        )
        log4j = [
            "status = warn",
            "name = gengroup-kafka-harness",
            "appender.file.type = File",
            "appender.file.name = FILE",
            f"appender.file.fileName = {_escape_property((data / 'broker.log').as_posix())}",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = [%d] %p %m (%c)%n",
            "rootLogger.level = INFO",
            "rootLogger.appenderRef.file.ref = FILE",
        ]
        for i, name in enumerate(_QUIET_LOGGERS):
            log4j += [f"logger.q{i}.name = {name}", f"logger.q{i}.level = WARN"]
        (data / "log4j2.properties").write_text("\n".join(log4j) + "\n")

    def _java_command(self, *args: str, heap: str | None = None) -> list[str]:
        assert self._java is not None and self._lib is not None and self._data_dir is not None
        command = [self._java]
        if heap is not None:
            command += [f"-Xms{heap}", f"-Xmx{heap}", *_JVM_DEFAULTS, *self._jvm_args]
        command += [
            f"-Dlog4j2.configurationFile={(self._data_dir / 'log4j2.properties').as_posix()}",
            f"-D{_OWNER_PROPERTY}={os.getpid()}",
            "-cp",
            f"{self._lib}{os.sep}*",
            *args,
        ]
        return command

    def _format(self) -> None:
        assert self._data_dir is not None
        self._cluster_id = new_cluster_id()
        command = self._java_command(
            "kafka.tools.StorageTool",
            "format",
            "--standalone",
            "-t",
            self._cluster_id,
            "-c",
            str(self._data_dir / "server.properties"),
        )
        try:
            done = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                cwd=self._data_dir,
                timeout=self.start_timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise KafkaHarnessError(
                f"formatting the KRaft storage took more than {self.start_timeout:.0f} s"
            ) from None
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace").strip()
            raise KafkaHarnessError(
                f"formatting the KRaft storage failed (exit code {done.returncode}):\n"
                + "\n".join(output.splitlines()[-_LOG_TAIL_LINES:])
            )

    def _launch(self) -> None:
        assert self._data_dir is not None
        command = self._java_command(
            "kafka.Kafka", str(self._data_dir / "server.properties"), heap=self._heap
        )
        with (self._data_dir / "stdout.log").open("ab") as out:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self._data_dir,
                start_new_session=True,
            )
        self._arm_watchdog(self._proc.pid)

    def _arm_watchdog(self, pgid: int) -> None:
        if not sys.executable:
            return
        cleanup = "" if self.keep or self._data_dir is None else str(self._data_dir)
        read_fd, write_fd = os.pipe()
        try:
            self._watchdog = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG_SOURCE, str(pgid), cleanup],
                stdin=read_fd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError:
            os.close(write_fd)  # no watchdog: the atexit hook still covers normal exits
            return
        finally:
            os.close(read_fd)
        self._watchdog_fd = write_fd

    def _disarm_watchdog(self) -> None:
        fd, self._watchdog_fd = self._watchdog_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.write(fd, b"disarm\n")
            os.close(fd)
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            try:
                watchdog.wait(timeout=10)
            except subprocess.TimeoutExpired:
                watchdog.kill()
                watchdog.wait()

    def _log_tail(self) -> str:
        if self._data_dir is None:
            return "(no log)"
        parts = []
        log = _tail(self._data_dir / "broker.log", _LOG_TAIL_LINES)
        if log:
            parts.append(f"--- last lines of {self._data_dir / 'broker.log'}:\n{log}")
        out = _tail(self._data_dir / "stdout.log", 20)
        if out:
            parts.append(f"--- JVM stdout/stderr:\n{out}")
        return "\n".join(parts) if parts else "(the broker wrote no log)"

    def _await_ready(self, deadline: float, *, detect_conflict: bool) -> None:
        proc = self._proc
        assert proc is not None
        while True:
            code = proc.poll()
            if code is not None:
                tail = self._log_tail()
                if detect_conflict and (
                    "Address already in use" in tail or "BindException" in tail
                ):
                    raise _PortConflict
                raise KafkaHarnessError(
                    f"the Kafka broker exited with code {code} before it was ready "
                    f"(ports {self._port}/{self._controller_port}):\n{tail}"
                )
            try:
                probe_api_versions(self.host, self.port, timeout=2.0)
                return
            except (OSError, KafkaHarnessError):
                pass
            if time.monotonic() >= deadline:
                raise KafkaHarnessError(
                    f"the Kafka broker did not answer ApiVersions on {self.bootstrap} "
                    f"within {self.start_timeout:.0f} s:\n{self._log_tail()}"
                )
            time.sleep(0.1)

    def _terminate(self, *, kill: bool) -> None:
        proc = self._proc
        if proc is None:
            self._disarm_watchdog()
            return
        pgid = proc.pid
        try:
            if proc.poll() is None:
                if kill:
                    _killpg(pgid, signal.SIGKILL)
                    proc.wait()
                else:
                    _killpg(pgid, signal.SIGTERM)
                    try:
                        proc.wait(timeout=self.stop_timeout)
                    except subprocess.TimeoutExpired:
                        _killpg(pgid, signal.SIGKILL)
                        proc.wait()
        finally:
            # The JVM led its own group; kill anything that might linger in it.
            _killpg(pgid, signal.SIGKILL)
            self._proc = None
            self._disarm_watchdog()

    def _remove_data_dir(self, *, force: bool) -> None:
        data, self._data_dir = self._data_dir, None
        if data is not None and (force or not self.keep):
            shutil.rmtree(data, ignore_errors=True)
        elif data is not None:
            self._data_dir = data

    def _emergency_stop(self) -> None:
        """Kill without waiting for the lock (atexit: a thread may hold it forever)."""
        locked = self._lock.acquire(timeout=2)
        try:
            proc = self._proc
            if proc is not None:
                _killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
            if locked:
                self._proc = None
                self._disarm_watchdog()
                self._remove_data_dir(force=False)
        finally:
            if locked:
                self._lock.release()


def _escape_property(value: str) -> str:
    """Escape a value for a Java ``.properties`` file."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")


# ---------------------------------------------------------------- async wrapper


@contextlib.asynccontextmanager
async def kafka_broker(**options: Unpack[BrokerOptions]) -> AsyncIterator[KafkaBroker]:
    """Run a :class:`KafkaBroker` for the duration of an ``async with`` block.

    The blocking start and stop run in a worker thread, so the event loop (trio
    or asyncio) keeps running; the stop is shielded from cancellation.

    Args:
        **options: Keyword options of :class:`KafkaBroker`.

    Yields:
        The started broker.

    Raises:
        KafkaHarnessError: The broker could not be started.
    """
    broker = KafkaBroker(**options)
    try:
        await anyio.to_thread.run_sync(broker.start)
        yield broker
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(broker.stop)


# ---------------------------------------------------------------- command line


class _Interrupted(BaseException):
    """A stop signal arrived while the broker was starting."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run a broker until SIGINT or SIGTERM (``python -m gengroup.testing.kafka``).

    Prints exactly one line to stdout, ``bootstrap 127.0.0.1:PORT``, once the
    broker is ready; diagnostics go to stderr.

    Args:
        argv: Command-line arguments (``sys.argv[1:]`` when omitted).

    Returns:
        The exit code: 0 after a requested stop, 1 if the broker failed.
    """
    parser = argparse.ArgumentParser(
        prog="python -m gengroup.testing.kafka",
        description=f"Run a single-node Apache Kafka {KAFKA_VERSION} broker on loopback.",
    )
    parser.add_argument("--port", type=int, default=None, help="client port (default: free)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_START_TIMEOUT,
        help="seconds to wait for readiness (default: %(default)s)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the data directory and broker log"
    )
    args = parser.parse_args(argv)

    stop_requested = threading.Event()
    starting = [True]

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()
        if starting[0]:
            starting[0] = False
            raise _Interrupted

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    broker = KafkaBroker(port=args.port, start_timeout=args.timeout, keep=args.keep)
    try:
        try:
            broker.start()
        except _Interrupted:
            return 0
        except KafkaHarnessError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 1
        finally:
            starting[0] = False
        print(f"bootstrap {broker.bootstrap}", flush=True)
        print(
            f"Kafka {broker.version} ready (pid {broker.pid}, log {broker.log_path}); "
            "stop with SIGINT or SIGTERM",
            file=sys.stderr,
            flush=True,
        )
        while not stop_requested.wait(0.5):
            if not broker.running:
                print(f"error: the broker died:\n{broker._log_tail()}", file=sys.stderr, flush=True)
                return 1
        return 0
    finally:
        broker.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
