"""Conformance of the embedded broker's DeleteRecords with Apache Kafka.

Each scenario sends raw DeleteRecords requests (v2 unless a step says
otherwise) on the admin connection, against the session's real Apache Kafka
(``kafka``, marked ``kafka``) and a fresh embedded cluster, and both
transcripts must equal the expected one, written from what Kafka answers. A
partition's answer is ``"ERROR low=L"`` (its low watermark, -1 with an
error), by ``"alias[partition]"``; the brokers list the partitions of one
request in their own order, so an answer is a dict. Log start offsets are
also read back with ListOffsets (earliest, latest) and Fetch.

The server side under test is :mod:`gengroup.broker.apis.delete_records` and
:meth:`gengroup.broker.log.PartitionLog.delete_records`; the client side is
``tests/io/test_delete_records.py``.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
import pytest

from gengroup.protocol.framing import build, request_module
from gengroup.protocol.versions import ApiKey

from .. import embedded as rq
from .client import Session, Transcript, by_name, error_name, open_session
from .conftest import Target
from .scenarios import _new_group, _topic, _topic_name
from .test_conformance import SCENARIO_TIMEOUT, resolve

DELETE_V: Final = 2
PRODUCE_V: Final = 9
CREATE_V: Final = 7
OFFSETS_TOPIC: Final = "__consumer_offsets"

Part = tuple[str, int, int]
"""``(topic, partition, offset to delete before)``."""


async def delete(s: Session, *parts: Part, version: int = DELETE_V) -> dict[str, str]:
    """One DeleteRecords request for ``parts``; each partition's answer by name."""
    return dict(await delete_answers(s, *parts, version=version))


async def delete_answers(
    s: Session, *parts: Part, version: int = DELETE_V
) -> list[tuple[str, str]]:
    """One DeleteRecords request for ``parts`` (a partition may come twice):
    every partition answer, in order."""
    mod = request_module(ApiKey.DELETE_RECORDS, version)
    topics: dict[str, list[tuple[int, int]]] = {}
    for topic, partition, offset in parts:
        topics.setdefault(topic, []).append((partition, offset))
    resp = await s.admin.send(
        build(
            mod.DeleteRecordsRequest,
            topics=tuple(
                build(
                    mod.DeleteRecordsTopic,
                    name=topic,
                    partitions=tuple(
                        build(mod.DeleteRecordsPartition, partition_index=p, offset=o)
                        for p, o in entries
                    ),
                )
                for topic, entries in topics.items()
            ),
            timeout=datetime.timedelta(seconds=10),
        )
    )
    return [
        (
            f"{s.names.label(t.name)}[{p.partition_index}]",
            f"{error_name(p.error_code)} low={p.low_watermark}",
        )
        for t in resp.topics
        for p in t.partitions
    ]


async def produce(s: Session, topic: str, partition: int, *values: bytes) -> None:
    """Produce one batch of ``values`` (acks=all) and check it was accepted."""
    resp = await s.admin.send(rq.produce(PRODUCE_V, topic, partition, rq.batch(*values)))
    ((part,),) = (t.partition_responses for t in resp.responses)
    assert int(part.error_code) == 0, part


async def offsets(s: Session, topic: str, partition: int) -> str:
    """The partition's ``earliest..latest`` offsets (ListOffsets)."""
    first = await s.admin.list_offsets(topic, partition, -2)
    last = await s.admin.list_offsets(topic, partition, -1)
    return f"{first['offset']}..{last['offset']}"


async def fetch(s: Session, topic: str, partition: int, offset: int) -> str:
    """A Fetch at ``offset``: its error, log start and the batches' bytes."""
    answer = await s.admin.fetch(topic, partition, offset)
    return (
        f"{answer['partition_error']} start={answer['log_start_offset']} "
        f"batches={answer['records'] // BATCH2}"
    )


BATCH2: Final = len(rq.batch(b"a", b"b"))
"""Bytes of a stored batch of two one-byte records."""


def answered(**parts: str) -> dict[str, str]:
    """An expected DeleteRecords answer: ``t0="NONE low=3"`` stands for ``t[0]``."""
    return {f"{name[:-1]}[{name[-1]}]": answer for name, answer in parts.items()}


# --------------------------------------------------------------------------- scenarios


async def log_start_moves(s: Session) -> None:
    """The log start moves up to the offset, never back; -1 is the high watermark."""
    t = await _topic(s, "t", 2)
    for _ in range(3):
        await produce(s, t, 0, b"a", b"b")  # batches 0-1, 2-3, 4-5
    await produce(s, t, 1, b"a", b"b")
    s.record("delete t[0] below 3", await delete(s, (t, 0, 3)))
    s.record("t[0] offsets", await offsets(s, t, 0))
    s.record("fetch t[0] at 2", await fetch(s, t, 0, 2))
    s.record("fetch t[0] at 3", await fetch(s, t, 0, 3))
    s.record("delete t[0] below 1", await delete(s, (t, 0, 1)))
    s.record("delete t[0] below 3 again", await delete(s, (t, 0, 3)))
    s.record("delete t[1] below 0", await delete(s, (t, 1, 0)))
    s.record("delete t[0] -1 and t[1] below 1", await delete(s, (t, 0, -1), (t, 1, 1)))
    s.record("t[0] offsets after -1", await offsets(s, t, 0))
    s.record("t[1] offsets", await offsets(s, t, 1))
    s.record("fetch t[0] at 6", await fetch(s, t, 0, 6))
    await produce(s, t, 0, b"a", b"b")
    s.record("t[0] offsets after a produce", await offsets(s, t, 0))
    s.record("delete t[0] below 7, v0", await delete(s, (t, 0, 7), version=0))
    s.record("delete t[0] below 8, v1", await delete(s, (t, 0, 8), version=1))
    # A partition named twice is answered once, at its last offset.
    s.record("delete t[1] below 2, then 1", await delete_answers(s, (t, 1, 2), (t, 1, 1)))
    s.record("t[1] offsets after", await offsets(s, t, 1))
    s.record("delete t[1] below 9, then 2", await delete_answers(s, (t, 1, 9), (t, 1, 2)))


async def refusals(s: Session) -> None:
    """Offsets out of range, missing partitions and topics, compacted and internal topics."""
    t = await _topic(s, "t", 1)
    await produce(s, t, 0, b"a", b"b")
    missing = _topic_name(s, "missing")
    compacted = _topic_name(s, "c")
    created = await s.admin.send(
        rq.create_topics(
            CREATE_V, (compacted, 1), rf=-1, configs={"cleanup.policy": "compact"}, timeout=30_000
        )
    )
    assert [int(r.error_code) for r in created.topics] == [0]
    while (await s.admin.list_offsets(compacted, 0, -1))["error"] != "NONE":
        await anyio.sleep(0.05)
    both = _topic_name(s, "b")
    await s.admin.send(
        rq.create_topics(
            CREATE_V,
            (both, 1),
            rf=-1,
            configs={"cleanup.policy": "compact,delete"},
            timeout=30_000,
        )
    )
    while (await s.admin.list_offsets(both, 0, -1))["error"] != "NONE":
        await anyio.sleep(0.05)
    await _new_group(s)  # the offsets topic exists from here on
    s.topic(OFFSETS_TOPIC, "offsets")
    s.record("delete t[0] below 3 (above the high watermark)", await delete(s, (t, 0, 3)))
    s.record("delete t[0] below -2", await delete(s, (t, 0, -2)))
    s.record("delete t[0] below 2 (the high watermark)", await delete(s, (t, 0, 2)))
    s.record("t[0] offsets", await offsets(s, t, 0))
    s.record("delete t[5]", await delete(s, (t, 5, 0)))
    s.record("delete t[0] and t[5]", await delete(s, (t, 0, 1), (t, 5, 0)))
    s.record("delete an unknown topic", await delete(s, (missing, 0, 0)))
    s.record("delete c[0] (compact)", await delete(s, (compacted, 0, 0)))
    s.record("delete b[0] (compact,delete)", await delete(s, (both, 0, 0)))
    s.record("delete __consumer_offsets[0]", await delete(s, (OFFSETS_TOPIC, 0, 0)))


async def advertised(s: Session) -> None:
    """ApiVersions lists DeleteRecords."""
    lo, hi = s.admin.conn.broker_versions[int(ApiKey.DELETE_RECORDS)]
    s.record("DeleteRecords versions", f"{lo}-{hi}")


SCENARIOS: Final[dict[str, Callable[[Session], Awaitable[None]]]] = by_name(
    log_start_moves, refusals, advertised
)


def _out_of_range() -> str:
    return "OFFSET_OUT_OF_RANGE low=-1"


EXPECTED: Final[dict[str, Transcript]] = {
    "log_start_moves": [
        ("delete t[0] below 3", answered(t0="NONE low=3")),
        ("t[0] offsets", "3..6"),
        ("fetch t[0] at 2", "OFFSET_OUT_OF_RANGE start=-1 batches=0"),
        # The batch holding offset 3 (2-3) is still served, whole.
        ("fetch t[0] at 3", "NONE start=3 batches=2"),
        ("delete t[0] below 1", answered(t0="NONE low=3")),
        ("delete t[0] below 3 again", answered(t0="NONE low=3")),
        ("delete t[1] below 0", answered(t1="NONE low=0")),
        ("delete t[0] -1 and t[1] below 1", answered(t0="NONE low=6", t1="NONE low=1")),
        ("t[0] offsets after -1", "6..6"),
        ("t[1] offsets", "1..2"),
        ("fetch t[0] at 6", "NONE start=6 batches=0"),
        ("t[0] offsets after a produce", "6..8"),
        ("delete t[0] below 7, v0", answered(t0="NONE low=7")),
        ("delete t[0] below 8, v1", answered(t0="NONE low=8")),
        ("delete t[1] below 2, then 1", [("t[1]", "NONE low=1")]),
        ("t[1] offsets after", "1..2"),
        ("delete t[1] below 9, then 2", [("t[1]", "NONE low=2")]),
    ],
    "refusals": [
        ("delete t[0] below 3 (above the high watermark)", answered(t0=_out_of_range())),
        ("delete t[0] below -2", answered(t0=_out_of_range())),
        ("delete t[0] below 2 (the high watermark)", answered(t0="NONE low=2")),
        ("t[0] offsets", "2..2"),
        ("delete t[5]", answered(t5="UNKNOWN_TOPIC_OR_PARTITION low=-1")),
        (
            "delete t[0] and t[5]",
            answered(t0="NONE low=2", t5="UNKNOWN_TOPIC_OR_PARTITION low=-1"),
        ),
        ("delete an unknown topic", {"missing[0]": "UNKNOWN_TOPIC_OR_PARTITION low=-1"}),
        ("delete c[0] (compact)", answered(c0="POLICY_VIOLATION low=-1")),
        ("delete b[0] (compact,delete)", answered(b0="NONE low=0")),
        ("delete __consumer_offsets[0]", {"offsets[0]": "INVALID_TOPIC_EXCEPTION low=-1"}),
    ],
    "advertised": [("DeleteRecords versions", "0-2")],
}


# --------------------------------------------------------------------------- the tests


def test_every_scenario_has_an_expected_transcript() -> None:
    assert list(EXPECTED) == list(SCENARIOS)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_delete_records_conformance(scenario: str, target: Target, bootstrap: str) -> None:
    with anyio.fail_after(SCENARIO_TIMEOUT):
        async with open_session(bootstrap) as s:
            await SCENARIOS[scenario](s)
            transcript = s.transcript
    assert transcript == resolve(EXPECTED[scenario], target.name)
