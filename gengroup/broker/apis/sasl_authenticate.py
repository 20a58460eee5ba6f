"""SaslAuthenticate (key 36): one SASL token of the client, answered with the server's.

Version notes: v0-v2 served. v1 adds ``session_lifetime_ms`` to the answer
(KIP-368: the client must re-authenticate before it runs out); v2 is
flexible. The answer carries an error code, an error message and the
server's token.

While a connection authenticates, its SASL authenticator
(:class:`~gengroup.broker.security.SaslAuthenticator`) answers these
requests; what reaches this handler is a SaslAuthenticate sent on a listener
without SASL or on an already authenticated connection, which Kafka answers
ILLEGAL_SASL_STATE with the message below, keeping the connection open.
"""

from __future__ import annotations

import datetime
from typing import Any, Final

from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ._base import ApiSpec, Context, ec

__all__ = ["KEY", "SPEC", "VERSIONS", "error_response", "handle", "response"]

KEY: Final = ApiKey.SASL_AUTHENTICATE
VERSIONS: Final = (0, 2)

#: Kafka's message for a SaslAuthenticate outside of authentication.
AFTER_AUTHENTICATION: Final = "SaslAuthenticate request received after successful authentication"


def response(
    version: int,
    code: int,
    message: str | None = "",
    auth_bytes: bytes = b"",
    session_lifetime_ms: int = 0,
) -> Any:
    """A SaslAuthenticate answer (``session_lifetime_ms`` is dropped before v1).

    Kafka's answers carry an empty message, not a null one, when all went well.
    """
    mod = response_module(KEY, version)
    return build(
        mod.SaslAuthenticateResponse,
        error_code=ec(code),
        error_message=message,
        auth_bytes=auth_bytes,
        session_lifetime=datetime.timedelta(milliseconds=session_lifetime_ms),
    )


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """SaslAuthenticate failing with ``code`` and ``message``."""
    return response(version, code, "" if message is None else message)


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """A token outside of authentication: ILLEGAL_SASL_STATE, as Kafka answers."""
    return response(v, ErrorCode.illegal_sasl_state, AFTER_AUTHENTICATION)


SPEC: Final = ApiSpec(KEY, *VERSIONS, handle, error_response)
