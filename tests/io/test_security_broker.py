"""TLS, SASL and mutual TLS against a real Apache Kafka broker (the ``secure_kafka`` fixture)."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.static.primitive import i8

from gengroup import (
    Admin,
    AuthenticationError,
    Cluster,
    ConsumerGroup,
    Generation,
    GroupAuthorizationFailed,
    Producer,
    TLSError,
    TopicAuthorizationFailed,
    TopicPartition,
)
from gengroup.io.connection import open_connection
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import SECURE_PLAIN_USERS, SECURE_SCRAM_USERS
from tests.io import first_request

pytestmark = pytest.mark.kafka

#: Guards against a hang only: every operation here ends well within it.
HANG_GUARD = 60.0
GROUP = {"session_timeout": 10.0, "heartbeat_interval": 1.0, "join_backoff": 0.1}


def unsecured_jwt(subject: str, lifetime: float = 3600.0) -> str:
    """An unsigned JWT, which the broker's unsecured OAUTHBEARER validator accepts."""

    def part(claims: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")

    now = time.time()
    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'iat': now, 'exp': now + lifetime})}."


class TokenProvider:
    """An OAUTHBEARER token provider that counts its calls."""

    def __init__(self, subject: str) -> None:
        self.subject = subject
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        return unsecured_jwt(self.subject)


def sasl_settings(broker: KafkaBroker, mechanism: str) -> dict[str, Any]:
    """The settings of a client of the SASL_SSL listener with ``mechanism``'s user."""
    assert broker.security is not None
    settings: dict[str, Any] = {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": broker.security.certificates.ca,
        "sasl_mechanism": mechanism,
    }
    if mechanism == "OAUTHBEARER":
        settings["sasl_oauth_token_provider"] = TokenProvider("carol")
    else:
        users = SECURE_PLAIN_USERS if mechanism == "PLAIN" else SECURE_SCRAM_USERS
        [(user, password)] = users.items()
        settings |= {"sasl_username": user, "sasl_password": password}
    return settings


def failed_authentications(broker: KafkaBroker) -> int:
    """How many failed authentications the broker has logged."""
    assert broker.log_path is not None
    return broker.log_path.read_text(errors="replace").count("Failed authentication with")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
async def test_produce_consume_as_a_group_and_commit_over_sasl_ssl(
    secure_kafka: KafkaBroker, unique_name: Callable[[str], str], mechanism: str
) -> None:
    bootstrap = secure_kafka.listener_bootstrap("SASL_SSL")
    settings = sasl_settings(secure_kafka, mechanism)
    topic, group_id = unique_name("secure"), unique_name("secure-group")
    tps = [TopicPartition(topic, p) for p in (0, 1)]
    consumed: dict[TopicPartition, list[bytes]] = {tp: [] for tp in tps}

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        async for batch in gen.fetch(tp):
            consumed[tp].extend(r.value or b"" for r in batch.records)
            gen.mark(tp, batch.next_offset)

    with anyio.fail_after(HANG_GUARD):
        async with Admin(bootstrap, **settings) as admin:
            await admin.create_topics({topic: 2})
            async with Producer(bootstrap, **settings) as producer:
                for i in range(10):
                    await producer.send(topic, b"%d" % i, partition=i % 2)
            async with ConsumerGroup(group_id, [topic], bootstrap, **settings, **GROUP) as group:
                gen = await group.next()
                assert set(gen.assignments) == set(tps)
                for tp in tps:
                    gen.start_soon(worker, gen, tp)
                while sum(map(len, consumed.values())) < 10:
                    await anyio.sleep(0.05)
                await gen.commit()
                gen.cancel()
            assert await admin.fetch_offsets(group_id) == {tps[0]: 5, tps[1]: 5}
    assert consumed == {
        tps[0]: [b"0", b"2", b"4", b"6", b"8"],
        tps[1]: [b"1", b"3", b"5", b"7", b"9"],
    }
    provider = settings.get("sasl_oauth_token_provider")
    if provider is not None:  # each connection asked for a token
        assert provider.calls >= 2


@pytest.mark.parametrize("client", ["admin", "producer", "group"])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_wrong_password_is_one_authentication_error(
    secure_kafka: KafkaBroker,
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
    client: str,
    mechanism: str,
) -> None:
    bootstrap = secure_kafka.listener_bootstrap("SASL_SSL")
    settings = sasl_settings(secure_kafka, mechanism) | {"sasl_password": "wrong"}
    before = failed_authentications(secure_kafka)
    caplog.set_level(logging.WARNING, logger="gengroup")
    with anyio.fail_after(HANG_GUARD), pytest.raises(AuthenticationError) as info:
        await first_request(
            client, bootstrap, unique_name("secure"), settings, GROUP, unique_name("g")
        )
    error = info.value
    assert not isinstance(error, TLSError)
    assert (error.mechanism, error.broker) == (mechanism, bootstrap)
    assert f"{mechanism} authentication with {bootstrap} failed" in str(error)
    assert "Invalid username or password" in str(error) or "Authentication failed" in str(error)
    attempts = [r for r in caplog.records if "authentication with" in r.getMessage()]
    assert len(attempts) == 1, [r.getMessage() for r in attempts]
    # The broker saw exactly one attempt too (its log line may trail the answer).
    with anyio.fail_after(HANG_GUARD):
        while failed_authentications(secure_kafka) == before:
            await anyio.sleep(0.05)
    assert failed_authentications(secure_kafka) == before + 1


async def test_unknown_ca_is_a_tls_error(secure_kafka: KafkaBroker) -> None:
    assert secure_kafka.security is not None
    settings = sasl_settings(secure_kafka, "PLAIN")
    settings["ssl_cafile"] = secure_kafka.security.certificates.other_ca
    with anyio.fail_after(HANG_GUARD), pytest.raises(TLSError) as info:
        async with Admin(secure_kafka.listener_bootstrap("SASL_SSL"), **settings) as admin:
            await admin.list_groups()
    assert info.value.reason == "certificate verify failed"
    assert "unable to get local issuer certificate" in str(info.value)


async def test_wrong_host_name_is_a_tls_error(secure_kafka: KafkaBroker) -> None:
    """The WRONG_HOST listener's certificate names only kafka.invalid, not 127.0.0.1."""
    assert secure_kafka.security is not None
    bootstrap = secure_kafka.listener_bootstrap("WRONG_HOST")
    ca = secure_kafka.security.certificates.ca
    with anyio.fail_after(HANG_GUARD), pytest.raises(TLSError) as info:
        async with Producer(bootstrap, security_protocol="SSL", ssl_cafile=ca) as producer:
            await producer.send("never", b"x")
    assert info.value.reason == "hostname mismatch"
    assert "not valid for '127.0.0.1'" in str(info.value)
    # The certificate is otherwise sound: without the host name check it connects.
    with anyio.fail_after(HANG_GUARD):
        async with Cluster(
            bootstrap, security_protocol="SSL", ssl_cafile=ca, ssl_check_hostname=False
        ) as cluster:
            await cluster.refresh_metadata([])
            assert list(cluster.brokers) == [1]


async def test_mutual_tls(secure_kafka: KafkaBroker, unique_name: Callable[[str], str]) -> None:
    assert secure_kafka.security is not None
    certs = secure_kafka.security.certificates
    bootstrap = secure_kafka.listener_bootstrap("MTLS")
    topic = unique_name("mtls")
    mtls: dict[str, Any] = {
        "security_protocol": "SSL",
        "ssl_cafile": certs.ca,
        "ssl_certfile": certs.client_cert,
        "ssl_keyfile": certs.client_key,
    }
    with anyio.fail_after(HANG_GUARD):
        async with Admin(bootstrap, **mtls) as admin, Producer(admin.cluster) as producer:
            await admin.create_topics({topic: 1})
            meta = await producer.send(topic, b"signed")
            assert meta.offset == 0
    # Without a client certificate the broker refuses the handshake.
    with anyio.fail_after(HANG_GUARD), pytest.raises(TLSError) as info:
        async with Admin(bootstrap, security_protocol="SSL", ssl_cafile=certs.ca) as admin:
            await admin.list_groups()
    assert info.value.reason == "rejected by the broker"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "OAUTHBEARER"])
async def test_connections_reauthenticate_before_their_session_expires(
    secure_kafka: KafkaBroker, unique_name: Callable[[str], str], mechanism: str
) -> None:
    """On the REAUTH listener sessions last 4 s (KIP-368): the same connection goes on
    serving requests, sent all along, across several re-authentications."""
    settings = sasl_settings(secure_kafka, mechanism)
    topic = unique_name("reauth")
    acked: list[int] = []
    with anyio.fail_after(HANG_GUARD):
        async with Cluster(secure_kafka.listener_bootstrap("REAUTH"), **settings) as cluster:
            await Admin(cluster).create_topics({topic: 1})
            conn = await cluster.connection(1)
            assert conn.session_lifetime is not None and 0 < conn.session_lifetime <= 4.0
            async with Producer(cluster, linger=0.0) as producer:
                while conn.reauthentications < 2:
                    acked.append((await producer.send(topic, b"x", partition=0)).offset)
                    await cluster.refresh_metadata([topic])
                    await anyio.sleep(0.02)
            assert await cluster.connection(1) is conn and conn.is_usable
    assert acked == list(range(len(acked)))
    provider = settings.get("sasl_oauth_token_provider")
    if provider is not None:  # a fresh token for every re-authentication
        assert provider.calls >= 3


# Kafka's ACL enums (AclResourceType, AclOperation, AclPermissionType, PatternType).
RESOURCE_TOPIC, RESOURCE_GROUP = 2, 3
ALL, ALLOW, LITERAL = 2, 3, 3


async def allow_only(broker: KafkaBroker, principal: str, resource_type: int, name: str) -> None:
    """Create an ACL letting only ``principal`` use the resource (others are then denied)."""
    creation = AclCreation(
        resource_type=i8(resource_type),
        resource_name=name,
        resource_pattern_type=i8(LITERAL),
        principal=principal,
        host="*",
        operation=i8(ALL),
        permission_type=i8(ALLOW),
    )
    # The PLAINTEXT listener's principal, User:ANONYMOUS, is the super user.
    async with open_connection(broker.host, broker.port) as conn:
        resp = await conn.request(CreateAclsRequest(creations=(creation,)))
    assert [r.error_code for r in resp.results] == [0]


async def test_acls_reach_the_user_as_typed_errors(
    secure_kafka: KafkaBroker, unique_name: Callable[[str], str]
) -> None:
    """alice may use neither a topic nor a group that an ACL reserves for bob."""
    bootstrap = secure_kafka.listener_bootstrap("SASL_SSL")
    alice = sasl_settings(secure_kafka, "PLAIN")
    topic, group_id = unique_name("acl"), unique_name("acl-group")
    with anyio.fail_after(HANG_GUARD):
        async with Admin(bootstrap, **alice) as admin:
            await admin.create_topics({topic: 1})
            await allow_only(secure_kafka, "User:bob", RESOURCE_GROUP, group_id)
            await allow_only(secure_kafka, "User:bob", RESOURCE_TOPIC, topic)
            # The ACLs reach the broker's authorizer through the metadata log,
            # in its order: once the topic's is in force, the group's is too.
            while (await admin.cluster.refresh_metadata([topic]))[topic].error_code == 0:
                await anyio.sleep(0.05)
        with pytest.raises(TopicAuthorizationFailed, match=topic):
            async with Producer(bootstrap, **alice) as producer:
                await producer.send(topic, b"denied")
        with pytest.raises(GroupAuthorizationFailed):
            async with ConsumerGroup(group_id, [topic], bootstrap, **alice, **GROUP) as group:
                await group.next()
        bob = sasl_settings(secure_kafka, "SCRAM-SHA-256")
        async with Producer(bootstrap, **bob) as producer:
            assert (await producer.send(topic, b"allowed")).offset == 0
