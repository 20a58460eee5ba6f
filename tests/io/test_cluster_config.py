"""What ``Cluster``, ``Producer`` and ``Admin`` check at construction, before any I/O.

A negative ``request_timeout`` given to a ``Cluster`` showed as "cluster
unreachable", a string as an ExceptionGroup of TypeError; a ``Producer`` given
``security_protocol="SASL_SSL"`` with a shared PLAINTEXT cluster sent in plain
text; ``Producer(5)`` failed with "'int' object is not iterable"; a dict given
as ``config`` failed on a missing attribute.
"""

from __future__ import annotations

import pathlib
import ssl
from typing import Any

import pytest

from gengroup import Admin, AdminConfig, Cluster, ConfigError, Producer, ProducerConfig
from gengroup.io.security import Security
from gengroup.testing.kafka import make_certificates

BOOTSTRAP = "127.0.0.1:9092"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"request_timeout": -1}, "request_timeout must be a positive finite number"),
        ({"request_timeout": "30"}, "request_timeout must be a number of seconds"),
        ({"request_timeout": 3e6}, "request_timeout must be at most 2147483 s"),
        ({"connect_timeout": float("nan")}, "connect_timeout must be a positive finite"),
        ({"connect_timeout": 0}, "connect_timeout must be a positive finite"),
        ({"retry_backoff": -5}, "retry_backoff must be a positive finite"),
        ({"retry_backoff": True}, "retry_backoff must be a number of seconds"),
        ({"unreachable_timeout": 0}, "unreachable_timeout must be a positive finite"),
        ({"unreachable_timeout": float("inf")}, "unreachable_timeout must be a positive finite"),
    ],
)
def test_a_cluster_refuses_a_bad_duration_by_name(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Cluster(BOOTSTRAP, **settings)


def test_a_cluster_takes_good_durations_and_no_unreachable_timeout() -> None:
    cluster = Cluster(
        BOOTSTRAP,
        connect_timeout=1,
        request_timeout=2.5,
        retry_backoff=0.01,
        unreachable_timeout=None,
    )
    assert (cluster.connect_timeout, cluster.request_timeout) == (1, 2.5)
    assert Cluster(BOOTSTRAP, unreachable_timeout=5.0).unreachable_timeout == 5.0


@pytest.mark.parametrize("make", [Cluster, Producer, Admin], ids=lambda c: c.__name__)
@pytest.mark.parametrize("brokers", [5, 1.5, None])
async def test_bootstrap_of_a_wrong_type_is_a_config_error(make: Any, brokers: object) -> None:
    with pytest.raises(ConfigError, match="brokers must be bootstrap host:port addresses") as got:
        make(brokers)
    assert type(brokers).__name__ in str(got.value)
    assert "also takes an open Cluster" in str(got.value)


async def test_a_client_of_a_shared_cluster_refuses_other_security_settings() -> None:
    cluster = Cluster(BOOTSTRAP)
    secret = "hunter2-secret"
    with pytest.raises(ConfigError, match=r"security_protocol='SASL_SSL'.*shared Cluster") as got:
        Producer(
            cluster,
            security_protocol="SASL_SSL",
            sasl_mechanism="PLAIN",
            sasl_username="u",
            sasl_password=secret,
        )
    assert "PLAINTEXT" in str(got.value)
    with pytest.raises(ConfigError, match=r"security_protocol='SSL'.*shared Cluster"):
        Admin(cluster, security_protocol="SSL", ssl_check_hostname=False)
    with pytest.raises(ConfigError, match="shared Cluster"):
        Admin(
            cluster, AdminConfig(ssl_context=ssl.create_default_context(), security_protocol="SSL")
        )
    # A password is named, never shown.
    sasl = Cluster(
        BOOTSTRAP,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="u",
        sasl_password="p",
    )
    with pytest.raises(ConfigError, match=r"^sasl_password is set") as got:
        Admin(
            sasl,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_username="u",
            sasl_password=secret,
        )
    assert secret not in str(got.value)


async def test_a_client_of_a_shared_cluster_takes_its_settings_or_the_defaults() -> None:
    settings: dict[str, Any] = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_username": "u",
        "sasl_password": "p",
    }
    cluster = Cluster(BOOTSTRAP, **settings)
    for client in (
        Producer(cluster),
        Producer(cluster, **settings),
        Producer(cluster, client_id="mine"),
        Admin(cluster),
        Admin(cluster, AdminConfig(**settings)),
    ):
        assert client.cluster is cluster
        assert cluster.security == Security(**settings)


@pytest.mark.parametrize(
    ("make", "config", "wanted"),
    [
        (Producer, {"acks": 1}, "ProducerConfig"),
        (Producer, AdminConfig(), "ProducerConfig"),
        (Admin, {"timeout": 1}, "AdminConfig"),
        (Admin, ProducerConfig(), "AdminConfig"),
    ],
)
async def test_a_config_of_another_class_is_a_type_error(
    make: Any, config: object, wanted: str
) -> None:
    with pytest.raises(TypeError, match=f"config must be a {wanted} instance .*not "):
        make(BOOTSTRAP, config)


async def test_a_file_setting_given_as_str_or_path_is_the_shared_clusters(
    tmp_path: pathlib.Path,
) -> None:
    certificates = make_certificates(tmp_path)
    cafile = certificates.ca
    for mine, theirs in ((cafile, str(cafile)), (str(cafile), cafile)):
        cluster = Cluster(BOOTSTRAP, security_protocol="SSL", ssl_cafile=theirs)
        assert Producer(cluster, security_protocol="SSL", ssl_cafile=mine).cluster is cluster
        config = AdminConfig(security_protocol="SSL", ssl_cafile=mine)
        assert Admin(cluster, config).cluster is cluster
    cluster = Cluster(BOOTSTRAP, security_protocol="SSL", ssl_cafile=str(cafile))
    with pytest.raises(ConfigError, match=r"^ssl_cafile=.*shared Cluster"):
        Producer(cluster, security_protocol="SSL", ssl_cafile=certificates.other_ca)
