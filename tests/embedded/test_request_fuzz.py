"""The embedded broker fed mutated requests keeps serving everyone else.

Seeds are valid requests of every API and version the broker serves (drawn
from kio's hypothesis strategies); each case mutates one (truncation, bit
flips, huge lengths and counts, spans deleted or repeated, splices: the
mutations of ``tests/protocol/fuzz.py``) and sends it on its own connection,
then EOF. The broker may answer or close that connection; meanwhile three
well-behaved connections must keep being served, and the broker must record
no internal error (a handler that raised on a request it had accepted).
Runs in virtual time.
"""

from __future__ import annotations

import random
from pkgutil import resolve_name
from typing import Any

import anyio
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings, strategies as st
from kio.schema.index import schema_name_map
from kio.static.constants import EntityType

from gengroup.broker import FakeCluster
from gengroup.broker.apis import SUPPORTED_VERSIONS
from gengroup.protocol.framing import encode_request
from gengroup.protocol.versions import ApiKey
from tests.protocol.fuzz import mutate

from . import connect
from .test_robustness import raw, still_served

CASES = 1500


def _request_classes() -> list[type[Any]]:
    out = []
    for key, (lo, hi) in SUPPORTED_VERSIONS.items():
        for version, by_type in schema_name_map[key.name.lower()].items():
            if lo <= version <= hi:
                out.append(resolve_name(by_type[EntityType.request]))
    return out


#: APIs whose requests wait by design before they are answered.
WAITING_APIS = {ApiKey.FETCH, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP}


def _seeds(count: int) -> list[bytes]:
    seeds: list[bytes] = []

    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        derandomize=True,  # the same seeds every run: a finding reproduces
        suppress_health_check=list(HealthCheck),
    )
    @given(st.sampled_from(_request_classes()).flatmap(st.from_type))
    def collect(request: Any) -> None:
        seeds.append(encode_request(request, correlation_id=9, client_id="fuzz")[4:])

    collect()
    return seeds


async def test_mutated_requests_never_stop_the_broker_serving_others(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seeds = _seeds(150)
    rng = random.Random(20261124)
    outcomes = {"answered": 0, "closed": 0, "held": 0}
    async with FakeCluster(topics={"t": 1}) as cluster:
        async with connect(cluster) as a, connect(cluster) as b, connect(cluster) as c:
            for case in range(CASES):
                payload = mutate(rng, rng.choice(seeds), seeds)
                frame = len(payload).to_bytes(4, "big", signed=False) + payload
                async with raw(cluster) as evil:
                    await evil.send(frame)
                    await evil.send_eof()
                    got = b""
                    # The broker answers or closes, except that a request which
                    # waits by design (a Fetch long poll, a JoinGroup or
                    # SyncGroup waiting for the group) may be held for as long as
                    # its mutated fields ask, as Kafka holds it.
                    with anyio.move_on_after(60) as waited:
                        try:
                            while True:
                                got += await evil.receive()
                        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                            pass
                    if waited.cancelled_caught:
                        api = int.from_bytes(payload[:2], "big", signed=True)
                        assert api in WAITING_APIS, (
                            f"request of API {api} neither answered nor closed"
                        )
                        outcomes["held"] += 1
                    else:
                        outcomes["answered" if got else "closed"] += 1
                if case % 25 == 0:
                    for conn in (a, b, c):
                        await still_served(conn)
            for conn in (a, b, c):
                await still_served(conn)
        assert not cluster.errors, cluster.errors[:3]
    # the cases reach both outcomes: answered (the broker read a valid request) and closed
    print(outcomes)
    assert outcomes["answered"] and outcomes["closed"], outcomes
