"""Testing your service: a small fraud check, and how its tests run it.

The service (:func:`flag_large_payments`) is a consumer group that reads
payments (JSON ``{"account", "amount"}``) and sends each payment above a
limit to an ``alerts`` topic. It takes the bootstrap address and topic names
as arguments, so a test can point it at any broker:

* the embedded broker, in the test's own process (``FakeCluster``: fast, no
  JVM, with fault injection through ``cluster.control(...)``);
* a real Apache Kafka, through the pytest fixtures of
  ``gengroup.testing.pytest_plugin`` (``kafka``, the session's broker, and
  ``unique_name``, fresh topic and group names so tests never collide).

``examples/test_testing_your_service.py`` is such a test file. In your
project, load the fixtures from the top-level ``conftest.py``::

    pytest_plugins = ["gengroup.testing.pytest_plugin"]

Run: python examples/testing_your_service.py [--bootstrap HOST:PORT]
Without --bootstrap it starts an embedded broker, sends sample payments and
prints the alerts.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack

import anyio
import anyio.abc
from _common import bootstrap_or_embedded, command

import gengroup
from gengroup import ProducerRecord
from gengroup.io.fetch import read_partition

LIMIT = 1000


async def flag_large_payments(
    bootstrap: str,
    payments: str,
    alerts: str,
    group_id: str,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """The service: runs until cancelled (one worker per assigned partition)."""
    async with gengroup.Producer(bootstrap) as producer:

        async def check(gen: gengroup.Generation, tp: gengroup.TopicPartition) -> None:
            async for batch in gen.fetch(tp):
                large = [r for r in batch if json.loads(r.value or b"{}")["amount"] > LIMIT]
                if large:
                    await producer.send_many(
                        alerts, [ProducerRecord(r.value, key=r.key) for r in large]
                    )
                gen.mark(tp, batch.next_offset)

        async with gengroup.ConsumerGroup(group_id, [payments], bootstrap) as group:
            task_status.started()
            async for gen in group:
                for tp in gen.assignments:
                    gen.start_soon(check, gen, tp)


async def send_payments(bootstrap: str, topic: str, amounts: list[int]) -> None:
    """Test data: one payment per amount, accounts ``acct-0`` ... in turn."""
    async with gengroup.Admin(bootstrap) as admin, gengroup.Producer(admin.cluster) as producer:
        await admin.create_topics({topic: 2}, exist_ok=True)
        await producer.send_many(
            topic,
            [
                ProducerRecord(
                    json.dumps({"account": f"acct-{i}", "amount": amount}).encode(),
                    key=f"acct-{i}".encode(),
                )
                for i, amount in enumerate(amounts)
            ],
        )


async def read_alerts(bootstrap: str, topic: str, expected: int) -> list[dict[str, object]]:
    """The first ``expected`` alerts (waiting for them), sorted by account."""
    async with gengroup.Cluster(bootstrap) as cluster:
        found: list[dict[str, object]] = []
        with anyio.fail_after(60):
            while len(found) < expected:
                found = []
                md = await cluster.refresh_metadata([topic])
                for p in md[topic].partitions if topic in md and not md[topic].error_code else ():
                    tp = gengroup.TopicPartition(topic, p)
                    found += [
                        json.loads(r.value or b"")
                        for r in await read_partition(cluster, tp, 0, None)
                    ]
                await anyio.sleep(0.05)
        return sorted(found, key=lambda a: str(a["account"]))


async def main(bootstrap: str | None, amounts: list[int]) -> list[dict[str, object]]:
    """Run the service on sample payments; returns the alerts it sent."""
    async with AsyncExitStack() as stack:
        bootstrap = await bootstrap_or_embedded(stack, bootstrap)
        await send_payments(bootstrap, "payments", amounts)
        async with anyio.create_task_group() as tg:
            await tg.start(flag_large_payments, bootstrap, "payments", "alerts", "fraud-check")
            alerts = await read_alerts(bootstrap, "alerts", sum(a > LIMIT for a in amounts))
            tg.cancel_scope.cancel()
    for alert in alerts:
        print("alert:", alert)
    return alerts


if __name__ == "__main__":
    parser = command(__doc__)
    args = parser.parse_args()
    anyio.run(main, args.bootstrap, [120, 5000, 80, 1001, 1000])
