"""Subscribing by pattern without I/O: matching, the RE2J check, the heartbeat and join requests."""

from __future__ import annotations

import re
import uuid
from dataclasses import replace

import pytest

from gengroup._errors import ConfigError, UnsupportedVersion
from gengroup.membership.balancers import RangeBalancer
from gengroup.membership.member import Member, MemberConfig, Outcome
from gengroup.membership.pattern import describe_change, matching_topics, re2j_regex
from gengroup.membership.requests import ConsumerHeartbeat, consumer_heartbeat_request
from gengroup.protocol.consumer_protocol import decode_subscription
from gengroup.protocol.framing import request_module
from gengroup.protocol.versions import ApiKey


def test_matching_is_on_whole_names_and_leaves_internal_topics_out() -> None:
    topics = [
        ("orders.eu", False),
        ("orders.us", False),
        ("orders", False),
        ("xorders.eu", False),
        ("orders.eu.dlq", False),
        ("__consumer_offsets", True),
        ("__transaction_state", True),
    ]
    assert matching_topics(re.compile(r"orders\.[a-z]+"), topics) == {"orders.eu", "orders.us"}
    everything = {name for name, internal in topics if not internal}
    assert matching_topics(re.compile(".*"), topics) == everything
    assert matching_topics(re.compile("__consumer_offsets"), topics) == set()


def test_a_change_is_described() -> None:
    assert describe_change({"a", "b"}, {"b", "c"}) == "+c -a"
    assert describe_change({"a"}, {"a"}) == "unchanged"


@pytest.mark.parametrize(
    ("pattern", "regex"),
    [
        (re.compile(r"orders\..*"), r"orders\..*"),
        (re.compile(r"(?P<region>eu|us)-[0-9]{2,3}"), r"(?P<region>eu|us)-[0-9]{2,3}"),
        (re.compile("orders", re.IGNORECASE), "(?i)orders"),
        (re.compile("(?i)orders"), "(?i)orders"),
        (re.compile("a.b", re.DOTALL | re.IGNORECASE), "(?is)a.b"),
        (re.compile(r"[(?=]\(\?=x$"), r"[(?=]\(\?=x$"),
        (re.compile(r"[]{,3}(?u)]\{,3\}"), r"[]{,3}(?u)]\{,3\}"),
        (re.compile(r"[0-9]{0,3}", re.ASCII), r"[0-9]{0,3}"),
        (re.compile(r"(?P<n>x)(?i:y)"), r"(?P<n>x)(?i:y)"),
    ],
)
def test_the_broker_gets_the_pattern_in_re2j_form(pattern: re.Pattern[str], regex: str) -> None:
    assert re2j_regex(pattern) == regex


@pytest.mark.parametrize(
    ("source", "named"),
    [
        (r"orders\.(?=eu)", "lookahead"),
        (r"orders\.(?!test).*", "negative lookahead"),
        (r".*(?<=\.eu)", "lookbehind"),
        (r".*(?<!test)", "negative lookahead or lookbehind"),
        (r"(a)-\1", "backreference"),
        (r"(?P<x>a)-(?P=x)", "backreference"),
        (re.compile(r"(a)-\1", re.IGNORECASE), "backreference"),
        (r"orders.*+", "possessive quantifier"),
        (r"orders(?>\.eu)", "atomic group"),
        (r"(a)?(?(1)b|c)", "conditional group"),
        (r"orders\Z", r"\Z"),
        (re.compile(r"orders # comment", re.VERBOSE), "verbose mode"),
        (r"x(?x: y)", "verbose mode"),
        (r"(?u)orders", "inline flag (?u)"),
        (r"(?a)orders", "inline flag (?a)"),
        (r"x(?a:y)", "inline flag (?a)"),
        (r"orders-[0-9]{,3}", "without a minimum"),
        (r"(?:ab|(?=c))d", "lookahead"),
        (r"(x(y(?=z)))+", "lookahead"),
    ],
)
def test_constructs_re2j_lacks_are_refused_by_name(
    source: str | re.Pattern[str], named: str
) -> None:
    """``source`` is a pattern's text, or a pattern compiled with the flags it needs."""
    pattern = re.compile(source)
    with pytest.raises(ConfigError, match="RE2J") as raised:
        re2j_regex(pattern)
    assert named in str(raised.value)
    assert repr(pattern.pattern) in str(raised.value)


def _beat(regex: str | None) -> ConsumerHeartbeat:
    return ConsumerHeartbeat(
        group_id="g",
        member_id="m",
        member_epoch=0,
        instance_id=None,
        rack=None,
        rebalance_timeout=30.0,
        topics=(),
        assignor=None,
        owned={},
        regex=regex,
    )


def test_the_heartbeat_carries_the_regex_instead_of_names() -> None:
    mod = request_module(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1)
    req = consumer_heartbeat_request(mod, _beat(r"orders\..*"))
    assert req.subscribed_topic_regex == r"orders\..*"
    assert req.subscribed_topic_names is None
    by_names = replace(
        _beat(None), member_epoch=3, topics=("b", "a"), owned={uuid.UUID(int=1): (1, 0)}
    )
    names = consumer_heartbeat_request(mod, by_names)
    assert names.subscribed_topic_regex is None
    assert names.subscribed_topic_names == ("a", "b")


def test_a_regex_needs_heartbeat_v1() -> None:
    mod = request_module(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0)
    with pytest.raises(UnsupportedVersion, match="subscribed_topic_regex"):
        consumer_heartbeat_request(mod, _beat("orders.*"))
    assert consumer_heartbeat_request(mod, _beat(None)).subscribed_topic_names == ()


def test_the_join_subscription_is_what_the_pattern_matched() -> None:
    member = Member(
        MemberConfig(
            group_id="g",
            topics=(),
            balancers=(RangeBalancer(),),
            session_timeout=10.0,
            rebalance_timeout=10.0,
            heartbeat_interval=1.0,
            topic_pattern=re.compile(r"orders\..*"),
        )
    )
    assert member.subscription() == ()
    empty = decode_subscription(member.join_params().protocols[0][1])
    assert empty.topics == ()
    member.abandon(Outcome.REJOIN, "the pattern matched more")
    assert member.match({"orders.us", "orders.eu"})
    assert not member.match({"orders.eu", "orders.us"})
    sub = decode_subscription(member.join_params().protocols[0][1])
    assert sub.topics == ("orders.eu", "orders.us")
    assert member.subscribed_topics() == {"orders.eu", "orders.us"}
