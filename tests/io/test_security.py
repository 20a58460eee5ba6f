"""Security settings: validation, how they reach every client, and the SASL conversations."""

from __future__ import annotations

import logging
import pickle
import ssl
from pathlib import Path
from typing import Any

import pytest
import scramp  # type: ignore[import-untyped]
import trio
import trio.testing

from gengroup import (
    Admin,
    AdminConfig,
    AuthenticationError,
    Cluster,
    ConfigError,
    ConsumerGroup,
    GroupConfig,
    Producer,
    ProducerConfig,
    Security,
    TLSError,
)
from gengroup._errors import BrokenConnection, error_for_code, is_retriable
from gengroup.io import sasl
from gengroup.io.logins import Logins
from gengroup.io.security import PLAINTEXT


async def token() -> str:
    return "header.payload."


@pytest.fixture
def pem(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    path.write_text("not a certificate")
    return path


def test_defaults_are_plaintext() -> None:
    assert Security() == PLAINTEXT
    assert not PLAINTEXT.uses_tls and not PLAINTEXT.uses_sasl
    assert PLAINTEXT.tls_context() is None


def test_tls_context_verifies_by_default() -> None:
    context = Security(security_protocol="ssl").tls_context()
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    relaxed = Security(security_protocol="SSL", ssl_check_hostname=False).tls_context()
    assert relaxed is not None
    assert relaxed.verify_mode == ssl.CERT_REQUIRED and not relaxed.check_hostname
    own = ssl.create_default_context()
    assert Security(security_protocol="SASL_SSL", **SCRAM, ssl_context=own).tls_context() is own


SCRAM: dict[str, Any] = {
    "sasl_mechanism": "scram-sha-512",
    "sasl_username": "bob",
    "sasl_password": "bob-secret",
}


def test_names_are_normalised_and_passwords_stay_out_of_repr() -> None:
    s = Security(security_protocol="sasl_ssl", **SCRAM)
    assert (s.security_protocol, s.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert "bob-secret" not in repr(s)
    cfg = GroupConfig.create("g", ["t"], "h:1", security_protocol="SASL_SSL", **SCRAM)
    assert "bob-secret" not in repr(cfg)
    assert Security.of(cfg) == s


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"security_protocol": "TLS"}, "security_protocol must be one of PLAINTEXT, SSL"),
        ({"ssl_cafile": "x.pem"}, "ssl_cafile set, but security_protocol='PLAINTEXT' uses no TLS"),
        ({"ssl_check_hostname": False}, "ssl_check_hostname set, but"),
        ({"security_protocol": "SSL", "ssl_cafile": "/no/such.pem"}, "is not a file"),
        ({"security_protocol": "SSL", "ssl_keyfile": "{pem}"}, "ssl_keyfile needs ssl_certfile"),
        ({"security_protocol": "SSL", "ssl_password": "p"}, "ssl_password is the client key's"),
        (
            {"security_protocol": "SSL", "ssl_context": "ctx"},
            "ssl_context must be an ssl.SSLContext",
        ),
        (
            {"security_protocol": "SSL", "ssl_context": "{context}", "ssl_cafile": "{pem}"},
            "ssl_context excludes ssl_cafile",
        ),
        ({"sasl_mechanism": "PLAIN"}, "sasl_mechanism set, but security_protocol='PLAINTEXT'"),
        ({"security_protocol": "SASL_SSL"}, "needs sasl_mechanism, one of PLAIN, SCRAM-SHA-256"),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"},
            "needs sasl_mechanism",
        ),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "a"},
            "needs sasl_password",
        ),
        (
            {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER"},
            "needs sasl_oauth_token_provider",
        ),
        (
            {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "OAUTHBEARER",
                "sasl_oauth_token_provider": token,
                "sasl_username": "a",
            },
            "not used by OAUTHBEARER",
        ),
        (
            {"security_protocol": "SASL_SSL", **SCRAM, "sasl_oauth_token_provider": token},
            "sasl_oauth_token_provider is for OAUTHBEARER",
        ),
    ],
)
def test_invalid_settings_are_named(settings: dict[str, Any], message: str, pem: Path) -> None:
    fill = {"{pem}": pem, "{context}": ssl.create_default_context()}
    resolved = {k: fill.get(v, v) if isinstance(v, str) else v for k, v in settings.items()}
    for build in (
        lambda: Security(**resolved),
        lambda: GroupConfig.create("g", ["t"], "h:1", **resolved),
        lambda: ProducerConfig(**resolved),
        lambda: AdminConfig(**resolved),
        lambda: Cluster("h:1", **resolved),
    ):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            build()


def test_unloadable_certificate_is_a_config_error(pem: Path) -> None:
    with pytest.raises(ConfigError, match=r"ssl_cafile .* cannot be loaded"):
        Cluster("h:1", security_protocol="SSL", ssl_cafile=pem)
    with pytest.raises(ConfigError, match=r"ssl_certfile .* cannot be loaded"):
        Security(security_protocol="SSL", ssl_certfile=pem).tls_context()


def test_an_encrypted_key_without_its_password_is_named_and_never_prompted_for(
    tmp_path: Path,
) -> None:
    """OpenSSL asks for a missing key password on the terminal, which would block
    the event loop; the settings say instead what is missing."""
    from cryptography.hazmat.primitives import serialization

    from gengroup.testing.kafka.secure import make_certificates

    certs = make_certificates(tmp_path / "certs")
    key = serialization.load_pem_private_key(certs.client_key.read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    settings = {"security_protocol": "SSL", "ssl_certfile": certs.client_cert}
    with pytest.raises(ConfigError, match=r"encrypted.key' is encrypted: set ssl_password"):
        Security(**settings, ssl_keyfile=encrypted).tls_context()
    assert Security(**settings, ssl_keyfile=encrypted, ssl_password="secret").tls_context()


def test_a_token_given_for_the_provider_stays_out_of_the_error() -> None:
    with pytest.raises(ConfigError, match=r"\(got a str\)") as caught:
        Security(
            security_protocol="SASL_SSL",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider="eyJhbGciOi.secret-signature",  # type: ignore[arg-type]
        )
    assert "secret" not in str(caught.value)


async def test_every_client_takes_the_settings_by_name() -> None:
    settings: dict[str, Any] = {"security_protocol": "SASL_PLAINTEXT", **SCRAM}
    expected = Security(**settings)
    group = ConsumerGroup("g", ["t"], "h:1", **settings)
    assert group.cluster.security == expected
    assert Producer("h:1", **settings).cluster.security == expected
    assert Admin("h:1", **settings).cluster.security == expected
    assert Cluster("h:1", **settings).security == expected
    assert Cluster("h:1", security=expected).security == expected
    with pytest.raises(ConfigError, match="either security or security_protocol"):
        Cluster("h:1", security=expected, security_protocol="SSL")


def test_authentication_errors_are_never_retried() -> None:
    auth = AuthenticationError("PLAIN authentication failed", broker="h:1", mechanism="PLAIN")
    tls = TLSError("bad", broker="h:1", reason="hostname mismatch")
    assert not is_retriable(auth) and not is_retriable(tls)
    assert is_retriable(BrokenConnection("reset"))
    for code in (33, 34, 58):  # UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTH_FAILED
        assert not is_retriable(error_for_code(code))
    copy = pickle.loads(pickle.dumps(tls))
    assert (type(copy), str(copy), copy.broker, copy.reason) == (TLSError, "bad", "h:1", tls.reason)
    assert copy.mechanism == "TLS"


async def test_plain_message() -> None:
    s = Security(
        security_protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        sasl_username="alice",
        sasl_password="pw",
    )
    mechanism = await sasl.mechanism_for(s, "h:1")
    assert mechanism.first() == b"\0alice\0pw"
    assert mechanism.reply(b"") is None


@pytest.mark.parametrize("name", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_scram_conversation_with_a_scram_server(name: str) -> None:
    """The client half against scramp's server half: proof accepted, signature checked."""
    server_mechanism = scramp.ScramMechanism(name)
    info = server_mechanism.make_auth_info("pw", iteration_count=4096)
    s = Security(
        security_protocol="SASL_SSL",
        sasl_mechanism=name,
        sasl_username="bob",
        sasl_password="pw",
    )
    client = await sasl.mechanism_for(s, "h:1")
    server = server_mechanism.make_server(lambda _user: info)
    server.set_client_first(client.first().decode())
    final = client.reply(server.get_server_first().encode())
    assert final is not None
    server.set_client_final(final.decode())
    assert client.reply(server.get_server_final().encode()) is None


async def test_scram_rejects_a_forged_server_signature() -> None:
    name = "SCRAM-SHA-256"
    server_mechanism = scramp.ScramMechanism(name)
    wrong = server_mechanism.make_auth_info("other", iteration_count=4096)
    s = Security(
        security_protocol="SASL_SSL", sasl_mechanism=name, sasl_username="bob", sasl_password="pw"
    )
    client = await sasl.mechanism_for(s, "h:1")
    server = server_mechanism.make_server(lambda _user: wrong)
    server.set_client_first(client.first().decode())
    client.reply(server.get_server_first().encode())
    with pytest.raises(AuthenticationError, match="SCRAM-SHA-256 authentication with h:1 failed"):
        client.reply(b"v=" + b"A" * 44)


async def test_oauthbearer_message_and_a_failing_provider() -> None:
    s = Security(
        security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=token
    )
    mechanism = await sasl.mechanism_for(s, "h:1")
    assert mechanism.first() == b"n,,\x01auth=Bearer header.payload.\x01\x01"
    assert mechanism.reply(b'{"status":"invalid_token"}') == b"\x01"

    async def broken() -> str:
        raise RuntimeError("identity provider down")

    # A token not fetched is not a rejection of the credentials: retried as a
    # connection failure (within unreachable_timeout), as Java and librdkafka
    # retry a failed token refresh.
    with pytest.raises(
        BrokenConnection, match=r"token provider raised.*identity provider down"
    ) as info:
        await sasl.mechanism_for(
            Security(
                security_protocol="SASL_SSL",
                sasl_mechanism="OAUTHBEARER",
                sasl_oauth_token_provider=broken,
            ),
            "h:1",
        )
    assert is_retriable(info.value) and not isinstance(info.value, AuthenticationError)

    async def refusing() -> str:  # the provider's own verdict passes through as itself
        raise AuthenticationError("invalid_client", broker="idp", mechanism="OAUTHBEARER")

    with pytest.raises(AuthenticationError, match="invalid_client"):
        await sasl.mechanism_for(
            Security(
                security_protocol="SASL_SSL",
                sasl_mechanism="OAUTHBEARER",
                sasl_oauth_token_provider=refusing,
            ),
            "h:1",
        )


async def test_a_plain_function_is_a_token_provider_too() -> None:
    """A provider that returns the token rather than an awaitable (a lambda, a
    plain function) is called and its token used. (Awaiting its str raised a
    TypeError, retried as a broken connection until ClusterUnreachable.)"""

    def plain() -> str:
        return "header.payload."

    def nothing() -> None:
        return None

    def failing() -> str:
        raise RuntimeError("identity provider down")

    def oauth(provider: Any) -> Security:
        return Security(
            security_protocol="SASL_SSL",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=provider,
        )

    for provider in (plain, lambda: "header.payload.", lambda: token()):
        mechanism = await sasl.mechanism_for(oauth(provider), "h:1")
        assert mechanism.first() == b"n,,\x01auth=Bearer header.payload.\x01\x01"
    with pytest.raises(AuthenticationError, match="returned NoneType, not a non-empty token"):
        await sasl.mechanism_for(oauth(nothing), "h:1")
    with pytest.raises(BrokenConnection, match=r"token provider raised.*identity provider down"):
        await sasl.mechanism_for(oauth(failing), "h:1")


async def test_refused_logins_are_logged_once_per_cause(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The same refusal from another broker is DEBUG; another cause is a
    WARNING again; a broker that refused and accepts again is one INFO naming
    it, and a cause is a WARNING again only once no broker refuses with it."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    caplog.set_level(logging.DEBUG, logger="gengroup.connection")

    def refusal(broker: str) -> AuthenticationError:
        said = f"PLAIN authentication with {broker} failed: Invalid username or password"
        return AuthenticationError(said, broker=broker, mechanism="PLAIN")

    logins = Logins()
    logins.accepted("b1:9092")
    logins.refused(refusal("b1:9092"))
    logins.refused(refusal("b2:9092"), "<conn b2>: re-authentication failed: ")
    untrusted = "TLS handshake with b3:9092 failed: certificate verify failed: expired"
    logins.refused(TLSError(untrusted, broker="b3:9092", reason="certificate verify failed"))
    await trio.sleep(5.0)
    logins.accepted("b2:9092")
    logins.accepted("b3:9092")
    logins.refused(refusal("b1:9092"))  # b1 refuses still: DEBUG
    logins.accepted("b1:9092")
    logins.refused(refusal("b2:9092"))  # no broker refuses with it any more
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", str(refusal("b1:9092"))),
        (
            "DEBUG",
            f"<conn b2>: re-authentication failed: {refusal('b2:9092')}"
            " (refused so 2 times since its WARNING)",
        ),
        ("WARNING", untrusted),
        (
            "INFO",
            "login to b2:9092 accepted again, after 1 refused login(s) over 5.0 s"
            " (1 other broker(s) still refuse with the same cause)",
        ),
        ("INFO", "login to b3:9092 accepted again, after 1 refused login(s) over 5.0 s"),
        ("DEBUG", f"{refusal('b1:9092')} (refused so 3 times since its WARNING)"),
        ("INFO", "login to b1:9092 accepted again, after 2 refused login(s) over 5.0 s"),
        ("WARNING", str(refusal("b2:9092"))),
    ]


async def test_a_cause_some_brokers_refuse_with_is_one_warning_and_no_info(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A password rotated broker by broker: b3 refuses it while b1 and b2
    accept, round after round. One WARNING, and no INFO naming a broker that
    never refused; when b3 accepts, one INFO names it."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    caplog.set_level(logging.INFO, logger="gengroup.connection")
    said = "PLAIN authentication with b3:9092 failed: Invalid username or password"
    logins = Logins()
    for _ in range(4):
        logins.accepted("b1:9092")
        logins.refused(AuthenticationError(said, broker="b3:9092", mechanism="PLAIN"))
        logins.accepted("b2:9092")
        await trio.sleep(10.0)
    logins.accepted("b3:9092")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", said),
        ("INFO", "login to b3:9092 accepted again, after 4 refused login(s) over 40.0 s"),
    ]
    other = Logins()  # another client's: its own state
    other.refused(AuthenticationError(said, broker="b3:9092", mechanism="PLAIN"))
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO", "WARNING"]
