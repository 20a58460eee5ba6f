"""pytest fixtures running a real Apache Kafka broker for a test session.

Load it from a ``conftest.py`` with::

    pytest_plugins = ["gengroup.testing.pytest_plugin"]

Fixtures:

* ``kafka`` (session scope, sync): a started
  :class:`~gengroup.testing.kafka.KafkaBroker`, shared by the whole session and
  stopped at its end. Sync because pytest-trio cannot run session-scoped async
  fixtures; async tests use it as is (``kafka.bootstrap``). Tests that kill or
  restart a broker should start their own with
  :func:`~gengroup.testing.kafka.kafka_broker` instead of disturbing this one.
  Set ``GENGROUP_KAFKA_KEEP=1`` to keep its data directory and ``broker.log``.
* ``secure_kafka`` (session scope, sync): a second broker, started on first
  use, with the secure listeners of :mod:`gengroup.testing.kafka.secure`
  (SASL_SSL, REAUTH, MTLS, WRONG_HOST) beside PLAINTEXT, certificates made by
  trustme for the session, the PLAIN user ``alice`` / ``alice-secret`` and the
  SCRAM-SHA-256/512 user ``bob`` / ``bob-secret``
  (``secure_kafka.security.certificates`` has the PEM files), and the
  ``StandardAuthorizer`` (resources without ACLs open to all; the PLAINTEXT
  listener's ``User:ANONYMOUS`` is a super user who may create ACLs).
* ``kafka_cluster`` (session scope, sync): a
  :class:`~gengroup.testing.kafka.KafkaCluster` of three nodes, started on
  first use (``kafka_cluster.bootstrap`` names all three): three replicas of
  every topic and of ``__consumer_offsets``, ``min.insync.replicas=2``, no
  unclean leader election. Failover tests stop, kill and restart its nodes;
  each brings them back before it ends (``kafka_cluster.heal()``).
* ``unique_name``: a function ``unique_name(prefix) -> str`` returning a fresh
  topic or group name, so tests sharing the broker never collide.

Importing this module has no side effects; it also registers the ``kafka``
marker.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator

import pytest

from gengroup.testing.kafka import BrokerSecurity, KafkaBroker, KafkaCluster, make_certificates

__all__ = ["kafka", "kafka_cluster", "make_unique_name", "secure_kafka", "unique_name"]

#: The users of the ``secure_kafka`` broker: SASL/PLAIN and SCRAM (both SHA-256 and SHA-512).
SECURE_PLAIN_USERS = {"alice": "alice-secret"}
SECURE_SCRAM_USERS = {"bob": "bob-secret"}

_ILLEGAL = re.compile(r"[^A-Za-z0-9_-]+")


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``kafka`` marker.

    Args:
        config: The pytest configuration.
    """
    config.addinivalue_line(
        "markers", "kafka: needs the real Apache Kafka broker started by the harness"
    )


def make_unique_name(prefix: str = "gengroup") -> str:
    """Return a new name that is valid as a Kafka topic and group id.

    Args:
        prefix: A readable prefix; characters a topic name cannot hold become ``-``.

    Returns:
        ``"<prefix>-<12 hex digits>"``.
    """
    clean = _ILLEGAL.sub("-", prefix).strip("-")[:200] or "gengroup"
    return f"{clean}-{uuid.uuid4().hex[:12]}"


def _keep_data() -> bool:
    """Whether ``GENGROUP_KAFKA_KEEP`` asks to keep the brokers' data directories."""
    return os.environ.get("GENGROUP_KAFKA_KEEP", "") not in ("", "0")


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaBroker]:
    """A real Apache Kafka broker shared by the test session.

    Yields:
        The started broker; ``kafka.bootstrap`` is ``"127.0.0.1:PORT"``.

    Raises:
        KafkaHarnessError: The broker could not be started (an error, never a skip).
    """
    with KafkaBroker(keep=_keep_data()) as broker:
        yield broker


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A real Apache Kafka broker with TLS, SASL and mutual-TLS listeners, for the session.

    Yields:
        The started broker: ``secure_kafka.listener_bootstrap("SASL_SSL")`` and
        the other secure listeners, ``secure_kafka.security.certificates``.

    Raises:
        KafkaHarnessError: The certificates could not be made (trustme missing)
            or the broker could not be started (an error, never a skip).
    """
    certificates = make_certificates(tmp_path_factory.mktemp("certificates"))
    security = BrokerSecurity(
        certificates,
        plain_users=SECURE_PLAIN_USERS,
        scram_users=SECURE_SCRAM_USERS,
        authorizer=True,
    )
    with KafkaBroker(keep=_keep_data(), security=security) as broker:
        yield broker


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[KafkaCluster]:
    """A real three-node Apache Kafka cluster shared by the test session.

    Yields:
        The started, healthy cluster; ``kafka_cluster.bootstrap`` names every node.

    Raises:
        KafkaHarnessError: The cluster could not be started (an error, never a skip).
    """
    with KafkaCluster(3, keep=_keep_data()) as cluster:
        yield cluster


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """A function returning fresh topic/group names: ``unique_name("orders")``.

    Returns:
        :func:`make_unique_name`.
    """
    return make_unique_name
