"""ProducerConfig's validation: every bad value is a ConfigError at construction."""

from __future__ import annotations

import pytest

from gengroup import Compression, ConfigError
from gengroup.producer import ProducerConfig


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("lz4", Compression.LZ4),
        ("ZSTD", Compression.ZSTD),
        (Compression.GZIP, Compression.GZIP),
        (2, Compression.SNAPPY),
    ],
)
def test_compression_takes_the_codec_or_its_name(given: object, stored: Compression) -> None:
    assert ProducerConfig(compression=given).compression is stored  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "settings",
    [
        {"compression": "brotli"},
        {"compression": 9},
        {"acks": 2},
        {"partitioner": "random"},
        {"linger": -1.0},
        {"linger": "5"},
        {"max_batch_bytes": 0},
        {"buffer_bytes": 1.5},
        {"delivery_timeout": 0.0},
        {"delivery_timeout": float("nan")},
        {"request_timeout": 1e7},
        {"max_block": -1},
        # Zero would make an idle producer refresh its metadata in a busy loop.
        {"retry_backoff": 0},
        {"metadata_max_age": 0},
        {"metadata_max_age": -5},
    ],
)
def test_a_bad_value_is_a_config_error_naming_the_setting_and_value(
    settings: dict[str, object],
) -> None:
    with pytest.raises(ConfigError) as raised:
        ProducerConfig(**settings)  # type: ignore[arg-type]
    [(name, value)] = settings.items()
    assert name in str(raised.value)
    assert repr(value) in str(raised.value) or str(value) in str(raised.value)


def test_durations_meaning_never_may_be_infinite() -> None:
    """Local limits may be ``inf`` (never); one a request carries may not."""
    inf = float("inf")
    config = ProducerConfig(delivery_timeout=inf, max_block=inf, metadata_max_age=inf)
    assert (config.delivery_timeout, config.max_block, config.metadata_max_age) == (inf, inf, inf)
    assert ProducerConfig(delivery_timeout=1e7).delivery_timeout == 1e7
    with pytest.raises(ConfigError, match="request_timeout"):
        ProducerConfig(request_timeout=inf)
    with pytest.raises(ConfigError, match="linger"):
        ProducerConfig(linger=inf)
