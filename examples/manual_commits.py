"""Manual commits: commit each batch with ``await gen.commit()`` once it is processed.

Periodic commits are turned off (``commit_interval=0``): a batch's offsets are
committed right after the batch is processed, and a failed commit is seen at
once (``gen.commit()`` raises once it gave up retrying). This trades a
request per batch for the least reprocessing after a crash.

Run: python examples/manual_commits.py [--bootstrap HOST:PORT] [--count 1000]
Without --bootstrap it starts an embedded broker in this process.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
from _common import bootstrap_or_embedded, command, consuming, until

import gengroup
from gengroup import ProducerRecord

TOPIC = "invoices"
GROUP = "manual-commits"


class Progress:
    """Records processed and commits made, counted once each commit returned."""

    def __init__(self) -> None:
        self.committed_records = 0
        self.commits = 0


async def handle(gen: gengroup.Generation, tp: gengroup.TopicPartition, progress: Progress) -> None:
    async for batch in gen.fetch(tp):
        for _record in batch:
            pass  # the real work goes here
        gen.mark(tp, batch.next_offset)
        # A refusal worth retrying (coordinator loading or moving, a broken
        # connection) is retried within request_timeout; a fencing answer, or
        # one still refused after that, raises and ends the generation (and
        # the group, as any task's exception does).
        await gen.commit()
        progress.committed_records += len(batch)
        progress.commits += 1


async def main(bootstrap: str | None, count: int) -> tuple[int, int, int]:
    """Produce ``count`` records and consume them, committing after every batch.

    Returns:
        (records processed and committed, sum of the committed offsets, commits made).
    """
    async with AsyncExitStack() as stack:
        bootstrap = await bootstrap_or_embedded(stack, bootstrap)
        admin = await stack.enter_async_context(gengroup.Admin(bootstrap))
        await admin.create_topics({TOPIC: 2}, exist_ok=True)
        async with gengroup.Producer(admin.cluster) as producer:
            records = [ProducerRecord(b"invoice %d" % i, partition=i % 2) for i in range(count)]
            await producer.send_many(TOPIC, records)

        progress = Progress()
        async with gengroup.ConsumerGroup(GROUP, [TOPIC], bootstrap, commit_interval=0) as group:
            async with consuming(group, handle, progress):  # a worker per partition
                await until(lambda: progress.committed_records >= count)
                # Read while the member still runs: no final commit has happened
                # yet, so what is committed was committed batch by batch.
                committed = await admin.fetch_offsets(GROUP)
        total = sum(committed.values())
        n = progress.committed_records
        print(f"{n} records in {progress.commits} commits; committed offsets sum to {total}")
        return progress.committed_records, total, progress.commits


if __name__ == "__main__":
    parser = command(__doc__, count=1000)
    args = parser.parse_args()
    anyio.run(main, args.bootstrap, args.count)
