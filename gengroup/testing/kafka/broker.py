"""The broker: one real Apache Kafka (KRaft, one node, loopback only) for tests.

:meth:`KafkaBroker.start` makes a fresh temporary data directory, picks two
free loopback ports (client listener and controller listener), writes the
configuration (:mod:`.config`), formats the KRaft storage with
``kafka.tools.StorageTool format --standalone`` and a new cluster id, then runs
``java -cp '<lib>/*' kafka.Kafka server.properties`` under supervision
(:mod:`.process`). The broker is ready when its client port answers a real
ApiVersions v0 request (:mod:`.probe`); if the JVM exits first or the timeout
passes, :class:`KafkaHarnessError` carries the end of the log. A port taken
between picking and binding is retried with new ports. :meth:`KafkaBroker.stop`
sends SIGTERM, waits, then SIGKILLs and removes the data directory;
:meth:`KafkaBroker.kill` SIGKILLs at once (crash tests) and
:meth:`KafkaBroker.restart` relaunches on the same ports and data.
:func:`kafka_broker` runs the blocking calls in a worker thread for async code.
With ``security=`` (:mod:`.secure`) the broker also listens with TLS, SASL and
mutual TLS on further ports (:meth:`KafkaBroker.listener_bootstrap`). With
``node_id=`` and ``quorum=`` it is one node of a :class:`~.cluster.KafkaCluster`:
``start(wait=False)`` launches it, :meth:`KafkaBroker.wait_ready` awaits it, and
:meth:`KafkaBroker.halt` stops it gracefully keeping its data for a restart.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from pathlib import Path
from typing import Final, Unpack

from . import config, process, secure
from ._base import (
    DEFAULT_START_TIMEOUT,
    DEFAULT_STOP_TIMEOUT,
    KAFKA_VERSION,
    KafkaHarnessError,
    NodeOptions,
    StartedInBlock,
    run_in_thread,
    tail,
)
from .jars import ensure_jars
from .probe import probe_api_versions
from .tools import check_java_version, find_java

__all__ = ["BrokerOptions", "KafkaBroker", "kafka_broker"]

_LOG_TAIL_LINES: Final = 60
_BIND_ATTEMPTS: Final = 3


class BrokerOptions(NodeOptions, total=False):
    """Keyword options of :class:`KafkaBroker` (and :func:`kafka_broker`)."""

    port: int | None
    controller_port: int | None
    security: secure.BrokerSecurity | None
    node_id: int
    quorum: config.Quorum | None


def _started(port: int | None) -> int:
    if port is None:
        raise KafkaHarnessError("the broker has not been started")
    return port


class _PortConflict(Exception):
    """The broker exited because a picked port was taken meanwhile."""


class KafkaBroker(StartedInBlock):
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
        request_log: Log each request the broker completes, with its header,
            body and timings, to :attr:`request_log_path` (Kafka's
            ``kafka.request.logger`` at DEBUG; each line starts with its time
            in milliseconds since the epoch). ``True``: every request; a
            collection of API names as Kafka spells them (``{"HEARTBEAT"}``):
            those only. For a benchmark or test that must see what every
            client sent, such as when each member heartbeats.
        security: Add the secure listeners of :mod:`.secure` (TLS, SASL, mutual
            TLS), their users and certificates.
        node_id: The node's id (``node.id``).
        quorum: Make the node one voter of a static controller quorum of
            several nodes (see :class:`~gengroup.testing.kafka.KafkaCluster`):
            its storage is formatted with the quorum's cluster id, and it is
            ready only once a majority of the voters runs. ``None``: a single
            node that is its own quorum.
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
        security: secure.BrokerSecurity | None = None,
        node_id: int = 1,
        quorum: config.Quorum | None = None,
        request_log: bool | Collection[str] = False,
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
        self.security: Final = security
        self._listener_ports: dict[str, int] = {}
        self.node_id: Final = node_id
        self.quorum: Final = quorum
        self.request_log: Final = request_log

        self._lock = threading.RLock()
        self._process: process.JvmProcess | None = None
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
        return _started(self._port)

    @property
    def controller_port(self) -> int:
        """The KRaft controller port.

        Raises:
            KafkaHarnessError: The broker was never started.
        """
        return _started(self._controller_port)

    @property
    def host(self) -> str:
        """The host the broker listens on (always loopback)."""
        return "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        """The bootstrap address, ``"127.0.0.1:PORT"``."""
        return f"{self.host}:{self.port}"

    def listener_port(self, name: str) -> int:
        """The port of a secure listener: ``SASL_SSL``, ``REAUTH``, ``MTLS`` or ``WRONG_HOST``.

        Raises:
            KafkaHarnessError: The broker has no such listener, or was never started.
        """
        port = self._listener_ports.get(name)
        if port is None:
            raise KafkaHarnessError(
                f"{self!r} has no listener {name!r} (secure listeners need security=...)"
            )
        return port

    def listener_bootstrap(self, name: str) -> str:
        """The bootstrap address of a secure listener, ``"127.0.0.1:PORT"``."""
        return f"{self.host}:{self.listener_port(name)}"

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
    def request_log_path(self) -> Path | None:
        """The log of the completed requests ``request_log`` asks for (else ``None``)."""
        if self._data_dir is None or not self.request_log:
            return None
        return self._data_dir / config.REQUEST_LOG

    @property
    def pid(self) -> int | None:
        """The JVM's process id (also its process group id) while it runs."""
        jvm = self._process
        return jvm.pid if jvm is not None else None

    @property
    def running(self) -> bool:
        """Whether the broker's JVM is alive."""
        jvm = self._process
        return jvm is not None and jvm.poll() is None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        where = f" {self.host}:{self._port}" if self._port is not None else ""
        return f"<KafkaBroker {self.version}{where} {state}>"

    def log_tail(self) -> str:
        """The last lines of the broker's log and of the JVM's own output, for diagnostics.

        Returns:
            Both tails with headings, or a note that there is no log.
        """
        if self._data_dir is None:
            return "(no log)"
        parts = []
        log = tail(self._data_dir / "broker.log", _LOG_TAIL_LINES)
        if log:
            parts.append(f"--- last lines of {self._data_dir / 'broker.log'}:\n{log}")
        out = tail(self._data_dir / "stdout.log", 20)
        if out:
            parts.append(f"--- JVM stdout/stderr:\n{out}")
        return "\n".join(parts) if parts else "(the broker wrote no log)"

    # -- lifecycle

    def start(self, *, wait: bool = True) -> None:
        """Fetch the jars if needed, format fresh storage, start and await the broker.

        Args:
            wait: Wait until the broker answers ApiVersions. ``False`` returns
                once the JVM was launched (a node of a multi-node cluster is not
                ready before a majority of the quorum runs): call
                :meth:`wait_ready` then. Picked ports taken meanwhile are only
                retried when waiting.

        Raises:
            KafkaHarnessError: ``java``/``mvn`` missing, the fetch failed, or the
                broker exited or did not answer ApiVersions within
                :attr:`start_timeout` (the message ends with its log).
        """
        with self._lock:
            if self._process is not None:
                raise KafkaHarnessError(f"{self!r} was already started")
            java = find_java(self._java_arg)
            check_java_version(java)
            if self._lib_arg is not None:
                if not any(self._lib_arg.glob("kafka_2.13-*.jar")):
                    raise KafkaHarnessError(f"no kafka_2.13 jar in lib_dir {self._lib_arg}")
                lib = self._lib_arg
            else:
                lib = ensure_jars(self.version, cache_root=self._cache_root, mvn=self._mvn_arg)
            self._java, self._lib = java, lib
            process.track(self, self._emergency_stop)
            try:
                self._data_dir = Path(
                    tempfile.mkdtemp(prefix="gengroup-kafka-", dir=self._base_dir)
                )
                auto = self._fixed_port is None or self._fixed_controller_port is None
                attempts = _BIND_ATTEMPTS if auto and wait else 1
                deadline = time.monotonic() + self.start_timeout
                for attempt in range(attempts):
                    self._pick_ports()
                    self._write_config()
                    self._format()
                    self._launch()
                    if not wait:
                        return
                    try:
                        self._await_ready(deadline, detect_conflict=attempt + 1 < attempts)
                        return
                    except _PortConflict:
                        self._terminate(kill=True)
                        shutil.rmtree(self._data_dir / "kraft", ignore_errors=True)
            except BaseException:
                self._abandon()
                raise

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until the broker launched by ``start(wait=False)`` answers ApiVersions.

        Args:
            timeout: Seconds to wait (default: :attr:`start_timeout`).

        Raises:
            KafkaHarnessError: The broker is not running, exited, or did not
                answer in time; it is then stopped and its data removed.
        """
        with self._lock:
            if self._process is None:
                raise KafkaHarnessError(f"{self!r} is not running")
            limit = self.start_timeout if timeout is None else timeout
            try:
                self._await_ready(time.monotonic() + limit, detect_conflict=False)
            except BaseException:
                self._abandon()
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
                process.untrack(self)

    def halt(self) -> None:
        """Stop the broker gracefully (SIGTERM, SIGKILL after :attr:`stop_timeout`),
        keeping its data directory: :meth:`restart` brings it back, :meth:`stop`
        cleans up."""
        with self._lock:
            self._terminate(kill=False)

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

    def _shut_down(self) -> None:
        self.stop()

    # -- internals

    def _abandon(self) -> None:
        self._terminate(kill=True)
        self._remove_data_dir(force=False)
        process.untrack(self)

    def _pick_ports(self) -> None:
        fixed = [p for p in (self._fixed_port, self._fixed_controller_port) if p is not None]
        extra = list(secure.LISTENERS) if self.security is not None else []
        free = iter(process.free_ports(2 - len(fixed) + len(extra), exclude=fixed))
        self._port = self._fixed_port if self._fixed_port is not None else next(free)
        self._controller_port = (
            self._fixed_controller_port if self._fixed_controller_port is not None else next(free)
        )
        self._listener_ports = {name: next(free) for name in extra}

    def _write_config(self) -> None:
        assert self._data_dir is not None
        overrides = dict(self._overrides)
        if self.security is not None:
            ports = {"PLAINTEXT": self.port, "CONTROLLER": self.controller_port}
            ports.update(self._listener_ports)
            overrides = {**secure.secure_properties(self.security, self.host, ports), **overrides}
        properties = config.server_properties(
            self._data_dir,
            self.port,
            self.controller_port,
            overrides,
            node_id=self.node_id,
            quorum=self.quorum,
        )
        # A secure broker logs each failed authentication ("Failed authentication with ...").
        loud = [secure.AUTH_LOGGER] if self.security is not None else []
        config.write_config(self._data_dir, properties, loud, request_log=self.request_log)

    def _java_command(self, *args: str, heap: str | None = None) -> list[str]:
        assert self._java is not None and self._lib is not None and self._data_dir is not None
        return config.java_command(
            self._java, self._lib, self._data_dir, *args, heap=heap, jvm_args=self._jvm_args
        )

    def _format(self) -> None:
        assert self._data_dir is not None
        # A static quorum (controller.quorum.voters) is formatted without --standalone.
        quorum = self.quorum
        self._cluster_id = config.new_cluster_id() if quorum is None else quorum.cluster_id
        command = self._java_command(
            "kafka.tools.StorageTool",
            "format",
            *(["--standalone"] if quorum is None else []),
            "-t",
            self._cluster_id,
            "-c",
            str(self._data_dir / "server.properties"),
            *(secure.scram_format_args(self.security) if self.security is not None else []),
        )
        process.run_logged(
            command,
            cwd=self._data_dir,
            output=self._data_dir / "format.log",
            timeout=self.start_timeout,
            doing="formatting the KRaft storage",
            lines=_LOG_TAIL_LINES,
        )

    def _launch(self) -> None:
        assert self._data_dir is not None
        command = self._java_command(
            "kafka.Kafka", str(self._data_dir / "server.properties"), heap=self._heap
        )
        self._process = process.JvmProcess(
            command,
            cwd=self._data_dir,
            output=self._data_dir / "stdout.log",
            cleanup=None if self.keep else self._data_dir,
        )

    def _await_ready(self, deadline: float, *, detect_conflict: bool) -> None:
        jvm = self._process
        assert jvm is not None
        while True:
            code = jvm.poll()
            if code is not None:
                log = self.log_tail()
                if detect_conflict and ("Address already in use" in log or "BindException" in log):
                    raise _PortConflict
                raise KafkaHarnessError(
                    f"the Kafka broker exited with code {code} before it was ready "
                    f"(ports {self._port}/{self._controller_port}):\n{log}"
                )
            try:
                probe_api_versions(self.host, self.port, timeout=2.0)
                return
            except (OSError, KafkaHarnessError):
                pass
            if time.monotonic() >= deadline:
                raise KafkaHarnessError(
                    f"the Kafka broker did not answer ApiVersions on {self.bootstrap} "
                    f"within {self.start_timeout:.0f} s:\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def _terminate(self, *, kill: bool) -> None:
        jvm, self._process = self._process, None
        if jvm is not None:
            jvm.stop(kill=kill, timeout=self.stop_timeout)

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
            jvm = self._process
            if jvm is not None:
                jvm.kill_now()
            if locked:
                self._process = None
                if jvm is not None:
                    jvm.disarm()
                self._remove_data_dir(force=False)
        finally:
            if locked:
                self._lock.release()


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
    async with run_in_thread(broker.start, broker.stop):
        yield broker
