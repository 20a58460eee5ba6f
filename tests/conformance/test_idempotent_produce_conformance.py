"""Conformance of the embedded broker's idempotent producer support with Apache Kafka.

Each scenario sends raw InitProducerId and Produce requests on the admin
connection, against the session's real Apache Kafka (``kafka``, marked
``kafka``) and a fresh embedded cluster, and both transcripts must equal the
expected one, written from what Kafka answers. Producer ids are shown as
labels in order of appearance (``P1``, ``P2``...; Kafka hands out blocks of
ids, so their values differ); a produce answer is ``"ERROR base=B time=T
start=S"`` (base offset, log append time, log start offset), with ``msg=...``
appended when the broker sent an error message. What the log holds is read
back with Fetch: each batch as ``base-last@epoch:seq``.

The server side under test is :mod:`gengroup.broker.apis.init_producer_id`,
:mod:`gengroup.broker.producer_state` and the Produce path of
:meth:`gengroup.broker.log.PartitionLog.append`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import anyio
import pytest

from gengroup.broker import FakeCluster
from gengroup.protocol.framing import build, request_module
from gengroup.protocol.records import decode_batches, encode_batch
from gengroup.protocol.versions import ApiKey
from gengroup.testing.kafka import KafkaBroker

from .. import embedded as rq
from .client import Session, Transcript, by_name, error_name, open_session
from .conftest import EMBEDDED_SETTINGS, Target
from .scenarios import _topic, _topic_name
from .test_conformance import SCENARIO_TIMEOUT, resolve

PRODUCE_V: Final = 11
INIT_V: Final = 5
CREATE_V: Final = 7
TS: Final = 1_000
"""Every record's timestamp (a batch's max timestamp)."""
MAX_SEQ: Final = 2**31 - 1


class Producer:
    """Raw idempotent produce requests of one session, with producer id labels."""

    def __init__(self, s: Session) -> None:
        self.s = s
        self._labels: dict[int, str] = {}

    def label(self, producer_id: int) -> str:
        """``P1``, ``P2``... in order of appearance; -1 as it is."""
        if producer_id < 0:
            return str(producer_id)
        return self._labels.setdefault(producer_id, f"P{len(self._labels) + 1}")

    async def init_raw(
        self,
        *,
        version: int = INIT_V,
        transactional_id: str | None = None,
        producer_id: int = -1,
        epoch: int = -1,
        **extra: Any,
    ) -> tuple[str, int, int]:
        """One InitProducerId: ``(answer, producer id, epoch)``."""
        mod = request_module(ApiKey.INIT_PRODUCER_ID, version)
        resp = await self.s.admin.send(
            build(
                mod.InitProducerIdRequest,
                transactional_id=transactional_id,
                transaction_timeout=rq.ms(60_000),
                producer_id=producer_id,
                producer_epoch=epoch,
                **extra,
            )
        )
        pid, got_epoch = int(resp.producer_id), int(resp.producer_epoch)
        answer = f"{error_name(resp.error_code)} {self.label(pid)} epoch={got_epoch}"
        return answer, pid, got_epoch

    async def init(self) -> int:
        """A new producer id (checked to come with epoch 0).

        Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its broker got its
        first block of producer ids from the controller; like a client, this
        asks again.
        """
        with anyio.fail_after(30):
            while True:
                answer, pid, epoch = await self.init_raw()
                if not answer.startswith("COORDINATOR_LOAD_IN_PROGRESS"):
                    break
                await anyio.sleep(0.1)
        assert answer.startswith("NONE") and epoch == 0, answer
        return pid

    async def produce(
        self,
        topic: str,
        pid: int,
        epoch: int,
        seq: int,
        count: int = 2,
        *,
        partition: int = 0,
        version: int = PRODUCE_V,
        ts: int = TS,
    ) -> str:
        """Produce one batch of ``count`` records from ``seq`` on; the partition's answer."""
        data = encode_batch(
            [(None, b"v%d" % i, (), ts) for i in range(count)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
        )
        resp = await self.s.admin.send(rq.produce(version, topic, partition, data))
        ((part,),) = (t.partition_responses for t in resp.responses)
        answer = (
            f"{error_name(part.error_code)} base={part.base_offset} "
            f"time={_ms(part.log_append_time)} start={getattr(part, 'log_start_offset', None)}"
        )
        message = getattr(part, "error_message", None)
        return answer if message is None else f"{answer} msg={message}"

    async def log(self, topic: str, offset: int = 0, partition: int = 0) -> str:
        """The batches a Fetch from ``offset`` returns: ``base-last@epoch:seq`` each."""
        resp = await self.s.admin.send(rq.fetch(12, topic, partition, offset))
        ((part,),) = (t.partitions for t in resp.responses)
        if int(part.error_code):
            return error_name(part.error_code)
        records = bytes(part.records or b"")
        shown = [
            f"{b.base_offset}-{b.last_offset}@{b.producer_epoch}:{b.base_sequence}"
            for b in decode_batches(records)
        ]
        return " ".join(shown) or "empty"


def _ms(value: Any) -> int:
    """A kio timestamp (datetime or None) as epoch milliseconds (-1 for None)."""
    if value is None:
        return -1
    return int(value.timestamp() * 1000)


# --------------------------------------------------------------------------- scenarios


async def init_producer_id(s: Session) -> None:
    """InitProducerId without a transactional id: always a new id with epoch 0."""
    await Producer(s).init()  # Kafka's first block of ids has arrived (unlabelled)
    p = Producer(s)
    lo, hi = s.admin.conn.broker_versions[int(ApiKey.INIT_PRODUCER_ID)]
    s.record("InitProducerId versions", f"{lo}-{hi}")
    first, pid, _ = await p.init_raw()
    s.record("init", first)
    s.record("init again", (await p.init_raw())[0])
    s.record("init with P1 epoch 0", (await p.init_raw(producer_id=pid, epoch=0))[0])
    s.record("init with P1 epoch 7", (await p.init_raw(producer_id=pid, epoch=7))[0])
    s.record("init with P1 epoch -1", (await p.init_raw(producer_id=pid, epoch=-1))[0])
    s.record("init with -1 epoch 0", (await p.init_raw(producer_id=-1, epoch=0))[0])
    s.record("init with an unknown id", (await p.init_raw(producer_id=123_456, epoch=3))[0])
    s.record("init, empty transactional id", (await p.init_raw(transactional_id=""))[0])
    for version in range(lo, hi + 1):
        s.record(f"init v{version}", (await p.init_raw(version=version))[0])


async def in_order(s: Session) -> None:
    """In-order batches are appended; the answers carry their base offsets."""
    t = await _topic(s, "t", 1)
    p = Producer(s)
    pid = await p.init()
    s.record("seq 0 (2 records)", await p.produce(t, pid, 0, 0, 2))
    s.record("seq 2 (3 records)", await p.produce(t, pid, 0, 2, 3))
    s.record("seq 5 (1 record)", await p.produce(t, pid, 0, 5, 1))
    other = await p.init()
    s.record("P2 seq 0", await p.produce(t, other, 0, 0, 2))
    s.record("seq 6, v3", await p.produce(t, pid, 0, 6, 1, version=3))
    s.record("seq 7, v9", await p.produce(t, pid, 0, 7, 1, version=9))
    s.record("log", await p.log(t))


async def duplicate_batch(s: Session) -> None:
    """A retried batch of the last five is answered with its offset and not appended."""
    t = await _topic(s, "t", 1)
    p = Producer(s)
    pid = await p.init()
    for seq in (0, 2, 4):
        await p.produce(t, pid, 0, seq)
    s.record("retry seq 2", await p.produce(t, pid, 0, 2))
    s.record("retry seq 0", await p.produce(t, pid, 0, 0))
    s.record("retry seq 4", await p.produce(t, pid, 0, 4))
    s.record("seq 2, 3 records (overlapping)", await p.produce(t, pid, 0, 2, 3))
    s.record("log", await p.log(t))
    for seq in (6, 8, 10):
        await p.produce(t, pid, 0, seq)
    s.record("retry seq 2 (5th last)", await p.produce(t, pid, 0, 2))
    s.record("retry seq 0 (6th last)", await p.produce(t, pid, 0, 0))
    s.record("retry seq 4, epoch 1", await p.produce(t, pid, 1, 4))
    s.record("offsets", await _offsets(s, t))
    deleted = await _delete_records(s, t, 12)
    s.record("delete all records", deleted)
    s.record("retry seq 10 after DeleteRecords", await p.produce(t, pid, 0, 10))
    s.record("seq 12 after DeleteRecords", await p.produce(t, pid, 0, 12))
    s.record("seq 20 after DeleteRecords", await p.produce(t, pid, 0, 20))
    s.record("log from 12", await p.log(t, 12))


async def duplicate_log_append_time(s: Session) -> None:
    """On a log-append-time topic a retry is answered with its first append time."""
    t = _topic_name(s, "t")
    created = await s.admin.send(
        rq.create_topics(
            CREATE_V, (t, 1), rf=-1, configs={"message.timestamp.type": "LogAppendTime"}
        )
    )
    assert [int(r.error_code) for r in created.topics] == [0], created
    while (await s.admin.list_offsets(t, 0, -1))["error"] != "NONE":
        await anyio.sleep(0.05)
    p = Producer(s)
    pid = await p.init()
    first = await p.produce(t, pid, 0, 0)
    await anyio.sleep(0.05)  # the next append gets a later time
    second = await p.produce(t, pid, 0, 2)
    s.record("seq 0 and 2 have append times", [_time(first) > TS, _time(second) > TS])
    retry = await p.produce(t, pid, 0, 0)
    s.record("retry seq 0: its first append time", _time(retry) == _time(first))
    s.record("retry seq 0", retry.replace(f"time={_time(first)}", "time=T"))


def _time(answer: str) -> int:
    """The log append time of a produce answer."""
    return int(answer.split(" time=")[1].split()[0])


async def sequence_gap(s: Session) -> None:
    """A gap in the sequence is OUT_OF_ORDER_SEQUENCE_NUMBER and changes nothing."""
    t = await _topic(s, "t", 1)
    p = Producer(s)
    pid = await p.init()
    await p.produce(t, pid, 0, 0)
    s.record("seq 5 after 0-1", await p.produce(t, pid, 0, 5))
    s.record("seq 1 after 0-1", await p.produce(t, pid, 0, 1))
    s.record("seq 2", await p.produce(t, pid, 0, 2))
    s.record("seq 3 (behind)", await p.produce(t, pid, 0, 3))
    s.record("seq 5 v3", await p.produce(t, pid, 0, 5, version=3))
    s.record("seq 5 v9", await p.produce(t, pid, 0, 5, version=9))
    s.record("log", await p.log(t))


async def old_epoch(s: Session) -> None:
    """A batch of an epoch below the partition's last: INVALID_PRODUCER_EPOCH."""
    t = await _topic(s, "t", 1)
    p = Producer(s)
    pid = await p.init()
    await p.produce(t, pid, 0, 0)
    await p.produce(t, pid, 1, 0)
    s.record("epoch 0 seq 2", await p.produce(t, pid, 0, 2))
    s.record("epoch 0 seq 0 (retry)", await p.produce(t, pid, 0, 0))
    s.record("epoch 0 seq 2 v3", await p.produce(t, pid, 0, 2, version=3))
    s.record("epoch 0 seq 2 v9", await p.produce(t, pid, 0, 2, version=9))
    s.record("epoch 1 seq 2", await p.produce(t, pid, 1, 2))
    s.record("log", await p.log(t))


async def bumped_epoch(s: Session) -> None:
    """A new epoch must start at sequence 0; the old epoch's batches are forgotten."""
    t = await _topic(s, "t", 1)
    p = Producer(s)
    pid = await p.init()
    await p.produce(t, pid, 0, 0)
    await p.produce(t, pid, 0, 2)
    s.record("epoch 1 seq 4", await p.produce(t, pid, 1, 4))
    s.record("epoch 1 seq 0", await p.produce(t, pid, 1, 0))
    s.record("epoch 1 seq 0 (retry)", await p.produce(t, pid, 1, 0))
    s.record("epoch 0 seq 2 (retry of the old epoch)", await p.produce(t, pid, 0, 2))
    s.record("epoch 5 seq 0 (skipping epochs)", await p.produce(t, pid, 5, 0))
    s.record("epoch 5 seq 2", await p.produce(t, pid, 5, 2))
    s.record("log", await p.log(t))


async def unknown_producer(s: Session) -> None:
    """A producer the partition does not know may start at any sequence."""
    t = await _topic(s, "t", 2)
    p = Producer(s)
    pid = await p.init()
    s.record("P1 seq 7", await p.produce(t, pid, 0, 7))
    s.record("P1 seq 9", await p.produce(t, pid, 0, 9))
    s.record("P1 seq 3 on partition 1", await p.produce(t, pid, 0, 3, partition=1))
    s.record("P1 epoch 4 seq 5 on partition 1", await p.produce(t, pid, 4, 5, partition=1))
    s.record("a never allocated id, epoch 2 seq 11", await p.produce(t, 987_654, 2, 11))
    s.record("log", await p.log(t))


async def sequence_wrap(s: Session) -> None:
    """Sequences wrap from 2**31-1 to 0, within a batch and between batches."""
    t = await _topic(s, "t", 1)
    p = Producer(s)
    pid = await p.init()
    s.record("seq max-1 (3 records)", await p.produce(t, pid, 0, MAX_SEQ - 1, 3))
    s.record("seq 1", await p.produce(t, pid, 0, 1))
    s.record("retry seq max-1", await p.produce(t, pid, 0, MAX_SEQ - 1, 3))
    other = await p.init()
    await p.produce(t, other, 0, MAX_SEQ - 1, 2)
    s.record("P2 seq 0 after max", await p.produce(t, other, 0, 0))
    s.record("P2 seq 3 after 0-1", await p.produce(t, other, 0, 3))
    s.record("log", await p.log(t))


async def deleted_topic(s: Session) -> None:
    """Deleting a topic deletes its producer state: a topic of that name starts anew."""
    t = await _topic(s, "t", 1)
    p = Producer(s)
    pid = await p.init()
    await p.produce(t, pid, 0, 0)
    await p.produce(t, pid, 0, 2)
    resp = await s.admin.send(rq.delete_topics(6, t))
    assert [int(r.error_code) for r in resp.responses] == [0], resp
    with anyio.fail_after(30):
        while True:
            created = await s.admin.send(rq.create_topics(CREATE_V, (t, 1), rf=-1))
            if int(created.topics[0].error_code) == 0:
                break
            await anyio.sleep(0.2)
        while (await s.admin.list_offsets(t, 0, -1))["error"] != "NONE":
            await anyio.sleep(0.05)
    s.record("retry seq 2 on the new topic", await p.produce(t, pid, 0, 2))
    s.record("seq 9", await p.produce(t, pid, 0, 9))
    s.record("log", await p.log(t))


async def negative_sequence(s: Session) -> None:
    """A batch with a producer id and a negative base sequence is INVALID_RECORD."""
    t = await _topic(s, "t", 1)
    p = Producer(s)
    pid = await p.init()
    s.record("seq 0", await p.produce(t, pid, 0, 0))
    s.record("seq -1", await p.produce(t, pid, 0, -1))
    s.record("seq 2", await p.produce(t, pid, 0, 2))
    s.record("log", await p.log(t))


async def _offsets(s: Session, topic: str) -> str:
    first = await s.admin.list_offsets(topic, 0, -2)
    last = await s.admin.list_offsets(topic, 0, -1)
    return f"{first['offset']}..{last['offset']}"


async def _delete_records(s: Session, topic: str, before: int) -> str:
    mod = request_module(ApiKey.DELETE_RECORDS, 2)
    resp = await s.admin.send(
        build(
            mod.DeleteRecordsRequest,
            topics=(
                build(
                    mod.DeleteRecordsTopic,
                    name=topic,
                    partitions=(
                        build(mod.DeleteRecordsPartition, partition_index=0, offset=before),
                    ),
                ),
            ),
            timeout=rq.ms(10_000),
        )
    )
    ((part,),) = (t.partitions for t in resp.topics)
    return f"{error_name(part.error_code)} low={part.low_watermark}"


SCENARIOS: Final[dict[str, Callable[[Session], Awaitable[None]]]] = by_name(
    init_producer_id,
    in_order,
    duplicate_batch,
    duplicate_log_append_time,
    sequence_gap,
    old_epoch,
    bumped_epoch,
    unknown_producer,
    sequence_wrap,
    deleted_topic,
    negative_sequence,
)


def ok(base: int, start: int | None = 0, time: int = -1) -> str:
    """An accepted batch's answer (``start=None``: Produce v3-v4 have no log start)."""
    return f"NONE base={base} time={time} start={start}"


def refused(error: str, start: int | None = 0) -> str:
    """A refused batch's answer."""
    return f"{error} base=-1 time=-1 start={start}"


OUT_OF_ORDER: Final = "OUT_OF_ORDER_SEQUENCE_NUMBER"
OLD_EPOCH: Final = "INVALID_PRODUCER_EPOCH"

EXPECTED: Final[dict[str, Transcript]] = {
    "init_producer_id": [
        ("InitProducerId versions", "0-5"),
        ("init", "NONE P1 epoch=0"),
        ("init again", "NONE P2 epoch=0"),
        ("init with P1 epoch 0", "NONE P3 epoch=0"),
        ("init with P1 epoch 7", "NONE P4 epoch=0"),
        ("init with P1 epoch -1", "INVALID_REQUEST -1 epoch=-1"),
        ("init with -1 epoch 0", "INVALID_REQUEST -1 epoch=-1"),
        ("init with an unknown id", "NONE P5 epoch=0"),
        ("init, empty transactional id", "INVALID_REQUEST -1 epoch=-1"),
        ("init v0", "NONE P6 epoch=0"),
        ("init v1", "NONE P7 epoch=0"),
        ("init v2", "NONE P8 epoch=0"),
        ("init v3", "NONE P9 epoch=0"),
        ("init v4", "NONE P10 epoch=0"),
        ("init v5", "NONE P11 epoch=0"),
    ],
    "in_order": [
        ("seq 0 (2 records)", ok(0)),
        ("seq 2 (3 records)", ok(2)),
        ("seq 5 (1 record)", ok(5)),
        ("P2 seq 0", ok(6)),
        ("seq 6, v3", ok(8, start=None)),
        ("seq 7, v9", ok(9)),
        ("log", "0-1@0:0 2-4@0:2 5-5@0:5 6-7@0:0 8-8@0:6 9-9@0:7"),
    ],
    "duplicate_batch": [
        ("retry seq 2", ok(2, time=TS)),
        ("retry seq 0", ok(0, time=TS)),
        ("retry seq 4", ok(4, time=TS)),
        ("seq 2, 3 records (overlapping)", refused(OUT_OF_ORDER)),
        ("log", "0-1@0:0 2-3@0:2 4-5@0:4"),
        ("retry seq 2 (5th last)", ok(2, time=TS)),
        ("retry seq 0 (6th last)", refused(OUT_OF_ORDER)),
        ("retry seq 4, epoch 1", refused(OUT_OF_ORDER)),
        ("offsets", "0..12"),
        ("delete all records", "NONE low=12"),
        ("retry seq 10 after DeleteRecords", ok(10, start=12, time=TS)),
        ("seq 12 after DeleteRecords", ok(12, start=12)),
        ("seq 20 after DeleteRecords", refused(OUT_OF_ORDER, start=12)),
        ("log from 12", "12-13@0:12"),
    ],
    "duplicate_log_append_time": [
        ("seq 0 and 2 have append times", [True, True]),
        ("retry seq 0: its first append time", True),
        ("retry seq 0", "NONE base=0 time=T start=0"),
    ],
    "sequence_gap": [
        ("seq 5 after 0-1", refused(OUT_OF_ORDER)),
        ("seq 1 after 0-1", refused(OUT_OF_ORDER)),
        ("seq 2", ok(2)),
        ("seq 3 (behind)", refused(OUT_OF_ORDER)),
        ("seq 5 v3", refused(OUT_OF_ORDER, start=None)),
        ("seq 5 v9", refused(OUT_OF_ORDER)),
        ("log", "0-1@0:0 2-3@0:2"),
    ],
    "old_epoch": [
        ("epoch 0 seq 2", refused(OLD_EPOCH)),
        ("epoch 0 seq 0 (retry)", refused(OLD_EPOCH)),
        ("epoch 0 seq 2 v3", refused(OLD_EPOCH, start=None)),
        ("epoch 0 seq 2 v9", refused(OLD_EPOCH)),
        ("epoch 1 seq 2", ok(4)),
        ("log", "0-1@0:0 2-3@1:0 4-5@1:2"),
    ],
    "bumped_epoch": [
        ("epoch 1 seq 4", refused(OUT_OF_ORDER)),
        ("epoch 1 seq 0", ok(4)),
        ("epoch 1 seq 0 (retry)", ok(4, time=TS)),
        ("epoch 0 seq 2 (retry of the old epoch)", refused(OLD_EPOCH)),
        ("epoch 5 seq 0 (skipping epochs)", ok(6)),
        ("epoch 5 seq 2", ok(8)),
        ("log", "0-1@0:0 2-3@0:2 4-5@1:0 6-7@5:0 8-9@5:2"),
    ],
    "unknown_producer": [
        ("P1 seq 7", ok(0)),
        ("P1 seq 9", ok(2)),
        ("P1 seq 3 on partition 1", ok(0)),
        ("P1 epoch 4 seq 5 on partition 1", refused(OUT_OF_ORDER)),
        ("a never allocated id, epoch 2 seq 11", ok(4)),
        ("log", "0-1@0:7 2-3@0:9 4-5@2:11"),
    ],
    "sequence_wrap": [
        ("seq max-1 (3 records)", ok(0)),
        ("seq 1", ok(3)),
        ("retry seq max-1", ok(0, time=TS)),
        ("P2 seq 0 after max", ok(7)),
        ("P2 seq 3 after 0-1", refused(OUT_OF_ORDER)),
        ("log", f"0-2@0:{MAX_SEQ - 1} 3-4@0:1 5-6@0:{MAX_SEQ - 1} 7-8@0:0"),
    ],
    "deleted_topic": [
        ("retry seq 2 on the new topic", ok(0)),
        ("seq 9", refused(OUT_OF_ORDER)),
        ("log", "0-1@0:2"),
    ],
    "negative_sequence": [
        ("seq 0", ok(0)),
        ("seq -1", refused("INVALID_RECORD")),
        ("seq 2", ok(2)),
        ("log", "0-1@0:0 2-3@0:2"),
    ],
}


# --------------------------------------------------------------------------- the tests


def test_every_scenario_has_an_expected_transcript() -> None:
    assert list(EXPECTED) == list(SCENARIOS)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_idempotent_produce_conformance(
    scenario: str, target: Target, bootstrap: str
) -> None:
    with anyio.fail_after(SCENARIO_TIMEOUT):
        async with open_session(bootstrap) as s:
            await SCENARIOS[scenario](s)
            transcript = s.transcript
    assert transcript == resolve(EXPECTED[scenario], target.name)


# --------------------------------------------------------------------------- restart

Restart = Callable[[], Awaitable[None]]


@pytest.fixture
async def restartable(
    target: Target, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[str, Restart]]:
    """The target's bootstrap address and a function restarting its (only) broker.

    Kafka is the session's broker, restarted in place (same ports and data).
    """
    if target.name == "kafka":
        broker: KafkaBroker = request.getfixturevalue("kafka")

        async def restart_kafka() -> None:
            await anyio.to_thread.run_sync(broker.restart)

        yield broker.bootstrap, restart_kafka
        return
    async with FakeCluster(settings=EMBEDDED_SETTINGS) as cluster:

        async def restart_embedded() -> None:
            await cluster.restart_broker(0)

        yield cluster.bootstrap, restart_embedded
        assert cluster.errors == [], "the embedded broker met internal errors"


EXPECTED_RESTART: Final[Transcript] = [
    # A producer whose batches are stamped now: the restarted broker keeps
    # only its last batch (Kafka's producer snapshot), so a retry of an older
    # one of its last five batches is out of order.
    ("recent: seq 0", ok(0)),
    ("recent: seq 2", ok(2)),
    ("recent: seq 4", ok(4)),
    ("old: seq 0", ok(0)),
    ("old: seq 2", ok(2)),
    ("old: seq 4", ok(4)),
    ("recent: retry seq 2", refused(OUT_OF_ORDER)),
    ("recent: retry seq 4", "NONE base=4 time=T start=0"),
    ("recent: retry seq 0", refused(OUT_OF_ORDER)),
    ("recent: seq 6", ok(6)),
    # A producer whose batches are stamped 1970 (TS): older than
    # producer.id.expiration.ms (a day), so forgotten at the restart and its
    # retries appended anew.
    ("old: retry seq 2", ok(6)),
    ("old: retry seq 4", ok(8)),
    ("old: retry seq 0", refused(OUT_OF_ORDER)),
    ("old: seq 6", ok(10)),
    ("recent log", "0-1@0:0 2-3@0:2 4-5@0:4 6-7@0:6"),
    ("old log", "0-1@0:0 2-3@0:2 4-5@0:4 6-7@0:2 8-9@0:4 10-11@0:6"),
]
"""Both brokers' answers, as Kafka 4.3.1 gives them (``time=T``: the batch's own timestamp)."""


async def test_restart_rebuilds_producer_state_as_from_a_snapshot(
    target: Target, restartable: tuple[str, Restart]
) -> None:
    bootstrap, restart = restartable
    stamp = int(time.time() * 1000)
    with anyio.fail_after(SCENARIO_TIMEOUT):
        async with open_session(bootstrap) as s:
            recent, old = await _topic(s, "recent", 1), await _topic(s, "old", 1)
            p = Producer(s)
            recent_pid, old_pid = await p.init(), await p.init()
            for seq in (0, 2, 4):
                s.record(
                    f"recent: seq {seq}", await p.produce(recent, recent_pid, 0, seq, ts=stamp)
                )
            for seq in (0, 2, 4):
                s.record(f"old: seq {seq}", await p.produce(old, old_pid, 0, seq))
            transcript = s.transcript
    await restart()
    with anyio.fail_after(SCENARIO_TIMEOUT):
        async with open_session(bootstrap) as s:
            for topic in (recent, old):
                while (await s.admin.list_offsets(topic, 0, -1))["error"] != "NONE":
                    await anyio.sleep(0.2)
            p = Producer(s)
            for seq in (2, 4, 0, 6):
                step = "retry seq" if seq < 6 else "seq"
                answer = await p.produce(recent, recent_pid, 0, seq, ts=stamp)
                s.record(f"recent: {step} {seq}", answer.replace(f"time={stamp}", "time=T"))
            for seq in (2, 4, 0, 6):
                step = "retry seq" if seq < 6 else "seq"
                s.record(f"old: {step} {seq}", await p.produce(old, old_pid, 0, seq))
            s.record("recent log", await p.log(recent))
            s.record("old log", await p.log(old))
            transcript += s.transcript
    assert transcript == EXPECTED_RESTART
