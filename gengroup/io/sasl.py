"""SASL authentication of a broker connection: PLAIN, SCRAM-SHA-256/512, OAUTHBEARER.

Theory of operation:

Once a connection has negotiated API versions, :func:`authenticate` runs the
SASL exchange as Kafka frames it (KIP-152): a ``SaslHandshake`` (v1) naming
the mechanism, then ``SaslAuthenticate`` requests at the highest version both
sides support, each carrying one client message of the mechanism and
returning the server's next one. The mechanisms are small sans-IO
conversations (:class:`Mechanism`): ``first()`` gives the client's first
message, ``reply(server)`` the answer to each server message, or None when
the exchange is complete. PLAIN is one message (RFC 4616); SCRAM is two
rounds computed by the ``scramp`` library (RFC 5802/7677: nonce, salted
proof, and the check of the server's signature); OAUTHBEARER sends the token
of the user's provider in the RFC 7628 client response.

A rejected exchange raises :class:`~gengroup._errors.AuthenticationError`
naming the mechanism, the broker and the broker's message; the error table
never retries it. The broker closes the connection after a failure anyway.

Re-authentication (KIP-368): from ``SaslAuthenticate`` v1 on, the broker
tells the session's lifetime (``connections.max.reauth.ms``, or an
OAUTHBEARER token's expiry). :func:`authenticate` returns it, and the
connection re-runs the whole exchange *on the same connection* at a random
point between 85 % and 95 % of it (as the Java client does), while other
requests wait on the connection's send lock (one arriving after the
session expired makes the broker close the connection). The mechanism (an
OAUTHBEARER token) is made ahead of it, a quarter of the session (at most a
minute) before, without the lock: a slow token provider holds no request up
unless it is still running when the exchange is due, which then waits for
it. The exchange starts once the requests sent before it were answered (the
broker answers them first, in order; a parked JoinGroup may take up to its
rebalance timeout), so that its timeout counts the exchange alone (and the
wait for a token still coming). Kafka closes an expired session's
connection at its next request other than a SaslHandshake, so a handshake
that arrives late still re-authenticates. Re-authenticating
in place rather than reconnecting keeps parked JoinGroup and long-poll Fetch
requests alive across it: a reconnect would fail them and, for a consumer
group, could cost a rebalance. Should re-authentication fail, the connection
is closed and the next use opens a new one, whose authentication then reports
the cause.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, Protocol

import scramp  # type: ignore[import-untyped]
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v0.request import (
    SaslAuthenticateRequest as SaslAuthenticateRequestV0,
)
from kio.schema.sasl_authenticate.v1.request import (
    SaslAuthenticateRequest as SaslAuthenticateRequestV1,
)
from kio.schema.sasl_authenticate.v2.request import (
    SaslAuthenticateRequest as SaslAuthenticateRequestV2,
)
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from .._errors import AuthenticationError, BrokenConnection, ConfigError
from .security import Security

__all__ = ["Mechanism", "SaslPeer", "authenticate", "mechanism_for"]

_SASL_HANDSHAKE = 17
_SASL_AUTHENTICATE = 36
_AUTHENTICATE_REQUESTS: dict[int, type[Any]] = {
    0: SaslAuthenticateRequestV0,
    1: SaslAuthenticateRequestV1,
    2: SaslAuthenticateRequestV2,
}


class SaslPeer(Protocol):
    """What :func:`authenticate` needs of a connection (a ``BrokerConnection``)."""

    broker_versions: dict[int, tuple[int, int]]

    async def request(self, request: Any, *, timeout: float | None = None) -> Any:
        """Send one request on the connection and return its response."""
        ...


class Mechanism(Protocol):
    """One SASL mechanism's client side, as a sans-IO conversation."""

    name: str

    def first(self) -> bytes:
        """The client's first message."""
        ...

    def reply(self, server: bytes) -> bytes | None:
        """The answer to the server's message, or None when authentication is complete.

        Raises:
            AuthenticationError: the server's message is not what the mechanism expects.
        """
        ...


class _Plain:
    name = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._message = b"\0" + username.encode() + b"\0" + password.encode()

    def first(self) -> bytes:
        return self._message

    def reply(self, server: bytes) -> bytes | None:
        return None


class _Scram:
    def __init__(self, name: str, username: str, password: str, broker: str) -> None:
        self.name = name
        self._broker = broker
        self._client = scramp.ScramClient([name], username, password)
        self._round = 0

    def first(self) -> bytes:
        return str(self._client.get_client_first()).encode()

    def reply(self, server: bytes) -> bytes | None:
        self._round += 1
        try:
            if self._round == 1:
                self._client.set_server_first(server.decode())
                return str(self._client.get_client_final()).encode()
            if self._round == 2:
                self._client.set_server_final(server.decode())
                return None
        except (scramp.ScramException, UnicodeDecodeError) as exc:
            raise AuthenticationError(
                f"{self.name} authentication with {self._broker} failed: {exc}",
                broker=self._broker,
                mechanism=self.name,
            ) from exc
        raise AuthenticationError(
            f"{self.name} authentication with {self._broker} failed: "
            "the broker sent a message after the exchange was complete",
            broker=self._broker,
            mechanism=self.name,
        )


class _OAuthBearer:
    name = "OAUTHBEARER"

    def __init__(self, token: str) -> None:
        self._token = token
        self._errored = False

    def first(self) -> bytes:
        # RFC 7628 section 3.1: a GS2 header without authzid, then the auth key-value.
        return b"n,,\x01auth=Bearer " + self._token.encode() + b"\x01\x01"

    def reply(self, server: bytes) -> bytes | None:
        if not server or self._errored:
            return None
        # An error challenge (a JSON status): acknowledge it with %x01, as RFC
        # 7628 section 3.2.3 requires, and the broker then fails the exchange.
        self._errored = True
        return b"\x01"


async def mechanism_for(security: Security, broker: str) -> Mechanism:
    """The conversation of ``security``'s mechanism (OAUTHBEARER asks the provider for a token).

    Raises:
        AuthenticationError: the token provider returned no token.
        AuthenticationError, ConfigError: raised by the token provider itself.
        BrokenConnection: the token provider raised anything else: a failure to fetch a token
            (an identity provider briefly down) is retried as a connection's,
            within the client's ``unreachable_timeout``, not taken as a
            rejection of the credentials.
    """
    name = security.sasl_mechanism
    if name == "OAUTHBEARER":
        provider = security.sasl_oauth_token_provider
        assert provider is not None
        try:
            # An async function's awaitable, or a plain function's token.
            token: object = provider()
            if inspect.isawaitable(token):
                token = await token
        except (AuthenticationError, ConfigError):
            raise  # the provider's own verdict (its identity provider refused it)
        except Exception as exc:
            raise BrokenConnection(
                f"OAUTHBEARER authentication with {broker}: the token provider raised {exc!r}"
            ) from exc
        if not isinstance(token, str) or not token:
            raise AuthenticationError(
                f"OAUTHBEARER authentication with {broker} failed: the token provider "
                f"returned {type(token).__name__}, not a non-empty token string",
                broker=broker,
                mechanism="OAUTHBEARER",
            )
        return _OAuthBearer(token)
    assert security.sasl_username is not None and security.sasl_password is not None
    if name == "PLAIN":
        return _Plain(security.sasl_username, security.sasl_password)
    assert name in ("SCRAM-SHA-256", "SCRAM-SHA-512")
    return _Scram(name, security.sasl_username, security.sasl_password, broker)


def _authenticate_version(peer: SaslPeer) -> int | None:
    """The highest SaslAuthenticate version both sides support (None: the broker has none)."""
    rng = peer.broker_versions.get(_SASL_AUTHENTICATE)
    if rng is None:
        return None
    hi = min(rng[1], max(_AUTHENTICATE_REQUESTS))
    return hi if hi >= max(rng[0], 0) else None


async def authenticate(
    peer: SaslPeer, security: Security, broker: str, mechanism: Mechanism | None = None
) -> float | None:
    """Authenticate ``peer`` with ``security``'s SASL mechanism.

    Args:
        peer: the connection, with its API versions negotiated.
        security: the client's settings (``uses_sasl`` must be true).
        broker: the broker's ``host:port``, for messages.
        mechanism: the conversation to run, made beforehand by
            :func:`mechanism_for` (default: made here).

    Returns:
        The session's lifetime in seconds, after which the connection must
        re-authenticate (None: the broker set no limit).

    Raises:
        AuthenticationError: the broker rejected the mechanism or the credentials.
        KafkaConnectionError: the connection failed meanwhile.
    """
    if mechanism is None:
        mechanism = await mechanism_for(security, broker)
    name = mechanism.name

    def failed(detail: str) -> AuthenticationError:
        return AuthenticationError(
            f"{name} authentication with {broker} failed: {detail}", broker=broker, mechanism=name
        )

    handshake = peer.broker_versions.get(_SASL_HANDSHAKE)
    version = _authenticate_version(peer)
    if handshake is None or handshake[1] < 1 or version is None:
        raise failed("the broker does not support SaslHandshake v1 and SaslAuthenticate")
    resp: Any = await peer.request(SaslHandshakeRequest(mechanism=name))
    if resp.error_code == ErrorCode.unsupported_sasl_mechanism:
        enabled = ", ".join(resp.mechanisms) or "none"
        raise failed(f"the broker does not enable {name} (enabled: {enabled})")
    if resp.error_code == ErrorCode.illegal_sasl_state:
        raise failed(
            "SaslHandshake answered ILLEGAL_SASL_STATE: the listener does not use SASL "
            "(check security_protocol)"
        )
    if resp.error_code != ErrorCode.none:
        raise failed(f"SaslHandshake answered {resp.error_code.name.upper()}")
    request_cls = _AUTHENTICATE_REQUESTS[version]
    message: bytes | None = mechanism.first()
    lifetime_ms = 0
    while message is not None:
        auth: Any = await peer.request(request_cls(auth_bytes=message))
        if auth.error_code != ErrorCode.none:
            detail = auth.error_message or auth.error_code.name.upper()
            raise failed(_describe_rejection(detail, auth.auth_bytes))
        lifetime = getattr(auth, "session_lifetime", None)
        if lifetime is not None:
            lifetime_ms = int(lifetime.total_seconds() * 1000)
        message = mechanism.reply(bytes(auth.auth_bytes))
    return lifetime_ms / 1000 if lifetime_ms > 0 else None


def _describe_rejection(detail: str, server: bytes) -> str:
    """The broker's message, with an OAUTHBEARER error status appended if it sent one."""
    try:
        status = json.loads(bytes(server)).get("status") if server else None
    except (ValueError, AttributeError):
        status = None
    return f"{detail} (status: {status})" if status else detail
