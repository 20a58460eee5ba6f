"""How the client secures its connections: TLS and SASL settings, declared once.

Theory of operation:

:class:`Security` holds the settings a Java or librdkafka user knows by name
(``security_protocol``, ``ssl_*``, ``sasl_*``) and checks them together at
construction, before any I/O: a bad combination (SASL credentials with a
protocol without SASL, a key file without its certificate, a missing file, a
token provider with ``PLAIN`` ...) raises :class:`~gengroup._errors.ConfigError`
naming the settings. Every client configuration (``GroupConfig``,
``ProducerConfig``, ``AdminConfig``) inherits these fields, so
``ConsumerGroup``, ``Producer`` and ``Admin`` take them as keyword settings,
and :class:`~gengroup.io.cluster.Cluster` takes a :class:`Security` (or the
same keywords). Passwords are left out of every ``repr``.

:meth:`Security.tls_context` builds the one :class:`ssl.SSLContext` a cluster
uses for every connection it opens: the caller's own ``ssl_context``, or one
made from ``ssl_cafile`` (the system's trust store when omitted), the client
certificate for mutual TLS (``ssl_certfile``/``ssl_keyfile``/``ssl_password``)
and ``ssl_check_hostname``. Certificates are always verified; only the host
name check can be turned off (for brokers whose certificates do not name the
address clients use), and a caller who needs more passes a context of their own.

The SASL exchange itself is :mod:`gengroup.io.sasl`'s; this module does no I/O
beyond reading the certificate files when the context is built.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any, Final, Literal, TypedDict, get_args

from .._errors import ConfigError

__all__ = [
    "PLAINTEXT",
    "SaslMechanism",
    "Security",
    "SecurityProtocol",
    "SecuritySettings",
    "TokenProvider",
    "check_shared",
]

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
#: An async callable returning an OAuth 2 bearer token (a compact JWT) for
#: OAUTHBEARER. A plain function returning the token is accepted too (it is
#: called in the event loop, so it must not block).
TokenProvider = Callable[[], Awaitable[str] | str]
#: A path setting: a string or a :class:`os.PathLike`.
PathSetting = str | os.PathLike[str]

_PROTOCOLS: Final = get_args(SecurityProtocol)
_MECHANISMS: Final = get_args(SaslMechanism)
_SSL_FILES: Final = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")


class UsesProtocol:
    """What a listener's or a client's ``security_protocol`` implies (shared by both sides)."""

    __slots__ = ()
    security_protocol: SecurityProtocol

    @property
    def uses_tls(self) -> bool:
        """Whether connections are wrapped in TLS."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        """Whether connections authenticate with SASL (after ApiVersions)."""
        return self.security_protocol.startswith("SASL_")


@dataclass(frozen=True, slots=True, kw_only=True)
class Security(UsesProtocol):
    """The security settings of a client's connections (keyword-only, validated).

    Attributes:
        security_protocol: ``"PLAINTEXT"`` (the default), ``"SSL"`` (TLS),
            ``"SASL_PLAINTEXT"`` (SASL without TLS) or ``"SASL_SSL"`` (SASL over TLS).
            Lower case is accepted.
        ssl_context: a ready :class:`ssl.SSLContext` for TLS connections;
            excludes the other ``ssl_*`` settings.
        ssl_cafile: PEM file of the certificate authorities to trust (default:
            the system's trust store).
        ssl_certfile: PEM file of this client's certificate (mutual TLS); it
            may hold the private key too.
        ssl_keyfile: PEM file of the client certificate's private key.
        ssl_password: the password of an encrypted private key.
        ssl_check_hostname: whether the broker's certificate must name the
            host connected to (certificates are verified either way).
        sasl_mechanism: ``"PLAIN"``, ``"SCRAM-SHA-256"``, ``"SCRAM-SHA-512"`` or
            ``"OAUTHBEARER"``; required with a ``SASL_*`` protocol.
        sasl_username: the user name (PLAIN and SCRAM).
        sasl_password: the password (PLAIN and SCRAM).
        sasl_oauth_token_provider: a callable returning a bearer token
            (OAUTHBEARER): an async function, or a plain one returning the
            token (called in the event loop, so it must not block); called
            on every (re-)authentication, so it may refresh the token.

    Raises:
        ConfigError: a setting, or a combination of them, is invalid.
    """

    security_protocol: SecurityProtocol = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    ssl_cafile: PathSetting | None = None
    ssl_certfile: PathSetting | None = None
    ssl_keyfile: PathSetting | None = None
    ssl_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    sasl_oauth_token_provider: TokenProvider | None = None

    def __post_init__(self) -> None:
        _check_security(self)

    @classmethod
    def of(cls, settings: Security) -> Security:
        """The security settings of a client configuration (which inherits them)."""
        if type(settings) is cls:
            return settings
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})

    def tls_context(self) -> ssl.SSLContext | None:
        """The TLS context for this client's connections (None without TLS).

        Raises:
            ConfigError: a certificate or key file cannot be loaded (not PEM,
                wrong key password, key not matching the certificate).
        """
        if not self.uses_tls:
            return None
        if self.ssl_context is not None:
            return self.ssl_context
        cafile = None if self.ssl_cafile is None else os.fspath(self.ssl_cafile)
        try:
            context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"ssl_cafile {cafile!r} cannot be loaded: {exc}") from exc
        context.check_hostname = self.ssl_check_hostname
        context.verify_mode = ssl.CERT_REQUIRED
        if self.ssl_certfile is not None:
            load_cert_chain(context, self.ssl_certfile, self.ssl_keyfile, self.ssl_password)
        return context


def load_cert_chain(
    context: ssl.SSLContext,
    certfile: PathSetting,
    keyfile: PathSetting | None,
    password: str | None,
) -> None:
    """Load a certificate chain and its key into ``context`` (a client's or a listener's).

    Raises:
        ConfigError: the files cannot be read or do not fit together.
    """
    cert = os.fspath(certfile)
    key = None if keyfile is None else os.fspath(keyfile)

    def no_password() -> str:
        # Called for an encrypted key only (its exception comes out of
        # load_cert_chain as itself); without it, OpenSSL would ask for the
        # password on the process's terminal and block the event loop there.
        raise ConfigError(f"the key in {key or cert!r} is encrypted: set ssl_password")

    try:
        context.load_cert_chain(cert, key, no_password if password is None else password)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"ssl_certfile {cert!r} / ssl_keyfile {key!r} cannot be loaded (not PEM, no "
            f"private key, a wrong ssl_password, or a key of another certificate): {exc}"
        ) from exc


def check_pem_files(settings: Any, names: Iterable[str], certificate: str) -> None:
    """Check the PEM file settings ``names`` of a client's or a listener's settings.

    Each one that is set must name an existing file, and ``ssl_keyfile`` needs
    ``ssl_certfile`` (``certificate`` says whose, in the error).

    Raises:
        ConfigError: a setting is not a path, its file is missing, or a key has
            no certificate.
    """
    for name in names:
        value: Any = getattr(settings, name)
        if value is None:
            continue
        if not isinstance(value, str | os.PathLike) or not os.fspath(value):
            raise ConfigError(f"{name} must be a path, got {value!r}")
        if not os.path.isfile(value):
            raise ConfigError(f"{name} {os.fspath(value)!r} is not a file")
    if settings.ssl_keyfile is not None and settings.ssl_certfile is None:
        raise ConfigError(f"ssl_keyfile needs ssl_certfile ({certificate} it belongs to)")


def _check_security(s: Security) -> None:
    protocol = s.security_protocol
    if isinstance(protocol, str) and protocol.upper() in _PROTOCOLS:
        protocol = protocol.upper()  # type: ignore[assignment]
        object.__setattr__(s, "security_protocol", protocol)
    else:
        raise ConfigError(
            f"security_protocol must be one of {', '.join(_PROTOCOLS)}, got {protocol!r}"
        )
    if not isinstance(s.ssl_check_hostname, bool):
        raise ConfigError(f"ssl_check_hostname must be True or False, got {s.ssl_check_hostname!r}")
    ssl_set = [n for n in (*_SSL_FILES, "ssl_password") if getattr(s, n) is not None]
    if s.ssl_context is not None:
        ssl_set.insert(0, "ssl_context")
    if not s.uses_tls and (ssl_set or not s.ssl_check_hostname):
        named = ", ".join(ssl_set or ["ssl_check_hostname"])
        raise ConfigError(
            f"{named} set, but security_protocol={protocol!r} uses no TLS (use 'SSL' or 'SASL_SSL')"
        )
    if s.ssl_context is not None:
        if not isinstance(s.ssl_context, ssl.SSLContext):
            raise ConfigError(f"ssl_context must be an ssl.SSLContext, got {s.ssl_context!r}")
        if len(ssl_set) > 1 or not s.ssl_check_hostname:
            others = ", ".join(ssl_set[1:] or ["ssl_check_hostname"])
            raise ConfigError(
                f"ssl_context excludes {others}: configure the context itself, "
                "or pass the files instead of a context"
            )
    check_pem_files(s, _SSL_FILES, "the client certificate")
    if s.ssl_password is not None and s.ssl_certfile is None:
        raise ConfigError("ssl_password is the client key's password: it needs ssl_certfile")
    _check_sasl(s, protocol)


def _check_sasl(s: Security, protocol: str) -> None:
    sasl_set = [
        n
        for n in ("sasl_mechanism", "sasl_username", "sasl_password", "sasl_oauth_token_provider")
        if getattr(s, n) is not None
    ]
    if not s.uses_sasl:
        if sasl_set:
            raise ConfigError(
                f"{', '.join(sasl_set)} set, but security_protocol={protocol!r} uses no SASL "
                "(use 'SASL_SSL' or 'SASL_PLAINTEXT')"
            )
        return
    mechanism = s.sasl_mechanism
    if not isinstance(mechanism, str) or mechanism.upper() not in _MECHANISMS:
        raise ConfigError(
            f"security_protocol={protocol!r} needs sasl_mechanism, one of "
            f"{', '.join(_MECHANISMS)} (got {mechanism!r})"
        )
    mechanism = mechanism.upper()  # type: ignore[assignment]
    object.__setattr__(s, "sasl_mechanism", mechanism)
    if mechanism == "OAUTHBEARER":
        if not callable(s.sasl_oauth_token_provider):
            raise ConfigError(
                "sasl_mechanism='OAUTHBEARER' needs sasl_oauth_token_provider, a callable "
                "returning a token, async or not "
                f"(got a {type(s.sasl_oauth_token_provider).__name__})"
            )
        if s.sasl_username is not None or s.sasl_password is not None:
            raise ConfigError(
                "sasl_username/sasl_password are not used by OAUTHBEARER: the token "
                "provider's token names the principal"
            )
        return
    if s.sasl_oauth_token_provider is not None:
        raise ConfigError(
            f"sasl_oauth_token_provider is for OAUTHBEARER, not sasl_mechanism={mechanism!r}"
        )
    for name in ("sasl_username", "sasl_password"):
        value = getattr(s, name)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"sasl_mechanism={mechanism!r} needs {name} (a non-empty string)")


#: No TLS, no SASL.
PLAINTEXT: Final = Security()


def check_shared(settings: Security, cluster: Security) -> None:
    """Refuse a client's security settings that a shared cluster does not carry.

    A client given an open ``Cluster`` connects through it, with the
    cluster's settings: a setting of the client's left at its default is
    the cluster's, and one set to the cluster's value is harmless, but any
    other would be silently ignored (a ``SASL_SSL`` producer sending in
    plain text through a ``PLAINTEXT`` cluster).  A file setting is the
    cluster's when it names the same path, as a string or a path object.

    Raises:
        ConfigError: a setting of ``settings`` neither its default nor the cluster's.
    """
    for f in fields(Security):
        mine, theirs = getattr(settings, f.name), getattr(cluster, f.name)
        if f.name in _SSL_FILES and mine is not None and theirs is not None:
            same = os.fspath(mine) == os.fspath(theirs)  # a str and a Path of one file
        else:
            same = mine == theirs
        if mine != f.default and not same:
            shown = f"={mine!r} (the Cluster's: {theirs!r})" if f.repr else ""
            raise ConfigError(
                f"{f.name}{shown} is set on a client of a shared Cluster, which carries the "
                "security settings of its connections: pass them to Cluster(...), or pass "
                "bootstrap addresses instead of the Cluster"
            )


class SecuritySettings(TypedDict, total=False):
    """:class:`Security`'s fields as keyword arguments (names and types, for type checkers)."""

    security_protocol: SecurityProtocol
    ssl_context: ssl.SSLContext | None
    ssl_cafile: PathSetting | None
    ssl_certfile: PathSetting | None
    ssl_keyfile: PathSetting | None
    ssl_password: str | None
    ssl_check_hostname: bool
    sasl_mechanism: SaslMechanism | None
    sasl_username: str | None
    sasl_password: str | None
    sasl_oauth_token_provider: TokenProvider | None
