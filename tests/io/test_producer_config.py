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
        {"max_request_bytes": 0},
        {"max_request_bytes": True},
        {"delivery_timeout": 0.0},
        {"delivery_timeout": float("nan")},
        {"request_timeout": 1e7},
        {"max_block": -1},
        # Zero would make an idle producer refresh its metadata in a busy loop.
        {"retry_backoff": 0},
        {"metadata_max_age": 0},
        {"metadata_max_age": -5},
        # A bool is an int and 2.0 == 2: neither is a number of acks or a codec.
        {"acks": True},
        {"acks": 1.0},
        {"compression": True},
        {"compression": 2.0},
        # "no" is truthy: it used to leave auto-creation on.
        {"allow_auto_create_topics": "no"},
        {"allow_auto_create_topics": None},
        {"allow_auto_create_topics": 0},
        {"client_id": None},
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


@pytest.mark.parametrize(("linger", "delivery_timeout"), [(2.0, 1.0), (1.0, 1.0)])
def test_delivery_timeout_must_be_above_linger(linger: float, delivery_timeout: float) -> None:
    """Every record would expire while it lingers: refused at construction, as Java does."""
    with pytest.raises(ConfigError, match=r"delivery_timeout \(1.0 s\) must be above linger"):
        ProducerConfig(linger=linger, delivery_timeout=delivery_timeout)
    assert ProducerConfig(linger=1.0, delivery_timeout=1.5).delivery_timeout == 1.5
    assert ProducerConfig(linger=60.0, delivery_timeout=float("inf")).linger == 60.0


def test_the_flag_and_the_counts_keep_their_valid_values() -> None:
    config = ProducerConfig(acks="all", allow_auto_create_topics=False, compression=0)
    assert (config.acks, config.allow_auto_create_topics) == (-1, False)
    assert config.compression is Compression.NONE
    assert ProducerConfig(acks=0).acks == 0
