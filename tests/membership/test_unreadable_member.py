"""A peer whose subscription cannot be read does not stop a gengroup-led group.

On the embedded broker, in virtual time: a raw member joins with garbage
protocol metadata; the gengroup leader assigns around it (it gets nothing,
one ERROR names it per generation) and the good members keep every partition.
"""

from __future__ import annotations

import logging
import re

import anyio
import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode

from gengroup import ConsumerGroup
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Fail
from gengroup.protocol.consumer_protocol import decode_assignment
from gengroup.protocol.versions import ApiKey

from .. import embedded as rq
from ..consumer.helpers import Ledger, all_partitions, covers_exactly_once
from .test_sticky_group import SETTINGS

#: Version 1, then a topic count of 2**31-1 with nothing behind it.
GARBAGE = b"\x00\x01\x7f\xff\xff\xff"


class GarbageMember:
    """A raw group member offering ``range`` and ``roundrobin`` with unreadable metadata.

    It joins, syncs and heartbeats until told to rebalance, then rejoins,
    recording each generation it synced in with the assignment it got.
    """

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.member_id = ""
        self.synced: list[tuple[int, dict[str, list[int]]]] = []

    async def run(self) -> None:
        protocols = (("range", GARBAGE), ("roundrobin", GARBAGE))
        async with rq.connect(self.cluster) as conn:
            while True:
                join = await conn.request(
                    rq.join_group(9, "g", self.member_id, rebalance_ms=20_000, protocols=protocols)
                )
                if join.member_id:
                    self.member_id = join.member_id
                if join.error_code == ErrorCode.member_id_required:
                    continue
                assert join.error_code == 0, join
                generation = int(join.generation_id)
                sync = await conn.request(
                    rq.sync_group(5, "g", generation, self.member_id, protocol=join.protocol_name)
                )
                if sync.error_code:
                    continue
                got = decode_assignment(bytes(sync.assignment)).as_mapping()
                self.synced.append((generation, got))
                while not (
                    await conn.request(rq.heartbeat(4, "g", generation, self.member_id))
                ).error_code:
                    await anyio.sleep(1.0)


@pytest.mark.parametrize("describe_works", [True, False], ids=["described", "undescribed"])
async def test_leader_assigns_around_a_member_with_unreadable_metadata(
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    describe_works: bool,
) -> None:
    caplog.set_level(logging.ERROR, logger="gengroup")
    every = all_partitions("t", 4)
    ledger = Ledger()
    async with FakeCluster(topics={"t": 4}, initial_rebalance_delay_ms=0) as cluster:
        if not describe_works:
            cluster.control(
                ApiKey.DESCRIBE_GROUPS, lambda req: Fail(ErrorCode.group_authorization_failed)
            )
        garbage = GarbageMember(cluster)
        async with anyio.create_task_group() as tg:
            a = await tg.start(_member, ledger, "a", cluster)
            await ledger.wait_for(lambda: ledger.assigned("a") == every, "a to own everything")

            tg.start_soon(garbage.run)

            def a_leads_with_garbage_member() -> bool:
                gen = ledger.current().get("a")
                return (
                    gen is not None
                    and bool(garbage.synced)
                    and garbage.synced[-1][0] == gen.id
                    and set(gen.assignments) == every
                )

            await ledger.wait_for(a_leads_with_garbage_member, "a generation with the bad member")
            assert ledger.current()["a"].is_leader
            assert garbage.synced[-1][1] == {}

            b = await tg.start(_member, ledger, "b", cluster)

            def shared() -> bool:
                cur = ledger.current()
                gens = [cur.get("a"), cur.get("b")]
                return (
                    all(g is not None for g in gens)
                    and len({g.id for g in gens if g is not None}) == 1
                    and bool(garbage.synced)
                    and garbage.synced[-1][0] == gens[0].id  # type: ignore[union-attr]
                    and covers_exactly_once([g for g in gens if g is not None], every)
                    and all(g.assignments for g in gens if g is not None)
                )

            await ledger.wait_for(shared, "a and b to share every partition")
            assert garbage.synced[-1][1] == {}
            assert all(got == {} for _, got in garbage.synced)
            assert a.is_alive and b.is_alive
            tg.cancel_scope.cancel()

    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    logged: dict[int, int] = {}
    for record in errors:
        text = record.getMessage()
        assert garbage.member_id in text
        if describe_works:
            assert "client embedded-test@" in text  # the client id the raw member connected with
        else:
            assert "client unknown (DescribeGroups did not say)" in text
        assert "malformed consumer protocol subscription" in text
        match = re.search(r"generation (\d+)", text)
        assert match is not None
        logged[int(match[1])] = logged.get(int(match[1]), 0) + 1
    assert all(n == 1 for n in logged.values()), logged
    assert {g for g, _ in garbage.synced} <= set(logged)


class _Running:
    """A member's task: whether its ``async for`` is still going."""

    def __init__(self) -> None:
        self.is_alive = True


async def _member(
    ledger: Ledger,
    name: str,
    cluster: FakeCluster,
    *,
    task_status: trio.TaskStatus[_Running] = trio.TASK_STATUS_IGNORED,
) -> None:
    running = _Running()
    async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
        task_status.started(running)
        try:
            await ledger.member(name, group)
        finally:
            running.is_alive = False
