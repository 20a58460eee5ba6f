"""SASL sessions with a lifetime (KIP-368) against the embedded broker: the
client re-authenticates in place, also where the connection's owner was
cancelled and shielded clean-up still uses it, and behind a parked request."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import trio
import trio.testing

from gengroup import (
    AuthenticationError,
    BrokenConnection,
    Cluster,
    ConsumerGroup,
    KafkaConnectionError,
)
from gengroup.broker import Drop, FakeCluster
from gengroup.io import connection, sasl
from gengroup.io.cluster import AUTH_REFUSAL_MEMORY
from gengroup.io.connection import open_connection
from gengroup.io.security import Security
from gengroup.protocol.versions import ApiKey
from gengroup.testing.kafka import Certificates

from . import fetch, metadata
from .test_security import GROUP, HANG_GUARD, USERS, certs, client, server

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


async def test_a_re_authentication_waits_for_a_parked_join_group(
    autojump_clock: trio.testing.MockClock,
    certs: Certificates,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """B's JoinGroup is parked while A's tasks take 20 s to return; B's
    connection re-authenticates (4 s sessions) behind it without cutting it.
    (The exchange's connect_timeout ran from its start: it timed out behind
    the parked JoinGroup, and the connection was closed under it with a
    warning giving no cause.)"""
    caplog.set_level(logging.WARNING, logger="gengroup")
    security = server(certs, "SASL_PLAINTEXT", session_lifetime_ms=4_000)
    settings = {**client(certs, "SASL_PLAINTEXT", "SCRAM-SHA-256"), **GROUP}
    async with FakeCluster(
        security=security, topics={"t": 4}, initial_rebalance_delay_ms=0
    ) as cluster:
        formed: dict[str, float] = {}

        async def member(name: str, teardown: float) -> None:
            async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
                async for gen in group:
                    formed.setdefault(name, trio.current_time())

                    async def slow_to_return() -> None:
                        try:
                            await trio.sleep_forever()
                        finally:
                            with trio.CancelScope(shield=True):
                                await trio.sleep(teardown)

                    gen.start_soon(slow_to_return)

        with trio.fail_after(HANG_GUARD):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(member, "A", 20.0)
                while "A" not in formed:
                    await trio.sleep(0.1)
                nursery.start_soon(member, "B", 0.0)
                b_joined = trio.current_time()
                while "B" not in formed:
                    await trio.sleep(0.1)
                nursery.cancel_scope.cancel()
        assert 20.0 <= formed["B"] - b_joined < 25.0
        assert cluster.reauthentications >= 5
        assert cluster.servers[0].expired_sessions == 0
        warned = [r.getMessage() for r in caplog.records if r.name.startswith("gengroup")]
        assert not [w for w in warned if "re-authentication" in w], warned


async def test_a_re_authentication_without_an_answer_says_it_timed_out(
    autojump_clock: trio.testing.MockClock,
    certs: Certificates,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="gengroup")
    security = server(certs, "SASL_PLAINTEXT", session_lifetime_ms=2_000)
    settings = Security(**client(certs, "SASL_PLAINTEXT", "PLAIN"))
    async with FakeCluster(security=security, topics={"t": 1}) as cluster:
        host, port = cluster.bootstrap.rsplit(":", 1)
        async with open_connection(host, int(port), security=settings) as conn:
            cluster.control(ApiKey.SASL_HANDSHAKE, lambda call: Drop(), once=True)
            with trio.fail_after(HANG_GUARD):
                await conn.wait_closed()
    said = "re-authentication failed, closing the connection: no answer within connect_timeout"
    assert [r.getMessage() for r in caplog.records] == [f"{conn}: {said}=10.0 s"]


def slow_token_at_re_authentication(seconds: float, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Make the SASL mechanism (where OAUTHBEARER's provider is asked for its
    token) take ``seconds`` at each re-authentication; when each was asked for."""
    made = sasl.mechanism_for
    calls: list[float] = []

    async def slow(*args: Any) -> sasl.Mechanism:
        calls.append(trio.current_time())
        if len(calls) > 1:
            await trio.sleep(seconds)
        return await made(*args)

    monkeypatch.setattr(sasl, "mechanism_for", slow)
    return calls


async def test_closing_a_connection_does_not_wait_for_a_slow_token(
    autojump_clock: trio.testing.MockClock,
    certs: Certificates,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The re-authentication is shielded (so that shielded clean-up keeps its
    session), but a connection closed while its token provider runs (a block
    left, by a cancellation too) closes at once, not when the token comes."""
    monkeypatch.setattr(connection, "_REAUTH_AT", (0.85, 0.85))  # at 3.4 s of 4 s
    calls = slow_token_at_re_authentication(8.0, monkeypatch)
    security = server(certs, "SASL_PLAINTEXT", session_lifetime_ms=4_000)
    settings = Security(**client(certs, "SASL_PLAINTEXT", "PLAIN"))
    async with FakeCluster(security=security, topics={"t": 1}) as cluster:
        host, port = cluster.bootstrap.rsplit(":", 1)
        with trio.fail_after(HANG_GUARD), trio.CancelScope() as scope:
            async with open_connection(host, int(port), security=settings):
                while len(calls) < 2:
                    await trio.sleep(0.01)
                await trio.sleep(0.2)  # the provider is running
                left_at = trio.current_time()
                scope.cancel()
        assert trio.current_time() - left_at < 0.5, trio.current_time() - left_at


async def test_a_token_slower_than_the_session_holds_requests_back_near_its_end(
    autojump_clock: trio.testing.MockClock,
    certs: Certificates,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sessions of 4 s and a token that takes 2.5 s, while requests flow: they
    wait for the re-authentication, so none arrives after the session expired
    (which the broker answers by closing the connection)."""
    slow_token_at_re_authentication(2.5, monkeypatch)
    security = server(certs, "SASL_PLAINTEXT", session_lifetime_ms=4_000)
    settings = Security(**client(certs, "SASL_PLAINTEXT", "PLAIN"))
    async with FakeCluster(security=security, topics={"t": 1}) as cluster:
        host, port = cluster.bootstrap.rsplit(":", 1)
        async with open_connection(host, int(port), security=settings) as conn:
            with trio.fail_after(HANG_GUARD):
                while conn.reauthentications < 3:
                    await conn.request(metadata(1, ["t"]))
                    await trio.sleep(0.05)
        assert cluster.servers[0].expired_sessions == 0


async def test_a_slow_token_is_fetched_ahead_without_holding_requests_up(
    autojump_clock: trio.testing.MockClock,
    certs: Certificates,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sessions of 40 s re-authenticated at 34 s, and a token provider that
    takes 8 s: the token is asked for 10 s (a quarter of the session) before,
    while requests go on, and the exchange then uses it at once. No request
    waits more than a moment. (The token was asked for under the send lock
    at 34 s: every request sent in the next 8 s waited for it.)"""
    monkeypatch.setattr(connection, "_REAUTH_AT", (0.85, 0.85))
    calls = slow_token_at_re_authentication(8.0, monkeypatch)
    security = server(certs, "SASL_PLAINTEXT", session_lifetime_ms=40_000)
    settings = Security(**client(certs, "SASL_PLAINTEXT", "PLAIN"))
    waits: list[tuple[float, float]] = []
    async with FakeCluster(security=security, topics={"t": 1}) as cluster:
        host, port = cluster.bootstrap.rsplit(":", 1)
        async with open_connection(host, int(port), security=settings) as conn:
            started = trio.current_time()
            with trio.fail_after(HANG_GUARD):
                while conn.reauthentications < 2:
                    sent = trio.current_time()
                    await conn.request(metadata(1, ["t"]))
                    waits.append((sent - started, trio.current_time() - sent))
                    await trio.sleep(0.5)
        assert cluster.servers[0].expired_sessions == 0
    during = [wait for at, wait in waits if 24.0 <= at <= 42.0]
    assert len(during) > 30
    assert max(wait for _, wait in waits) < 0.1, max(waits, key=lambda w: w[1])
    assert calls[1] - calls[0] == pytest.approx(24.0, abs=0.1)  # 34 s less the lead
    assert calls[2] - calls[1] == pytest.approx(34.0, abs=0.1)  # the next session's


async def test_a_token_fetched_ahead_waits_for_a_parked_request_before_it_is_used(
    autojump_clock: trio.testing.MockClock,
    certs: Certificates,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The token is ready at 32 s (asked for at 24 s, 8 s to come) and the
    re-authentication is due at 34 s, behind a long poll parked from 30 s to
    39 s. A request sent behind the long poll before 34 s goes out; one sent
    after waits for the exchange, which starts once the long poll is answered:
    none reaches the broker after the session expired."""
    monkeypatch.setattr(connection, "_REAUTH_AT", (0.85, 0.85))
    slow_token_at_re_authentication(8.0, monkeypatch)
    events: list[tuple[str, float]] = []
    authenticate = sasl.authenticate
    started = trio.current_time()

    async def noted(*args: Any) -> float | None:
        events.append(("exchange", trio.current_time() - started))
        return await authenticate(*args)

    monkeypatch.setattr(sasl, "authenticate", noted)
    security = server(certs, "SASL_PLAINTEXT", session_lifetime_ms=40_000)
    settings = Security(**client(certs, "SASL_PLAINTEXT", "PLAIN"))
    async with FakeCluster(security=security, topics={"t": 1}) as cluster:
        host, port = cluster.bootstrap.rsplit(":", 1)
        async with open_connection(host, int(port), security=settings) as conn:
            started = trio.current_time()
            events.clear()  # the first authentication's

            async def send(name: str, at: float, request: Any) -> None:
                await trio.sleep_until(started + at)
                await conn.request(request)
                events.append((name, trio.current_time() - started))

            with trio.fail_after(HANG_GUARD):
                async with trio.open_nursery() as nursery:
                    long_poll = fetch(12, "t", 0, 0, max_wait=9_000)
                    nursery.start_soon(send, "long poll", 30.0, long_poll)
                    nursery.start_soon(send, "before", 31.0, metadata(1, ["t"]))
                    nursery.start_soon(send, "after", 35.0, metadata(1, ["t"]))
            assert conn.reauthentications == 1
        assert cluster.servers[0].expired_sessions == 0
    assert [name for name, _ in events] == ["long poll", "before", "exchange", "after"]
    assert [at for _, at in events] == pytest.approx([39.0] * 4, abs=0.1)


class _Tokens(Mapping[str, str]):
    """Tokens for alice that live as long as a session (as OAUTHBEARER's: the
    broker bounds a session by its token's expiry), simulated with PLAIN: the
    password is ``tok@<when issued>``, and the broker accepts it for ``life`` s."""

    def __init__(self, life: float) -> None:
        self.life, self.issued, self.logins = life, trio.current_time(), []

    def __getitem__(self, user: str) -> str:
        return f"tok@{self.issued}"

    def __iter__(self) -> Iterator[str]:
        return iter(["alice"])

    def __len__(self) -> int:
        return 1

    def get(self, user: str, default: Any = None) -> str:  # type: ignore[override]
        age = trio.current_time() - self.issued
        self.logins.append(age)
        return f"tok@{self.issued}" if age <= self.life else "expired"

    async def issue(self, security: Security, broker: str) -> sasl.Mechanism:
        self.issued = trio.current_time()
        return sasl._Plain("alice", f"tok@{self.issued}")


@pytest.mark.parametrize(
    ("parked", "asked"), [(5.0, [24.0]), (15.0, [24.0, 45.0]), (60.0, [24.0, 90.0])]
)
async def test_a_token_fetched_ahead_is_asked_again_if_the_wait_made_it_old(
    autojump_clock: trio.testing.MockClock,
    certs: Certificates,
    monkeypatch: pytest.MonkeyPatch,
    parked: float,
    asked: list[float],
) -> None:
    """Tokens that live 40 s, sessions of 40 s re-authenticated at 34 s: the
    token is asked for at 24 s, and a long poll parked from 30 s holds the
    exchange until it is answered. Answered at 35 s, the token (11 s old) is
    used; at 45 s or 90 s it would be 21 s or 66 s old, more than half the
    session: it is asked again then, and the broker accepts it. (The token
    asked for at 24 s was used at 90 s, expired: refused, never retried.)"""
    monkeypatch.setattr(connection, "_REAUTH_AT", (0.85, 0.85))
    tokens = _Tokens(40.0)
    security = server(
        certs, "SASL_PLAINTEXT", sasl_mechanisms=["PLAIN"], users=tokens, session_lifetime_ms=40_000
    )
    settings = Security(**client(certs, "SASL_PLAINTEXT", "PLAIN"))
    calls: list[float] = []

    async def issue(*args: Any) -> sasl.Mechanism:
        calls.append(trio.current_time() - started)
        return await tokens.issue(*args)

    monkeypatch.setattr(sasl, "mechanism_for", issue)
    async with FakeCluster(security=security, topics={"t": 1}) as cluster:
        host, port = cluster.bootstrap.rsplit(":", 1)
        started = trio.current_time()
        async with open_connection(host, int(port), security=settings) as conn:
            started, calls[:] = trio.current_time(), []  # the first login's
            with trio.fail_after(HANG_GUARD):
                await trio.sleep(30.0)
                await conn.request(fetch(12, "t", 0, 0, max_wait=parked * 1000), timeout=99)
                await trio.sleep(1.0)
                await conn.request(metadata(1, ["t"]))
            assert conn.reauthentications == 1
        assert cluster.servers[0].expired_sessions == 0
    assert calls == pytest.approx(asked, abs=0.1)
    assert tokens.logins[-1] <= 20.0 + 0.1  # the token used: at most half a session old


@pytest.mark.parametrize(
    ("takes", "said"),
    [
        (2.0, "token provider raised RuntimeError('identity provider down')"),
        (60.0, "the token provider gave no token within connect_timeout=10.0 s"),
    ],
)
async def test_a_token_fetch_that_fails_ahead_fails_the_re_authentication_when_due(
    autojump_clock: trio.testing.MockClock,
    certs: Certificates,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    takes: float,
    said: str,
) -> None:
    """A token provider that raises while the token is fetched ahead (from
    24 s) leaves the connection be until the re-authentication is due (34 s):
    then the connection is closed with one WARNING naming the cause, as
    before. One that gives no token by then gets ``connect_timeout`` more."""
    caplog.set_level(logging.WARNING, logger="gengroup")
    monkeypatch.setattr(connection, "_REAUTH_AT", (0.85, 0.85))
    made = sasl.mechanism_for
    calls: list[float] = []

    async def failing(*args: Any) -> sasl.Mechanism:
        calls.append(trio.current_time())
        if len(calls) == 1:
            return await made(*args)
        await trio.sleep(takes)
        raise BrokenConnection(
            "OAUTHBEARER authentication with broker: the token provider raised "
            "RuntimeError('identity provider down')"
        )

    monkeypatch.setattr(sasl, "mechanism_for", failing)
    security = server(certs, "SASL_PLAINTEXT", session_lifetime_ms=40_000)
    settings = Security(**client(certs, "SASL_PLAINTEXT", "PLAIN"))
    async with FakeCluster(security=security, topics={"t": 1}) as cluster:
        host, port = cluster.bootstrap.rsplit(":", 1)
        async with open_connection(host, int(port), security=settings) as conn:
            started = trio.current_time()
            with trio.fail_after(HANG_GUARD):
                while conn.is_usable:
                    try:
                        await conn.request(metadata(1, ["t"]))
                    except BrokenConnection:
                        break  # sent while the re-authentication failed
                    await trio.sleep(0.5)
                closed = trio.current_time() - started
            with pytest.raises(BrokenConnection, match="re-authentication failed"):
                await conn.request(metadata(1, ["t"]))
        assert cluster.servers[0].expired_sessions == 0
    assert calls[1] - started == pytest.approx(24.0, abs=0.1)
    assert closed == pytest.approx(34.0 if takes < 10 else 44.0, abs=0.6)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and said in warned[0], warned
    assert "re-authentication failed, closing the connection" in warned[0]


async def test_a_password_changed_on_the_brokers_is_one_warning_for_all_connections(
    autojump_clock: trio.testing.MockClock,
    certs: Certificates,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Three brokers, two connections to each (and the bootstrap one),
    sessions of 4 s, and the password changes on the brokers: the seven
    re-authentications are refused,
    then a login on a new connection to each broker (once the refusals are
    forgotten); each caller gets its AuthenticationError, but one WARNING
    says so (the rest at DEBUG), and one INFO per broker that its logins are
    accepted again once the password is back. (Each refusal was a WARNING of
    its own.)"""
    caplog.set_level(logging.WARNING, logger="gengroup")
    caplog.set_level(logging.INFO, logger="gengroup.connection")
    users = dict(USERS)
    security = server(
        certs, "SASL_PLAINTEXT", sasl_mechanisms=["PLAIN"], users=users, session_lifetime_ms=4_000
    )
    settings = client(certs, "SASL_PLAINTEXT", "PLAIN")
    nodes = [(node, channel) for node in (0, 1, 2) for channel in ("default", "group")]
    async with (
        FakeCluster(3, security=security, topics={"t": 3}) as cluster,
        Cluster(cluster.bootstrap, **settings) as pool,
    ):
        with trio.fail_after(HANG_GUARD):
            await pool.refresh_metadata(["t"])
            conns = [await pool.connection(node, channel) for node, channel in nodes]
            users["alice"] = "rotated"
            await trio.sleep(4.0)  # every session re-authenticates, and is refused
            assert not [conn for conn in conns if conn.is_usable]
            refused = cluster.failed_authentications  # and the bootstrap connection's
            assert refused == 7
            await trio.sleep(AUTH_REFUSAL_MEMORY)
            for node, channel in nodes:
                with pytest.raises(AuthenticationError) as info:
                    await pool.connection(node, channel)
                assert info.value.broker == "{}:{}".format(*cluster.address(node))
                assert "PLAIN authentication with" in str(info.value)
            assert cluster.failed_authentications == refused + 3  # one login per broker
            warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert len(warned) == 1, [r.getMessage() for r in warned]
            assert "re-authentication failed" in warned[0].getMessage()
            assert "Invalid username or password" in warned[0].getMessage()
            users["alice"] = USERS["alice"]
            await trio.sleep(AUTH_REFUSAL_MEMORY)
            for node, channel in nodes:
                await pool.connection(node, channel)
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    brokers = {"{}:{}".format(*cluster.address(node)) for node in (0, 1, 2)}
    again = [
        re.match(r"login to (\S+) accepted again, after (\d+) refused login\(s\)", s) for s in said
    ]
    assert all(again), said  # one INFO per broker that refused, naming it
    assert sorted(m[1] for m in again if m) == sorted(brokers), said
    assert sum(int(m[2]) for m in again if m) == refused + 3
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1


async def test_a_password_only_one_broker_refuses_is_one_warning_and_no_info(
    autojump_clock: trio.testing.MockClock,
    certs: Certificates,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A password rotated broker by broker: broker 2 already wants the new
    one, 0 and 1 the old. Round after round of connections (each once the
    refusal is forgotten), broker 2's refusal is one WARNING, and the logins
    0 and 1 accept meanwhile say nothing: they never refused. (Each round was a
    WARNING and an INFO naming a broker that never refused.)"""
    caplog.set_level(logging.WARNING, logger="gengroup")
    caplog.set_level(logging.INFO, logger="gengroup.connection")
    security = server(certs, "SASL_PLAINTEXT", sasl_mechanisms=["PLAIN"], users=dict(USERS))
    settings = client(certs, "SASL_PLAINTEXT", "PLAIN")
    async with (
        FakeCluster(3, security=security, topics={"t": 3}) as cluster,
        Cluster(cluster.bootstrap, **settings) as pool,
    ):
        with trio.fail_after(HANG_GUARD):
            await pool.refresh_metadata(["t"])
            cluster.servers[2].security = dataclasses.replace(security, users={"alice": "new"})
            for round_ in range(4):
                for node in (0, 1):
                    await pool.connection(node, f"round{round_}")
                with pytest.raises(AuthenticationError):
                    await pool.connection(2, f"round{round_}")
                await trio.sleep(AUTH_REFUSAL_MEMORY + 1)
    logged = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in logged] == ["WARNING"], logged
    assert "{}:{}".format(*cluster.address(2)) in logged[0][1]
