"""``Admin.delete_groups`` of several groups tries every one, on the embedded broker
in virtual time.

It deleted groups one by one and stopped at the first that failed: the groups
after it were not deleted, and the caller could not tell which were.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest
import trio
import trio.testing

from gengroup import Admin, BrokerError, GengroupError, GroupsNotDeleted, TopicPartition
from gengroup._errors import GroupIdNotFound
from gengroup.admin_groups import read_deleted_group
from gengroup.broker import Delay, Fail, FakeCluster
from gengroup.broker.faults import Intercepted
from gengroup.cli._admin import PartlyFailed
from gengroup.cli.groups import _delete
from gengroup.protocol.versions import ApiKey

NON_EMPTY_GROUP = 68


def refuse(call: Intercepted) -> Fail | Delay | None:
    """``locked`` still has members; ``slow``'s request is answered after 60 s
    (its connection stalls meanwhile, as behind a hung coordinator)."""
    if "locked" in call.request.groups_names:
        return Fail(NON_EMPTY_GROUP)
    if "slow" in call.request.groups_names:
        return Delay(60)
    return None


async def test_every_group_is_tried_and_each_failure_is_reported(
    autojump_clock: trio.testing.MockClock,
) -> None:
    asked = ["typo-group", "old-a", "locked", "slow", "old-b"]
    async with FakeCluster(brokers=2, topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        first, second = sorted(cluster.state.node_ids)
        for group_id in [*asked, "kept"]:  # a hung coordinator holds no other group up
            cluster.move_coordinator(group_id, second if group_id == "slow" else first)
        async with Admin(cluster.bootstrap, timeout=2.0) as admin:
            for group_id in ("old-a", "old-b", "kept"):
                await admin.reset_offsets(group_id, [TopicPartition("t", 0)], to="earliest")
            cluster.control(ApiKey.DELETE_GROUPS, refuse)
            started = trio.current_time()
            with pytest.raises(GroupsNotDeleted) as caught:
                await admin.delete_groups(asked)
            assert trio.current_time() - started <= 2.0 + 0.01  # one deadline for all
        async with Admin(cluster.bootstrap) as admin:  # connections no request holds up
            left = [g.group_id for g in await admin.list_groups()]

    failed = caught.value
    assert isinstance(failed, GengroupError) and isinstance(failed, ExceptionGroup)
    assert failed.deleted == ["old-a", "old-b"]
    assert list(failed.errors) == ["typo-group", "locked", "slow"]
    assert isinstance(failed.errors["typo-group"], GroupIdNotFound)
    locked = failed.errors["locked"]
    assert isinstance(locked, BrokerError) and locked.name == "NON_EMPTY_GROUP"
    assert isinstance(failed.errors["slow"], TimeoutError)
    assert list(failed.exceptions) == list(failed.errors.values())
    message = str(failed)
    assert message.startswith("3 of 5 groups not deleted: 'typo-group' (GroupIdNotFound: ")
    assert "'locked' (BrokerError: NON_EMPTY_GROUP" in message
    assert "'slow' (TimeoutError: " in message
    assert "deleted: 'old-a', 'old-b'" in message
    assert left == ["kept"]
    # An exception group: each kind of failure can be handled on its own.
    missing: list[BaseException] = []
    try:
        raise failed
    except* GroupIdNotFound as group:
        missing.extend(group.exceptions)
    except* (BrokerError, TimeoutError):
        pass
    assert missing == [failed.errors["typo-group"]]


async def test_one_group_raises_its_own_error(autojump_clock: trio.testing.MockClock) -> None:
    """``except GroupIdNotFound`` around a one-group call keeps working."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap, timeout=2.0) as admin:
            with pytest.raises(GroupIdNotFound):
                await admin.delete_groups(["typo-group"])
            with pytest.raises(GroupIdNotFound):  # the same group twice is one group
                await admin.delete_groups(["typo-group", "typo-group"])
            cluster.control(ApiKey.DELETE_GROUPS, refuse)
            with pytest.raises(BrokerError, match="NON_EMPTY_GROUP"):
                await admin.delete_groups(["locked"])
            with pytest.raises(TimeoutError, match="'slow'"):
                await admin.delete_groups(["slow"])
            await admin.delete_groups([])  # nothing to do


def test_an_answer_that_leaves_the_group_out_is_not_a_deletion() -> None:
    answer = SimpleNamespace(results=[SimpleNamespace(group_id="other", error_code=0)])
    with pytest.raises(GroupIdNotFound, match="did not mention group 'g'"):
        read_deleted_group(answer, "g")


async def test_the_cli_reports_each_group(autojump_clock: trio.testing.MockClock) -> None:
    """``gengroup groups delete``: what was deleted, and each failure (one line each)."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with Admin(cluster.bootstrap, timeout=2.0) as admin:
            await admin.reset_offsets("old-a", [TopicPartition("t", 0)], to="earliest")
            cluster.control(ApiKey.DELETE_GROUPS, refuse)
            args = argparse.Namespace(groups=["gone", "old-a", "locked", "gone"])
            with pytest.raises(PartlyFailed) as caught:
                await _delete(admin, args)
            assert caught.value.result == {"deleted": ["old-a"]}
            assert [type(e) for e in caught.value.errors] == [GroupIdNotFound, BrokerError]
            with pytest.raises(PartlyFailed) as one:
                await _delete(admin, argparse.Namespace(groups=["gone"]))
            assert one.value.result == {"deleted": []}
            assert [type(e) for e in one.value.errors] == [GroupIdNotFound]
