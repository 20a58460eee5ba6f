"""Conformance of the embedded broker's OffsetCommit v10 (topics named by id) with Apache Kafka.

Each scenario sends raw OffsetCommit v10 requests, which name each topic by
its id alone, against the session's real Apache Kafka (``kafka``, marked
``kafka``) and a fresh embedded cluster; both transcripts must equal the
expected one, written from what Kafka answers. A commit's answer is
``{"t[0]": "NONE", ...}``, by the label of the topic the id belongs to (an id
no broker handed out is ``"unknown"``, the nil id ``"nil"``); what was stored
is read back with OffsetFetch, by name.

The server side under test is :mod:`gengroup.broker.apis.offset_commit`; the
client side (a member names its topics by the ids it read them under, so a
topic deleted and created again is refused its old position) is
``tests/consumer/test_deleted_topics.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import anyio
import pytest

from gengroup.membership.requests import commit_request
from gengroup.protocol.framing import request_module
from gengroup.protocol.versions import ApiKey

from .. import embedded as rq
from .client import Session, Transcript, by_name, error_name, open_session
from .conftest import Target
from .scenarios import _new_group, _topic
from .test_conformance import SCENARIO_TIMEOUT, resolve

COMMIT_V: Final = 10
METADATA_V: Final = 12
DELETE_V: Final = 6
CREATE_V: Final = 7
NIL: Final = uuid.UUID(int=0)


async def topic_id(s: Session, topic: str) -> uuid.UUID | None:
    """``topic``'s id in the broker's metadata, or None while it has none."""
    resp = await s.admin.send(rq.metadata(METADATA_V, [topic], auto=False))
    (t,) = resp.topics
    return t.topic_id if int(t.error_code) == 0 and t.topic_id != NIL else None


async def known_id(s: Session, topic: str, *, other_than: uuid.UUID | None = None) -> uuid.UUID:
    """``topic``'s id once the metadata has one (another than ``other_than``)."""
    while (found := await topic_id(s, topic)) is None or found == other_than:
        await anyio.sleep(0.05)
    return found


async def commit(
    s: Session,
    group: str,
    offsets: Mapping[tuple[uuid.UUID, int], int],
    labels: Mapping[uuid.UUID, str],
) -> dict[str, str]:
    """A simple (generation -1) OffsetCommit v10 of ``{(topic id, partition): offset}``;
    each partition's answer, by ``labels[topic id]``."""
    resp = await s.admin.send(
        commit_request(
            request_module(ApiKey.OFFSET_COMMIT, COMMIT_V),
            group_id=group,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            offsets=((i, p, o, None) for (i, p), o in offsets.items()),
        )
    )
    return {
        f"{labels.get(t.topic_id or NIL, '?')}[{p.partition_index}]": error_name(p.error_code)
        for t in resp.topics
        for p in t.partitions
    }


async def stored(s: Session, group: str, topic: str, partitions: int) -> dict[str, int]:
    """The offsets ``group`` has committed for ``topic`` (OffsetFetch by name)."""
    answer = await s.admin.fetch_offsets(group, topic, list(range(partitions)))
    return {key: offset for key, (offset, *_) in answer["offsets"].items()}


# --------------------------------------------------------------------------- scenarios


async def by_id(s: Session) -> None:
    """A known id stores the offsets under its topic's name; an unknown id, the
    nil id and a partition the topic lacks are refused, the rest of the request stored."""
    group = await _new_group(s)
    t = await _topic(s, "t", 2)
    tid = await known_id(s, t)
    labels = {tid: "t", NIL: "nil"}
    unknown = uuid.uuid4()
    labels[unknown] = "unknown"
    s.record(
        "commit t[0] and t[1] by id", await commit(s, group, {(tid, 0): 5, (tid, 1): 7}, labels)
    )
    s.record("t's offsets", await stored(s, group, t, 2))
    s.record(
        "commit t[0], an unknown id and the nil id",
        await commit(s, group, {(tid, 0): 6, (unknown, 0): 1, (NIL, 0): 1}, labels),
    )
    s.record("commit t[2] (no such partition)", await commit(s, group, {(tid, 2): 1}, labels))
    s.record("t's offsets after", await stored(s, group, t, 2))


async def created_again(s: Session) -> None:
    """A topic deleted and created again under its name: its old id is refused,
    its new id stored, and nothing of the old topic's is read back."""
    group = await _new_group(s)
    t = await _topic(s, "t", 1)
    old = await known_id(s, t)
    labels = {old: "old t"}
    s.record("commit old t[0]", await commit(s, group, {(old, 0): 4}, labels))
    resp = await s.admin.send(rq.delete_topics(DELETE_V, t))
    assert [int(r.error_code) for r in resp.responses] == [0], resp
    while await topic_id(s, t) is not None:
        await anyio.sleep(0.05)
    resp = await s.admin.send(rq.create_topics(CREATE_V, (t, 1), rf=-1, timeout=30_000))
    assert [int(r.error_code) for r in resp.topics] == [0], resp
    new = await known_id(s, t, other_than=old)
    labels[new] = "new t"
    s.record(
        "commit old t[0] after t was created again", await commit(s, group, {(old, 0): 9}, labels)
    )
    s.record("t's offsets", await stored(s, group, t, 1))
    s.record("commit new t[0]", await commit(s, group, {(new, 0): 2}, labels))
    s.record("t's offsets after", await stored(s, group, t, 1))


async def advertised(s: Session) -> None:
    """ApiVersions lists OffsetCommit up to v10."""
    lo, hi = s.admin.conn.broker_versions[int(ApiKey.OFFSET_COMMIT)]
    s.record("OffsetCommit versions", f"{lo}-{hi}")


SCENARIOS: Final[dict[str, Callable[[Session], Awaitable[None]]]] = by_name(
    by_id, created_again, advertised
)

EXPECTED: Final[dict[str, Transcript]] = {
    "by_id": [
        ("commit t[0] and t[1] by id", {"t[0]": "NONE", "t[1]": "NONE"}),
        ("t's offsets", {"t[0]": 5, "t[1]": 7}),
        (
            "commit t[0], an unknown id and the nil id",
            {"t[0]": "NONE", "unknown[0]": "UNKNOWN_TOPIC_ID", "nil[0]": "UNKNOWN_TOPIC_ID"},
        ),
        ("commit t[2] (no such partition)", {"t[2]": "UNKNOWN_TOPIC_OR_PARTITION"}),
        ("t's offsets after", {"t[0]": 6, "t[1]": 7}),
    ],
    "created_again": [
        ("commit old t[0]", {"old t[0]": "NONE"}),
        ("commit old t[0] after t was created again", {"old t[0]": "UNKNOWN_TOPIC_ID"}),
        ("t's offsets", {"t[0]": -1}),
        ("commit new t[0]", {"new t[0]": "NONE"}),
        ("t's offsets after", {"t[0]": 2}),
    ],
    "advertised": [("OffsetCommit versions", "2-10")],
}


def test_every_scenario_has_an_expected_transcript() -> None:
    assert list(EXPECTED) == list(SCENARIOS)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_offset_commit_by_id_conformance(
    scenario: str, target: Target, bootstrap: str
) -> None:
    with anyio.fail_after(SCENARIO_TIMEOUT):
        async with open_session(bootstrap) as s:
            await SCENARIOS[scenario](s)
            transcript = s.transcript
    assert transcript == resolve(EXPECTED[scenario], target.name)
