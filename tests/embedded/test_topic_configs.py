"""Topic configs at creation: the embedded broker refuses what Apache Kafka refuses.

Every expected message below is what Kafka 4.3's own topic config validation
answers for the same configs (INVALID_CONFIG).
"""

from __future__ import annotations

import pytest

from gengroup import Admin, BrokerError
from gengroup.admin import NewTopic
from gengroup.broker import FakeCluster
from gengroup.broker.log import LogError
from gengroup.broker.topic_configs import TOPIC_CONFIG_NAMES, topic_config_error

from .. import embedded as rq
from . import connect

_CHOICES = "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"

REFUSED: list[tuple[dict[str, str], str]] = [
    ({"retension.ms": "1000"}, "Unknown topic config name: retension.ms"),
    ({"message.format.version": "3.0"}, "Unknown topic config name: message.format.version"),
    (
        {"message.timestamp.difference.max.ms": "5"},
        "Unknown topic config name: message.timestamp.difference.max.ms",
    ),
    # An unknown name is reported before any invalid value.
    (
        {"cleanup.policy": "bogus", "retension.ms": "1"},
        "Unknown topic config name: retension.ms",
    ),
    (
        {"cleanup.policy": "bogus"},
        "Invalid value bogus for configuration cleanup.policy: "
        "String must be one of: compact, delete",
    ),
    (
        {"cleanup.policy": "Compact"},
        "Invalid value Compact for configuration cleanup.policy: "
        "String must be one of: compact, delete",
    ),
    ({"cleanup.policy": "compact,"}, "Configuration 'cleanup.policy' values must not be empty."),
    (
        {"compression.type": " brotli "},
        f"Invalid value brotli for configuration compression.type: {_CHOICES}",
    ),
    (
        {"min.insync.replicas": "abc"},
        "Invalid value abc for configuration min.insync.replicas: Not a number of type INT",
    ),
    (
        {"min.insync.replicas": " 0 "},
        "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1",
    ),
    (
        {"retention.ms": "-2"},
        "Invalid value -2 for configuration retention.ms: Value must be at least -1",
    ),
    (
        {"retention.ms": "1_000"},
        "Invalid value 1_000 for configuration retention.ms: Not a number of type LONG",
    ),
    (
        {"max.message.bytes": "3000000000"},
        "Invalid value 3000000000 for configuration max.message.bytes: Not a number of type INT",
    ),
    (
        {"segment.bytes": "1000"},
        "Invalid value 1000 for configuration segment.bytes: Value must be at least 1048576",
    ),
    (
        {"preallocate": "yes"},
        "Invalid value yes for configuration preallocate: "
        "Expected value to be either true or false",
    ),
    (
        {"min.cleanable.dirty.ratio": "1.5"},
        "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: "
        "Value must be no more than 1",
    ),
    (
        {"compression.gzip.level": "0"},
        "Invalid value 0 for configuration compression.gzip.level: "
        "Value must be between 1 and 9 or equal to -1",
    ),
    (
        {"compression.zstd.level": "23"},
        "Invalid value 23 for configuration compression.zstd.level: Value must be no more than 22",
    ),
    (
        {"message.timestamp.type": "createtime"},
        "Invalid value createtime for configuration message.timestamp.type: "
        "String must be one of: CreateTime, LogAppendTime",
    ),
    (
        {"leader.replication.throttled.replicas": "a, b"},
        "Invalid value [a, b] for configuration leader.replication.throttled.replicas: "
        "leader.replication.throttled.replicas must be the literal '*' or a list of "
        "replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...",
    ),
    # Of two invalid values, Kafka reports the one it defines first.
    (
        {"retention.ms": "abc", "segment.bytes": "1"},
        "Invalid value 1 for configuration segment.bytes: Value must be at least 1048576",
    ),
    (
        {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
        "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)",
    ),
]

ACCEPTED: list[dict[str, str]] = [
    {},
    {"retention.ms": " 5 ", "retention.bytes": "-5", "segment.ms": "+5"},
    {"cleanup.policy": "compact,delete"},
    {"cleanup.policy": " compact , delete "},
    {"cleanup.policy": "delete,compact,delete"},
    {"cleanup.policy": ""},
    {"compression.type": " gzip ", "compression.gzip.level": "-1"},
    {"preallocate": " TRUE ", "unclean.leader.election.enable": "false"},
    {"min.cleanable.dirty.ratio": "1e-1"},
    {"min.cleanable.dirty.ratio": "0.5d"},
    {"leader.replication.throttled.replicas": "*"},
    {"follower.replication.throttled.replicas": " 0:1 , 1:2 "},
    {"message.timestamp.type": "LogAppendTime", "max.message.bytes": "10000"},
    {"min.insync.replicas": "2", "local.retention.ms": "-2", "remote.storage.enable": "false"},
]


@pytest.mark.parametrize(("configs", "message"), REFUSED)
def test_refused_as_kafka_refuses(configs: dict[str, str], message: str) -> None:
    assert topic_config_error(configs) == message


@pytest.mark.parametrize("configs", ACCEPTED)
def test_accepted_as_kafka_accepts(configs: dict[str, str]) -> None:
    assert topic_config_error(configs) is None


def test_known_names_and_null_values() -> None:
    assert {"cleanup.policy", "retention.ms", "min.insync.replicas"} <= TOPIC_CONFIG_NAMES
    assert len(TOPIC_CONFIG_NAMES) == 34
    assert (
        topic_config_error({"retention.ms": None, "x": "1", "cleanup.policy": None})
        == "Null value not supported for topic configs: retention.ms,cleanup.policy"
    )


async def test_fake_cluster_refuses_invalid_configs() -> None:
    async with FakeCluster() as cluster:
        with pytest.raises(LogError) as info:
            cluster.create_topic("t", configs={"retension.ms": "1000"})
        assert (info.value.code, str(info.value)) == (
            40,
            "Unknown topic config name: retension.ms",
        )
        assert "t" not in cluster.state.topics
        topic = cluster.create_topic("t", configs={"cleanup.policy": "compact"})
        assert topic.configs["cleanup.policy"] == "compact"


async def test_create_topics_answers_invalid_config_with_kafkas_message() -> None:
    async with FakeCluster() as cluster, connect(cluster) as conn:
        cases: list[tuple[str, int, dict[str, str | None], int, str | None]] = [
            ("a", 1, {"retension.ms": "1"}, 40, "Unknown topic config name: retension.ms"),
            (
                "b",
                1,
                {"cleanup.policy": "bogus"},
                40,
                "Invalid value bogus for configuration cleanup.policy: "
                "String must be one of: compact, delete",
            ),
            (
                "c",
                1,
                {"retention.ms": None},
                40,
                "Null value not supported for topic configs: retention.ms",
            ),
            # Configs are checked before the partition count, as Kafka does.
            ("d", 0, {"retension.ms": "1"}, 40, "Unknown topic config name: retension.ms"),
            ("e", 1, {"cleanup.policy": "compact", "retention.ms": "-1"}, 0, None),
        ]
        for name, partitions, configs, code, message in cases:
            resp = await conn.request(rq.create_topics(7, (name, partitions), configs=configs))
            (result,) = resp.topics
            assert (result.error_code, result.error_message) == (code, message), name
        assert sorted(cluster.state.topics.by_name) == ["e"]
        # An existing topic is reported as such whatever its configs.
        resp = await conn.request(rq.create_topics(7, ("e", 1), configs={"bogus": "1"}))
        assert resp.topics[0].error_code == 36
        assert not cluster.errors


async def test_admin_create_topics_raises_invalid_config() -> None:
    async with FakeCluster() as cluster, Admin(cluster.bootstrap, timeout=5) as admin:
        for configs in ({"compression.type": "brotli"}, {"min.insync.replicas": "abc"}):
            with pytest.raises(BrokerError) as info:
                await admin.create_topics([NewTopic("t", 1, configs=configs)])
            assert info.value.name == "INVALID_CONFIG"
        assert "t" not in cluster.state.topics
