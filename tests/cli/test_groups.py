"""``gengroup groups``: run as a user would, against the embedded broker
(``gengroup serve`` in its own process) and against real Kafka."""

from __future__ import annotations

import json
import re
import subprocess
from functools import partial

import anyio
import pytest

from gengroup import Admin, ConsumerGroup, Producer, TopicPartition
from tests.cli.conftest import Target, gengroup
from tests.cli.test_progress import FORCED, screen


def seed(bootstrap: str, topic: str, group_id: str) -> None:
    """Two partitions of ten records; the group has committed 4 and 7."""

    async def main() -> None:
        async with Admin(bootstrap) as admin, Producer(admin.cluster) as producer:
            await admin.create_topics({topic: 2})
            for p in (0, 1):
                for i in range(10):
                    await producer.send(topic, str(i).encode(), partition=p)
            await admin.reset_offsets(group_id, [TopicPartition(topic, 0)], offset=4)
            await admin.reset_offsets(group_id, [TopicPartition(topic, 1)], offset=7)

    anyio.run(main)


def scenario(bootstrap: str, topic: str, group_id: str) -> None:
    seed(bootstrap, topic, group_id)
    listed = gengroup("groups", "list", "--json", bootstrap=bootstrap)
    assert listed.returncode == 0, listed.stderr
    assert group_id in [g["group"] for g in json.loads(listed.stdout)]

    lag = gengroup("groups", "lag", group_id, "--json", bootstrap=bootstrap)
    assert lag.returncode == 0, lag.stderr
    report = json.loads(lag.stdout)
    assert report["total_lag"] == 6 + 3
    assert [(p["committed"], p["end"], p["lag"]) for p in report["partitions"]] == [
        (4, 10, 6),
        (7, 10, 3),
    ]

    plan = gengroup(
        "groups", "reset-offsets", group_id, "--topic", topic, "--to", "earliest", "--dry-run",
        "--json", bootstrap=bootstrap,
    )  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    assert [p["offset"] for p in json.loads(plan.stdout)["partitions"]] == [0, 0]
    done = gengroup(
        "groups", "reset-offsets", group_id, "--topic", topic, "--partition", "1",
        "--offset", "2", "--execute", bootstrap=bootstrap,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    after = json.loads(gengroup("groups", "lag", group_id, "--json", bootstrap=bootstrap).stdout)
    assert [p["committed"] for p in after["partitions"]] == [4, 2]

    described = gengroup("groups", "describe", group_id, bootstrap=bootstrap)
    assert described.returncode == 0 and "state: Empty" in described.stdout, described

    missing = gengroup("groups", "describe", group_id + "-nope", bootstrap=bootstrap)
    assert missing.returncode == 3 and "does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_groups_commands(target: Target) -> None:
    scenario(target.bootstrap, target.name("t"), target.name("g"))


def test_a_live_consumer_protocol_group(target: Target) -> None:
    """A group of the consumer protocol (KIP-848), live, nothing committed:
    ``describe`` shows its member and partitions, ``lag`` lists them (unknown
    where records wait, 0 where the log is empty), and ``reset-offsets`` is
    refused NON_EMPTY_GROUP."""
    topic, group_id = target.name("k848"), target.name("k848-g")
    settings = {"group_protocol": "consumer", "heartbeat_interval": 0.5, "commit_interval": 0}

    async def run(*args: str) -> subprocess.CompletedProcess[str]:
        return await anyio.to_thread.run_sync(partial(gengroup, *args, bootstrap=target.bootstrap))

    async def main() -> None:
        async with Admin(target.bootstrap) as admin:
            await admin.create_topics({topic: 2})
        async with Producer(target.bootstrap) as producer:
            await producer.send(topic, b"waiting", partition=0)
        async with ConsumerGroup(group_id, [topic], target.bootstrap, **settings) as group:
            gen = await group.next()
            described = await run("groups", "describe", group_id, "--json")
            assert described.returncode == 0, described.stderr
            d = json.loads(described.stdout)
            assert (d["state"], d["group_protocol"], d["protocol"]) == (
                "Stable",
                "consumer",
                "uniform",
            )
            (m,) = d["members"]
            assert m["member_id"] == gen.member_id
            assert m["assignment"] == m["target_assignment"] == [f"{topic}[0]", f"{topic}[1]"]
            assert m["member_epoch"] == d["group_epoch"] == d["assignment_epoch"]

            lag = await run("lag", group_id, "--json")
            assert lag.returncode == 0, lag.stderr
            rows = json.loads(lag.stdout)["partitions"]
            assert [(r["partition"], r["lag"], r["member_id"]) for r in rows] == [
                (f"{topic}[0]", None, gen.member_id),
                (f"{topic}[1]", 0, gen.member_id),
            ]

            reset = await run(
                "groups", "reset-offsets", group_id, "--topic", topic, "--to", "0", "--execute"
            )
            assert reset.returncode == 1, reset
            assert "NON_EMPTY_GROUP" in reset.stderr and "1 live member(s)" in reset.stderr
            gen.cancel()

    anyio.run(main)


def test_usage_errors_and_an_unreachable_broker_say_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GENGROUP_BOOTSTRAP", raising=False)
    no_bootstrap = gengroup("groups", "list")
    assert no_bootstrap.returncode == 2 and "GENGROUP_BOOTSTRAP" in no_bootstrap.stderr
    down = gengroup("groups", "list", "--timeout", "1", bootstrap="127.0.0.1:1")
    assert down.returncode == 1, down
    assert "Traceback" not in down.stderr and "connection refused" in down.stderr
    assert len(down.stderr.strip().splitlines()) == 1, down.stderr


def test_topics_commands_on_the_embedded_broker(served: str) -> None:
    created = gengroup("topics", "create", "orders", "--partitions", "2", bootstrap=served)
    assert created.returncode == 0, created.stderr
    listed = json.loads(gengroup("topics", "list", "--json", bootstrap=served).stdout)
    assert {"topic": "orders", "partitions": 2} in listed
    grown = gengroup("topics", "add-partitions", "orders", "--partitions", "3", bootstrap=served)
    assert grown.returncode == 0, grown.stderr
    described = json.loads(
        gengroup("topics", "describe", "orders", "--json", bootstrap=served).stdout
    )
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    assert all(p["end_offset"] == 0 for p in described["partitions"])
    deleted = gengroup("topics", "delete", "orders", bootstrap=served)
    assert deleted.returncode == 0, deleted.stderr
    missing = gengroup("topics", "describe", "orders", bootstrap=served)
    assert missing.returncode == 3 and "does not exist" in missing.stderr


def test_a_missing_topic_is_named_once(target: Target) -> None:
    """The broker's text for UNKNOWN_TOPIC_OR_PARTITION named the topic too (the
    embedded broker's), or said something else (Apache Kafka's): the line says
    the command's own words, on either broker."""
    topic = target.name("never-created")
    for action in (["delete", topic], ["add-partitions", topic, "--partitions", "3"]):
        done = gengroup("topics", *action, bootstrap=target.bootstrap)
        assert done.returncode == 3, (action, done.stderr)
        assert done.stderr == (
            f"gengroup topics: UNKNOWN_TOPIC_OR_PARTITION (3): topic {topic!r} does not exist\n"
        ), action


def test_version() -> None:
    done = gengroup("--version")
    assert done.returncode == 0 and done.stdout.startswith("gengroup 0.")


def test_reset_offsets_and_lag_say_what_is_wrong_with_the_right_exit_code(served: str) -> None:
    """Bad values are usage errors (2), a missing topic, partition or group is
    exit code 3, each in one line and at once (a missing partition used to wait
    30 s for ListOffsets, and a topic that does not exist was exit code 1)."""
    assert (
        gengroup("topics", "create", "ledger", "--partitions", "2", bootstrap=served).returncode
        == 0
    )
    reset = ["groups", "reset-offsets", "books"]
    cases = [
        ([*reset, "--topic", "ledger", "--to", "bogus"], 2, "--to must be earliest, latest"),
        ([*reset, "--topic", "ledger", "--to", "99999999999999999999", "--dry-run"], 2,
         "(at most 9223372036854775807), not '99999999999999999999'"),
        ([*reset, "--topic", "nosuch", "--to", "earliest"], 3, "topic 'nosuch' does not exist"),
        ([*reset, "--topic", "ledger", "--partition", "9", "--to", "earliest"], 3,
         "topic 'ledger' has no partition 9"),
        (["groups", "lag", "nosuchgroup", "--topic", "ledger"], 3,
         "group 'nosuchgroup' does not exist"),
    ]  # fmt: skip
    for args, code, said in cases:
        done = gengroup(*args, "--timeout", "60", bootstrap=served)
        assert done.returncode == code, (args, done.stderr)
        assert said in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    # Numbers out of range (or beyond what the wire carries) are argparse's
    # usage errors: the usage, then one line naming the option; no traceback.
    out_of_range = [
        ([*reset, "--topic", "ledger", "--offset", "-5"], "--offset: must be at least 0"),
        ([*reset, "--topic", "ledger", "--offset", str(2**63)], "at most 9223372036854775807"),
        ([*reset, "--topic", "ledger", "--partition", str(2**31), "--to", "earliest"],
         "--partition: must be at least 0 and at most 2147483647, got 2147483648"),
        (["topics", "create", "big", "--partitions", "99999999999"],
         "--partitions: must be at least 1 and at most 2147483647, got 99999999999"),
        (["topics", "create", "zero", "--partitions", "0"], "--partitions: must be at least 1"),
        (["topics", "add-partitions", "ledger", "--partitions", "99999999999"],
         "--partitions: must be at least 1 and at most 2147483647"),
    ]  # fmt: skip
    for args, said in out_of_range:
        done = gengroup(*args, bootstrap=served)
        assert done.returncode == 2, (args, done.stderr)
        assert said in done.stderr.splitlines()[-1] and "Traceback" not in done.stderr, done.stderr


def test_reset_offsets_prints_its_plan_in_partition_order(served: str) -> None:
    """The plan of ``--to`` came out in a random partition order (the offsets
    looked up over a set), and the progress view listed ``--partition`` as given."""
    created = gengroup("topics", "create", "wide", "--partitions", "12", bootstrap=served)
    assert created.returncode == 0, created.stderr
    reset = ["groups", "reset-offsets", "g", "--topic", "wide", "--dry-run"]
    for to in ("earliest", "latest", "0"):
        plan = gengroup(*reset, "--to", to, "--json", bootstrap=served)
        assert plan.returncode == 0, plan.stderr
        rows = json.loads(plan.stdout)["partitions"]
        assert [r["partition"] for r in rows] == [f"wide[{p}]" for p in range(12)], to
        text = gengroup(*reset, "--to", to, bootstrap=served, env=FORCED)
        assert text.returncode == 0, text.stderr
        shown = re.findall(r"wide\[(\d+)\]", text.stdout)
        assert shown == [str(p) for p in range(12)], text.stdout
        drawn = re.findall(r"wide\[(\d+)\].*planned", screen(text.stderr))
        assert drawn[-12:] == [str(p) for p in range(12)], text.stderr
    some = gengroup(
        *reset, "--partition", "7", "--partition", "2", "--to", "latest",
        bootstrap=served, env=FORCED,
    )  # fmt: skip
    assert some.returncode == 0, some.stderr
    assert re.findall(r"wide\[(\d+)\]", some.stdout) == ["2", "7"], some.stdout
    assert re.findall(r"wide\[(\d+)\].*planned", screen(some.stderr))[-2:] == ["2", "7"]


def test_reset_offsets_resets_every_topic_given(served: str) -> None:
    """A repeated ``--topic`` kept the last one only: the others were left
    as they were, and nothing said so."""
    for topic, count in (("left", 2), ("right", 3)):
        made = gengroup("topics", "create", topic, "--partitions", str(count), bootstrap=served)
        assert made.returncode == 0, made.stderr
    reset = ["groups", "reset-offsets", "two"]
    done = gengroup(
        *reset, "--topic", "right", "--topic", "left", "--topic", "right", "--to", "earliest",
        "--execute", "--json", bootstrap=served,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    expected = ["left[0]", "left[1]", "right[0]", "right[1]", "right[2]"]
    assert [p["partition"] for p in json.loads(done.stdout)["partitions"]] == expected
    lag = gengroup("groups", "lag", "two", "--json", bootstrap=served)
    assert [p["partition"] for p in json.loads(lag.stdout)["partitions"]] == expected
    assert {p["committed"] for p in json.loads(lag.stdout)["partitions"]} == {0}

    missing = gengroup(
        *reset, "--topic", "left", "--topic", "nowhere", "--to", "earliest", bootstrap=served
    )
    assert missing.returncode == 3, missing.stderr
    assert missing.stderr.strip().splitlines() == [
        "gengroup groups: UNKNOWN_TOPIC_OR_PARTITION (3): topic 'nowhere' does not exist"
    ]
    several = gengroup(
        *reset, "--topic", "left", "--topic", "right", "--partition", "0", "--to", "earliest",
        bootstrap=served,
    )  # fmt: skip
    assert several.returncode == 2, several.stderr
    assert several.stderr.strip().splitlines() == [
        "gengroup groups: --partition takes one --topic, not 2: reset the topics one at a time"
    ]
    one = gengroup(
        *reset, "--topic", "left", "--topic", "left", "--partition", "1", "--offset", "0",
        "--json", bootstrap=served,
    )  # fmt: skip
    assert one.returncode == 0, one.stderr
    assert [p["partition"] for p in json.loads(one.stdout)["partitions"]] == ["left[1]"]


def test_reset_offsets_only_previews_unless_told_to_execute(served: str) -> None:
    """As Kafka's ``kafka-consumer-groups``: without ``--execute`` the plan is
    printed and nothing is committed (it used to commit unless ``--dry-run``)."""
    seed(served, "careful", "watcher")  # committed 4 and 7, ends 10 and 10
    reset = ["groups", "reset-offsets", "watcher", "--topic", "careful", "--to", "earliest"]

    def committed() -> list[int]:
        lag = gengroup("groups", "lag", "watcher", "--json", bootstrap=served)
        return [p["committed"] for p in json.loads(lag.stdout)["partitions"]]

    preview = gengroup(*reset, "--json", bootstrap=served)
    assert preview.returncode == 0, preview.stderr
    plan = json.loads(preview.stdout)
    assert plan["dry_run"] is True and [p["offset"] for p in plan["partitions"]] == [0, 0]
    assert preview.stderr.splitlines() == [
        "gengroup groups: a preview, nothing was committed: add --execute to apply this plan"
    ]
    assert committed() == [4, 7]
    text = gengroup(*reset, bootstrap=served)
    assert text.returncode == 0 and "dry_run: True" in text.stdout, text
    assert "add --execute" in text.stderr and committed() == [4, 7]
    dry = gengroup(*reset, "--dry-run", "--json", bootstrap=served)
    assert dry.returncode == 0 and dry.stderr == "", dry.stderr
    assert json.loads(dry.stdout) == plan and committed() == [4, 7]

    both = gengroup(*reset, "--dry-run", "--execute", bootstrap=served)
    assert both.returncode == 2, both.stderr
    assert "argument --execute: not allowed with argument --dry-run" in both.stderr
    assert committed() == [4, 7]

    done = gengroup(*reset, "--execute", "--json", bootstrap=served)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert json.loads(done.stdout)["dry_run"] is False
    assert committed() == [0, 0]
