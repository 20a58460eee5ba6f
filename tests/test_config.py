"""ConsumerGroup settings are validated before any I/O, with clear errors."""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Sequence
from typing import Any

import pytest

from gengroup import (
    Admin,
    AdminConfig,
    AdminSettings,
    Balancer,
    ConfigError,
    ConsumerGroup,
    Producer,
    ProducerConfig,
    ProducerSettings,
    RangeBalancer,
)
from gengroup._config import GroupConfig, GroupSettings
from gengroup._types import TopicPartition, checked_offset
from gengroup.io.cluster import Cluster


def make(**kw: Any) -> ConsumerGroup:
    args: dict[str, Any] = {"group_id": "g", "topics": ["t"], "brokers": "127.0.0.1:9092"}
    args.update(kw)
    return ConsumerGroup(**args)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"group_id": ""}, "group_id must be a non-empty string"),
        ({"topics": []}, "topics must be a non-empty list"),
        ({"topics": "payments"}, "not a string"),
        ({"topics": ["ok", ""]}, "topics must be a non-empty list"),
        ({"brokers": []}, "at least one"),
        ({"brokers": "no-port"}, "is not host:port"),
        ({"brokers": "h:99999"}, "'h:99999': the port must be from 1 to 65535"),
        ({"brokers": "h:0"}, "the port must be from 1 to 65535"),
        ({"brokers": ["h:1", 9092]}, "broker address 9092 is not a host:port string"),
        ({"brokers": 9092}, "brokers must be bootstrap host:port addresses .* got int"),
        ({"brokers": object()}, "brokers must be bootstrap host:port addresses .* got object"),
        ({"brokers": ["a:1, b:2"]}, "'a:1, b:2' is not one host:port"),
        ({"brokers": ["a:1 b:2"]}, "'a:1 b:2' is not one host:port"),
        ({"balancers": ["range"]}, "balancers must be balancer objects .*got 'range'"),
        ({"balancers": [RangeBalancer]}, "balancers must be balancer objects"),
        ({"group_instance_id": 5}, "group_instance_id must be None or a non-empty string, got 5"),
        ({"rack": 5}, "rack must be None or a string, got 5"),
        ({"session_timeout": 1e7}, r"session_timeout must be at most 2147483 s .*got 10000000.0"),
        ({"heartbeat_interval": 10.0, "session_timeout": 10.0}, "must be below session_timeout"),
        ({"session_timeout": 0}, "session_timeout must be a positive"),
        ({"rebalance_timeout": float("nan")}, "rebalance_timeout must be a positive finite"),
        ({"heartbeat_interval": "3"}, "heartbeat_interval must be a number"),
        ({"start_offset": "beginning"}, "start_offset must be"),
        ({"isolation_level": "committed"}, "isolation_level must be"),
        ({"group_instance_id": ""}, "group_instance_id must be None or a non-empty"),
        ({"commit_interval": -1}, "commit_interval must be >= 0"),
        ({"fetch_max_wait": 40.0}, "fetch_max_wait must be below request_timeout"),
        ({"partition_buffer_bytes": 0}, "partition_buffer_bytes must be a positive integer"),
        ({"client_id": "c" * 32768}, "client_id of 32768 bytes: a request header holds 32767"),
        ({"client_id": None}, "client_id must be a string"),
        # Requests carry them as int16-length strings: refused here, not at the first JoinGroup.
        ({"rack": "é" * 16384}, "rack of 32768 bytes: a request holds 32767 at most"),
        ({"group_instance_id": "i" * 40000}, "group_instance_id of 40000 bytes: a request holds"),
        # A bool is an int, and "no" is truthy: neither is taken for what it is not.
        ({"fetch_min_bytes": True}, "fetch_min_bytes must be a positive integer, got True"),
        ({"fetch_max_bytes": True}, "fetch_max_bytes must be a positive integer"),
        ({"partition_buffer_bytes": True}, "partition_buffer_bytes must be a positive"),
        # A Fetch carries them as int32: refused at construction, not at the first Fetch.
        ({"fetch_min_bytes": 2**31}, "fetch_min_bytes must be at most 2147483647 .*got 2147483648"),
        ({"fetch_max_bytes": 2**31}, "fetch_max_bytes must be at most 2147483647"),
        ({"partition_buffer_bytes": 2**33}, "partition_buffer_bytes must be at most 2147483647"),
        ({"fetch_buffer_bytes": 2**31}, "fetch_buffer_bytes must be None or at most 2147483647"),
        # No Fetch asks for more than either: Kafka would read it as the request's max_bytes.
        (
            {"fetch_min_bytes": 2048, "fetch_max_bytes": 1024},
            r"fetch_min_bytes \(2048\) must be at most fetch_max_bytes \(1024\): .*"
            "lower fetch_min_bytes .* or raise fetch_max_bytes",
        ),
        (
            {"fetch_min_bytes": 2048, "fetch_buffer_bytes": 1024},
            r"fetch_min_bytes \(2048\) must be at most fetch_buffer_bytes \(1024\): .*"
            "lower fetch_min_bytes .* or raise fetch_buffer_bytes",
        ),
        ({"watch_partition_changes": "no"}, "watch_partition_changes must be True or False"),
        ({"watch_partition_changes": 0}, "watch_partition_changes must be True or False"),
        ({"fetch_sessions": "false"}, "fetch_sessions must be True or False, got 'false'"),
    ],
)
def test_bad_settings_raise_config_error(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make(**kw)


def test_fetch_min_bytes_may_be_as_large_as_what_a_fetch_asks() -> None:
    assert make(fetch_min_bytes=1024, fetch_max_bytes=1024).config.fetch_min_bytes == 1024
    cfg = make(fetch_min_bytes=4096, fetch_max_bytes=4096, fetch_buffer_bytes=4096).config
    assert cfg.fetch_min_bytes == 4096
    # Without a member-wide budget, only fetch_max_bytes bounds it.
    assert make(fetch_min_bytes=2**20, fetch_buffer_bytes=None).config.fetch_min_bytes == 2**20


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        make(group_id="")


def test_defaults_are_consistent() -> None:
    group = make()
    cfg = group.config
    assert cfg.heartbeat_interval < cfg.session_timeout
    assert cfg.start_offset == "earliest"
    assert cfg.isolation_level == "read_committed"
    assert group.member_id == ""


def test_keyword_settings_are_group_configs_fields() -> None:
    """GroupSettings (the typed keywords of ConsumerGroup) lists GroupConfig's fields."""
    fields = typing.get_type_hints(GroupConfig)
    for positional in ("group_id", "topics", "brokers"):
        del fields[positional]
    settings = typing.get_type_hints(GroupSettings)
    assert set(settings) == set(fields)
    # balancers may be any sequence (or None for the default list); the rest match exactly.
    assert settings.pop("balancers") == Sequence[Balancer] | None
    del fields["balancers"]
    assert settings == fields


@pytest.mark.parametrize(
    ("config", "settings"),
    [(ProducerConfig, ProducerSettings), (AdminConfig, AdminSettings)],
    ids=["producer", "admin"],
)
def test_keyword_settings_are_the_configs_fields(config: type, settings: type) -> None:
    """The typed keywords of Producer and Admin list their config's fields, types included."""
    assert typing.get_type_hints(settings) == typing.get_type_hints(config)


async def test_keyword_settings_override_the_config() -> None:
    base = ProducerConfig(linger=0.5)
    producer = Producer("127.0.0.1:9", base, acks=1)
    assert (producer.config.linger, producer.config.acks) == (0.5, 1)
    admin = Admin("127.0.0.1:9", timeout=7.0)
    assert admin.config == AdminConfig(timeout=7.0)
    with pytest.raises(ConfigError, match="timeout"):
        Admin("127.0.0.1:9", timeout=0)
    with pytest.raises(ConfigError):
        Producer("127.0.0.1:9", acks=2)  # type: ignore[typeddict-item]


def test_member_config_is_derived_from_the_group_config() -> None:
    cfg = make(balancers=None, session_timeout=20.0, rack="r1").config
    assert [b.name for b in cfg.balancers] == ["range", "roundrobin"]
    member = cfg.member_config()
    for f in dataclasses.fields(member):
        assert getattr(member, f.name) == getattr(cfg, f.name)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "5", None, True, -1.0])
def test_commit_interval_must_be_a_finite_number(value: Any) -> None:
    """nan used to disable periodic commits silently, and "5" gave a bare TypeError."""
    with pytest.raises(ConfigError, match="commit_interval"):
        make(commit_interval=value)


def test_commit_interval_zero_disables_periodic_commits() -> None:
    assert make(commit_interval=0).config.commit_interval == 0


@pytest.mark.parametrize("value", [-1, 0, float("nan"), "5", None])
def test_admin_timeout_must_be_positive(value: Any) -> None:
    with pytest.raises(ConfigError, match="timeout"):
        Admin("127.0.0.1:9", timeout=value)


@pytest.mark.parametrize("value", [None, 5, "c" * 32768])
def test_admin_client_id_must_be_a_string_a_header_holds(value: Any) -> None:
    """It was not checked when the admin was given an open cluster."""
    with pytest.raises(ConfigError, match="client_id"):
        AdminConfig(client_id=value)


def test_bootstrap_addresses_are_trimmed() -> None:
    """'a:1, b:2' (as the Java client accepts it) has no space in a host."""
    cfg = make(brokers=" h1:9092, h2:9093 ,").config
    assert cfg.brokers == ("h1:9092", "h2:9093")
    group = make(brokers=["h1:9092 ", " h2:9093"])
    assert group.cluster.bootstrap == [("h1", 9092), ("h2", 9093)]
    admin = Admin("h1:9092, [::1]:9093")
    assert admin.cluster.bootstrap == [("h1", 9092), ("::1", 9093)]


def test_a_compiled_pattern_in_place_of_topics_subscribes_by_pattern() -> None:
    pattern = re.compile(r"orders\..*")
    cfg = make(topics=pattern).config
    assert (cfg.topics, cfg.topic_pattern) == ((), pattern)
    assert cfg.subscription_regex == r"orders\..*"
    assert cfg.member_config().topic_pattern is pattern
    keyword = make(topics=None, topic_pattern=pattern).config
    assert (keyword.topics, keyword.topic_pattern) == ((), pattern)
    assert make(topics=[], topic_pattern=pattern).config.topic_pattern is pattern
    assert make().config.subscription_regex is None


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"topics": None}, "topics must be a non-empty list of names, got .*topic_pattern="),
        (
            {"topics": ["orders.eu"], "topic_pattern": re.compile("orders.*")},
            "either to topics or to a pattern, not both",
        ),
        (
            {"topics": re.compile("a.*"), "topic_pattern": re.compile("b.*")},
            "give the pattern once",
        ),
        ({"topics": [], "topic_pattern": "orders.*"}, "topic_pattern must be a compiled str"),
        ({"topics": re.compile(b"orders.*")}, "topic_pattern must be a compiled str"),
    ],
)
def test_exactly_one_of_topics_and_pattern(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make(**kw)


@pytest.mark.parametrize(
    ("topic", "message"),
    [
        ("a b", r"topics: topic name 'a b' has characters outside \[a-zA-Z0-9._-\]"),
        ("..", "topics: topic name cannot be '..'"),
        ("t" * 250, "topics: topic name is longer than 249 characters"),
    ],
)
def test_a_topic_name_kafka_refuses_is_refused_at_construction(topic: str, message: str) -> None:
    """Its partitions could never be assigned: no waiting for them to exist."""
    with pytest.raises(ConfigError, match=message):
        make(topics=["orders", topic])
    assert make(topics=["orders.eu-1_x", "t" * 249]).config.topics[1] == "t" * 249


@pytest.mark.parametrize(
    ("pattern", "named"),
    [
        (r"orders\.(?!test).*", "negative lookahead"),
        (r"(orders)\.\1", "backreference"),
        (r"orders.*+", "possessive quantifier"),
        (r"(?>orders)", "atomic group"),
        (r"(o)?(?(1)rders|x)", "conditional group"),
    ],
)
def test_the_consumer_protocol_refuses_what_re2j_lacks(pattern: str, named: str) -> None:
    """The broker matches under group_protocol="consumer": refused at construction, named;
    the classic protocol matches with Python's re, so the same pattern is accepted there."""
    with pytest.raises(ConfigError, match=f"uses an? {named}.*RE2J"):
        make(topics=re.compile(pattern), group_protocol="consumer")
    assert make(topics=re.compile(pattern)).config.topic_pattern is not None


def test_a_rack_and_an_instance_id_a_request_holds_are_taken() -> None:
    cfg = make(rack="é" * 16383, group_instance_id="i" * 32767).config  # 32,766 and 32,767 bytes
    assert cfg.rack is not None and cfg.group_instance_id is not None


def test_a_cluster_refuses_a_client_id_no_request_header_holds() -> None:
    # The producer and the admin open their clusters with their client ids.
    Cluster("127.0.0.1:9092", client_id="é" * 16383)  # 32,766 bytes: fits
    with pytest.raises(ConfigError, match="client_id of 32768 bytes"):
        Cluster("127.0.0.1:9092", client_id="é" * 16384)


#: Each client, made with these settings, and its cluster.
CLIENTS = {
    "group": lambda **kw: make(**kw).cluster,
    "producer": lambda **kw: Producer("127.0.0.1:9092", **kw).cluster,
    "admin": lambda **kw: Admin("127.0.0.1:9092", **kw).cluster,
    "cluster": lambda **kw: Cluster("127.0.0.1:9092", **kw),
}


@pytest.mark.parametrize("client", CLIENTS)
def test_connections_max_idle_reaches_the_cluster(client: str) -> None:
    """540 s by default (the Java client's, below the broker's 600 s); None: never."""
    open_cluster = CLIENTS[client]
    assert open_cluster().idle.limit == 540.0
    assert open_cluster(connections_max_idle=30.0).idle.limit == 30.0
    assert open_cluster(connections_max_idle=None).idle.limit is None


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    ("value", "said"),
    [
        (0, "must be a positive finite number of seconds, got 0"),
        (-1.0, "must be a positive finite number of seconds, got -1.0"),
        (float("nan"), "must be a positive finite number of seconds, got nan"),
        (float("inf"), "must be a positive finite number of seconds, got inf"),
        ("540", "must be a number of seconds, got '540'"),
        (True, "must be a number of seconds, got True"),
    ],
)
def test_connections_max_idle_must_be_positive_seconds_or_none(
    client: str, value: Any, said: str
) -> None:
    with pytest.raises(ConfigError, match=f"^connections_max_idle {re.escape(said)}$"):
        CLIENTS[client](connections_max_idle=value)


@pytest.mark.parametrize(
    ("offset", "error", "said"),
    [
        (10.0, TypeError, "must be an integer, not float (10.0)"),
        ("10", TypeError, "must be an integer, not str ('10')"),
        (True, TypeError, "not bool"),
        (-1, ValueError, "from 0 to 2**63 - 1, not -1"),
        (2**63, ValueError, f"not {2**63}"),
    ],
)
def test_an_offset_to_mark_or_commit_is_checked_where_it_is_given(
    offset: object, error: type[Exception], said: str
) -> None:
    with pytest.raises(error) as caught:
        checked_offset(TopicPartition("t", 3), offset)
    assert "offset of t[3]" in str(caught.value)
    assert said in str(caught.value)


def test_an_offset_may_be_any_integer_type() -> None:
    import numpy  # installed with the development extras (matplotlib needs it)

    tp = TopicPartition("t", 0)
    assert checked_offset(tp, numpy.int64(7)) == 7
    assert type(checked_offset(tp, numpy.int64(7))) is int
    assert checked_offset(tp, 2**63 - 1) == 2**63 - 1
    assert checked_offset(tp, 0) == 0
