"""ApiVersions (key 18): which APIs and versions the broker serves.

Version notes: v0-v4 served. v3 adds the client's software name and version,
which must match Kafka's pattern (else INVALID_REQUEST); v3+ are flexible and
carry feature fields (left empty). A request of an unsupported version is
answered as a v0 response with UNSUPPORTED_VERSION and the ApiVersions range
(:func:`unsupported`), so a client can retry with a version the broker knows.
The ranges reported are the registry's (:mod:`gengroup.broker.apis`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ._base import NONE, ZERO, ApiSpec, Context, ec

__all__ = ["KEY", "VERSIONS", "error_response", "spec", "unsupported"]

KEY: Final = ApiKey.API_VERSIONS
VERSIONS: Final = (0, 4)

_SOFTWARE_RE: Final = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def _response(mod: Any, code: int, api_keys: tuple[Any, ...]) -> Any:
    return build(
        mod.ApiVersionsResponse,
        error_code=ec(code),
        api_keys=api_keys,
        throttle_time=ZERO,
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """ApiVersions failing with ``code``: no API keys listed."""
    return _response(response_module(KEY, version), code, ())


def unsupported() -> Any:
    """The v0 answer to an ApiVersions request of a version the broker does not serve."""
    mod = response_module(KEY, 0)
    lo, hi = VERSIONS
    keys = (mod.ApiVersion(api_key=int(KEY), min_version=lo, max_version=hi),)
    return _response(mod, ErrorCode.unsupported_version, keys)


def spec(served: Mapping[ApiKey, ApiSpec]) -> ApiSpec:
    """The ApiVersions spec, reporting ``served`` (read at each request) and itself."""

    async def handle(ctx: Context, req: Any, v: int) -> Any:
        if v >= 3 and not (
            _SOFTWARE_RE.fullmatch(req.client_software_name or "")
            and _SOFTWARE_RE.fullmatch(req.client_software_version or "")
        ):
            return error_response(v, req, ErrorCode.invalid_request)
        mod = response_module(KEY, v)
        keys = tuple(
            mod.ApiVersion(api_key=int(s.key), min_version=s.min_version, max_version=s.max_version)
            for s in sorted(served.values(), key=lambda s: s.key)
            if s.enabled is None or s.enabled(ctx.state)
        )
        return _response(mod, NONE, keys)

    return ApiSpec(KEY, *VERSIONS, handle, error_response)
