"""Batches into SQLite: offsets are committed only after the transaction commits.

Each fetched batch is inserted into an SQLite table in one transaction (in a
worker thread: sqlite3 blocks). Once that transaction has committed, the
batch is marked and its offset committed (``await gen.commit()``). Stopping
at any point between two batches loses nothing and duplicates nothing: the
next run starts at the committed offset, which is exactly past the rows in
the database. (A crash between the database commit and the offset commit
would insert that one batch again; storing the offsets in the same
transaction closes that gap too.)

Run: python examples/sqlite_batches.py [--bootstrap HOST:PORT] [--db rows.sqlite]
     [--produce 500] [--until 500]
Without --bootstrap it starts an embedded broker in this process.
"""

from __future__ import annotations

import sqlite3
from contextlib import AsyncExitStack

import anyio
from _common import bootstrap_or_embedded, command, consuming, until as wait_until

import gengroup
from gengroup import ProducerRecord

TOPIC = "readings"
GROUP = "sqlite-sink"

SCHEMA = """CREATE TABLE IF NOT EXISTS readings (
    partition INTEGER NOT NULL, kafka_offset INTEGER NOT NULL, sensor TEXT, value TEXT
)"""


def insert_batch(
    db: sqlite3.Connection, tp: gengroup.TopicPartition, batch: list[gengroup.Record]
) -> None:
    """One transaction: every row of the batch, or none."""
    with db:
        db.executemany(
            "INSERT INTO readings (partition, kafka_offset, sensor, value) VALUES (?, ?, ?, ?)",
            [
                (tp.partition, r.offset, (r.key or b"").decode(), (r.value or b"").decode())
                for r in batch
            ],
        )


def count_rows(db_path: str) -> int:
    with sqlite3.connect(db_path) as db:
        return int(db.execute("SELECT count(*) FROM readings").fetchone()[0])


async def main(bootstrap: str | None, db_path: str, produce: int, until: int) -> int:
    """Produce ``produce`` readings, store them until the table has ``until`` rows.

    Returns:
        The rows in the table when the member stopped.
    """
    db = sqlite3.connect(db_path, check_same_thread=False)
    db.execute(SCHEMA)
    lock = anyio.Lock()  # one connection: one transaction at a time
    async with AsyncExitStack() as stack:
        stack.callback(db.close)
        bootstrap = await bootstrap_or_embedded(stack, bootstrap)
        admin = await stack.enter_async_context(gengroup.Admin(bootstrap))
        await admin.create_topics({TOPIC: 2}, exist_ok=True)
        async with gengroup.Producer(admin.cluster) as producer:
            await producer.send_many(
                TOPIC,
                [ProducerRecord(b"%d" % i, key=b"sensor-%d" % (i % 4)) for i in range(produce)],
            )
        stored = count_rows(db_path)

        async def sink(gen: gengroup.Generation, tp: gengroup.TopicPartition) -> None:
            nonlocal stored
            async for batch in gen.fetch(tp):
                async with lock:
                    records = batch.records[: max(0, until - stored)]  # stop at --until rows
                    if records:
                        await anyio.to_thread.run_sync(insert_batch, db, tp, records)
                        stored += len(records)
                if not records:
                    await anyio.sleep_forever()
                gen.mark(tp, records[-1].offset + 1)
                await gen.commit()  # only now: the rows are in the database

        async with gengroup.ConsumerGroup(GROUP, [TOPIC], bootstrap, commit_interval=0) as group:
            async with consuming(group, sink):  # a sink task per assigned partition
                await wait_until(lambda: stored >= until)
    rows = count_rows(db_path)
    print(f"{rows} rows in {db_path}")
    return rows


if __name__ == "__main__":
    parser = command(__doc__)
    parser.add_argument("--db", default="readings.sqlite", help="the SQLite file")
    parser.add_argument("--produce", type=int, default=500, help="readings to produce first")
    parser.add_argument("--until", type=int, default=500, help="stop at this many rows")
    args = parser.parse_args()
    anyio.run(main, args.bootstrap, args.db, args.produce, args.until)
