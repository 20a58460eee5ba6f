"""Run a real Apache Kafka broker (KRaft, one node, loopback only) for tests.

Theory of operation:

1. **Jars** (:mod:`.jars`, :mod:`.tools`). The broker is assembled from Maven
   Central, not from a download site or Docker: :func:`ensure_jars` runs
   ``mvn dependency:copy-dependencies`` on the ``pom.xml`` shipped with
   :mod:`gengroup.testing` (``kafka_2.13`` plus ``log4j-slf4j-impl``) once per
   machine, into ``~/.cache/gengroup/kafka-<version>/lib`` (the root is
   ``$GENGROUP_KAFKA_CACHE`` if set, else ``$XDG_CACHE_HOME/gengroup``). An
   ``fcntl`` lock on ``kafka-<version>/.lock`` keeps concurrent processes from
   fetching twice; Maven writes into a temporary directory that is renamed into
   place only after a marker file listing every jar and its size was written, so
   ``lib`` is either absent or complete.
2. **Start** (:mod:`.broker`, :mod:`.config`, :mod:`.probe`).
   :meth:`KafkaBroker.start` makes a fresh temporary data directory, picks two
   free loopback ports (client listener and controller listener), writes
   ``server.properties`` and a log4j2 configuration (the broker logs to
   ``broker.log`` in the data directory), formats the KRaft storage with
   ``kafka.tools.StorageTool format --standalone`` and a new cluster id, then
   runs ``java -cp '<lib>/*' kafka.Kafka server.properties`` in its own process
   group. The broker is ready when its client port answers a real ApiVersions
   v0 request (:func:`probe_api_versions`, framed by the client's own
   :mod:`gengroup.protocol.framing`); if the JVM exits first or the timeout
   passes, :class:`KafkaHarnessError` carries the end of the log. A port taken
   between picking and binding is retried with new ports.
3. **Stop** (:mod:`.process`). :meth:`KafkaBroker.stop` sends SIGTERM to the
   process group, waits (20 s by default), then SIGKILLs it and removes the
   data directory. :meth:`KafkaBroker.kill` SIGKILLs at once (crash tests);
   :meth:`KafkaBroker.restart` relaunches on the same ports and data.
4. **No orphans** (:mod:`.process`). Every live broker is killed by an
   ``atexit`` hook, and a tiny watchdog process per broker holds the read end
   of a pipe whose write end only this process has: if this process dies
   without stopping the broker (even by SIGKILL), the watchdog sees end-of-file
   and terminates the broker's process group. Each JVM also carries
   ``-Dgengroup.harness.owner=<pid>`` so a stray one can be traced to the
   process that started it.
5. **Async and CLI** (:mod:`.broker`, :mod:`.cli`). :func:`kafka_broker` wraps
   the blocking calls in ``anyio.to_thread.run_sync`` (trio and asyncio alike),
   and ``python -m gengroup.testing.kafka`` runs a broker until SIGINT/SIGTERM,
   printing ``bootstrap 127.0.0.1:PORT`` once it is ready.
"""

from __future__ import annotations

from ._base import (
    DEFAULT_START_TIMEOUT,
    DEFAULT_STOP_TIMEOUT,
    INSTALL_HINT,
    KAFKA_VERSION,
    MIN_JAVA,
    KafkaHarnessError,
)
from .broker import BrokerOptions, KafkaBroker, kafka_broker
from .cli import main
from .config import new_cluster_id
from .jars import default_cache_root, ensure_jars, jar_dir
from .probe import probe_api_versions
from .secure import BrokerSecurity, Certificates, make_certificates
from .tools import find_java, find_mvn

__all__ = [
    "DEFAULT_START_TIMEOUT",
    "DEFAULT_STOP_TIMEOUT",
    "INSTALL_HINT",
    "KAFKA_VERSION",
    "BrokerOptions",
    "BrokerSecurity",
    "Certificates",
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
    "make_certificates",
    "new_cluster_id",
    "probe_api_versions",
]
