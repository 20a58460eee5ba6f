"""Secure listeners for the test broker: TLS certificates, SASL users, client authentication.

A broker started with a :class:`BrokerSecurity` keeps its PLAINTEXT client
listener (the readiness probe and inter-broker traffic use it) and its
PLAINTEXT controller listener, and adds, each on a free loopback port:

* ``SASL_SSL`` -- SASL over TLS with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and
  OAUTHBEARER (Kafka's unsecured JWT validator: any unsigned token with a
  ``sub`` claim is accepted, which is what a test needs of a token);
* ``REAUTH`` -- the same, but sessions last ``reauth_ms`` milliseconds, so
  clients must re-authenticate (KIP-368);
* ``MTLS`` -- TLS that requires a client certificate signed by the test CA;
* ``WRONG_HOST`` -- TLS with a certificate naming only ``kafka.invalid``,
  for host name verification tests.

The certificates (:func:`make_certificates`) are made by ``trustme`` at test
time and written as PEM files, which Kafka reads as they are
(``ssl.keystore.type=PEM``, the private key in PKCS#8). PLAIN users are listed
in the listeners' JAAS configuration; SCRAM users are created the way an
operator bootstraps them in KRaft mode: ``kafka-storage format --add-scram``,
which writes their salted credentials into the cluster's first metadata
records.

With ``authorizer=True`` the broker runs KRaft's ``StandardAuthorizer``: the
PLAINTEXT listeners' principal (``User:ANONYMOUS``, which the broker's own
controller traffic uses too) is a super user, and a resource without ACLs is
open to everyone, so a test restricts exactly the topic or group it creates
ACLs for (over the PLAINTEXT listener, as the super user).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ._base import KafkaHarnessError

__all__ = [
    "AUTH_LOGGER",
    "LISTENERS",
    "BrokerSecurity",
    "Certificates",
    "make_certificates",
    "scram_format_args",
    "secure_properties",
]

#: The listeners a secure broker adds, and the security protocol of each.
LISTENERS: Final[Mapping[str, str]] = {
    "SASL_SSL": "SASL_SSL",
    "REAUTH": "SASL_SSL",
    "MTLS": "SSL",
    "WRONG_HOST": "SSL",
}
#: The broker's logger of failed authentications, logged at INFO by a secure broker.
AUTH_LOGGER: Final = "org.apache.kafka.common.network.Selector"
_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_SCRAM: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True, slots=True)
class Certificates:
    """PEM files made for one test session by :func:`make_certificates`.

    Attributes:
        ca: the test CA's certificate (what clients trust).
        server: the broker's private key (PKCS#8) and certificate chain, for
            ``127.0.0.1`` and ``localhost``.
        wrong_host_server: the same for ``kafka.invalid`` only.
        client_cert: a client certificate signed by the test CA (mutual TLS).
        client_key: its private key.
        other_ca: a CA that signed nothing the broker uses (an untrusted one).
    """

    ca: Path
    server: Path
    wrong_host_server: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def make_certificates(directory: Path) -> Certificates:
    """Make a test CA, the broker's and a client's certificates, as PEM files in ``directory``.

    Raises:
        KafkaHarnessError: ``trustme`` (a development dependency) is not installed.
    """
    try:
        import trustme
        from cryptography.hazmat.primitives import serialization
    except ImportError as exc:  # a missing component fails loudly, never skips
        raise KafkaHarnessError(
            f"the secure test broker needs trustme to make its certificates ({exc}); "
            "install the development extras: pip install -e '.[dev]'"
        ) from exc
    directory.mkdir(parents=True, exist_ok=True)
    ca, other = trustme.CA(organization_name="gengroup test CA"), trustme.CA()

    def keystore(cert: trustme.LeafCert, name: str) -> Path:
        key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), password=None)
        pkcs8 = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        path = directory / name
        path.write_bytes(pkcs8 + b"".join(blob.bytes() for blob in cert.cert_chain_pems))
        return path

    client = ca.issue_cert("client.gengroup.test")
    client_cert, client_key = directory / "client.pem", directory / "client.key"
    client.cert_chain_pems[0].write_to_path(str(client_cert))
    client.private_key_pem.write_to_path(str(client_key))
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    other.cert_pem.write_to_path(str(directory / "other-ca.pem"))
    return Certificates(
        ca=directory / "ca.pem",
        server=keystore(ca.issue_cert("127.0.0.1", "localhost"), "server.pem"),
        wrong_host_server=keystore(ca.issue_cert("kafka.invalid"), "wrong-host.pem"),
        client_cert=client_cert,
        client_key=client_key,
        other_ca=directory / "other-ca.pem",
    )


@dataclass(frozen=True, slots=True)
class BrokerSecurity:
    """What a secure test broker listens with (see the module's description).

    Attributes:
        certificates: the PEM files (:func:`make_certificates`).
        plain_users: user -> password accepted by SASL/PLAIN.
        scram_users: user -> password created for SCRAM-SHA-256 and SCRAM-SHA-512.
        reauth_ms: session lifetime on the ``REAUTH`` listener, in milliseconds.
        authorizer: run the ``StandardAuthorizer`` (see the module's description).
    """

    certificates: Certificates
    plain_users: Mapping[str, str] = field(default_factory=lambda: {"admin": "admin-secret"})
    scram_users: Mapping[str, str] = field(default_factory=dict)
    reauth_ms: int = 4000
    authorizer: bool = False


def _jaas(module: str, options: Mapping[str, str]) -> str:
    def quote(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return " ".join([module, "required", *(f"{k}={quote(v)}" for k, v in options.items())]) + ";"


def secure_properties(
    security: BrokerSecurity, host: str, ports: Mapping[str, int]
) -> dict[str, str | int | bool]:
    """The ``server.properties`` entries of the secure listeners.

    Args:
        security: the listeners' settings.
        host: the loopback address every listener binds and advertises.
        ports: ``"PLAINTEXT"``, ``"CONTROLLER"`` and each of :data:`LISTENERS` -> port.

    Returns:
        Entries overriding the harness defaults (listeners and their maps included).
    """
    certs = security.certificates
    names = ["PLAINTEXT", *LISTENERS]
    props: dict[str, str | int | bool] = {
        "listeners": ",".join(f"{n}://{host}:{ports[n]}" for n in [*names, "CONTROLLER"]),
        "advertised.listeners": ",".join(f"{n}://{host}:{ports[n]}" for n in names),
        "listener.security.protocol.map": ",".join(
            ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
            + [f"{n}:{protocol}" for n, protocol in LISTENERS.items()]
        ),
        "sasl.enabled.mechanisms": ",".join(_MECHANISMS),
    }
    if security.authorizer:
        props["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        props["super.users"] = "User:ANONYMOUS"
        props["allow.everyone.if.no.acl.found"] = True
    plain = _jaas(
        "org.apache.kafka.common.security.plain.PlainLoginModule",
        {f"user_{user}": password for user, password in security.plain_users.items()},
    )
    scram = _jaas("org.apache.kafka.common.security.scram.ScramLoginModule", {})
    oauth = _jaas(
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
        {"unsecuredLoginStringClaim_sub": "broker"},
    )
    jaas = {"PLAIN": plain, "SCRAM-SHA-256": scram, "SCRAM-SHA-512": scram, "OAUTHBEARER": oauth}
    for name, protocol in LISTENERS.items():
        prefix = f"listener.name.{name.lower()}."
        keystore = certs.wrong_host_server if name == "WRONG_HOST" else certs.server
        props[prefix + "ssl.keystore.type"] = "PEM"
        props[prefix + "ssl.keystore.location"] = keystore.as_posix()
        if name == "MTLS":
            props[prefix + "ssl.client.auth"] = "required"
            props[prefix + "ssl.truststore.type"] = "PEM"
            props[prefix + "ssl.truststore.location"] = certs.ca.as_posix()
        if protocol != "SASL_SSL":
            continue
        for mechanism in _MECHANISMS:
            props[f"{prefix}{mechanism.lower()}.sasl.jaas.config"] = jaas[mechanism]
            if name == "REAUTH":
                props[f"{prefix}{mechanism.lower()}.connections.max.reauth.ms"] = security.reauth_ms
    return props


def scram_format_args(security: BrokerSecurity) -> list[str]:
    """The ``kafka-storage format`` arguments creating the SCRAM users.

    Raises:
        KafkaHarnessError: a user name or password holds a character the
            tool's ``[name=...,password=...]`` syntax cannot carry.
    """
    args: list[str] = []
    for user, password in security.scram_users.items():
        if any(c in user + password for c in ',[]="'):
            raise KafkaHarnessError(f'SCRAM user {user!r}: names and passwords may not hold ,[]="')
        for mechanism in _SCRAM:
            args += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
    return args
