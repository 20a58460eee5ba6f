"""SASL sessions with a lifetime (KIP-368) against the embedded broker: the
client re-authenticates in place, also where the connection's owner was
cancelled and shielded clean-up still uses it."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from gengroup import KafkaConnectionError
from gengroup.broker import FakeCluster
from gengroup.io.connection import open_connection
from gengroup.io.security import Security
from gengroup.testing.kafka import Certificates

from . import metadata
from .test_security import certs, client, server

__all__ = ["certs"]  # the fixture, imported for these tests


async def test_a_connection_re_authenticates_while_shielded_clean_up_uses_it(
    autojump_clock: trio.testing.MockClock, certs: Certificates
) -> None:
    """The scope around a connection is cancelled and shielded clean-up goes on
    using it for several sessions: the re-authentication goes on too, as the
    reader does. (It was cancelled with the scope: the session expired and
    the broker closed the connection at the next request.)"""
    security = server(certs, "SASL_PLAINTEXT", session_lifetime_ms=2_000)
    settings = client(certs, "SASL_PLAINTEXT", "SCRAM-SHA-256")
    async with FakeCluster(security=security, topics={"t": 1}) as cluster:
        host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
        answers: list[Any] = []
        with trio.CancelScope() as outer:
            async with open_connection(host, int(port), security=Security(**settings)) as conn:
                outer.cancel()
                with trio.CancelScope(shield=True):
                    await trio.sleep(9.0)
                    try:
                        answers.append(await conn.request(metadata(1, ["t"])))
                    except KafkaConnectionError as exc:
                        answers.append(exc)
        assert not isinstance(answers[0], KafkaConnectionError), answers[0]
        assert [t.name for t in answers[0].topics] == ["t"]
        assert conn.reauthentications >= 4
        assert cluster.servers[0].expired_sessions == 0
