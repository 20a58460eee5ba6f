"""``gengroup lag`` (once, and refreshed with --watch) and ``gengroup groups delete``."""

from __future__ import annotations

import io
import json
import signal

import anyio
from rich.console import Console

from gengroup import Admin, ConsumerGroup, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.cli.groups import lag_report
from gengroup.cli.lag import render
from tests.cli.conftest import gengroup
from tests.cli.test_consume import running, seed
from tests.embedded.test_cli import command


def commit(bootstrap: str, group_id: str, topic: str, offsets: dict[int, int]) -> None:
    async def main() -> None:
        async with Admin(bootstrap) as admin:
            for p, offset in offsets.items():
                await admin.reset_offsets(group_id, [TopicPartition(topic, p)], offset=offset)

    anyio.run(main)


def test_lag_once_as_a_table_and_as_json(served: str) -> None:
    seed(served, "lagging", partitions=2, per_partition=10)
    commit(served, "slow", "lagging", {0: 3, 1: 10})
    table = gengroup("lag", "slow", bootstrap=served)
    assert table.returncode == 0, table.stderr
    assert "group slow: total lag 7" in table.stdout
    rows = [ln.replace("│", " ").split() for ln in table.stdout.splitlines() if "lagging[" in ln]
    assert rows == [["lagging[0]", "3", "10", "7"], ["lagging[1]", "10", "10", "0"]]
    report = json.loads(gengroup("lag", "slow", "--json", bootstrap=served).stdout)
    assert report["total_lag"] == 7
    assert (report["state"], report["partial"], report["rebalancing"]) == ("Empty", False, False)
    assert {p["member_id"] for p in report["partitions"]} == {None}  # no live member
    assert [p["lag"] for p in report["partitions"]] == [7, 0]
    missing = gengroup("lag", "nobody", bootstrap=served)
    assert missing.returncode == 3 and "does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr


def _text(table: object) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text()


async def test_lag_lists_what_a_live_member_owns_before_it_commits() -> None:
    """A member still on its first batch: its partitions with lag unknown and the
    member named, and a total that says it is partial; a commit past the end
    (the log truncated) is a negative lag, as Kafka's tool shows it."""
    async with (
        FakeCluster(topics={"t": 3}, initial_rebalance_delay_ms=0) as cluster,
        Admin(cluster.bootstrap) as admin,
    ):
        for p in range(3):
            cluster.produce("t", [b"x"] * 5, partition=p)
        async with ConsumerGroup("g", ["t"], cluster.bootstrap) as group:
            gen = await group.next()
            report = await lag_report(admin, "g", None)
            assert (report["total_lag"], report["partial"], report["state"]) == (0, True, "Stable")
            rows = report["partitions"]
            assert [(r["partition"], r["committed"], r["end"], r["lag"]) for r in rows] == [
                (f"t[{p}]", None, 5, None) for p in range(3)
            ]
            assert {(r["member_id"], r["client_id"]) for r in rows} == {
                (gen.member_id, group.config.client_id)
            }
            text = _text(render(report))
            assert "group g: total lag 0 (partial: lag unknown for 3 partition(s))" in text
            assert "member" in text and gen.member_id in text

            await gen.commit({TopicPartition("t", 0): 2, TopicPartition("t", 1): 9})
            report = await lag_report(admin, "g", None)
            assert [r["lag"] for r in report["partitions"]] == [3, -4, None]
            assert (report["total_lag"], report["partial"]) == (3, True)
            text = _text(render(report))
            assert "total lag 3 (partial: lag unknown for 1 partition(s))" in text
            assert " -4 " in text
            gen.cancel()


def test_lag_watch_refreshes_until_a_signal(served: str) -> None:
    seed(served, "watched", partitions=1, per_partition=10)
    commit(served, "watcher", "watched", {0: 2})
    cmd = command("lag", "watcher", "--watch", "0.2", "--json", "--bootstrap", served)
    with running(cmd) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert json.loads(proc.stdout.readline())["total_lag"] == 8
        commit(served, "watcher", "watched", {0: 9})
        # A later refresh shows the new committed offset.
        while json.loads(proc.stdout.readline())["total_lag"] != 1:
            pass
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert proc.stderr.read() == ""


def test_lag_watch_prints_a_table_per_refresh_when_not_on_a_terminal(served: str) -> None:
    seed(served, "tables", partitions=1, per_partition=4)
    commit(served, "viewer", "tables", {0: 1})
    cmd = command("lag", "viewer", "--watch", "0.2", "--bootstrap", served)
    with running(cmd) as proc:
        assert proc.stdout is not None
        titles = 0
        while titles < 2:
            titles += proc.stdout.readline().startswith("group viewer: total lag 3 at ")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_groups_delete_deletes_each_group_and_names_the_missing(served: str) -> None:
    seed(served, "deleting", partitions=1, per_partition=3)
    for group_id in ("old-a", "old-b"):
        commit(served, group_id, "deleting", {0: 1})
    done = gengroup("groups", "delete", "old-a", "gone", "old-b", "--json", bootstrap=served)
    assert done.returncode == 3, done
    assert json.loads(done.stdout) == {"deleted": ["old-a", "old-b"]}
    assert done.stderr.strip().splitlines() == [
        "gengroup groups: GROUP_ID_NOT_FOUND (69): group 'gone'"
    ]
    listed = json.loads(gengroup("groups", "list", "--json", bootstrap=served).stdout)
    assert not {"old-a", "old-b"} & {g["group"] for g in listed}
    again = gengroup("lag", "old-a", bootstrap=served)
    assert again.returncode == 3
    # Nothing deleted: the error alone, no empty "deleted:" header.
    none = gengroup("groups", "delete", "gone", bootstrap=served)
    assert (none.returncode, none.stdout) == (3, ""), none


def test_groups_delete_refuses_a_group_with_a_live_member(served: str) -> None:
    seed(served, "busy", partitions=1, per_partition=3)
    cmd = command("consume", "busy", "--group", "busy-g", "--from-beginning", "--bootstrap", served)
    with running(cmd) as member:
        assert member.stdout is not None
        assert [member.stdout.readline() for _ in range(3)] == ["p0-0\n", "p0-1\n", "p0-2\n"]
        refused = gengroup("groups", "delete", "busy-g", bootstrap=served)
        assert refused.returncode == 1 and "NON_EMPTY_GROUP" in refused.stderr, refused
        member.send_signal(signal.SIGTERM)
        assert member.wait(timeout=60) == 0
    done = gengroup("groups", "delete", "busy-g", bootstrap=served)
    assert done.returncode == 0 and done.stdout == "deleted:\n  busy-g\n", done


async def test_lag_report_lists_a_commit_of_a_deleted_topic_as_unknown(
    autojump_clock: object,
) -> None:
    """``gengroup lag`` failed with exit 3 ("not found") once the group had a commit
    for a deleted topic; the live topic's lag is reported, the other shown as `-`."""
    async with (
        FakeCluster(topics={"orders": 1, "old": 1}, initial_rebalance_delay_ms=0) as cluster,
        Admin(cluster.bootstrap) as admin,
    ):
        cluster.produce("orders", [b"x"] * 5, partition=0)
        await admin.reset_offsets("g", [TopicPartition("orders", 0)], offset=1)
        await admin.reset_offsets("g", [TopicPartition("old", 0)], offset=0)
        # Kafka deletes a deleted topic's committed offsets when its coordinator
        # learns of the deletion; until then OffsetFetch still returns them.
        # The topic's log alone is deleted here, the offsets left as in that window.
        cluster.state.topics.delete("old")
        report = await lag_report(admin, "g", None)
        rows = [(r["partition"], r["committed"], r["end"], r["lag"]) for r in report["partitions"]]
        assert rows == [("old[0]", 0, None, None), ("orders[0]", 1, 5, 4)]
        assert (report["total_lag"], report["partial"]) == (4, True)
        text = " ".join(_text(render(report)).split())  # the title wraps
        assert "(partial: lag unknown for 1 partition(s), 1 of them no longer existing)" in text
