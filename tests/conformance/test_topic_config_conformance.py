"""Conformance of the embedded broker's topic config checks with Apache Kafka.

Each scenario sends raw CreateTopics v7 requests on the admin connection,
against the session's real Apache Kafka (``kafka``, marked ``kafka``) and a
fresh embedded cluster, and both transcripts must equal the expected one,
written from what Kafka answers. A creation's answer is ``"ERROR message"``
(the messages name configs and values, never the topic); afterwards
ListOffsets shows whether the topic exists.

The server side under test is :mod:`gengroup.broker.topic_configs`, called by
:meth:`gengroup.broker.log.Topics.create`; the unit tests are
``tests/embedded/test_topic_configs.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

import anyio
import pytest

from .. import embedded as rq
from .client import Session, Transcript, by_name, error_name, open_session
from .conftest import Target
from .scenarios import _topic_name
from .test_conformance import SCENARIO_TIMEOUT, resolve

CREATE_V: Final = 7


async def create(
    s: Session,
    name: str,
    configs: dict[str, str | None],
    *,
    partitions: int = 1,
    validate_only: bool = False,
) -> str:
    """One CreateTopics request for topic ``name``: its error and message."""
    resp = await s.admin.send(
        rq.create_topics(
            CREATE_V,
            (name, partitions),
            rf=-1,
            configs=configs,
            validate_only=validate_only,
            timeout=30_000,
        )
    )
    (result,) = resp.topics
    return f"{error_name(result.error_code)} {result.error_message}"


async def exists(s: Session, name: str) -> str:
    """Whether the topic exists: ListOffsets of its partition 0."""
    return str((await s.admin.list_offsets(name, 0, -1))["error"])


# --------------------------------------------------------------------------- scenarios


async def unknown_config_name(s: Session) -> None:
    """A config name Kafka does not know: a typo, and a config removed in Kafka 4.0."""
    t = _topic_name(s, "t")
    s.record("create with retension.ms", await create(s, t, {"retension.ms": "1000"}))
    s.record(
        "create with message.format.version",
        await create(s, t, {"message.format.version": "3.0"}),
    )
    # The name is checked before the values and before the partition count.
    s.record(
        "create with retension.ms and cleanup.policy=bogus",
        await create(s, t, {"cleanup.policy": "bogus", "retension.ms": "1"}),
    )
    s.record(
        "create with retension.ms and 0 partitions",
        await create(s, t, {"retension.ms": "1"}, partitions=0),
    )
    s.record(
        "validate only, retension.ms",
        await create(s, t, {"retension.ms": "1"}, validate_only=True),
    )
    s.record("t exists", await exists(s, t))


async def invalid_config_value(s: Session) -> None:
    """Values that do not parse, are out of range or not among the choices; a null value."""
    t = _topic_name(s, "t")
    cases: list[tuple[str, dict[str, str | None]]] = [
        ("cleanup.policy=bogus", {"cleanup.policy": "bogus"}),
        ("compression.type=brotli", {"compression.type": "brotli"}),
        ("min.insync.replicas=abc", {"min.insync.replicas": "abc"}),
        ("min.insync.replicas=0", {"min.insync.replicas": "0"}),
        ("retention.ms=-2", {"retention.ms": "-2"}),
        ("preallocate=yes", {"preallocate": "yes"}),
        ("message.timestamp.type=createtime", {"message.timestamp.type": "createtime"}),
        (
            "min.compaction.lag.ms above max.compaction.lag.ms",
            {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
        ),
        ("retention.ms null", {"retention.ms": None}),
    ]
    for step, configs in cases:
        s.record(f"create with {step}", await create(s, t, configs))
    s.record("t exists", await exists(s, t))
    s.record(
        "create with valid configs",
        await create(
            s,
            t,
            {"cleanup.policy": " compact , delete ", "retention.ms": "-1", "preallocate": "TRUE"},
        ),
    )
    while await exists(s, t) != "NONE":
        await anyio.sleep(0.05)


SCENARIOS: Final[dict[str, Callable[[Session], Awaitable[None]]]] = by_name(
    unknown_config_name, invalid_config_value
)


def _invalid(name: str, value: str, why: str) -> str:
    return f"INVALID_CONFIG Invalid value {value} for configuration {name}: {why}"


UNKNOWN: Final = "INVALID_CONFIG Unknown topic config name: retension.ms"

EXPECTED: Final[dict[str, Transcript]] = {
    "unknown_config_name": [
        ("create with retension.ms", UNKNOWN),
        (
            "create with message.format.version",
            "INVALID_CONFIG Unknown topic config name: message.format.version",
        ),
        ("create with retension.ms and cleanup.policy=bogus", UNKNOWN),
        ("create with retension.ms and 0 partitions", UNKNOWN),
        ("validate only, retension.ms", UNKNOWN),
        ("t exists", "UNKNOWN_TOPIC_OR_PARTITION"),
    ],
    "invalid_config_value": [
        (
            "create with cleanup.policy=bogus",
            _invalid("cleanup.policy", "bogus", "String must be one of: compact, delete"),
        ),
        (
            "create with compression.type=brotli",
            _invalid(
                "compression.type",
                "brotli",
                "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer",
            ),
        ),
        (
            "create with min.insync.replicas=abc",
            _invalid("min.insync.replicas", "abc", "Not a number of type INT"),
        ),
        (
            "create with min.insync.replicas=0",
            _invalid("min.insync.replicas", "0", "Value must be at least 1"),
        ),
        (
            "create with retention.ms=-2",
            _invalid("retention.ms", "-2", "Value must be at least -1"),
        ),
        (
            "create with preallocate=yes",
            _invalid("preallocate", "yes", "Expected value to be either true or false"),
        ),
        (
            "create with message.timestamp.type=createtime",
            _invalid(
                "message.timestamp.type",
                "createtime",
                "String must be one of: CreateTime, LogAppendTime",
            ),
        ),
        (
            "create with min.compaction.lag.ms above max.compaction.lag.ms",
            "INVALID_CONFIG conflict topic config setting min.compaction.lag.ms (10) > "
            "max.compaction.lag.ms (5)",
        ),
        (
            "create with retention.ms null",
            "INVALID_CONFIG Null value not supported for topic configs: retention.ms",
        ),
        ("t exists", "UNKNOWN_TOPIC_OR_PARTITION"),
        ("create with valid configs", "NONE None"),
    ],
}


# --------------------------------------------------------------------------- the tests


def test_every_scenario_has_an_expected_transcript() -> None:
    assert list(EXPECTED) == list(SCENARIOS)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_topic_config_conformance(scenario: str, target: Target, bootstrap: str) -> None:
    with anyio.fail_after(SCENARIO_TIMEOUT):
        async with open_session(bootstrap) as s:
            await SCENARIOS[scenario](s)
            transcript = s.transcript
    assert transcript == resolve(EXPECTED[scenario], target.name)
