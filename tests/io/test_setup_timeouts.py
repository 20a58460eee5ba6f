"""An Admin call whose partition leader or coordinator hangs while its
connection is being set up: the timeout names the broker and the step.

The broker reached by node id (not a bootstrap address) accepts connections
and never answers: a call whose timeout is shorter than ``connect_timeout``
is cut during the connection's set-up, with no error to name. Its
TimeoutError said only "no attempt was answered" (``waiting_on()`` was
empty), the coordinator's "did not answer" without the step. Virtual time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
import trio
import trio.testing

from gengroup import Admin, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Drop
from gengroup.broker.security import ServerSecurity
from gengroup.protocol.versions import ApiKey

USERS = {"alice": "alice-secret"}
SASL = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_mechanism": "PLAIN",
    "sasl_username": "alice",
    "sasl_password": "alice-secret",
}


def hang_tcp(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    """Connecting to ``port`` never completes (a black hole: no SYN-ACK)."""
    connect = anyio.connect_tcp

    async def black_hole(host: Any, to: int, **kwargs: Any) -> Any:
        if to == port:
            await trio.sleep_forever()
        return await connect(host, to, **kwargs)

    monkeypatch.setattr(anyio, "connect_tcp", black_hole)


@pytest.mark.parametrize(
    ("step", "said"),
    [
        ("tcp", "connecting, no answer"),
        ("api_versions", "connected, no answer to ApiVersions"),
        ("sasl", "connected, no answer to PLAIN authentication"),
    ],
)
async def test_a_leader_or_coordinator_hung_in_its_set_up_is_named_with_the_step(
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
    step: str,
    said: str,
) -> None:
    security = ServerSecurity(security_protocol="SASL_PLAINTEXT", users=USERS)
    settings: dict[str, Any] = SASL if step == "sasl" else {}
    async with FakeCluster(brokers=2, security=security if step == "sasl" else None) as cluster:
        cluster.create_topic("t", 1, replication_factor=2)
        cluster.move_partition_leader("t", 0, 1)
        cluster.move_coordinator("g", 1)
        host, port = cluster.address(1)
        async with Admin(cluster.bootstrap.split(",")[0], timeout=3, **settings) as admin:
            await admin.metadata(["t"])  # connected to broker 0 only, knows broker 1
            if step == "tcp":
                hang_tcp(monkeypatch, port)
            elif step == "api_versions":
                cluster.control(None, lambda call: Drop(), broker_id=1)
            else:
                cluster.control(ApiKey.SASL_HANDSHAKE, lambda call: Drop(), broker_id=1)
            calls: dict[str, tuple[Callable[[], Any], str]] = {
                "ListOffsets": (
                    lambda: admin.list_offsets([TopicPartition("t", 0)], "latest"),
                    f"no attempt was answered; waiting on {host}:{port} (node 1): {said} for 3.0 s",
                ),
                "OffsetFetch 'g'": (
                    lambda: admin.fetch_offsets("g"),
                    f"coordinator node 1 at {host}:{port} did not answer: {said} for 3.0 s",
                ),
            }
            for what, (call, named) in calls.items():
                with pytest.raises(TimeoutError) as caught:
                    await call()
                assert str(caught.value) == f"{what} did not complete within 3 s ({named})"
            assert admin.cluster.waiting_on() == {f"{host}:{port} (node 1)": f"{said} for 3.0 s"}
            # The set-up that comes through is no longer named.
            cluster.clear_controls()
            monkeypatch.undo()
            await admin.list_offsets([TopicPartition("t", 0)], "latest")
            assert admin.cluster.waiting_on() == {}
