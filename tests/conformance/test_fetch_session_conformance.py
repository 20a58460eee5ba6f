"""Conformance of the embedded broker's incremental fetch sessions (KIP-227) with Apache Kafka.

Each scenario sends raw Fetch v12 requests (or v16, naming topics by id)
with explicit session ids, epochs and ``forgotten_topics_data`` on one
connection, against the session's real
Apache Kafka (``kafka``, marked ``kafka``) and a fresh embedded cluster, and
both transcripts must equal the expected one, written from what Kafka
answers. Session ids are random on both brokers, so they are shown as labels:
``"none"`` for 0, ``"S1"``, ``"S2"``... in order of appearance, ``"X"`` and
``"Y"`` for the ids the scenarios make up. A partition
answer is ``"t[0] ERROR hw=H start=S bytes=B"`` with ``B`` the record bytes
returned; the order of the partitions is the broker's.

The server side under test is :mod:`gengroup.broker.fetch_sessions`; its unit
tests are ``tests/embedded/test_fetch_sessions.py``.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import anyio
import pytest

from gengroup.io.connection import BrokerConnection
from gengroup.protocol.framing import build, request_module
from gengroup.protocol.versions import ApiKey

from .. import embedded as rq
from .client import Session, Transcript, by_name, error_name, open_session
from .conftest import Target
from .scenarios import _topic
from .test_conformance import SCENARIO_TIMEOUT, Divergence, resolve

FETCH_V: Final = 12
#: The Fetch version naming topics by id that the by-id scenarios send.
BY_ID_V: Final = 16
UNKNOWN_ID: Final = uuid.UUID(int=0x5EED)
"""A topic id no topic has (labelled ``"?"``)."""
PRODUCE_V: Final = 9
NO_SUCH_SESSION: Final = 1
"""A session id no live session has (ids are drawn at random from 31 bits), labelled ``"X"``."""

BEYOND_SHARDS: Final = 2**31 - 1
"""A session id no broker hands out, beyond the ranges of Kafka's cache shards, labelled ``"Y"``."""

_SHARDS: Final = (
    "Kafka splits its session cache into shards owning id ranges that end below INT32_MAX, "
    "and fails to find the shard of a larger id (an internal error); "
    "the embedded broker answers any unknown id FETCH_SESSION_ID_NOT_FOUND"
)

Part = tuple[str, int, int]
"""``(topic, partition, fetch offset)``."""


class Fetcher:
    """One connection sending Fetch requests with explicit session fields."""

    def __init__(self, s: Session, conn: BrokerConnection) -> None:
        self.s = s
        self.conn = conn
        self._labels: dict[int, str] = {0: "none", NO_SUCH_SESSION: "X", BEYOND_SHARDS: "Y"}
        self.ids: dict[str, int] = {v: k for k, v in self._labels.items()}
        #: Topic ids by name (from Metadata), and names by id.
        self.topic_ids: dict[str, uuid.UUID] = {"?": UNKNOWN_ID}
        self._names: dict[uuid.UUID, str] = {UNKNOWN_ID: "?"}

    async def learn_id(self, topic: str) -> None:
        """Look ``topic``'s id up (Metadata v12), for the requests by id."""
        resp = await self.conn.request(rq.metadata(12, [topic], auto=False))
        (found,) = resp.topics
        self.topic_ids[topic] = found.topic_id
        self._names[found.topic_id] = topic

    def _topic_label(self, topic: Any) -> str | None:
        name = getattr(topic, "topic", None)
        if name is None:
            name = self._names.get(topic.topic_id, "?")
        return "?" if name == "?" else self.s.names.label(name)

    def _label(self, session_id: int) -> str:
        if session_id not in self._labels:
            label = f"S{len(self._labels) - 2}"
            self._labels[session_id] = label
            self.ids[label] = session_id
        return self._labels[session_id]

    async def fetch(
        self,
        session: str | int,
        epoch: int,
        parts: Sequence[Part] = (),
        *,
        forget: Sequence[tuple[str, int]] = (),
        max_bytes: int = 1 << 20,
        max_wait_ms: int = 100,
        version: int = FETCH_V,
    ) -> dict[str, Any]:
        """A Fetch (v12 unless ``version``; v13+ naming topics by the ids
        :meth:`learn_id` found, ``"?"`` by an id no topic has) of ``parts`` in
        session ``session`` (a label or a raw id) at ``epoch``.

        Returns:
            ``error``, ``session`` (label) and ``partitions`` (one string each).
        """
        session_id = self.ids[session] if isinstance(session, str) else session
        mod = request_module(ApiKey.FETCH, version)
        ids = self.topic_ids
        topics: dict[str, list[tuple[int, int]]] = {}
        for topic, partition, offset in parts:
            topics.setdefault(topic, []).append((partition, offset))
        forgotten: dict[str, list[int]] = {}
        for topic, partition in forget:
            forgotten.setdefault(topic, []).append(partition)
        resp = await self.conn.request(
            build(
                mod.FetchRequest,
                replica_id=-1,
                max_wait=datetime.timedelta(milliseconds=max_wait_ms),
                min_bytes=1,
                max_bytes=max_bytes,
                isolation_level=0,
                session_id=session_id,
                session_epoch=epoch,
                topics=tuple(
                    build(
                        mod.FetchTopic,
                        topic=topic,
                        topic_id=ids.get(topic),
                        partitions=tuple(
                            build(
                                mod.FetchPartition,
                                partition=p,
                                current_leader_epoch=-1,
                                fetch_offset=o,
                                last_fetched_epoch=-1,
                                log_start_offset=-1,
                                partition_max_bytes=1 << 20,
                            )
                            for p, o in entries
                        ),
                    )
                    for topic, entries in topics.items()
                ),
                forgotten_topics_data=tuple(
                    build(mod.ForgottenTopic, topic=t, topic_id=ids.get(t), partitions=tuple(ps))
                    for t, ps in forgotten.items()
                ),
                rack_id="",
            )
        )
        return {
            "error": error_name(resp.error_code),
            "session": self._label(int(resp.session_id)),
            "partitions": [
                f"{self._topic_label(t)}[{p.partition_index}] {error_name(p.error_code)} "
                f"hw={p.high_watermark} start={p.log_start_offset} "
                f"bytes={0 if p.records is None else len(bytes(p.records))}"
                for t in resp.responses
                for p in t.partitions
            ],
        }

    async def produce(self, topic: str, partition: int, *values: bytes) -> None:
        """Produce one batch of ``values`` (acks=all) and check it was accepted."""
        resp = await self.conn.request(rq.produce(PRODUCE_V, topic, partition, rq.batch(*values)))
        ((part,),) = (t.partition_responses for t in resp.responses)
        assert int(part.error_code) == 0, part


def fetched(error: str, session: str, *partitions: str) -> dict[str, Any]:
    """An expected Fetch answer."""
    return {"error": error, "session": session, "partitions": list(partitions)}


BATCH: Final = len(rq.batch(b"x"))
"""Bytes of a batch of one one-byte record (null key, no headers)."""


def part(name: str, hw: int, bytes_: int = 0, error: str = "NONE", start: int = 0) -> str:
    """An expected partition answer."""
    return f"{name} {error} hw={hw} start={start} bytes={bytes_}"


# --------------------------------------------------------------------------- scenarios


async def _fetcher(s: Session) -> Fetcher:
    return Fetcher(s, await s.connect("conf-fetcher"))


async def incremental_session(s: Session) -> None:
    """A session's life: created, empty increments, one changed partition, added and
    forgotten partitions, closed with epoch -1."""
    f = await _fetcher(s)
    t = await _topic(s, "t", 2)
    u = await _topic(s, "u", 1)
    s.record("full, epoch 0", await f.fetch(0, 0, [(t, 0, 0), (t, 1, 0)]))
    s.record("incremental, nothing new", await f.fetch("S1", 1))
    await f.produce(t, 1, b"x")
    s.record("incremental after a produce to t[1]", await f.fetch("S1", 2))
    s.record("t[1] at its new offset", await f.fetch("S1", 3, [(t, 1, 1)]))
    s.record("add u[0]", await f.fetch("S1", 4, [(u, 0, 0)]))
    await f.produce(t, 0, b"x")
    s.record("forget t[0] after a produce to it", await f.fetch("S1", 5, forget=[(t, 0)]))
    await f.produce(u, 0, b"x")
    s.record("u[0] changed", await f.fetch("S1", 6))
    s.record("close with epoch -1", await f.fetch("S1", -1, [(t, 0, 0)]))
    s.record("the closed session", await f.fetch("S1", 7))


async def session_errors(s: Session) -> None:
    """Wrong epochs and unknown ids; a session survives an error; a full request naming
    a session replaces it; forgetting every partition closes the session."""
    f = await _fetcher(s)
    t = await _topic(s, "t", 1)
    s.record("full, epoch 0", await f.fetch(0, 0, [(t, 0, 0)]))
    s.record("epoch 5 instead of 1", await f.fetch("S1", 5))
    s.record("epoch 1 after the error", await f.fetch("S1", 1))
    s.record("the same epoch again", await f.fetch("S1", 1))
    s.record("unknown session id", await f.fetch(NO_SUCH_SESSION, 1))
    s.record("session id 0, epoch 1", await f.fetch(0, 1))
    s.record("session id beyond the shards", await f.fetch(BEYOND_SHARDS, 1))
    s.record("full naming S1, epoch 0", await f.fetch("S1", 0, [(t, 0, 0)]))
    s.record("S1 is gone", await f.fetch("S1", 2))
    s.record("S2 goes on", await f.fetch("S2", 1))
    s.record("forget every partition", await f.fetch("S2", 2, forget=[(t, 0)]))
    s.record("S2 is gone", await f.fetch("S2", 3))
    s.record("closing an unknown session", await f.fetch(NO_SUCH_SESSION, -1, [(t, 0, 0)]))


async def session_rotation(s: Session) -> None:
    """With a byte budget for one batch, a partition that returned records moves to the
    end of the session, so the next request reads the other one first."""
    f = await _fetcher(s)
    t = await _topic(s, "t", 2)
    await f.produce(t, 0, b"x")
    await f.produce(t, 1, b"x")
    s.record("full, one batch", await f.fetch(0, 0, [(t, 0, 0), (t, 1, 0)], max_bytes=1))
    s.record("first increment", await f.fetch("S1", 1, max_bytes=1))
    s.record("second increment", await f.fetch("S1", 2, max_bytes=1))
    s.record("third increment", await f.fetch("S1", 3, max_bytes=1))
    s.record("everything", await f.fetch("S1", 4))


async def unknown_partition_in_session(s: Session) -> None:
    """A partition that does not exist stays in the session and is answered, with its
    error, in every increment."""
    f = await _fetcher(s)
    t = await _topic(s, "t", 1)
    s.record("full with t[3]", await f.fetch(0, 0, [(t, 3, 0), (t, 0, 0)]))
    s.record("increment", await f.fetch("S1", 1))
    await f.produce(t, 0, b"x")
    s.record("increment after a produce", await f.fetch("S1", 2))


async def session_by_topic_id(s: Session) -> None:
    """Fetch v16 names topics by id: a session of two partitions, one changed,
    one forgotten by id; a topic id no topic has is UNKNOWN_TOPIC_ID; a
    request by name to the session made by id is FETCH_SESSION_TOPIC_ID_ERROR,
    and the other way round."""
    f = await _fetcher(s)
    t = await _topic(s, "t", 2)
    await f.learn_id(t)
    v = BY_ID_V
    s.record("full by id, epoch 0", await f.fetch(0, 0, [(t, 0, 0), (t, 1, 0)], version=v))
    s.record("incremental, nothing new", await f.fetch("S1", 1, version=v))
    await f.produce(t, 1, b"x")
    s.record("incremental after a produce to t[1]", await f.fetch("S1", 2, version=v))
    s.record("t[1] at its new offset", await f.fetch("S1", 3, [(t, 1, 1)], version=v))
    s.record("forget t[0] by id", await f.fetch("S1", 4, forget=[(t, 0)], version=v))
    s.record("incremental by name", await f.fetch("S1", 5))
    s.record("the session goes on by id", await f.fetch("S1", 5, version=v))
    s.record("full, an unknown topic id", await f.fetch(0, -1, [("?", 0, 0)], version=v))
    s.record("full by name, epoch 0", await f.fetch(0, 0, [(t, 0, 0)]))
    s.record("incremental by id", await f.fetch("S2", 1, version=v))


SCENARIOS: Final[dict[str, Callable[[Session], Awaitable[None]]]] = by_name(
    incremental_session,
    session_errors,
    session_rotation,
    unknown_partition_in_session,
    session_by_topic_id,
)


# --------------------------------------------------------------------------- expected


EXPECTED: Final[dict[str, Transcript]] = {
    "incremental_session": [
        ("full, epoch 0", fetched("NONE", "S1", part("t[0]", 0), part("t[1]", 0))),
        ("incremental, nothing new", fetched("NONE", "S1")),
        ("incremental after a produce to t[1]", fetched("NONE", "S1", part("t[1]", 1, BATCH))),
        ("t[1] at its new offset", fetched("NONE", "S1")),
        ("add u[0]", fetched("NONE", "S1", part("u[0]", 0))),
        ("forget t[0] after a produce to it", fetched("NONE", "S1")),
        ("u[0] changed", fetched("NONE", "S1", part("u[0]", 1, BATCH))),
        ("close with epoch -1", fetched("NONE", "none", part("t[0]", 1, BATCH))),
        ("the closed session", fetched("FETCH_SESSION_ID_NOT_FOUND", "none")),
    ],
    "session_errors": [
        ("full, epoch 0", fetched("NONE", "S1", part("t[0]", 0))),
        ("epoch 5 instead of 1", fetched("INVALID_FETCH_SESSION_EPOCH", "none")),
        ("epoch 1 after the error", fetched("NONE", "S1")),
        ("the same epoch again", fetched("INVALID_FETCH_SESSION_EPOCH", "none")),
        ("unknown session id", fetched("FETCH_SESSION_ID_NOT_FOUND", "none")),
        ("session id 0, epoch 1", fetched("FETCH_SESSION_ID_NOT_FOUND", "none")),
        (
            "session id beyond the shards",
            Divergence(
                kafka=fetched("UNKNOWN_SERVER_ERROR", "Y"),
                embedded=fetched("FETCH_SESSION_ID_NOT_FOUND", "none"),
                reason=_SHARDS,
            ),
        ),
        ("full naming S1, epoch 0", fetched("NONE", "S2", part("t[0]", 0))),
        ("S1 is gone", fetched("FETCH_SESSION_ID_NOT_FOUND", "none")),
        ("S2 goes on", fetched("NONE", "S2")),
        ("forget every partition", fetched("NONE", "none")),
        ("S2 is gone", fetched("FETCH_SESSION_ID_NOT_FOUND", "none")),
        ("closing an unknown session", fetched("NONE", "none", part("t[0]", 0))),
    ],
    "session_rotation": [
        ("full, one batch", fetched("NONE", "S1", part("t[0]", 1, BATCH), part("t[1]", 1))),
        ("first increment", fetched("NONE", "S1", part("t[0]", 1, BATCH))),
        ("second increment", fetched("NONE", "S1", part("t[1]", 1, BATCH))),
        ("third increment", fetched("NONE", "S1", part("t[0]", 1, BATCH))),
        ("everything", fetched("NONE", "S1", part("t[1]", 1, BATCH), part("t[0]", 1, BATCH))),
    ],
    "unknown_partition_in_session": [
        (
            "full with t[3]",
            fetched(
                "NONE",
                "S1",
                part("t[0]", 0),
                part("t[3]", -1, error="UNKNOWN_TOPIC_OR_PARTITION", start=-1),
            ),
        ),
        (
            "increment",
            fetched("NONE", "S1", part("t[3]", -1, error="UNKNOWN_TOPIC_OR_PARTITION", start=-1)),
        ),
        (
            "increment after a produce",
            fetched(
                "NONE",
                "S1",
                part("t[0]", 1, BATCH),
                part("t[3]", -1, error="UNKNOWN_TOPIC_OR_PARTITION", start=-1),
            ),
        ),
    ],
    "session_by_topic_id": [
        ("full by id, epoch 0", fetched("NONE", "S1", part("t[0]", 0), part("t[1]", 0))),
        ("incremental, nothing new", fetched("NONE", "S1")),
        ("incremental after a produce to t[1]", fetched("NONE", "S1", part("t[1]", 1, BATCH))),
        ("t[1] at its new offset", fetched("NONE", "S1")),
        ("forget t[0] by id", fetched("NONE", "S1")),
        ("incremental by name", fetched("FETCH_SESSION_TOPIC_ID_ERROR", "none")),
        ("the session goes on by id", fetched("NONE", "S1")),
        (
            "full, an unknown topic id",
            fetched("NONE", "none", part("?[0]", -1, error="UNKNOWN_TOPIC_ID", start=-1)),
        ),
        ("full by name, epoch 0", fetched("NONE", "S2", part("t[0]", 0))),
        ("incremental by id", fetched("FETCH_SESSION_TOPIC_ID_ERROR", "none")),
    ],
}


# --------------------------------------------------------------------------- the tests


def test_every_scenario_has_an_expected_transcript() -> None:
    assert list(EXPECTED) == list(SCENARIOS)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_fetch_session_conformance(scenario: str, target: Target, bootstrap: str) -> None:
    with anyio.fail_after(SCENARIO_TIMEOUT):
        async with open_session(bootstrap) as s:
            await SCENARIOS[scenario](s)
            transcript = s.transcript
    assert transcript == resolve(EXPECTED[scenario], target.name)
