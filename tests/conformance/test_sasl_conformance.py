"""Conformance of the embedded broker's SASL authentication with Apache Kafka 4.3.

Every scenario below runs against both targets, step by step over raw TLS
connections (:class:`~tests.conformance.client.RawConnection`: no ApiVersions
or SASL done for us, so a scenario can send what a client never would):

* ``kafka``: the session's secured Apache Kafka broker (the ``secure_kafka``
  fixture, marked ``kafka``), on its ``SASL_SSL`` listener (sessions without
  a lifetime) and its ``REAUTH`` listener (sessions of 4 s);
* ``embedded``: two fresh embedded brokers configured the same way, with a
  :class:`~gengroup.broker.ServerSecurity` each: ``SASL_SSL``, the PLAIN user
  ``alice`` and the SCRAM user ``bob`` with the fixture's passwords, one
  without and one with ``session_lifetime_ms=4000``.

A scenario's transcript must equal ONE expected transcript, the same for
both targets, written from what Kafka answers; a step where the embedded
broker legitimately differs is a ``Divergence`` (only the list of enabled
mechanisms: Kafka's fixture enables OAUTHBEARER, which the embedded broker
does not serve). Normalisation: error codes become their names, mechanism
lists are sorted (Kafka lists them in HashSet order), SCRAM messages keep
their shape only (``"r=<r>,s=<s>,i=4096"``: nonces, salts and proofs are
random) and the server's SCRAM signature is checked by ``scramp``'s client,
which records whether it verified. ``"closed"`` is a connection the broker
closed instead of answering.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import pytest
import scramp  # type: ignore[import-untyped]
from kio.schema.sasl_authenticate.v0.request import SaslAuthenticateRequest as AuthenticateV0
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest as AuthenticateV1
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest as AuthenticateV2
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as HandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest as HandshakeV1

from gengroup.broker import FakeCluster, ServerSecurity
from gengroup.io.cluster import parse_address
from gengroup.protocol.versions import ApiKey
from gengroup.testing.kafka import Certificates, KafkaBroker, make_certificates
from gengroup.testing.pytest_plugin import (
    SECURE_PLAIN_USERS,
    SECURE_SCRAM_USERS,
    make_unique_name,
)

from ..embedded import api_versions, metadata
from .client import CLOSED, RawConnection, Transcript, by_name, error_name
from .test_conformance import Divergence

REAUTH_MS: Final = 4000
"""The session lifetime of the ``REAUTH`` listener (the fixture's default)."""

EXPIRY_WAIT: Final = REAUTH_MS / 1000 + 1.0
"""Seconds a scenario waits for a ``REAUTH`` session to expire."""

SCENARIO_TIMEOUT: Final = 60.0
"""Hang guard per scenario, in seconds."""

[(ALICE, ALICE_PASSWORD)] = SECURE_PLAIN_USERS.items()
[(BOB, BOB_PASSWORD)] = SECURE_SCRAM_USERS.items()
PLAIN_ALICE: Final = f"\0{ALICE}\0{ALICE_PASSWORD}".encode()

MECHANISMS: Final = Divergence(
    kafka=["OAUTHBEARER", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
    embedded=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
    reason="the embedded broker does not serve OAUTHBEARER, which the Kafka fixture enables",
)


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class SaslTarget:
    """A broker under test: its listeners (``SASL_SSL``, ``REAUTH``) and the CA to trust."""

    name: str
    listeners: Mapping[str, str]
    ca: Path


@pytest.fixture(scope="module")
def embedded_certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("sasl-conformance-certificates"))


@pytest.fixture(params=[pytest.param("kafka", marks=pytest.mark.kafka), "embedded"])
async def target(request: pytest.FixtureRequest) -> AsyncIterator[SaslTarget]:
    """The broker under test; two fresh embedded brokers for the embedded target."""
    if request.param == "kafka":
        broker: KafkaBroker = request.getfixturevalue("secure_kafka")
        assert broker.security is not None and broker.security.reauth_ms == REAUTH_MS
        yield SaslTarget(
            "kafka",
            {name: broker.listener_bootstrap(name) for name in ("SASL_SSL", "REAUTH")},
            broker.security.certificates.ca,
        )
        return
    certs: Certificates = request.getfixturevalue("embedded_certs")

    def security(lifetime: int | None) -> ServerSecurity:
        return ServerSecurity(
            security_protocol="SASL_SSL",
            ssl_certfile=certs.server,
            users={**SECURE_PLAIN_USERS, **SECURE_SCRAM_USERS},
            session_lifetime_ms=lifetime,
        )

    async with (
        FakeCluster(security=security(None)) as plain,
        FakeCluster(security=security(REAUTH_MS)) as reauth,
    ):
        yield SaslTarget(
            "embedded", {"SASL_SSL": plain.bootstrap, "REAUTH": reauth.bootstrap}, certs.ca
        )
        assert plain.errors == [] and reauth.errors == []


# --------------------------------------------------------------------------- steps


@dataclass
class Steps:
    """One scenario's target and transcript."""

    target: SaslTarget
    transcript: Transcript

    def record(self, step: str, answer: Any) -> None:
        self.transcript.append((step, answer))

    @asynccontextmanager
    async def connect(self, listener: str = "SASL_SSL") -> AsyncIterator[RawConnection]:
        """A new TLS connection to ``listener``, nothing sent on it yet."""
        host, port = parse_address(self.target.listeners[listener])
        context = ssl.create_default_context(cafile=str(self.target.ca))
        stream = await anyio.connect_tcp(
            host, port, ssl_context=context, tls_hostname=host, tls_standard_compatible=False
        )
        async with stream:
            yield RawConnection(stream)


def versions(resp: Any) -> Any:
    """An ApiVersions answer: its error and the SASL APIs' version ranges."""
    if resp == CLOSED:
        return CLOSED
    ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
    return {
        "error": error_name(resp.error_code),
        "SaslHandshake": ranges.get(ApiKey.SASL_HANDSHAKE),
        "SaslAuthenticate": ranges.get(ApiKey.SASL_AUTHENTICATE),
    }


def handshake_answer(resp: Any) -> Any:
    if resp == CLOSED:
        return CLOSED
    return {"error": error_name(resp.error_code), "mechanisms": sorted(resp.mechanisms)}


def shape(data: bytes) -> str:
    """A SASL server message with its random parts replaced (``r=<r>,s=<s>,i=4096``)."""
    return ",".join(
        f"{item[0]}=<{item[0]}>" if item[:2] in ("r=", "s=", "v=") else item
        for item in data.decode().split(",")
        if item
    )


def authenticate_answer(resp: Any) -> Any:
    if resp == CLOSED:
        return CLOSED
    lifetime = getattr(resp, "session_lifetime", None)
    return {
        "error": error_name(resp.error_code),
        "message": resp.error_message,
        "auth_bytes": shape(bytes(resp.auth_bytes)),
        "lifetime_ms": None if lifetime is None else int(lifetime.total_seconds() * 1000),
    }


def handshake(mechanism: str, version: int = 1) -> Any:
    return (HandshakeV1 if version else HandshakeV0)(mechanism=mechanism)


def authenticate(token: bytes, version: int = 2) -> Any:
    return {0: AuthenticateV0, 1: AuthenticateV1, 2: AuthenticateV2}[version](auth_bytes=token)


async def _sasl(c: RawConnection, s: Steps, mechanism: str, token: bytes, version: int = 2) -> None:
    """Handshake and one SaslAuthenticate (PLAIN), both recorded."""
    s.record(f"handshake {mechanism}", handshake_answer(await c.send(handshake(mechanism))))
    s.record(
        f"authenticate v{version}", authenticate_answer(await c.send(authenticate(token, version)))
    )


async def _scram(c: RawConnection, s: Steps, mechanism: str, user: str, password: str) -> None:
    """A SCRAM exchange, each answer recorded; the server's signature checked when it comes."""
    client = scramp.ScramClient([mechanism], user, password)
    s.record(f"handshake {mechanism}", handshake_answer(await c.send(handshake(mechanism))))
    first = await c.send(authenticate(client.get_client_first().encode()))
    s.record("client first", authenticate_answer(first))
    if first == CLOSED or first.error_code:
        s.record("then", "closed" if await c.closed() else "open")
        return
    client.set_server_first(bytes(first.auth_bytes).decode())
    final = await c.send(authenticate(client.get_client_final().encode()))
    s.record("client final", authenticate_answer(final))
    if final == CLOSED or final.error_code:
        s.record("then", "closed" if await c.closed() else "open")
        return
    client.set_server_final(bytes(final.auth_bytes).decode())  # raises if it does not verify
    s.record("server signature verified", True)


# --------------------------------------------------------------------------- scenarios

Scenario = Callable[[Steps], Awaitable[None]]


async def versions_and_handshake(s: Steps) -> None:
    """ApiVersions lists the SASL APIs; the handshake lists the enabled mechanisms."""
    async with s.connect() as c:
        s.record("api versions", versions(await c.send(api_versions(3))))
        await _sasl(c, s, "PLAIN", PLAIN_ALICE)
        s.record("api versions after authentication", versions(await c.send(api_versions(3))))


async def unknown_mechanism(s: Steps) -> None:
    """A mechanism the broker does not enable: UNSUPPORTED_SASL_MECHANISM, then closed."""
    async with s.connect() as c:
        s.record("api versions", versions(await c.send(api_versions(3))))
        s.record("handshake GSSAPI", handshake_answer(await c.send(handshake("GSSAPI"))))
        s.record("api versions", versions(await c.send(api_versions(3))))


async def plain_credentials(s: Steps) -> None:
    """PLAIN with a wrong password, an unknown user, no password; each closes the connection."""
    for step, token in [
        ("wrong password", f"\0{ALICE}\0wrong".encode()),
        ("unknown user", f"\0mallory\0{ALICE_PASSWORD}".encode()),
        ("no password", f"\0{ALICE}\0".encode()),
        ("another authorization id", f"{BOB}\0{ALICE}\0{ALICE_PASSWORD}".encode()),
    ]:
        async with s.connect() as c:
            s.record(step, step)
            await _sasl(c, s, "PLAIN", token)
            s.record("then", "closed" if await c.closed() else "open")


async def authenticate_versions(s: Steps) -> None:
    """SaslAuthenticate v0 (no session lifetime field), v1 and v2."""
    for version in (0, 1, 2):
        async with s.connect() as c:
            await _sasl(c, s, "PLAIN", PLAIN_ALICE, version)


async def scram_sha_256(s: Steps) -> None:
    """SCRAM-SHA-256: a good exchange, then an unknown user and another authorization id
    (both rejected at the first message)."""
    async with s.connect() as c:
        await _scram(c, s, "SCRAM-SHA-256", BOB, BOB_PASSWORD)
        s.record("api versions", versions(await c.send(api_versions(3))))
    async with s.connect() as c:
        await _scram(c, s, "SCRAM-SHA-256", "mallory", BOB_PASSWORD)
    async with s.connect() as c:  # bob asking to act as alice
        s.record(
            "handshake SCRAM-SHA-256", handshake_answer(await c.send(handshake("SCRAM-SHA-256")))
        )
        first = f"n,a={ALICE},n={BOB},r=fyko+d2lbbFgONRv9qkxdawL".encode()
        s.record(
            "client first, another authorization id",
            authenticate_answer(await c.send(authenticate(first))),
        )
        s.record("then", "closed" if await c.closed() else "open")


async def scram_sha_512(s: Steps) -> None:
    """SCRAM-SHA-512: a good exchange, then a wrong password (rejected at the final message)."""
    async with s.connect() as c:
        await _scram(c, s, "SCRAM-SHA-512", BOB, BOB_PASSWORD)
    async with s.connect() as c:
        await _scram(c, s, "SCRAM-SHA-512", BOB, "wrong")


async def request_before_authentication(s: Steps) -> None:
    """Requests out of turn: before the handshake they close the connection unanswered;
    during the exchange they are answered ILLEGAL_SASL_STATE, then the connection closes."""
    topic = make_unique_name("conf-sasl")
    async with s.connect() as c:
        s.record("metadata first", await c.send(metadata(12, [topic])))
    async with s.connect() as c:
        s.record("api versions", versions(await c.send(api_versions(3))))
        s.record("metadata after api versions", await c.send(metadata(12, [topic])))
    async with s.connect() as c:
        s.record("api versions", versions(await c.send(api_versions(3))))
        s.record("api versions again", versions(await c.send(api_versions(3))))
    async with s.connect() as c:
        s.record("handshake PLAIN", handshake_answer(await c.send(handshake("PLAIN"))))
        resp = await c.send(metadata(12, [topic]))
        s.record(
            "metadata during the exchange",
            resp if resp == CLOSED else [error_name(t.error_code) for t in resp.topics],
        )
        s.record("then", "closed" if await c.closed() else "open")
    async with s.connect() as c:
        s.record("handshake PLAIN", handshake_answer(await c.send(handshake("PLAIN"))))
        s.record("api versions during the exchange", versions(await c.send(api_versions(3))))
        s.record("then", "closed" if await c.closed() else "open")
    async with s.connect() as c:
        s.record("handshake PLAIN", handshake_answer(await c.send(handshake("PLAIN"))))
        s.record("handshake again", handshake_answer(await c.send(handshake("PLAIN"))))
        s.record("then", "closed" if await c.closed() else "open")


async def second_handshake_after_authentication(s: Steps) -> None:
    """On a listener without session lifetime an authenticated connection cannot
    re-authenticate: the SASL APIs are answered ILLEGAL_SASL_STATE, the connection lives."""
    async with s.connect() as c:
        await _sasl(c, s, "PLAIN", PLAIN_ALICE)
        s.record("handshake again", handshake_answer(await c.send(handshake("PLAIN"))))
        s.record("authenticate again", authenticate_answer(await c.send(authenticate(PLAIN_ALICE))))
        s.record("api versions", versions(await c.send(api_versions(3))))


async def reauthentication(s: Steps) -> None:
    """KIP-368 on the REAUTH listener: a second handshake re-authenticates, with a new
    session; re-authenticating with another mechanism closes the connection."""
    async with s.connect("REAUTH") as c:
        await _sasl(c, s, "PLAIN", PLAIN_ALICE)
        await _sasl(c, s, "PLAIN", PLAIN_ALICE)
        s.record("api versions", versions(await c.send(api_versions(3))))
    async with s.connect("REAUTH") as c:
        await _sasl(c, s, "PLAIN", PLAIN_ALICE)
        s.record(
            "handshake SCRAM-SHA-256", handshake_answer(await c.send(handshake("SCRAM-SHA-256")))
        )
        client = scramp.ScramClient(["SCRAM-SHA-256"], ALICE, ALICE_PASSWORD)
        first = await c.send(authenticate(client.get_client_first().encode()))
        s.record("authenticate", authenticate_answer(first))


async def session_expiry(s: Steps) -> None:
    """A request after the session expired closes the connection, unanswered."""
    async with s.connect("REAUTH") as c:
        await _sasl(c, s, "PLAIN", PLAIN_ALICE)
        await anyio.sleep(EXPIRY_WAIT)
        s.record("api versions after expiry", versions(await c.send(api_versions(3))))


async def handshake_v0_raw_tokens(s: Steps) -> None:
    """After SaslHandshake v0 the tokens are raw frames: PLAIN's answer is an empty frame;
    rejected credentials close the connection without an answer."""
    async with s.connect() as c:
        s.record("handshake v0 PLAIN", handshake_answer(await c.send(handshake("PLAIN", 0))))
        token = await c.token(PLAIN_ALICE)
        s.record("raw token", token if token == CLOSED else shape(bytes(token)))
        s.record("api versions", versions(await c.send(api_versions(3))))
    async with s.connect() as c:
        s.record("handshake v0 PLAIN", handshake_answer(await c.send(handshake("PLAIN", 0))))
        s.record("raw token, wrong password", await c.token(f"\0{ALICE}\0wrong".encode()))


SCENARIOS: Final[dict[str, Scenario]] = by_name(
    versions_and_handshake,
    unknown_mechanism,
    plain_credentials,
    authenticate_versions,
    scram_sha_256,
    scram_sha_512,
    request_before_authentication,
    second_handshake_after_authentication,
    reauthentication,
    session_expiry,
    handshake_v0_raw_tokens,
)
"""Every SASL scenario by name."""


# --------------------------------------------------------------------------- expected answers

SASL_VERSIONS: Final = {"error": "NONE", "SaslHandshake": (0, 1), "SaslAuthenticate": (0, 2)}
GENERIC: Final = (
    "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"
)


def hs(error: str = "NONE", mechanisms: Any = MECHANISMS) -> dict[str, Any]:
    """A SaslHandshake answer."""
    return {"error": error, "mechanisms": mechanisms}


def auth(
    error: str = "NONE", message: str = "", auth_bytes: str = "", lifetime: int | None = 0
) -> dict[str, Any]:
    """A SaslAuthenticate answer (``lifetime`` None: v0, which has no such field)."""
    return {"error": error, "message": message, "auth_bytes": auth_bytes, "lifetime_ms": lifetime}


def failed(message: str) -> dict[str, Any]:
    return auth("SASL_AUTHENTICATION_FAILED", message)


ILLEGAL_STATE_VERSIONS: Final = {
    "error": "ILLEGAL_SASL_STATE",
    "SaslHandshake": None,
    "SaslAuthenticate": None,
}
SCRAM_FIRST: Final = auth(auth_bytes="r=<r>,s=<s>,i=4096")
SCRAM_FINAL: Final = auth(auth_bytes="v=<v>")


def plain_steps(answer: dict[str, Any], version: int = 2) -> Transcript:
    return [("handshake PLAIN", hs()), (f"authenticate v{version}", answer)]


EXPECTED: Final[dict[str, Transcript]] = {
    "versions_and_handshake": [
        ("api versions", SASL_VERSIONS),
        *plain_steps(auth()),
        ("api versions after authentication", SASL_VERSIONS),
    ],
    "unknown_mechanism": [
        ("api versions", SASL_VERSIONS),
        ("handshake GSSAPI", hs("UNSUPPORTED_SASL_MECHANISM")),
        ("api versions", CLOSED),
    ],
    "plain_credentials": [
        ("wrong password", "wrong password"),
        *plain_steps(failed("Authentication failed: Invalid username or password")),
        ("then", "closed"),
        ("unknown user", "unknown user"),
        *plain_steps(failed("Authentication failed: Invalid username or password")),
        ("then", "closed"),
        ("no password", "no password"),
        *plain_steps(failed("Authentication failed: password not specified")),
        ("then", "closed"),
        ("another authorization id", "another authorization id"),
        *plain_steps(
            failed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        ),
        ("then", "closed"),
    ],
    "authenticate_versions": [
        *plain_steps(auth(lifetime=None), 0),
        *plain_steps(auth(), 1),
        *plain_steps(auth(), 2),
    ],
    "scram_sha_256": [
        ("handshake SCRAM-SHA-256", hs()),
        ("client first", SCRAM_FIRST),
        ("client final", SCRAM_FINAL),
        ("server signature verified", True),
        ("api versions", SASL_VERSIONS),
        ("handshake SCRAM-SHA-256", hs()),
        ("client first", failed(GENERIC.format("SCRAM-SHA-256"))),
        ("then", "closed"),
        ("handshake SCRAM-SHA-256", hs()),
        (
            "client first, another authorization id",
            failed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            ),
        ),
        ("then", "closed"),
    ],
    "scram_sha_512": [
        ("handshake SCRAM-SHA-512", hs()),
        ("client first", SCRAM_FIRST),
        ("client final", SCRAM_FINAL),
        ("server signature verified", True),
        ("handshake SCRAM-SHA-512", hs()),
        ("client first", SCRAM_FIRST),
        ("client final", failed(GENERIC.format("SCRAM-SHA-512"))),
        ("then", "closed"),
    ],
    "request_before_authentication": [
        ("metadata first", CLOSED),
        ("api versions", SASL_VERSIONS),
        ("metadata after api versions", CLOSED),
        ("api versions", SASL_VERSIONS),
        ("api versions again", CLOSED),
        ("handshake PLAIN", hs()),
        ("metadata during the exchange", ["ILLEGAL_SASL_STATE"]),
        ("then", "closed"),
        ("handshake PLAIN", hs()),
        ("api versions during the exchange", ILLEGAL_STATE_VERSIONS),
        ("then", "closed"),
        ("handshake PLAIN", hs()),
        ("handshake again", hs("ILLEGAL_SASL_STATE", [])),
        ("then", "closed"),
    ],
    "second_handshake_after_authentication": [
        *plain_steps(auth()),
        ("handshake again", hs("ILLEGAL_SASL_STATE", [])),
        (
            "authenticate again",
            auth(
                "ILLEGAL_SASL_STATE",
                "SaslAuthenticate request received after successful authentication",
            ),
        ),
        ("api versions", SASL_VERSIONS),
    ],
    "reauthentication": [
        *plain_steps(auth(lifetime=REAUTH_MS)),
        *plain_steps(auth(lifetime=REAUTH_MS)),
        ("api versions", SASL_VERSIONS),
        *plain_steps(auth(lifetime=REAUTH_MS)),
        ("handshake SCRAM-SHA-256", hs()),
        ("authenticate", CLOSED),
    ],
    "session_expiry": [
        *plain_steps(auth(lifetime=REAUTH_MS)),
        ("api versions after expiry", CLOSED),
    ],
    "handshake_v0_raw_tokens": [
        ("handshake v0 PLAIN", hs()),
        ("raw token", ""),
        ("api versions", SASL_VERSIONS),
        ("handshake v0 PLAIN", hs()),
        ("raw token, wrong password", CLOSED),
    ],
}
"""The expected transcript of every SASL scenario, written from Kafka's answers."""


# --------------------------------------------------------------------------- the tests


def resolve(expected: Any, target: str) -> Any:
    """``expected`` for one target: every :class:`Divergence` in it, however deep, resolved."""
    if isinstance(expected, Divergence):
        return getattr(expected, target)
    if isinstance(expected, dict):
        return {k: resolve(v, target) for k, v in expected.items()}
    if isinstance(expected, list | tuple):
        return type(expected)(resolve(v, target) for v in expected)
    return expected


def test_every_sasl_scenario_has_an_expected_transcript() -> None:
    assert list(EXPECTED) == list(SCENARIOS)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_sasl_conformance(scenario: str, target: SaslTarget) -> None:
    steps = Steps(target, [])
    with anyio.fail_after(SCENARIO_TIMEOUT):
        await SCENARIOS[scenario](steps)
    assert steps.transcript == resolve(EXPECTED[scenario], target.name)
