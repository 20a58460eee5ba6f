"""STALE_MEMBER_EPOCH on an offset commit (KIP-848), on the embedded broker.

The coordinator answers an OffsetCommit STALE_MEMBER_EPOCH when the member
epoch it carries is not the member's current one (and the partitions were not
held at that epoch). The commit is retriable: the member goes on, its marks
are committed again by the next commit, nothing is lost and nothing is
processed twice. The broker's own answer is forced once with a fault control;
everything else is the real coordinator. In trio's virtual time.
"""

from __future__ import annotations

from collections import Counter

import trio
import trio.testing

from gengroup import ConsumerGroup, TopicPartition
from gengroup._errors import ErrorCode
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Fail, Intercepted
from gengroup.protocol.records import NewRecord
from gengroup.protocol.versions import ApiKey

from .cooperative import SpanLedger, wait_until
from .kip848 import EMBEDDED_SETTINGS, KIP848

PARTITIONS = 4
RECORDS = 50


async def test_a_commit_answered_stale_member_epoch_is_committed_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    every = {TopicPartition("t", p) for p in range(PARTITIONS)}
    ledger = SpanLedger()
    refused: list[int] = []

    def stale_once(req: Intercepted) -> Fail | None:
        if refused:
            return None
        refused.append(req.request.generation_id_or_member_epoch)
        return Fail(ErrorCode.stale_member_epoch)

    async with FakeCluster(topics={"t": PARTITIONS}, settings=EMBEDDED_SETTINGS) as cluster:
        for p in range(PARTITIONS):
            values = [f"{p}-{i}".encode() for i in range(RECORDS)]
            cluster.produce("t", [NewRecord(None, v, (), 0) for v in values], partition=p)
        cluster.control(ApiKey.OFFSET_COMMIT, stale_once)
        async with (
            ConsumerGroup("g", ["t"], cluster.bootstrap, client_id="a", **KIP848) as group,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(ledger.member, "a", group)
            await wait_until(
                lambda: len(ledger.processed) == PARTITIONS * RECORDS, "every record", 60
            )
            await wait_until(
                lambda: cluster.committed_offsets("g") == dict.fromkeys(every, RECORDS),
                "the marks to be committed",
                60,
            )
            nursery.cancel_scope.cancel()
        assert not cluster.state.errors, cluster.state.errors
    # The refused commit carried the member's epoch; it did not end the
    # member's generation, and every record was processed exactly once.
    assert refused and refused[0] > 0
    assert len(ledger.generations["a"]) == 1
    assert ledger.processed == Counter(
        {f"{p}-{i}".encode(): 1 for p in range(PARTITIONS) for i in range(RECORDS)}
    )
