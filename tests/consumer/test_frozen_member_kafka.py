"""A member frozen past its session timeout (SIGSTOP) wakes up and processes
nothing more: its local lease expired, so it hands out no further batch and
ends its generation itself, while another member owns its partitions.

Real Apache Kafka; the member runs in its own process so it can be stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from gengroup import ConsumerGroup, Producer
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import make_unique_name

from .helpers import Lines, create_topic

pytestmark = pytest.mark.kafka

SESSION = 6.0
ROOT = Path(__file__).resolve().parents[2]


async def test_a_member_frozen_past_its_session_processes_nothing_after_waking(
    kafka: KafkaBroker,
) -> None:
    topic, group_id = make_unique_name("frozen"), make_unique_name("g")
    await create_topic(kafka.bootstrap, topic, 2)
    args = (kafka.bootstrap, group_id, topic, str(SESSION), "batches")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.consumer.member_process", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines = Lines(proc)
    try:
        await lines.wait_for("generation")
        async with Producer(kafka.bootstrap) as producer:
            for i in range(50):
                await producer.send(topic, b"x" * 100, partition=i % 2)
            # Every record handed out and printed before the freeze (see
            # Lines.wait_for_records).
            await lines.wait_for_records(50)
            proc.send_signal(signal.SIGSTOP)
            # Meanwhile another member takes the partitions and records keep coming.
            async with ConsumerGroup(
                group_id, [topic], kafka.bootstrap, session_timeout=SESSION, heartbeat_interval=0.5
            ) as group:
                with anyio.fail_after(60):
                    async for gen in group:
                        if len(gen.assignments) == 2:
                            break
                        gen.cancel("waiting for the frozen member's eviction")
                for i in range(200):
                    await producer.send(topic, b"y" * 100, partition=i % 2)
                await anyio.sleep(SESSION)  # frozen well past its session timeout
                woken = time.monotonic()
                proc.send_signal(signal.SIGCONT)
                after = await lines.wait_for("ended", since=woken)
                gen.cancel()
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    # Everything it printed after waking up, up to its generation's end: no batch.
    assert not [line for line in after if line.startswith("batch")], after
    assert "local lease expired" in after[-1], after
