"""The subscription version a member sends, and reading what other clients send."""

from __future__ import annotations

import struct

import pytest

from gengroup import ConfigError, GroupConfig
from gengroup._errors import ProtocolError
from gengroup.membership.balancers import RangeBalancer, RoundRobinBalancer
from gengroup.membership.member import Member
from gengroup.protocol.consumer_protocol import (
    Subscription,
    decode_subscription,
    encode_subscription,
)


def kafka_go_subscription(version: int, topics: list[str], user_data: bytes | None) -> bytes:
    """What segmentio/kafka-go writes: version, topics and user data, nothing more."""
    out = [struct.pack(">hi", version, len(topics))]
    for topic in topics:
        raw = topic.encode()
        out.append(struct.pack(">h", len(raw)) + raw)
    if user_data is None:
        out.append(struct.pack(">i", -1))
    else:
        out.append(struct.pack(">i", len(user_data)) + user_data)
    return b"".join(out)


@pytest.mark.parametrize("version", [1, 2, 3, 7])
@pytest.mark.parametrize("user_data", [None, b"", b"\x00\x01"])
def test_a_version_1_or_later_that_ends_after_user_data_is_read_as_v0(
    version: int, user_data: bytes | None
) -> None:
    sub = decode_subscription(kafka_go_subscription(version, ["b", "a"], user_data))
    assert sub == Subscription(topics=("b", "a"), user_data=user_data, version=0)


def test_a_version_1_cut_inside_owned_partitions_is_still_malformed() -> None:
    data = kafka_go_subscription(1, ["a"], None) + b"\x00\x00"
    with pytest.raises(ProtocolError, match="owned partitions"):
        decode_subscription(data)


def test_a_complete_version_1_keeps_its_owned_partitions() -> None:
    sub = Subscription(topics=("a",), owned_partitions=(("a", (0, 2)),))
    decoded = decode_subscription(encode_subscription(sub, 1))
    assert decoded.owned_partitions == (("a", (0, 2)),) and decoded.version == 1


@pytest.mark.parametrize("version", [None, 0, 1, 2, 3])
def test_subscription_version_setting_picks_what_join_sends(version: int | None) -> None:
    cfg = GroupConfig.create(
        "g",
        ["t"],
        "localhost:9092",
        balancers=[RangeBalancer(), RoundRobinBalancer()],
        subscription_version=version,
        rack="r1",
    )
    member = Member(cfg.member_config())
    member.owned = {"t": (1,)}
    for name, metadata in member.join_params().protocols:
        wire_version = struct.unpack(">h", metadata[:2])[0]
        assert wire_version == (3 if version is None else version), name
        sub = decode_subscription(metadata)
        assert sub.topics == ("t",)
        if version == 0:
            # Exactly what a kafka-go leader accepts: nothing after the user data.
            assert metadata == kafka_go_subscription(0, ["t"], None)


@pytest.mark.parametrize("bad", [-1, 4, True, 1.0, "0"])
def test_subscription_version_is_checked(bad: object) -> None:
    with pytest.raises(ConfigError, match="subscription_version"):
        GroupConfig.create("g", ["t"], "localhost:9092", subscription_version=bad)  # type: ignore[arg-type]
