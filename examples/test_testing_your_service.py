"""Tests of the service in ``testing_your_service.py``: what a test file of yours looks like.

In your project the top-level ``conftest.py`` holds
``pytest_plugins = ["gengroup.testing.pytest_plugin"]``, which provides the
``kafka`` fixture (a real Apache Kafka for the session; ``kafka.bootstrap``)
and ``unique_name`` (fresh names, so tests sharing the broker never collide),
and registers the ``kafka`` marker. The embedded broker needs no fixture.
With pytest-trio and ``trio_mode = true`` in your pytest configuration the
tests are plain async functions. To run this file outside this repository,
copy ``testing_your_service.py`` and ``_common.py`` (which it imports) beside it.
"""

from __future__ import annotations

import pathlib
import runpy
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from gengroup.broker import FakeCluster
from gengroup.testing.kafka import KafkaBroker

service: dict[str, Any] = runpy.run_path(
    str(pathlib.Path(__file__).with_name("testing_your_service.py"))
)  # in your project: from myservice import flag_large_payments, ...


async def test_flags_only_payments_above_the_limit_on_the_embedded_broker() -> None:
    async with FakeCluster(initial_rebalance_delay_ms=0) as cluster:
        await service["send_payments"](cluster.bootstrap, "payments", [5, 1500, 1000, 99_999])
        async with anyio.create_task_group() as tg:
            await tg.start(
                service["flag_large_payments"], cluster.bootstrap, "payments", "alerts", "check"
            )
            alerts = await service["read_alerts"](cluster.bootstrap, "alerts", 2)
            tg.cancel_scope.cancel()
    assert alerts == [
        {"account": "acct-1", "amount": 1500},
        {"account": "acct-3", "amount": 99_999},
    ]


@pytest.mark.kafka
async def test_flags_on_real_kafka(kafka: KafkaBroker, unique_name: Callable[[str], str]) -> None:
    payments, alerts = unique_name("payments"), unique_name("alerts")
    await service["send_payments"](kafka.bootstrap, payments, [2000, 10])
    async with anyio.create_task_group() as tg:
        await tg.start(service["flag_large_payments"], kafka.bootstrap, payments, alerts, payments)
        found = await service["read_alerts"](kafka.bootstrap, alerts, 1)
        tg.cancel_scope.cancel()
    assert found == [{"account": "acct-0", "amount": 2000}]
