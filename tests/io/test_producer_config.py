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
        {"max_batch_bytes": 0},
        {"delivery_timeout": 0.0},
    ],
)
def test_a_bad_value_is_a_config_error(settings: dict[str, object]) -> None:
    with pytest.raises(ConfigError) as raised:
        ProducerConfig(**settings)  # type: ignore[arg-type]
    assert str(raised.value)
