"""The embedded broker's listener security: TLS, and SASL PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512.

Theory of operation:

:class:`ServerSecurity` is what a listener is configured with, checked at
construction like the client's :class:`~gengroup.io.security.Security`: the
security protocol (``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT``, ``SASL_SSL``),
the server certificate (a ready :class:`ssl.SSLContext`, or PEM files) and an
optional CA whose client certificates are then required (mutual TLS), the
enabled SASL mechanisms, the users and their passwords, and an optional
session lifetime (Kafka's ``connections.max.reauth.ms``). SCRAM credentials
are derived from the passwords once, at construction, with ``scramp`` (salt,
stored key, server key; 4096 iterations like Kafka's tools), so the SCRAM
exchanges themselves never see a password.

:class:`SaslAuthenticator` is one connection's SASL state machine, sans-IO:
the server hands it each decoded request (or, after a v0 handshake, each raw
token) with the event loop's current time, and it answers with an
:class:`Outcome` -- serve the request normally, send this answer, close the
connection, and whether an authentication failed or completed. It follows
Kafka's ``SaslServerAuthenticator`` step by step:

* before authentication only ApiVersions (once) and SaslHandshake are
  served; any other request closes the connection without an answer;
* SaslHandshake with a mechanism that is not enabled is answered
  UNSUPPORTED_SASL_MECHANISM with the enabled list, then the connection
  closes; with an enabled one the answer lists them too, and the SASL tokens
  follow in SaslAuthenticate requests (v1) or as raw frames (v0);
* while authenticating, a request other than SaslAuthenticate is answered
  with its API's error response carrying ILLEGAL_SASL_STATE, then the
  connection closes;
* rejected credentials are answered SASL_AUTHENTICATION_FAILED with Kafka's
  message -- verbatim where Kafka's mechanism gives one to the client (PLAIN's
  "Authentication failed: Invalid username or password"), otherwise
  Kafka's generic "Authentication failed during authentication due to invalid
  credentials with SASL mechanism M", which does not tell whether the user
  exists -- then the connection closes;
* once authenticated every request goes to the APIs, where SaslHandshake and
  SaslAuthenticate are answered ILLEGAL_SASL_STATE, except a SaslHandshake
  on a listener with a session lifetime, which starts a re-authentication
  (KIP-368; at most one a second, and with the same mechanism and user);
* with a session lifetime the last SaslAuthenticate (v1+) carries
  ``session_lifetime_ms``, and the first request other than SaslHandshake
  that arrives after the session expired closes the connection, as Kafka
  does (a connection idle past expiry stays open until it is used).

Failed authentications are reported in the outcome (``failure``) so that the
server logs and counts each exactly once.
"""

from __future__ import annotations

import enum
import os
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

import scramp  # type: ignore[import-untyped]
from kio.schema.errors import ErrorCode

from .._errors import ConfigError
from ..io.security import (
    PathSetting,
    SecurityProtocol,
    UsesProtocol,
    check_pem_files,
    load_cert_chain,
)
from ..protocol.versions import ApiKey
from .apis import sasl_authenticate, sasl_handshake

__all__ = ["MECHANISMS", "Outcome", "SaslAuthenticator", "ServerMechanism", "ServerSecurity"]

ServerMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
#: The SASL mechanisms the embedded broker serves.
MECHANISMS: Final[tuple[str, ...]] = get_args(ServerMechanism)
_PROTOCOLS: Final = get_args(SecurityProtocol)
_SCRAM_ITERATIONS: Final = 4096
#: Kafka lets a connection start re-authenticating at most once a second.
_MIN_REAUTH_INTERVAL: Final = 1.0


@dataclass(frozen=True, kw_only=True, eq=False)
class ServerSecurity(UsesProtocol):
    """How a listener of the embedded broker secures its connections (validated).

    Attributes:
        security_protocol: ``"PLAINTEXT"`` (the default), ``"SSL"``,
            ``"SASL_PLAINTEXT"`` or ``"SASL_SSL"``; lower case is accepted.
        ssl_context: a ready server-side :class:`ssl.SSLContext`; excludes
            the ``ssl_*`` files.
        ssl_certfile: PEM file of the broker's certificate chain (it may hold
            the private key too).
        ssl_keyfile: PEM file of the private key, if not in ``ssl_certfile``.
        ssl_password: the password of an encrypted private key.
        ssl_cafile: PEM file of the CAs whose client certificates are
            accepted; when set, clients must present one (mutual TLS).
        sasl_mechanisms: the enabled mechanisms, among ``PLAIN``,
            ``SCRAM-SHA-256`` and ``SCRAM-SHA-512`` (default: all three).
        users: user name -> password, accepted by every enabled mechanism.
        session_lifetime_ms: how long a SASL session lasts before the client
            must re-authenticate (Kafka's ``connections.max.reauth.ms``;
            None: forever).

    Raises:
        ConfigError: a setting, or a combination of them, is invalid.

    Example::

        ServerSecurity(
            security_protocol="SASL_SSL",
            ssl_certfile="server.pem",
            users={"alice": "alice-secret"},
            sasl_mechanisms=("SCRAM-SHA-512",),
        )
    """

    security_protocol: SecurityProtocol = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    ssl_certfile: PathSetting | None = None
    ssl_keyfile: PathSetting | None = None
    ssl_password: str | None = field(default=None, repr=False)
    ssl_cafile: PathSetting | None = None
    sasl_mechanisms: Sequence[ServerMechanism] | None = None
    users: Mapping[str, str] = field(default_factory=dict, repr=False)
    session_lifetime_ms: int | None = None
    _scram: dict[str, dict[str, tuple[bytes, bytes, bytes, int]]] = field(
        init=False, repr=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        _check(self)
        for name in self.mechanisms:
            if name.startswith("SCRAM-"):
                mechanism = scramp.ScramMechanism(name)
                self._scram[name] = {
                    user: tuple(mechanism.make_auth_info(password, _SCRAM_ITERATIONS))
                    for user, password in self.users.items()
                }

    @property
    def mechanisms(self) -> tuple[str, ...]:
        """The enabled SASL mechanisms (none without SASL)."""
        if not self.uses_sasl:
            return ()
        return tuple(self.sasl_mechanisms) if self.sasl_mechanisms is not None else MECHANISMS

    def tls_context(self) -> ssl.SSLContext | None:
        """The server-side TLS context (None without TLS).

        Raises:
            ConfigError: a certificate, key or CA file cannot be loaded.
        """
        if not self.uses_tls:
            return None
        if self.ssl_context is not None:
            return self.ssl_context
        assert self.ssl_certfile is not None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        load_cert_chain(context, self.ssl_certfile, self.ssl_keyfile, self.ssl_password)
        if self.ssl_cafile is not None:
            cafile = os.fspath(self.ssl_cafile)
            try:
                context.load_verify_locations(cafile)
            except (ssl.SSLError, OSError) as exc:
                raise ConfigError(f"ssl_cafile {cafile!r} cannot be loaded: {exc}") from exc
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def authenticator(self) -> SaslAuthenticator | None:
        """A new connection's SASL state machine (None without SASL)."""
        return SaslAuthenticator(self) if self.uses_sasl else None

    def scram_credentials(self, mechanism: str, user: str) -> tuple[bytes, bytes, bytes, int]:
        """The SCRAM credentials of ``user``: salt, stored key, server key, iterations.

        Raises:
            KeyError: the user is unknown or the mechanism is not enabled.
        """
        return self._scram[mechanism][user]


def _check(s: ServerSecurity) -> None:
    protocol = s.security_protocol
    if not isinstance(protocol, str) or protocol.upper() not in _PROTOCOLS:
        raise ConfigError(
            f"security_protocol must be one of {', '.join(_PROTOCOLS)}, got {protocol!r}"
        )
    object.__setattr__(s, "security_protocol", protocol.upper())
    files = [n for n in ("ssl_certfile", "ssl_keyfile", "ssl_cafile") if getattr(s, n) is not None]
    tls_set = (["ssl_context"] if s.ssl_context is not None else []) + files
    if s.ssl_password is not None:
        tls_set.append("ssl_password")
    if not s.uses_tls:
        if tls_set:
            raise ConfigError(
                f"{', '.join(tls_set)} set, but security_protocol={s.security_protocol!r} "
                "uses no TLS (use 'SSL' or 'SASL_SSL')"
            )
    elif s.ssl_context is not None:
        if not isinstance(s.ssl_context, ssl.SSLContext):
            raise ConfigError(f"ssl_context must be an ssl.SSLContext, got {s.ssl_context!r}")
        if len(tls_set) > 1:
            raise ConfigError(
                f"ssl_context excludes {', '.join(tls_set[1:])}: configure the context itself"
            )
    elif s.ssl_certfile is None:
        raise ConfigError(
            f"security_protocol={s.security_protocol!r} needs the broker's certificate: "
            "ssl_certfile (and ssl_keyfile unless the key is in it), or ssl_context"
        )
    check_pem_files(s, files, "the certificate")
    _check_sasl(s)


def _check_sasl(s: ServerSecurity) -> None:
    lifetime = s.session_lifetime_ms
    if not s.uses_sasl:
        named = [
            n
            for n, unset in (
                ("sasl_mechanisms", s.sasl_mechanisms is None),
                ("users", not s.users),
                ("session_lifetime_ms", lifetime is None),
            )
            if not unset
        ]
        if named:
            raise ConfigError(
                f"{', '.join(named)} set, but security_protocol={s.security_protocol!r} uses "
                "no SASL (use 'SASL_PLAINTEXT' or 'SASL_SSL')"
            )
        return
    if s.sasl_mechanisms is not None:
        if isinstance(s.sasl_mechanisms, str):
            raise ConfigError(
                f"sasl_mechanisms must be a sequence of names, got {s.sasl_mechanisms!r}"
            )
        names = [str(m).upper() for m in s.sasl_mechanisms]
        unknown = [m for m in names if m not in MECHANISMS]
        if unknown or not names:
            raise ConfigError(
                f"sasl_mechanisms must name one or more of {', '.join(MECHANISMS)}, "
                f"got {list(s.sasl_mechanisms)!r}"
            )
        object.__setattr__(s, "sasl_mechanisms", tuple(dict.fromkeys(names)))
    if not isinstance(s.users, Mapping) or not s.users:
        raise ConfigError(
            f"security_protocol={s.security_protocol!r} needs users: a mapping of user name "
            "to password (the embedded broker has no other user store)"
        )
    for user, password in s.users.items():
        if not isinstance(user, str) or not user or not isinstance(password, str) or not password:
            raise ConfigError(
                f"users: user names and passwords must be non-empty strings, got {user!r}"
            )
    if lifetime is not None and (
        isinstance(lifetime, bool) or not isinstance(lifetime, int) or lifetime <= 0
    ):
        raise ConfigError(
            f"session_lifetime_ms must be a positive number of milliseconds, got {lifetime!r}"
        )


# --------------------------------------------------------------------------- mechanisms


class _Rejected(Exception):
    """Credentials refused. ``public``: the client sees this message (else Kafka's generic one)."""

    def __init__(self, message: str, *, public: bool) -> None:
        super().__init__(message)
        self.public = public


class _PlainServer:
    """SASL/PLAIN (RFC 4616): ``[authzid] NUL user NUL password``, one message."""

    name = "PLAIN"

    def __init__(self, security: ServerSecurity) -> None:
        self._users = security.users
        self.complete = False
        self.principal: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        # Kafka reads three NUL-separated fields, ignoring anything after a third NUL.
        authzid, user, password = [*token.decode("utf-8", "replace").split("\0"), "", ""][:3]
        if not user:
            raise _Rejected("Authentication failed: username not specified", public=True)
        if not password:
            raise _Rejected("Authentication failed: password not specified", public=True)
        if self._users.get(user) != password:
            raise _Rejected("Authentication failed: Invalid username or password", public=True)
        if authzid and authzid != user:
            raise _Rejected(
                "Authentication failed: Client requested an authorization id that is "
                "different from username",
                public=True,
            )
        self.complete, self.principal = True, user
        return b""


class _ScramServer:
    """SCRAM-SHA-256/512 (RFC 5802/7677) computed by ``scramp``: two rounds."""

    def __init__(self, name: str, security: ServerSecurity) -> None:
        self.name = name
        self.complete = False
        self.principal: str | None = None
        self._security = security
        self._user: str | None = None
        self._server = scramp.ScramMechanism(name).make_server(self._credentials)

    def _credentials(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        self._user = user
        return self._security.scram_credentials(self.name, user)

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
            if self._user is None:
                authzid, user = _gs2_names(text)
                if authzid:
                    # scramp takes no authorization id. Kafka refuses one naming
                    # another user, once the user is known; the same user is
                    # refused here too (a documented divergence).
                    self._credentials(user)
                    if authzid != user:
                        raise _Rejected(
                            "Authentication failed: Client requested an authorization id "
                            "that is different from username",
                            public=True,
                        )
                self._server.set_client_first(text)
                return str(self._server.get_server_first()).encode()
            self._server.set_client_final(text)
            final = str(self._server.get_server_final()).encode()
        except (scramp.ScramException, UnicodeDecodeError, ValueError) as exc:
            raise _Rejected(str(exc), public=False) from exc
        except KeyError as exc:
            raise _Rejected(f"unknown user {exc}", public=False) from exc
        self.complete, self.principal = True, self._user
        return final


def _gs2_names(client_first: str) -> tuple[str, str]:
    """The authorization id (``""``: none) and user name of a SCRAM client-first message."""

    def unescape(name: str) -> str:
        return name.replace("=2C", ",").replace("=3D", "=")

    parts = client_first.split(",", 3)
    authzid = parts[1][2:] if len(parts) > 1 and parts[1].startswith("a=") else ""
    user = parts[2][2:] if len(parts) > 2 and parts[2].startswith("n=") else ""
    return unescape(authzid), unescape(user)


_Mechanism = _PlainServer | _ScramServer


def _new_mechanism(name: str, security: ServerSecurity) -> _Mechanism:
    return _PlainServer(security) if name == "PLAIN" else _ScramServer(name, security)


# --------------------------------------------------------------------------- the state machine


class _State(enum.Enum):
    """Where a connection is in the exchange (only the identity of a state matters)."""

    VERSIONS_OR_HANDSHAKE = enum.auto()  # new: ApiVersions (once) or SaslHandshake
    HANDSHAKE = enum.auto()  # ApiVersions served: SaslHandshake next
    AUTHENTICATE = enum.auto()  # handshake done: the mechanism's tokens
    BAD_MECHANISM = enum.auto()  # re-authentication with another mechanism: fail next
    COMPLETE = enum.auto()  # authenticated: requests go to the APIs
    FAILED = enum.auto()  # authentication failed: the connection closes


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the server does with one request of a connection that uses SASL.

    Attributes:
        forward: serve the request through the APIs, as on any connection.
        response: the kio response to send instead.
        error: answer with the request's API error response carrying this
            code instead (the API's ``error_response``).
        raw: a raw SASL token to send as a frame of its own (after a v0 handshake).
        close: close the connection (after sending the answer, if any).
        failure: a failed authentication: Kafka's message, logged and counted once.
        completed: ``"authentication"`` or ``"re-authentication"`` when the
            exchange just completed.
        reason: why the connection closes, when it closes without a failure.
    """

    forward: bool = False
    response: Any = None
    error: int | None = None
    raw: bytes | None = None
    close: bool = False
    failure: str | None = None
    completed: str | None = None
    reason: str | None = None


_FORWARD: Final = Outcome(forward=True)


class SaslAuthenticator:
    """One connection's SASL state, fed the connection's requests in order (sans-IO).

    Args:
        security: the listener's settings (``uses_sasl`` is true).
    """

    def __init__(self, security: ServerSecurity) -> None:
        self._security = security
        self._state = _State.VERSIONS_OR_HANDSHAKE
        self._headers = True
        self._mechanism: _Mechanism | None = None
        #: The authenticated user (None until the first authentication completes).
        self.principal: str | None = None
        self._previous: tuple[str, str | None] | None = None  # re-authenticating: (mechanism, user)
        self._expires_at: float | None = None
        self._last_reauth: float | None = None
        self._bad_mechanism = ""

    @property
    def authenticated(self) -> bool:
        """Whether the connection completed authentication and is not re-authenticating."""
        return self._state is _State.COMPLETE

    @property
    def mechanism(self) -> str | None:
        """The mechanism of the current exchange or session."""
        return None if self._mechanism is None else self._mechanism.name

    @property
    def expects_raw_token(self) -> bool:
        """Whether the next frame is a raw SASL token (after a v0 handshake), not a request."""
        return self._state in (_State.AUTHENTICATE, _State.BAD_MECHANISM) and not self._headers

    @property
    def _text(self) -> str:
        return "re-authentication" if self._previous is not None else "authentication"

    def api_versions_answered(self, ok: bool) -> None:
        """Note that an ApiVersions request before authentication was answered (``ok``: no error).

        Kafka accepts one successful ApiVersions before the handshake; one
        answered with an error may be retried.
        """
        if ok and self._state is _State.VERSIONS_OR_HANDSHAKE:
            self._state = _State.HANDSHAKE

    def receive(self, api_key: int, version: int, request: Any, now: float) -> Outcome:
        """What to do with one decoded request.

        Args:
            api_key: the request's API key.
            version: its version.
            request: the decoded kio request.
            now: the event loop's time, in seconds.
        """
        state = self._state
        if state is _State.COMPLETE:
            return self._authenticated(api_key, version, request, now)
        if state in (_State.VERSIONS_OR_HANDSHAKE, _State.HANDSHAKE):
            if api_key == ApiKey.SASL_HANDSHAKE:
                return self._handshake(version, request)
            if api_key == ApiKey.API_VERSIONS and state is _State.VERSIONS_OR_HANDSHAKE:
                return _FORWARD
            return self._fail_silently(f"{_api_name(api_key)} request before authentication")
        if state is _State.AUTHENTICATE:
            if api_key != ApiKey.SASL_AUTHENTICATE:
                message = (
                    f"Unexpected Kafka request of type {_api_name(api_key)} during SASL "
                    f"{self._text}."
                )
                return self._failed(message, error=ErrorCode.illegal_sasl_state)
            return self._authenticate(version, bytes(request.auth_bytes), now)
        if state is _State.BAD_MECHANISM:
            return self._failed(self._bad_mechanism)
        return self._fail_silently("the connection failed authentication")

    def receive_token(self, token: bytes, now: float) -> Outcome:
        """What to do with one raw SASL token (see :attr:`expects_raw_token`)."""
        mechanism = self._mechanism
        assert mechanism is not None and self.expects_raw_token
        if self._state is _State.BAD_MECHANISM:
            return self._failed(self._bad_mechanism)
        try:
            reply = mechanism.evaluate(token)
        except _Rejected as exc:
            return self._failed(self._client_message(exc), detail=str(exc))
        if mechanism.complete:
            return self._complete(now, raw=reply)
        return Outcome(raw=reply)

    # ------------------------------------------------------------------ steps

    def _handshake(self, version: int, request: Any) -> Outcome:
        enabled = self._security.mechanisms
        name = str(request.mechanism)
        if name not in enabled:
            return self._failed(
                f"Unsupported SASL mechanism {name}",
                response=sasl_handshake.response(
                    version, ErrorCode.unsupported_sasl_mechanism, enabled
                ),
            )
        self._headers = version >= 1
        answer = sasl_handshake.response(version, ErrorCode.none, enabled)
        if self._previous is not None and self._previous[0] != name:
            self._bad_mechanism = (
                f"SASL mechanism '{name}' requested by client is not supported for "
                f"re-authentication of mechanism '{self._previous[0]}'"
            )
            self._state = _State.BAD_MECHANISM
            return Outcome(response=answer)
        self._mechanism = _new_mechanism(name, self._security)
        self._state = _State.AUTHENTICATE
        return Outcome(response=answer)

    def _authenticate(self, version: int, token: bytes, now: float) -> Outcome:
        mechanism = self._mechanism
        assert mechanism is not None
        try:
            reply = mechanism.evaluate(token)
        except _Rejected as exc:
            message = self._client_message(exc)
            return self._failed(
                message,
                detail=str(exc),
                response=sasl_authenticate.response(
                    version, ErrorCode.sasl_authentication_failed, message
                ),
            )
        if not mechanism.complete:
            answer = sasl_authenticate.response(version, ErrorCode.none, auth_bytes=reply)
            return Outcome(response=answer)
        return self._complete(now, version=version, reply=reply)

    def _complete(
        self, now: float, *, version: int = 0, reply: bytes = b"", raw: bytes | None = None
    ) -> Outcome:
        mechanism = self._mechanism
        assert mechanism is not None
        previous, text = self._previous, self._text
        if previous is not None and previous[1] != mechanism.principal:
            message = (
                f"Cannot change principals during re-authentication from User.{previous[1]}: "
                f"User.{mechanism.principal}"
            )
            response = None
            if raw is None:
                response = sasl_authenticate.response(
                    version, ErrorCode.sasl_authentication_failed, message
                )
            return self._failed(message, response=response)
        lifetime = self._security.session_lifetime_ms or 0
        self._expires_at = now + lifetime / 1000 if lifetime else None
        self.principal = mechanism.principal
        self._previous = None
        self._state = _State.COMPLETE
        if raw is not None:
            return Outcome(raw=raw, completed=text)
        response = sasl_authenticate.response(
            version, ErrorCode.none, auth_bytes=reply, session_lifetime_ms=lifetime
        )
        return Outcome(response=response, completed=text)

    def _authenticated(self, api_key: int, version: int, request: Any, now: float) -> Outcome:
        if (
            api_key == ApiKey.SASL_HANDSHAKE
            and self._expires_at is not None
            and (self._last_reauth is None or now - self._last_reauth >= _MIN_REAUTH_INTERVAL)
        ):
            self._last_reauth = now
            assert self._mechanism is not None
            self._previous = (self._mechanism.name, self.principal)
            return self._handshake(version, request)
        if self._expires_at is not None and now > self._expires_at:
            self._state = _State.FAILED
            return Outcome(close=True, reason="its SASL session expired")
        return _FORWARD

    # ------------------------------------------------------------------ failures

    def _client_message(self, exc: _Rejected) -> str:
        if exc.public:
            return str(exc)
        name = self.mechanism
        return (
            f"Authentication failed during {self._text} due to invalid credentials "
            f"with SASL mechanism {name}"
        )

    def _failed(
        self,
        message: str,
        *,
        detail: str | None = None,
        response: Any = None,
        error: int | None = None,
    ) -> Outcome:
        self._state = _State.FAILED
        failure = message if detail is None or detail == message else f"{message} ({detail})"
        return Outcome(response=response, error=error, close=True, failure=failure)

    def _fail_silently(self, reason: str) -> Outcome:
        self._state = _State.FAILED
        return Outcome(close=True, reason=reason)


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api key {api_key}"
