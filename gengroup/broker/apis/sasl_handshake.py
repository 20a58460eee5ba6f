"""SaslHandshake (key 17): the SASL mechanism a client picks, once a connection is authenticated.

Version notes: v0-v1 served. v1 announces that the SASL tokens that follow
travel in SaslAuthenticate requests; after a v0 handshake they are raw
length-prefixed frames without a Kafka header. The answer is an error code
and the mechanisms the listener enables.

Before authentication the connection's SASL authenticator
(:class:`~gengroup.broker.security.SaslAuthenticator`) answers this request;
what reaches this handler is a handshake sent on a listener without SASL, or
on an authenticated connection that may not re-authenticate now (its
listener sets no session lifetime, or it started re-authenticating less than
a second ago). Kafka answers those ILLEGAL_SASL_STATE, and so does this
handler; the connection stays open.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ._base import ApiSpec, Context, ec

__all__ = ["KEY", "SPEC", "VERSIONS", "error_response", "handle", "response"]

KEY: Final = ApiKey.SASL_HANDSHAKE
VERSIONS: Final = (0, 1)


def response(version: int, code: int, mechanisms: Sequence[str] = ()) -> Any:
    """A SaslHandshake answer: ``code`` and the enabled ``mechanisms``."""
    mod = response_module(KEY, version)
    return build(mod.SaslHandshakeResponse, error_code=ec(code), mechanisms=tuple(mechanisms))


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """SaslHandshake failing with ``code`` (no mechanisms listed)."""
    return response(version, code)


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """A handshake outside of authentication: ILLEGAL_SASL_STATE, as Kafka answers."""
    return response(v, ErrorCode.illegal_sasl_state)


SPEC: Final = ApiSpec(KEY, *VERSIONS, handle, error_response)
