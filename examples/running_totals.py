"""Per-partition state, rebuilt on assignment from a compacted state topic.

Deposits (key: account, value: amount) arrive on ``deposits``; the service
keeps each account's running total. The totals of input partition P live in
memory while this member owns P, and every new total is also written to
partition P of the compacted topic ``deposit-totals`` (key: account). When a
generation assigns P, the worker first rebuilds P's totals by re-reading
that state partition from the beginning (the last value of each key wins),
then continues from the group's committed offset. A new member, or this one
after a restart, so picks up where the previous owner stopped.

A batch is marked only once the broker acknowledged its new totals. The
write is shielded from the generation's cancellation: when the generation
ends (a rebalance, closing), a write under way is waited for -- within
``rebalance_timeout`` -- and its batch then marked, so the generation's final
commit covers exactly the batches whose totals are in the state topic. The
partition's next owner starts only once this member's tasks returned and
that commit was made (while this member is in the group: see the last case
below), so it rebuilds from every total written for the
committed deposits and from none written after them: each deposit counts
once, and a late write of the previous owner never lands over the new
owner's totals. (Cancelling the write instead would only stop waiting for
it: the records are still delivered, possibly after the next owner rebuilt,
and compaction would keep that older total.)

What this does not cover, and what it gives then:

* a crash between a write and the commit covering its batch, a write that
  fails (its error stops the group; some of its totals may have landed),
  or a final commit that fails (the coordinator gave the partition away
  already): the next owner counts that batch again, so totals come out
  too high, never lower. A service that cannot accept that keeps the input
  offset in the state record and skips what it covers;
* a write still unacknowledged when the coordinator gives the partition
  away (``rebalance_timeout`` into the rebalance: docs/guarantees.md,
  section 1) may land after the next owner rebuilt; the
  group raises ``TaskStuckError`` ``rebalance_timeout`` after the generation
  ended if the write is still waited for, and the service stops (this
  example exits with the error).

Run: python examples/running_totals.py [--bootstrap HOST:PORT] [--count 300]
Without --bootstrap it starts an embedded broker in this process.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
from _common import bootstrap_or_embedded, command, consuming, until

import gengroup
from gengroup import NewTopic, ProducerRecord
from gengroup.io.fetch import read_partition

INPUT = "deposits"
STATE = "deposit-totals"
GROUP = "running-totals"
PARTITIONS = 3


async def rebuild(cluster: gengroup.Cluster, partition: int) -> dict[str, int]:
    """The totals stored in one state partition: the last value of each key."""
    totals: dict[str, int] = {}
    records = await read_partition(cluster, gengroup.TopicPartition(STATE, partition), 0, None)
    for record in records:
        if record.key is not None and record.value is not None:
            totals[record.key.decode()] = int(record.value)
    return totals


async def keep_totals(
    gen: gengroup.Generation,
    tp: gengroup.TopicPartition,
    producer: gengroup.Producer,
    progress: list[int],
) -> None:
    totals = await rebuild(producer.cluster, tp.partition)
    async for batch in gen.fetch(tp):
        updates: dict[str, int] = {}
        for record in batch:
            account = (record.key or b"").decode()
            totals[account] = updates[account] = totals.get(account, 0) + int(record.value or 0)
        # Shielded: cancelled, the write would go on without us (its records are
        # still delivered) and the partition's next owner could rebuild before it
        # landed. The generation waits for it, and for the mark after it.
        with anyio.CancelScope(shield=True):
            await producer.send_many(
                STATE,
                [
                    ProducerRecord(
                        str(total).encode(), key=account.encode(), partition=tp.partition
                    )
                    for account, total in updates.items()
                ],
            )
        gen.mark(tp, batch.next_offset)
        progress.append(len(batch))


async def main(bootstrap: str | None, count: int) -> dict[str, int]:
    """Add ``count`` deposits and process them; returns every account's total."""
    async with AsyncExitStack() as stack:
        bootstrap = await bootstrap_or_embedded(stack, bootstrap)
        admin = await stack.enter_async_context(gengroup.Admin(bootstrap))
        await admin.create_topics(
            [
                NewTopic(INPUT, PARTITIONS),
                NewTopic(STATE, PARTITIONS, configs={"cleanup.policy": "compact"}),
            ],
            exist_ok=True,
        )
        producer = await stack.enter_async_context(gengroup.Producer(admin.cluster))
        await producer.send_many(
            INPUT,
            [
                ProducerRecord(b"%d" % (i % 7 + 1), key=b"account-%d" % (i % 5))
                for i in range(count)
            ],
        )
        progress: list[int] = []
        async with gengroup.ConsumerGroup(GROUP, [INPUT], bootstrap) as group:
            async with consuming(group, keep_totals, producer, progress):  # one per partition
                await until(lambda: sum(progress) >= count)
        totals: dict[str, int] = {}
        for p in range(PARTITIONS):
            totals.update(await rebuild(admin.cluster, p))
        print("totals:", dict(sorted(totals.items())))
        return totals


if __name__ == "__main__":
    parser = command(__doc__, count=300, records="deposits")
    args = parser.parse_args()
    anyio.run(main, args.bootstrap, args.count)
