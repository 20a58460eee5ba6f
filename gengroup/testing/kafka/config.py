"""What the broker is started with: ``server.properties``, log4j2, the JVM command.

The defaults make a one-node KRaft broker (combined broker and controller
roles) on loopback whose internal topics have one replica and one partition,
whose groups rebalance without the initial delay, and which logs only the
interesting lines (group coordinator, requests) to ``broker.log`` in its data
directory. Nothing here starts a process.
"""

from __future__ import annotations

import base64
import os
import re
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "OWNER_PROPERTY",
    "Quorum",
    "escape_property",
    "java_command",
    "new_cluster_id",
    "server_properties",
    "write_config",
]

OWNER_PROPERTY: Final = "gengroup.harness.owner"
"""The JVM system property naming the pid of the process that started the broker."""

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

#: The file (in the data directory) of the completed requests ``request_log`` asks for.
REQUEST_LOG: Final = "requests.log"
#: Kafka's logger of completed requests (at DEBUG: header, body and timings).
_REQUEST_LOGGER: Final = "kafka.request.logger"
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
    _REQUEST_LOGGER,
    "kafka.authorizer.logger",
)


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


def escape_property(value: str) -> str:
    """Escape a value for a Java ``.properties`` file."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")


@dataclass(frozen=True, slots=True)
class Quorum:
    """The controller quorum of a multi-node cluster, shared by every node.

    Attributes:
        cluster_id: The KRaft cluster id every node's storage is formatted with.
        voters: Node id -> controller port of every voter (a static quorum:
            ``controller.quorum.voters``).
    """

    cluster_id: str
    voters: Mapping[int, int]

    def voters_property(self) -> str:
        """The ``controller.quorum.voters`` value: ``id@127.0.0.1:port,...``."""
        return ",".join(f"{node}@127.0.0.1:{port}" for node, port in sorted(self.voters.items()))


def server_properties(
    data_dir: Path,
    port: int,
    controller_port: int,
    overrides: Mapping[str, str | int | bool],
    *,
    node_id: int = 1,
    quorum: Quorum | None = None,
) -> dict[str, str]:
    """The broker's ``server.properties`` entries, as strings.

    Args:
        data_dir: The broker's data directory (the KRaft log is ``data_dir/kraft``).
        port: The client (PLAINTEXT) port.
        controller_port: The KRaft controller port.
        overrides: Entries replacing or adding to the harness defaults.
        node_id: The node's id.
        quorum: The static controller quorum of a multi-node cluster; ``None``
            for a single node that is its own quorum.

    Returns:
        Every entry, booleans spelled as Java does (``true``/``false``).
    """
    cport = controller_port
    voters: dict[str, str | int | bool] = (
        {"controller.quorum.bootstrap.servers": f"127.0.0.1:{cport}"}
        if quorum is None
        else {"controller.quorum.voters": quorum.voters_property()}
    )
    props: dict[str, str | int | bool] = {
        "process.roles": "broker,controller",
        "node.id": node_id,
        **voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": (data_dir / "kraft").as_posix(),
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
    props.update(overrides)
    out: dict[str, str] = {}
    for key, value in props.items():
        out[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def write_config(
    data_dir: Path,
    properties: Mapping[str, str],
    loud: Sequence[str] = (),
    *,
    request_log: bool | Collection[str] = False,
) -> None:
    """Write ``server.properties`` and ``log4j2.properties`` into the data directory.

    Args:
        data_dir: The broker's data directory; ``broker.log`` will be written there.
        properties: The ``server.properties`` entries (see :func:`server_properties`).
        loud: Loggers to log at INFO although a quiet parent logger would hide them.
        request_log: Also log completed requests to :data:`REQUEST_LOG`, a
            line each: the time in milliseconds since the epoch, then Kafka's
            ``Completed request:`` text. ``True``: every request; names of
            APIs as Kafka spells them (``"HEARTBEAT"``): those only.
    """
    data = data_dir
    lines = [f"{key}={escape_property(value)}" for key, value in properties.items()]
    (data / "server.properties").write_text(
        "# written by gengroup.testing.kafka\n" + "\n".join(lines) + "\n"
    )
    log4j = [
        "status = warn",
        "name = gengroup-kafka-harness",
        "appender.file.type = File",
        "appender.file.name = FILE",
        f"appender.file.fileName = {escape_property((data / 'broker.log').as_posix())}",
        "appender.file.layout.type = PatternLayout",
        "appender.file.layout.pattern = [%d] %p %m (%c)%n",
        "rootLogger.level = INFO",
        "rootLogger.appenderRef.file.ref = FILE",
    ]
    for i, name in enumerate(_QUIET_LOGGERS):
        if not (request_log and name == _REQUEST_LOGGER):
            log4j += [f"logger.q{i}.name = {name}", f"logger.q{i}.level = WARN"]
    for i, name in enumerate(loud):
        log4j += [f"logger.l{i}.name = {name}", f"logger.l{i}.level = INFO"]
    if request_log:
        log4j += [
            "appender.requests.type = File",
            "appender.requests.name = REQUESTS",
            f"appender.requests.fileName = {escape_property((data / REQUEST_LOG).as_posix())}",
            "appender.requests.layout.type = PatternLayout",
            "appender.requests.layout.pattern = %d{UNIX_MILLIS} %m%n",
            f"logger.requests.name = {_REQUEST_LOGGER}",
            "logger.requests.level = DEBUG",
            "logger.requests.additivity = false",
            "logger.requests.appenderRef.requests.ref = REQUESTS",
        ]
        if not isinstance(request_log, bool):
            names = "|".join(re.escape(name) for name in sorted(request_log))
            log4j += [
                "appender.requests.filter.apis.type = RegexFilter",
                # Kafka's text is one line of JSON naming its API in the header.
                "appender.requests.filter.apis.regex = "
                + escape_property(f'.*"requestApiKeyName":"({names})".*'),
                "appender.requests.filter.apis.onMatch = ACCEPT",
                "appender.requests.filter.apis.onMismatch = DENY",
            ]
    (data / "log4j2.properties").write_text("\n".join(log4j) + "\n")


def java_command(
    java: str,
    lib: Path,
    data_dir: Path,
    *args: str,
    heap: str | None = None,
    jvm_args: Sequence[str] = (),
) -> list[str]:
    """The command line running a class of the broker's jars.

    Args:
        java: The ``java`` executable.
        lib: The directory of jars (the classpath is ``lib/*``).
        data_dir: The data directory holding ``log4j2.properties``.
        *args: The main class and its arguments.
        heap: For the broker itself: the heap size, which also adds the JVM
            options Kafka's start script uses and ``jvm_args``; ``None`` for tools.
        jvm_args: Extra JVM arguments (with ``heap`` only).

    Returns:
        The argument vector; it marks the JVM with :data:`OWNER_PROPERTY`.
    """
    command = [java]
    if heap is not None:
        command += [f"-Xms{heap}", f"-Xmx{heap}", *_JVM_DEFAULTS, *jvm_args]
    command += [
        f"-Dlog4j2.configurationFile={(data_dir / 'log4j2.properties').as_posix()}",
        f"-D{OWNER_PROPERTY}={os.getpid()}",
        "-cp",
        f"{lib}{os.sep}*",
        *args,
    ]
    return command
