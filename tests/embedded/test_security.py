"""TLS and SASL on the embedded broker, with gengroup's own clients and with librdkafka.

Everything runs in virtual time (trio's ``MockClock``) except the librdkafka
tests, whose client has threads and a clock of its own. The certificates
come from the harness's ``make_certificates`` (trustme): the test CA, the
broker's certificate for 127.0.0.1, a client certificate, and an unrelated CA.
The raw-protocol tests drive one connection frame by frame over an in-memory
stream, to check the SASL states Kafka's authenticator has (and
``tests/conformance/test_sasl_conformance.py`` compares them with Kafka's).
"""

from __future__ import annotations

import logging
import signal
import ssl
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import anyio.abc
import anyio.to_thread
import confluent_kafka
import pytest
import scramp  # type: ignore[import-untyped]
import trio
import trio.testing
from anyio.streams.tls import TLSStream
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v0.request import (
    SaslAuthenticateRequest as SaslAuthenticateV0,
)
from kio.schema.sasl_authenticate.v2.request import (
    SaslAuthenticateRequest as SaslAuthenticateV2,
)
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest as SaslHandshakeV1

from gengroup import (
    Admin,
    AuthenticationError,
    Cluster,
    ClusterUnreachable,
    ConfigError,
    ConsumerGroup,
    Generation,
    KafkaConnectionError,
    Producer,
    TLSError,
    TopicPartition,
)
from gengroup.broker import BrokerSettings, Fail, FakeCluster, ServerSecurity
from gengroup.io.cluster import AUTH_REFUSAL_MEMORY
from gengroup.io.connection import open_connection
from gengroup.io.security import Security
from gengroup.protocol.versions import ApiKey
from gengroup.testing.kafka import Certificates, make_certificates

from ..conformance.client import CLOSED, RawConnection
from ..io import first_request
from ..io.test_connection import cancelled_natively, metadata_request
from . import api_versions, metadata
from .test_cli import command

USERS: Final = {"alice": "alice-secret", "bob": "bob-secret"}
MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
GROUP: Final = {"session_timeout": 10.0, "heartbeat_interval": 1.0, "join_backoff": 0.1}
#: Guards against a hang only (virtual seconds under the mock clock).
HANG_GUARD: Final = 120.0
#: The same, in real seconds, for librdkafka.
REAL_HANG_GUARD: Final = 60.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("embedded-certificates"))


def server(certs: Certificates, protocol: str = "SASL_SSL", **kwargs: Any) -> ServerSecurity:
    """The broker's security: ``protocol`` with the test certificate and users."""
    if protocol.endswith("SSL"):
        kwargs.setdefault("ssl_certfile", certs.server)
    if protocol.startswith("SASL_"):
        kwargs.setdefault("users", USERS)
    return ServerSecurity(security_protocol=protocol, **kwargs)  # type: ignore[arg-type]


def client(
    certs: Certificates,
    protocol: str = "SASL_SSL",
    mechanism: str = "SCRAM-SHA-512",
    user: str = "alice",
    password: str | None = None,
) -> dict[str, Any]:
    """The client settings of ``user`` for a broker of :func:`server`."""
    settings: dict[str, Any] = {"security_protocol": protocol}
    if protocol.endswith("SSL"):
        settings["ssl_cafile"] = certs.ca
    if protocol.startswith("SASL_"):
        settings |= {
            "sasl_mechanism": mechanism,
            "sasl_username": user,
            "sasl_password": USERS[user] if password is None else password,
        }
    return settings


async def produce_and_consume(bootstrap: str, settings: dict[str, Any]) -> None:
    """Admin creates a topic, Producer writes 6 records, a group reads and commits them."""
    tps = [TopicPartition("t", p) for p in (0, 1)]
    seen: list[bytes] = []

    async def worker(gen: Generation, tp: TopicPartition) -> None:
        async for batch in gen.fetch(tp):
            seen.extend(r.value or b"" for r in batch.records)
            gen.mark(tp, batch.next_offset)

    async with Admin(bootstrap, **settings) as admin:
        await admin.create_topics({"t": 2})
        async with Producer(bootstrap, **settings) as producer:
            for i in range(6):
                await producer.send("t", b"%d" % i, partition=i % 2)
        async with ConsumerGroup("g", ["t"], bootstrap, **settings, **GROUP) as group:
            gen = await group.next()
            assert set(gen.assignments) == set(tps)
            for tp in tps:
                gen.start_soon(worker, gen, tp)
            while len(seen) < 6:
                await anyio.sleep(0.05)
            await gen.commit()
            gen.cancel()
        assert await admin.fetch_offsets("g") == {tps[0]: 3, tps[1]: 3}
    assert sorted(seen) == [b"%d" % i for i in range(6)]


# --------------------------------------------------------------------------- gengroup's clients


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT"])
async def test_admin_producer_and_group_with_each_mechanism(
    autojump_clock: trio.testing.MockClock, certs: Certificates, protocol: str, mechanism: str
) -> None:
    security = server(certs, protocol)
    async with FakeCluster(security=security, initial_rebalance_delay_ms=0) as cluster:
        with anyio.fail_after(HANG_GUARD):
            await produce_and_consume(cluster.bootstrap, client(certs, protocol, mechanism))
        # Admin, Producer and the group each opened at least one connection.
        assert cluster.servers[0].authentications >= 3
        assert cluster.failed_authentications == 0
        assert cluster.errors == []


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_tls_on_asyncio(certs: Certificates, protocol: str) -> None:
    """The same clients on asyncio, real time: over TLS every frame is encrypted and
    written in one step by the connection (io/inplace.py), not through anyio's send."""

    async def scenario() -> None:
        security = server(certs, protocol)
        async with FakeCluster(security=security, initial_rebalance_delay_ms=0) as cluster:
            with anyio.fail_after(REAL_HANG_GUARD):
                await produce_and_consume(cluster.bootstrap, client(certs, protocol))
            assert cluster.errors == []

    anyio.run(scenario, backend="asyncio")


def test_a_request_cancelled_natively_over_tls_keeps_the_connection_usable(
    certs: Certificates,
) -> None:
    """asyncio's own cancellation (``task.cancel()``: ``asyncio.timeout``, ``wait_for``),
    which no shield stops, landing right after a request was written: anyio's TLS
    stream counted it as breaking the stream (the records encrypted, not yet written),
    so every such cancellation failed the connection and the requests in flight on it.
    Now the request is written, its answer dropped, and the connection goes on."""

    async def scenario() -> None:
        security = server(certs, "SSL")
        async with FakeCluster(security=security) as cluster:
            host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
            settings = Security(security_protocol="SSL", ssl_cafile=certs.ca)
            async with open_connection(host, int(port), security=settings) as conn:
                assert conn._write is not None  # the connection encrypts and writes itself
                for _ in range(10):
                    await cancelled_natively(conn)
                    with anyio.fail_after(REAL_HANG_GUARD):
                        await conn.request(metadata_request())
                assert conn.is_usable

    anyio.run(scenario, backend="asyncio")


async def test_tls_only(autojump_clock: trio.testing.MockClock, certs: Certificates) -> None:
    async with FakeCluster(security=server(certs, "SSL"), initial_rebalance_delay_ms=0) as cluster:
        with anyio.fail_after(HANG_GUARD):
            await produce_and_consume(cluster.bootstrap, client(certs, "SSL"))
        assert cluster.servers[0].authentications == 0  # no SASL
        assert cluster.failed_authentications == 0


async def test_mutual_tls(autojump_clock: trio.testing.MockClock, certs: Certificates) -> None:
    security = server(certs, "SSL", ssl_cafile=certs.ca)
    mtls = client(certs, "SSL") | {
        "ssl_certfile": certs.client_cert,
        "ssl_keyfile": certs.client_key,
    }
    async with FakeCluster(security=security, topics={"t": 1}) as cluster:
        with anyio.fail_after(HANG_GUARD):
            async with Producer(cluster.bootstrap, **mtls) as producer:
                assert (await producer.send("t", b"signed")).offset == 0
            assert cluster.failed_authentications == 0
            # Without a client certificate the broker refuses the handshake, and says so.
            with pytest.raises(TLSError) as info:
                async with Admin(cluster.bootstrap, **client(certs, "SSL")) as admin:
                    await admin.list_groups()
        assert info.value.reason == "rejected by the broker"
        assert cluster.failed_authentications == 1


async def test_unknown_ca_is_a_tls_error(
    autojump_clock: trio.testing.MockClock, certs: Certificates
) -> None:
    settings = client(certs) | {"ssl_cafile": certs.other_ca}
    async with FakeCluster(security=server(certs)) as cluster:
        with anyio.fail_after(HANG_GUARD), pytest.raises(TLSError) as info:
            async with Admin(cluster.bootstrap, **settings) as admin:
                await admin.list_groups()
        assert info.value.reason == "certificate verify failed"
        assert "unable to get local issuer certificate" in str(info.value)
        assert cluster.servers[0].authentications == 0


async def test_tls_over_an_in_memory_connection(
    autojump_clock: trio.testing.MockClock, certs: Certificates
) -> None:
    """connect_memory() is served like the listener: TLS first, then SASL."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    async with FakeCluster(security=server(certs, session_lifetime_ms=1000)) as cluster:
        stream = await TLSStream.wrap(
            cluster.connect_memory(),
            hostname="127.0.0.1",
            ssl_context=context,
            standard_compatible=False,
        )
        async with stream:
            r = RawConnection(stream)
            assert (await r.send(api_versions(3))).error_code == ErrorCode.none
            assert answer(await r.send(handshake("PLAIN"))) == ("none", list(MECHANISMS))
            assert answer(await r.send(authenticate(PLAIN_ALICE))) == ("none", "", 1000)
            await anyio.sleep(2)  # virtual: the session expired
            assert await r.send(api_versions(3)) == CLOSED
        assert cluster.servers[0].expired_sessions == 1


async def test_a_client_that_never_finishes_the_tls_handshake_is_dropped_when_idle(
    autojump_clock: trio.testing.MockClock, certs: Certificates
) -> None:
    settings = BrokerSettings(connections_max_idle=30.0)
    async with FakeCluster(security=server(certs, "SSL"), settings=settings) as cluster:
        async with cluster.connect_memory() as stream:
            t0 = trio.current_time()
            with pytest.raises(anyio.EndOfStream):
                await stream.receive()
            assert trio.current_time() - t0 == pytest.approx(30.0)
        assert cluster.failed_authentications == 0


@pytest.mark.parametrize("kind", ["admin", "producer", "group"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_wrong_password_is_one_authentication_error(
    autojump_clock: trio.testing.MockClock,
    certs: Certificates,
    caplog: pytest.LogCaptureFixture,
    kind: str,
    mechanism: str,
) -> None:
    settings = client(certs, mechanism=mechanism, password="wrong")
    caplog.set_level(logging.INFO, logger="gengroup")
    async with FakeCluster(security=server(certs), topics={"t": 1}) as cluster:
        bootstrap = cluster.bootstrap
        with anyio.fail_after(HANG_GUARD), pytest.raises(AuthenticationError) as info:
            await first_request(kind, bootstrap, "t", settings, GROUP)
        # Some virtual time for a retry storm to show, if there were one.
        await anyio.sleep(30)
        assert cluster.failed_authentications == 1
    error = info.value
    assert not isinstance(error, TLSError)
    assert (error.mechanism, error.broker) == (mechanism, bootstrap)
    assert f"{mechanism} authentication with {bootstrap} failed: " in str(error)
    if mechanism == "PLAIN":
        assert str(error).endswith("Authentication failed: Invalid username or password")
    else:  # Kafka's generic message: it does not tell whether the user exists
        assert str(error).endswith(
            "Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {mechanism}"
        )
    client_lines = [r for r in caplog.records if r.name == "gengroup.connection"]
    broker_lines = [r for r in caplog.records if r.name == "gengroup.broker"]
    assert len([r for r in client_lines if "authentication with" in r.getMessage()]) == 1
    assert len([r for r in broker_lines if "failed authentication" in r.getMessage()]) == 1


async def test_a_refused_login_is_the_answer_for_a_while_without_logging_in_again(
    autojump_clock: trio.testing.MockClock, certs: Certificates
) -> None:
    """After a refusal, the same client's next connections (a group's final commit
    and LeaveGroup, other channels) are answered with it instead of another
    failed login, for AUTH_REFUSAL_MEMORY; then it logs in again."""
    settings = client(certs, mechanism="PLAIN", password="wrong")
    async with (
        FakeCluster(security=server(certs), topics={"t": 1}) as cluster,
        Cluster(cluster.bootstrap, **settings) as pool,
    ):
        for _ in range(3):
            with anyio.fail_after(HANG_GUARD), pytest.raises(AuthenticationError, match="PLAIN"):
                await pool.any_connection()
        assert cluster.failed_authentications == 1
        await anyio.sleep(AUTH_REFUSAL_MEMORY)
        with anyio.fail_after(HANG_GUARD), pytest.raises(AuthenticationError):
            await pool.any_connection()
        assert cluster.failed_authentications == 2


async def test_senders_waiting_when_a_login_is_refused_each_get_their_own_error(
    autojump_clock: trio.testing.MockClock, certs: Certificates
) -> None:
    """The password changes on the broker while records are queued: each waiting
    send raises an AuthenticationError of its own, caused by the batch's. It
    used to be the same object in every task, caused by itself, so that a
    ``while e: e = e.__cause__`` loop never ended."""
    users = dict(USERS)
    security = server(certs, "SASL_PLAINTEXT", sasl_mechanisms=["PLAIN"], users=users)
    settings = client(certs, "SASL_PLAINTEXT", "PLAIN")
    errors: list[BaseException] = []

    async def send(producer: Producer) -> None:
        with pytest.raises(AuthenticationError) as info:
            await producer.send("t", b"x", partition=0)
        errors.append(info.value)

    async with FakeCluster(security=security, topics={"t": 1}) as cluster:
        with anyio.fail_after(HANG_GUARD):
            async with Producer(cluster.bootstrap, **settings, linger=1.0) as producer:
                assert (await producer.send("t", b"warm")).offset == 0
                users["alice"] = "rotated"
                cluster.cut_connections()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(send, producer)
                    tg.start_soon(send, producer)
    first, second = errors
    assert first is not second
    for error in errors:
        chain = [error]
        while chain[-1].__cause__ is not None and len(chain) < 10:
            chain.append(chain[-1].__cause__)
        assert len(chain) == 2 and chain[1] is not error
        assert type(chain[1]) is AuthenticationError and str(chain[1]) == str(error)
    assert first.__cause__ is second.__cause__


async def test_unsupported_mechanism(
    autojump_clock: trio.testing.MockClock, certs: Certificates
) -> None:
    security = server(certs, sasl_mechanisms=["PLAIN"])
    async with FakeCluster(security=security) as cluster:
        with anyio.fail_after(HANG_GUARD), pytest.raises(AuthenticationError) as info:
            async with Admin(cluster.bootstrap, **client(certs)) as admin:
                await admin.list_groups()
        assert "the broker does not enable SCRAM-SHA-512 (enabled: PLAIN)" in str(info.value)
        assert cluster.failed_authentications == 1


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT"])
async def test_a_group_that_forgot_sasl_is_told_so_within_the_unreachable_timeout(
    autojump_clock: trio.testing.MockClock,
    certs: Certificates,
    caplog: pytest.LogCaptureFixture,
    protocol: str,
) -> None:
    """A listener that requires SASL closes every connection on its first request
    after ApiVersions: the cluster is unusable, said once (WARNING) with the
    likely cause, and the group ends once that lasted ``unreachable_timeout``
    (it reconnected forever, saying nothing above INFO)."""
    settings = client(certs, protocol.removeprefix("SASL_"))  # no SASL settings
    caplog.set_level(logging.INFO, logger="gengroup")
    async with FakeCluster(security=server(certs, protocol), topics={"t": 1}) as cluster:
        start = anyio.current_time()
        with anyio.fail_after(HANG_GUARD), pytest.raises(ClusterUnreachable) as info:
            async with ConsumerGroup(
                "g", ["t"], cluster.bootstrap, **settings, **GROUP, unreachable_timeout=20
            ) as group:
                await group.next()
        took = anyio.current_time() - start
    assert info.value.exhausted and 20 <= took < 30
    assert "does the listener require SASL? check security_protocol" in str(info.value)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage().split(":")[0] for r in warnings] == ["cluster unreachable"]


async def test_a_plaintext_client_of_a_tls_listener_is_told_to_check_security_protocol(
    autojump_clock: trio.testing.MockClock, certs: Certificates
) -> None:
    async with FakeCluster(security=server(certs, "SSL")) as cluster:
        with anyio.fail_after(HANG_GUARD), pytest.raises(TimeoutError) as info:
            async with Admin(cluster.bootstrap) as admin:  # its timeout, 30 s, comes first
                await admin.list_groups()
    assert "does the broker speak TLS on this port? check security_protocol" in str(info.value)


@pytest.mark.parametrize("client_kind", ["admin", "producer"])
async def test_a_client_without_sasl_of_a_sasl_listener_is_asked_about_sasl(
    autojump_clock: trio.testing.MockClock, certs: Certificates, client_kind: str
) -> None:
    """An Admin call or a send gives up at its own deadline, before the
    cluster counts as unreachable: its error asks too (the hint was only in
    the WARNING and in ClusterUnreachable)."""
    hint = "does the listener require SASL? check security_protocol"
    async with FakeCluster(security=server(certs, "SASL_PLAINTEXT"), topics={"t": 1}) as cluster:
        with anyio.fail_after(HANG_GUARD):
            if client_kind == "admin":
                with pytest.raises(TimeoutError) as info:
                    async with Admin(cluster.bootstrap, timeout=10.0) as admin:
                        await admin.list_groups()
            else:
                with pytest.raises(KafkaConnectionError) as info:
                    async with Producer(cluster.bootstrap, max_block=10.0) as producer:
                        await producer.send("t", b"x")
    assert hint in str(info.value)


async def test_a_sasl_client_of_a_listener_without_sasl_is_told_so(
    autojump_clock: trio.testing.MockClock, certs: Certificates
) -> None:
    async with FakeCluster(security=server(certs, "SSL")) as cluster:
        with anyio.fail_after(HANG_GUARD), pytest.raises(AuthenticationError) as info:
            async with Admin(cluster.bootstrap, **client(certs, "SASL_SSL")) as admin:
                await admin.list_groups()
    assert "the listener does not use SASL (check security_protocol)" in str(info.value)


async def test_fault_controls_see_the_sasl_exchange(
    autojump_clock: trio.testing.MockClock, certs: Certificates
) -> None:
    """A test can make the broker refuse an authentication it would accept (once here)."""
    async with FakeCluster(security=server(certs), topics={"t": 1}) as cluster:
        cluster.control(
            ApiKey.SASL_AUTHENTICATE,
            lambda call: Fail(ErrorCode.sasl_authentication_failed, "locked out for the test"),
            once=True,
        )
        with anyio.fail_after(HANG_GUARD):
            with pytest.raises(AuthenticationError, match="locked out for the test"):
                async with Admin(cluster.bootstrap, **client(certs)) as admin:
                    await admin.list_groups()
            async with Producer(cluster.bootstrap, **client(certs)) as producer:
                assert (await producer.send("t", b"x")).offset == 0


async def test_connections_reauthenticate_while_requests_flow(
    autojump_clock: trio.testing.MockClock, certs: Certificates
) -> None:
    """Sessions of 10 s: the same connection re-authenticates (at 85-95 % of each
    session) while produce and metadata requests go on, and none is refused."""
    security = server(certs, session_lifetime_ms=10_000)
    acked: list[int] = []
    async with FakeCluster(security=security, topics={"t": 1}) as cluster:
        with anyio.fail_after(HANG_GUARD):
            async with Cluster(cluster.bootstrap, **client(certs, mechanism="PLAIN")) as c:
                await c.refresh_metadata(["t"])
                conn = await c.connection(0)
                assert conn.session_lifetime == 10.0
                async with Producer(c, linger=0.0) as producer:
                    while conn.reauthentications < 3:
                        acked.append((await producer.send("t", b"x")).offset)
                        await c.refresh_metadata(["t"])
                        await anyio.sleep(0.5)
                assert await c.connection(0) is conn and conn.is_usable
        assert cluster.reauthentications >= 3
        assert cluster.servers[0].expired_sessions == 0
        assert cluster.failed_authentications == 0
    assert acked == list(range(len(acked)))


async def test_a_group_keeps_its_generation_across_reauthentications(
    autojump_clock: trio.testing.MockClock, certs: Certificates
) -> None:
    """Heartbeats, a parked long-poll Fetch and commits go on across re-authentications."""
    security = server(certs, "SASL_PLAINTEXT", session_lifetime_ms=5_000)
    settings = client(certs, "SASL_PLAINTEXT", "SCRAM-SHA-256", user="bob")
    async with FakeCluster(
        security=security, topics={"t": 1}, initial_rebalance_delay_ms=0
    ) as cluster:
        with anyio.fail_after(HANG_GUARD):
            async with ConsumerGroup(
                "g", ["t"], cluster.bootstrap, **settings, **GROUP, fetch_max_wait=2.0
            ) as group:
                gen = await group.next()
                tp = TopicPartition("t", 0)
                seen: list[bytes] = []

                async def worker() -> None:
                    async for batch in gen.fetch(tp):
                        seen.extend(r.value or b"" for r in batch.records)
                        gen.mark(tp, batch.next_offset)

                gen.start_soon(worker)
                for i in range(30):
                    cluster.produce("t", [b"%d" % i])
                    await anyio.sleep(1.0)
                while len(seen) < 30:
                    await anyio.sleep(0.1)
                await gen.commit()
                assert not gen.ended
                assert gen.id == 1
                gen.cancel()
        assert cluster.reauthentications >= 4
        assert cluster.servers[0].expired_sessions == 0
        assert cluster.committed_offsets("g") == {tp: 30}


async def test_serve_with_sasl_ssl(certs: Certificates) -> None:
    """``gengroup serve`` with the security options; a SCRAM client connects."""
    cmd = command(
        "serve",
        "--security-protocol",
        "sasl_ssl",
        "--ssl-certfile",
        str(certs.server),
        "--sasl-mechanisms",
        "SCRAM-SHA-512",
        "--sasl-user",
        "alice:alice-secret",
        "--sasl-session-lifetime-ms",
        "60000",
        "--topic",
        "t:1",
    )
    async with await anyio.open_process(cmd) as process:
        assert process.stdout is not None
        try:
            with anyio.fail_after(REAL_HANG_GUARD):
                line = b""
                while not line.endswith(b"\n"):
                    line += await process.stdout.receive(1)
                bootstrap = line.decode().split()[1]
                async with Cluster(bootstrap, **client(certs)) as c:
                    await c.refresh_metadata(["t"])
                    conn = await c.connection(0)
                    assert conn.session_lifetime == 60.0
                    async with Producer(c) as producer:
                        assert (await producer.send("t", b"x")).offset == 0
                with pytest.raises(AuthenticationError, match="enabled: SCRAM-SHA-512"):
                    async with Admin(bootstrap, **client(certs, mechanism="PLAIN")) as admin:
                        await admin.list_groups()
        finally:
            process.send_signal(signal.SIGTERM)
        with anyio.fail_after(REAL_HANG_GUARD):
            assert await process.wait() == 0
            assert process.stderr is not None
            err = b"".join([chunk async for chunk in process.stderr]).decode()
    # One line for the refused client, none for the others.
    assert err.splitlines() == [
        "gengroup serve: broker 0: failed authentication with /127.0.0.1 (SASL): "
        "Unsupported SASL mechanism PLAIN"
    ]


def test_serve_rejects_bad_security_options(certs: Certificates) -> None:
    import subprocess

    cases = {
        ("--security-protocol", "SASL_SSL", "--sasl-user", "a:b"): "needs the broker's certificate",
        ("--sasl-user", "a:b"): "--sasl-user set, but --security-protocol='PLAINTEXT' uses no SASL",
        ("--security-protocol", "SASL_PLAINTEXT"): "needs --sasl-user",
        (
            "--security-protocol",
            "SASL_PLAINTEXT",
            "--sasl-user",
            "a:b",
            "--sasl-mechanisms",
            "GSSAPI",
        ): "--sasl-mechanisms must name one or more of",
        ("--security-protocol", "SSL", "--ssl-certfile", str(certs.ca)): "cannot be loaded",
    }
    for args, message in cases.items():
        done = subprocess.run(command("serve", *args), capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("gengroup serve: ") and message in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1, done.stderr


# --------------------------------------------------------------------------- settings


def test_server_security_is_validated(certs: Certificates) -> None:
    with pytest.raises(ConfigError, match="security_protocol must be one of"):
        ServerSecurity(security_protocol="TLS")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs the broker's certificate"):
        ServerSecurity(security_protocol="SSL")
    with pytest.raises(ConfigError, match="uses no TLS"):
        ServerSecurity(security_protocol="SASL_PLAINTEXT", ssl_certfile=certs.server, users=USERS)
    with pytest.raises(ConfigError, match="is not a file"):
        ServerSecurity(security_protocol="SSL", ssl_certfile="/nonexistent.pem")
    with pytest.raises(ConfigError, match="needs users"):
        ServerSecurity(security_protocol="SASL_PLAINTEXT")
    with pytest.raises(ConfigError, match="must name one or more of"):
        ServerSecurity(
            security_protocol="SASL_PLAINTEXT",
            users=USERS,
            sasl_mechanisms=["OAUTHBEARER"],  # type: ignore[list-item]
        )
    with pytest.raises(ConfigError, match="session_lifetime_ms set, but"):
        ServerSecurity(session_lifetime_ms=1000)
    with pytest.raises(ConfigError, match="positive number of milliseconds"):
        ServerSecurity(security_protocol="SASL_PLAINTEXT", users=USERS, session_lifetime_ms=0)
    with pytest.raises(ConfigError, match="cannot be loaded"):
        FakeCluster(security=ServerSecurity(security_protocol="SSL", ssl_certfile=certs.ca))
    ok = ServerSecurity(
        security_protocol="sasl_ssl",
        ssl_certfile=certs.server,
        users=USERS,
        sasl_mechanisms=["scram-sha-256"],  # type: ignore[list-item]
    )
    assert (ok.security_protocol, ok.mechanisms) == ("SASL_SSL", ("SCRAM-SHA-256",))
    assert "secret" not in repr(ok)


# --------------------------------------------------------------------------- raw protocol

PLAIN_ALICE: Final = b"\0alice\0alice-secret"


@asynccontextmanager
async def raw(cluster: FakeCluster) -> AsyncIterator[RawConnection]:
    stream = cluster.connect_memory()
    async with stream:
        yield RawConnection(stream)


def handshake(mechanism: str, version: int = 1) -> Any:
    cls = SaslHandshakeV1 if version == 1 else SaslHandshakeV0
    return cls(mechanism=mechanism)


def authenticate(token: bytes, version: int = 2) -> Any:
    return (SaslAuthenticateV2 if version == 2 else SaslAuthenticateV0)(auth_bytes=token)


def answer(resp: Any) -> tuple[Any, ...]:
    """A SaslHandshake or SaslAuthenticate answer as a tuple, for comparisons."""
    if resp == CLOSED:
        return (CLOSED,)
    if hasattr(resp, "mechanisms"):
        return (resp.error_code.name, sorted(resp.mechanisms))
    lifetime = getattr(resp, "session_lifetime", None)
    ms = None if lifetime is None else int(lifetime.total_seconds() * 1000)
    return (resp.error_code.name, resp.error_message, ms)


async def plain_log_in(r: RawConnection, token: bytes = PLAIN_ALICE) -> tuple[Any, ...]:
    """A PLAIN handshake and authentication with ``token`` (alice's) on ``r``: the
    :func:`answer` to the SaslAuthenticate."""
    await r.send(handshake("PLAIN"))
    return answer(await r.send(authenticate(token)))


@pytest.fixture
async def plain_cluster() -> AsyncIterator[FakeCluster]:
    security = ServerSecurity(
        security_protocol="SASL_PLAINTEXT", users=USERS, session_lifetime_ms=4000
    )
    async with FakeCluster(security=security, topics={"t": 1}) as cluster:
        yield cluster
        assert cluster.errors == []


async def test_requests_before_authentication_close_the_connection(
    autojump_clock: trio.testing.MockClock, plain_cluster: FakeCluster
) -> None:
    async with raw(plain_cluster) as r:  # first thing on the connection
        assert await r.send(metadata(12, ["t"])) == CLOSED
    async with raw(plain_cluster) as r:  # after ApiVersions
        assert (await r.send(api_versions(3))).error_code == ErrorCode.none
        assert await r.send(metadata(12, ["t"])) == CLOSED
    async with raw(plain_cluster) as r:  # a second ApiVersions
        assert (await r.send(api_versions(3))).error_code == ErrorCode.none
        assert await r.send(api_versions(3)) == CLOSED
    # None of these is an authentication attempt.
    assert plain_cluster.failed_authentications == 0
    async with raw(plain_cluster) as r:  # during the exchange: ILLEGAL_SASL_STATE, then closed
        assert answer(await r.send(handshake("PLAIN"))) == ("none", list(MECHANISMS))
        resp = await r.send(metadata(12, ["t"]))
        assert [t.error_code for t in resp.topics] == [ErrorCode.illegal_sasl_state]
        assert await r.closed()
    assert plain_cluster.failed_authentications == 1


async def test_handshake_and_authenticate_answers(
    autojump_clock: trio.testing.MockClock, plain_cluster: FakeCluster
) -> None:
    async with raw(plain_cluster) as r:
        resp = await r.send(api_versions(3))
        keys = {int(k.api_key): (k.min_version, k.max_version) for k in resp.api_keys}
        assert keys[ApiKey.SASL_HANDSHAKE] == (0, 1) and keys[ApiKey.SASL_AUTHENTICATE] == (0, 2)
        assert answer(await r.send(handshake("GSSAPI"))) == (
            "unsupported_sasl_mechanism",
            list(MECHANISMS),
        )
        assert await r.closed()
    async with raw(plain_cluster) as r:
        assert await plain_log_in(r, b"\0alice\0nope") == (
            "sasl_authentication_failed",
            "Authentication failed: Invalid username or password",
            0,
        )
        assert await r.closed()
    async with raw(plain_cluster) as r:
        assert await plain_log_in(r) == ("none", "", 4000)
        # Authenticated: the SASL APIs are answered ILLEGAL_SASL_STATE and the connection lives.
        assert answer(await r.send(authenticate(PLAIN_ALICE))) == (
            "illegal_sasl_state",
            "SaslAuthenticate request received after successful authentication",
            0,
        )
        assert (await r.send(metadata(12, ["t"]))).topics[0].error_code == ErrorCode.none
    assert plain_cluster.failed_authentications == 2


async def test_scram_exchange_and_unknown_user(
    autojump_clock: trio.testing.MockClock, plain_cluster: FakeCluster
) -> None:
    for user, password, expected in [
        ("bob", "bob-secret", ("none", "", 4000)),
        ("bob", "wrong", None),
        ("mallory", "bob-secret", None),
    ]:
        scram = scramp.ScramClient(["SCRAM-SHA-256"], user, password)
        async with raw(plain_cluster) as r:
            await r.send(handshake("SCRAM-SHA-256"))
            first = await r.send(authenticate(scram.get_client_first().encode()))
            if user == "mallory":  # unknown users fail at the first message, generically
                final = first
            else:
                assert answer(first) == ("none", "", 0)
                scram.set_server_first(first.auth_bytes.decode())
                final = await r.send(authenticate(scram.get_client_final().encode()))
            if expected is not None:
                assert answer(final) == expected
                scram.set_server_final(final.auth_bytes.decode())  # the server's proof checks
                continue
            assert answer(final) == (
                "sasl_authentication_failed",
                "Authentication failed during authentication due to invalid credentials "
                "with SASL mechanism SCRAM-SHA-256",
                0,
            )
            assert await r.closed()
    assert plain_cluster.failed_authentications == 2


async def test_session_expiry_and_reauthentication_rules(
    autojump_clock: trio.testing.MockClock, plain_cluster: FakeCluster
) -> None:
    """Kafka's KIP-368 rules, in virtual time (sessions of 4 s)."""
    async with raw(plain_cluster) as r:
        await plain_log_in(r)
        await anyio.sleep(3.9)
        # Re-authentication renews the session; another within a second is refused.
        assert answer(await r.send(handshake("PLAIN"))) == ("none", list(MECHANISMS))
        assert answer(await r.send(authenticate(PLAIN_ALICE))) == ("none", "", 4000)
        await anyio.sleep(0.5)
        assert answer(await r.send(handshake("PLAIN"))) == ("illegal_sasl_state", [])
        await anyio.sleep(3.4)  # 3.9 s into the new session
        assert (await r.send(api_versions(3))).error_code == ErrorCode.none
        await anyio.sleep(0.2)  # expired: the next request closes the connection
        assert await r.send(api_versions(3)) == CLOSED
    assert plain_cluster.servers[0].expired_sessions == 1
    assert plain_cluster.reauthentications == 1
    # Re-authenticating as someone else, or with another mechanism, fails.
    async with raw(plain_cluster) as r:
        await plain_log_in(r)
        assert await plain_log_in(r, b"\0bob\0bob-secret") == (
            "sasl_authentication_failed",
            "Cannot change principals during re-authentication from User.alice: User.bob",
            0,
        )
        assert await r.closed()
    async with raw(plain_cluster) as r:
        await plain_log_in(r)
        assert answer(await r.send(handshake("SCRAM-SHA-512"))) == ("none", list(MECHANISMS))
        assert await r.send(authenticate(b"n,,n=alice,r=abc")) == CLOSED
    assert plain_cluster.failed_authentications == 2


async def test_handshake_v0_exchanges_raw_tokens(
    autojump_clock: trio.testing.MockClock, plain_cluster: FakeCluster
) -> None:
    async with raw(plain_cluster) as r:
        assert answer(await r.send(handshake("PLAIN", 0))) == ("none", list(MECHANISMS))
        assert await r.token(PLAIN_ALICE) == b""  # PLAIN's empty answer, as a frame
        assert (await r.send(metadata(12, ["t"]))).topics[0].error_code == ErrorCode.none
    scram = scramp.ScramClient(["SCRAM-SHA-512"], "bob", "bob-secret")
    async with raw(plain_cluster) as r:
        await r.send(handshake("SCRAM-SHA-512", 0))
        first = await r.token(scram.get_client_first().encode())
        assert isinstance(first, bytes)
        scram.set_server_first(first.decode())
        final = await r.token(scram.get_client_final().encode())
        assert isinstance(final, bytes)
        scram.set_server_final(final.decode())
        assert (await r.send(api_versions(3))).error_code == ErrorCode.none
    async with raw(plain_cluster) as r:  # rejected: closed without an answer
        await r.send(handshake("PLAIN", 0))
        assert await r.token(b"\0alice\0nope") == CLOSED
    assert plain_cluster.failed_authentications == 1
    assert plain_cluster.servers[0].authentications == 2


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("handshake_version", [0, 1])
async def test_malformed_tokens_are_refused_cleanly(
    autojump_clock: trio.testing.MockClock,
    plain_cluster: FakeCluster,
    mechanism: str,
    handshake_version: int,
) -> None:
    """Garbage in the exchange is a failed authentication: answered or closed, never a bug."""
    tokens = [
        b"",
        b"\xff\xfe\x00\x01",
        b"\0\0\0\0",
        b"n,,",
        b"p=tls-unique,,n=alice,r=abc",
        b"y,,n=alice,r=abc,x=unknown",
        b"n,,n=alice" + b"A" * 100_000,
    ]
    for token in tokens:
        async with raw(plain_cluster) as r:
            await r.send(handshake(mechanism, handshake_version))
            if handshake_version == 0:
                got: Any = await r.token(token)
            else:
                got = answer(await r.send(authenticate(token)))
            if isinstance(got, bytes) or got[0] == "none":  # SCRAM's first round went through
                continue
            assert await r.closed()
    assert plain_cluster.errors == []
    assert plain_cluster.servers[0].authentications == 0


async def test_sasl_apis_on_a_listener_without_sasl(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster() as cluster, raw(cluster) as r:
        assert answer(await r.send(handshake("PLAIN"))) == ("illegal_sasl_state", [])
        assert answer(await r.send(authenticate(PLAIN_ALICE, 0))) == (
            "illegal_sasl_state",
            "SaslAuthenticate request received after successful authentication",
            None,
        )
        assert (await r.send(api_versions(3))).error_code == ErrorCode.none


# --------------------------------------------------------------------------- librdkafka


def librdkafka_settings(
    certs: Certificates, bootstrap: str, password: str = "bob-secret"
) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "bob",
        "sasl.password": password,
        "ssl.ca.location": str(certs.ca),
    }


def produce_with_librdkafka(settings: dict[str, Any], count: int) -> list[Any]:
    producer = confluent_kafka.Producer({**settings, "linger.ms": 5})
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for i in range(count):
        producer.produce("t", value=b"%d" % i, partition=i % 2, on_delivery=report)
    assert producer.flush(REAL_HANG_GUARD) == 0
    return errors


def consume_with_librdkafka(settings: dict[str, Any], count: int) -> list[bytes]:
    consumer = confluent_kafka.Consumer(
        {
            **settings,
            "group.id": "rdkafka",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    values: list[bytes] = []
    try:
        consumer.subscribe(["t"])
        while len(values) < count:
            for msg in consumer.consume(100, 0.1):
                assert msg.error() is None, msg.error()
                values.append(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


async def test_librdkafka_scram_sha_512_over_sasl_ssl(certs: Certificates) -> None:
    """An independent client: produce, consume as a group and commit, re-authenticating."""
    security = server(certs, session_lifetime_ms=3000)
    async with FakeCluster(
        security=security, topics={"t": 2}, initial_rebalance_delay_ms=0
    ) as cluster:
        settings = librdkafka_settings(certs, cluster.bootstrap)
        with anyio.fail_after(REAL_HANG_GUARD):
            errors = await anyio.to_thread.run_sync(produce_with_librdkafka, settings, 10)
            assert errors == []
            values = await anyio.to_thread.run_sync(consume_with_librdkafka, settings, 10)
        assert sorted(values) == sorted(b"%d" % i for i in range(10))
        assert cluster.committed_offsets("rdkafka") == {
            TopicPartition("t", 0): 5,
            TopicPartition("t", 1): 5,
        }
        assert cluster.failed_authentications == 0
        assert cluster.servers[0].authentications >= 2
        assert cluster.servers[0].expired_sessions == 0


async def test_librdkafka_wrong_password(certs: Certificates) -> None:
    async with FakeCluster(security=server(certs), topics={"t": 1}) as cluster:
        settings = librdkafka_settings(certs, cluster.bootstrap, password="wrong")
        seen: list[Any] = []
        got_one = threading.Event()

        def on_error(err: Any) -> None:
            seen.append(err)
            got_one.set()

        def run() -> None:
            producer = confluent_kafka.Producer({**settings, "error_cb": on_error})
            while not got_one.wait(0.05):
                producer.poll(0)
            producer.flush(0)

        with anyio.fail_after(REAL_HANG_GUARD):
            await anyio.to_thread.run_sync(run)
        err = seen[0]
        assert err.code() == confluent_kafka.KafkaError._AUTHENTICATION
        assert "Authentication failed during authentication due to invalid credentials" in str(
            err.str()
        )
        assert cluster.failed_authentications >= 1
