"""Progress views of the long commands: drawn on stderr when forced (``GENGROUP_PROGRESS=always``,
as on a terminal), absent otherwise when stderr is not a terminal, and never on stdout."""

from __future__ import annotations

import json
import re

import anyio

from gengroup import Admin, TopicPartition
from tests.cli.conftest import gengroup
from tests.cli.test_consume import seed

FORCED = {"GENGROUP_PROGRESS": "always"}
_STYLE = re.compile(r"\x1b\[[0-9;]*m")
_MOVE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def screen(stderr: str) -> str:
    """The lines drawn on stderr: without colours, a line at each cursor movement."""
    return _MOVE.sub("\n", _STYLE.sub("", stderr))


def test_produce_shows_records_sent_acked_and_the_rate(served: str) -> None:
    lines = "".join(f"line {i}\n" for i in range(2500))
    shown = gengroup(
        "produce", "progress-produce", "--json", input=lines, bootstrap=served, env=FORCED
    )
    assert shown.returncode == 0, shown.stderr
    # stdout holds the JSON summary only; the view went to stderr.
    assert json.loads(shown.stdout)["records"] == 2500
    view = screen(shown.stderr)
    assert "produce progress-produce" in view
    assert re.search(r"2,500 sent\s+2,500 acked\s+[\d,]+ records/s", view), view
    # Not forced, stderr a pipe: no view, and with --json nothing on stderr at all.
    quiet = gengroup("produce", "progress-produce", "--json", input=lines, bootstrap=served)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert json.loads(quiet.stdout)["records"] == 2500


def test_consume_until_end_shows_each_partition_against_its_end(served: str) -> None:
    seed(served, "progress-consume", partitions=3, per_partition=40)
    shown = gengroup(
        "consume", "progress-consume", "--from-beginning", "--until-end",
        bootstrap=served, env=FORCED,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert len(shown.stdout.splitlines()) == 120  # the records, and only them
    view = screen(shown.stderr)
    for p in range(3):
        assert re.search(rf"progress-consume\[{p}\].*40/40", view), view
    # As a group member, from the group's committed offsets (none: the beginning).
    member = gengroup(
        "consume", "progress-consume", "--group", "progress", "--from-beginning", "--until-end",
        bootstrap=served, env=FORCED,
    )  # fmt: skip
    assert member.returncode == 0, member.stderr
    assert len(member.stdout.splitlines()) == 120
    view = screen(member.stderr)
    assert "generation 1" in view
    for p in range(3):
        assert re.search(rf"progress-consume\[{p}\].*40/40", view), view
    # Without --until-end there is no end to show progress against.
    limited = gengroup(
        "consume", "progress-consume", "--from-beginning", "-n", "5", bootstrap=served, env=FORCED
    )
    assert limited.returncode == 0 and "/40" not in screen(limited.stderr), limited.stderr


def test_topics_create_and_add_partitions_show_partitions_with_a_leader(served: str) -> None:
    created = gengroup(
        "topics", "create", "progress-topic", "--partitions", "3", "--json",
        bootstrap=served, env=FORCED,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout) == {"created": "progress-topic", "partitions": 3}
    assert re.search(r"create progress-topic.*3/3 partitions served", screen(created.stderr))
    grown = gengroup(
        "topics", "add-partitions", "progress-topic", "--partitions", "5",
        bootstrap=served, env=FORCED,
    )  # fmt: skip
    assert grown.returncode == 0, grown.stderr
    assert re.search(r"add-partitions progress-topic.*5/5 partitions served", screen(grown.stderr))
    assert "partitions: 5" in grown.stdout


def test_topics_create_with_the_brokers_default_count_shows_the_count_it_got(
    served: str,
) -> None:
    """``--partitions -1`` showed "-1/-1 partitions served"."""
    created = gengroup(
        "topics", "create", "progress-default", "--partitions", "-1", "--json",
        bootstrap=served, env=FORCED,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    got = json.loads(created.stdout)["partitions"]
    assert got >= 1
    view = screen(created.stderr)
    assert re.search(rf"create progress-default.*{got}/{got} partitions served", view), view
    assert "-1" not in view, view


def test_reset_offsets_shows_each_partition(served: str) -> None:
    seed(served, "progress-reset", partitions=2, per_partition=10)

    async def commit() -> None:
        async with Admin(served) as admin:
            tps = [TopicPartition("progress-reset", p) for p in (0, 1)]
            await admin.reset_offsets("resetting", tps, offset=6)

    anyio.run(commit)
    reset = gengroup(
        "groups", "reset-offsets", "resetting", "--topic", "progress-reset", "--to", "earliest",
        "--execute", "--json", bootstrap=served, env=FORCED,
    )  # fmt: skip
    assert reset.returncode == 0, reset.stderr
    assert [p["offset"] for p in json.loads(reset.stdout)["partitions"]] == [0, 0]
    view = screen(reset.stderr)
    for p in (0, 1):
        assert re.search(rf"progress-reset\[{p}\].*6 -> 0 committed", view), view
    dry = gengroup(
        "groups", "reset-offsets", "resetting", "--topic", "progress-reset", "--to", "latest",
        "--dry-run", bootstrap=served, env=FORCED,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert re.search(r"progress-reset\[1\].*0 -> 10 planned \(dry run\)", screen(dry.stderr))


def test_a_bad_progress_mode_is_a_usage_error(served: str) -> None:
    bad = gengroup("topics", "create", "x", bootstrap=served, env={"GENGROUP_PROGRESS": "loud"})
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.strip() == (
        "gengroup topics: GENGROUP_PROGRESS must be auto, always or never, not 'loud'"
    )
