"""The API registry: one module per API key, the single source of versions and error shapes."""

from __future__ import annotations

import importlib

import pytest
from kio.schema.errors import ErrorCode

from gengroup.broker.apis import SPECS, SUPPORTED_VERSIONS, error_response
from gengroup.protocol.versions import ApiKey


def test_every_spec_is_its_modules_own() -> None:
    assert set(SPECS) == set(SUPPORTED_VERSIONS)
    for key, spec in SPECS.items():
        assert spec.key == key
        assert 0 <= spec.min_version <= spec.max_version
        assert SUPPORTED_VERSIONS[key] == (spec.min_version, spec.max_version)
        module = importlib.import_module(f"gengroup.broker.apis.{key.name.lower()}")
        assert "Version notes" in (module.__doc__ or ""), key
        assert spec.error_response is module.error_response


def test_api_versions_is_served_and_reports_itself() -> None:
    assert SPECS[ApiKey.API_VERSIONS].supports(0)
    response = error_response(ApiKey.API_VERSIONS, 3, None, ErrorCode.invalid_request)
    assert response.error_code == ErrorCode.invalid_request
    assert response.api_keys == ()


def test_error_response_of_an_api_not_served() -> None:
    with pytest.raises(ValueError, match="no error response"):
        error_response(9999, 0, None, ErrorCode.unknown_server_error)
