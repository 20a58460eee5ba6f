"""``gengroup consume``: as a group member or reading partitions directly, as a user runs it."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator

import anyio
import pytest
import trio
import trio.testing

from gengroup import Admin, Cluster, CorruptRecordError, Producer, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Intercepted, Respond
from gengroup.cli import build_parser, consume
from gengroup.cli._common import leaf
from gengroup.cli._progress import View
from gengroup.io.fetch import read_partition
from gengroup.producer import ProducerRecord
from gengroup.protocol.records import Record, encode_batch, with_base_offset
from gengroup.protocol.versions import ApiKey
from tests.cli.conftest import Target, ctrl_c_until_it_ends, gengroup
from tests.consumer import test_recordless_offsets as recordless
from tests.consumer.helpers import EMBEDDED_SETTINGS
from tests.embedded import damaged_batch, fetch_answer
from tests.embedded.test_cli import command


def seed(bootstrap: str, topic: str, partitions: int = 3, per_partition: int = 10) -> None:
    """``per_partition`` records ``p<P>-<I>`` (key ``k<I>``) in each partition."""

    async def main() -> None:
        async with Admin(bootstrap) as admin, Producer(admin.cluster) as producer:
            await admin.create_topics({topic: partitions})
            for p in range(partitions):
                await producer.send_many(
                    topic,
                    [
                        ProducerRecord(f"p{p}-{i}".encode(), f"k{i}".encode(), partition=p)
                        for i in range(per_partition)
                    ],
                )

    anyio.run(main)


def committed(bootstrap: str, group_id: str) -> dict[int, int]:
    async def main() -> dict[TopicPartition, int]:
        async with Admin(bootstrap) as admin:
            return await admin.fetch_offsets(group_id)

    return {tp.partition: off for tp, off in anyio.run(main).items()}


@contextlib.contextmanager
def running(cmd: list[str]) -> Iterator[subprocess.Popen[str]]:
    """``cmd`` started with pipes; killed if still running when the block ends (a failure)."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def as_json(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines()]


def group_reads_each_record_once(bootstrap: str, topic: str, group_id: str) -> None:
    seed(bootstrap, topic)
    first = gengroup(
        "consume", topic, "--group", group_id, "--from-beginning", "-n", "7", "--format", "json",
        bootstrap=bootstrap,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    printed = as_json(first.stdout)
    assert len(printed) == 7
    assert "assigned " + ", ".join(f"{topic}[{p}]" for p in range(3)) in first.stderr
    # Committed: exactly past the printed records of each partition.
    expected: dict[int, int] = {}
    for r in printed:
        p, offset = int(str(r["partition"])), int(str(r["offset"]))
        expected[p] = max(expected.get(p, 0), offset + 1)
    assert committed(bootstrap, group_id) == expected

    # --from-beginning: where nothing was committed (a partition nothing was printed from).
    rest = gengroup(
        "consume", topic, "--group", group_id, "--from-beginning", "--until-end",
        "--format", "json", bootstrap=bootstrap,
    )  # fmt: skip
    assert rest.returncode == 0, rest.stderr
    everything = printed + as_json(rest.stdout)
    assert sorted(str(r["value"]) for r in everything) == sorted(
        f"p{p}-{i}" for p in range(3) for i in range(10)
    )
    assert committed(bootstrap, group_id) == {0: 10, 1: 10, 2: 10}


def test_a_group_member_prints_and_commits_each_record_once(target: Target) -> None:
    group_reads_each_record_once(target.bootstrap, target.name("orders"), target.name("printer"))


def direct_reads(bootstrap: str, topic: str) -> None:
    seed(bootstrap, topic)
    everything = gengroup(
        "consume", topic, "--from-beginning", "--until-end", "--format", "json",
        bootstrap=bootstrap,
    )  # fmt: skip
    assert everything.returncode == 0, everything.stderr
    records = as_json(everything.stdout)
    assert sorted((r["partition"], r["offset"]) for r in records) == [
        (p, i) for p in range(3) for i in range(10)
    ]
    assert all(r["value"] == f"p{r['partition']}-{r['offset']}" for r in records)
    assert all(r["key"] == f"k{r['offset']}" and r["topic"] == topic for r in records)

    two = gengroup(
        "consume", topic, "--partition", "1", "--from-beginning", "-n", "2",
        "--key-separator", "=", bootstrap=bootstrap,
    )  # fmt: skip
    assert two.returncode == 0, two.stderr
    assert two.stdout == "k0=p1-0\nk1=p1-1\n"

    # From the end (the default) with --until-end there is nothing to print.
    nothing = gengroup("consume", topic, "--until-end", bootstrap=bootstrap)
    assert nothing.returncode == 0 and nothing.stdout == "", nothing


def test_reading_partitions_directly(target: Target) -> None:
    direct_reads(target.bootstrap, target.name("direct"))


def test_produce_then_consume_round_trips_json(served: str) -> None:
    seed(served, "source", partitions=2, per_partition=5)
    out = gengroup("consume", "source", "--from-beginning", "--until-end", "--format", "json",
                   bootstrap=served)  # fmt: skip
    assert (
        gengroup("topics", "create", "copy", "--partitions", "2", bootstrap=served).returncode == 0
    )
    copied = gengroup("produce", "copy", "--format", "json", "--json", bootstrap=served,
                      input=out.stdout)  # fmt: skip
    assert copied.returncode == 0, copied.stderr
    assert json.loads(copied.stdout)["partitions"] == {"0": 5, "1": 5}
    back = gengroup("consume", "copy", "--from-beginning", "--until-end", "--format", "json",
                    bootstrap=served)  # fmt: skip
    strip = [{k: v for k, v in r.items() if k not in ("topic", "timestamp")} for r in as_json(
        back.stdout)]  # fmt: skip
    assert sorted(strip, key=str) == sorted(
        [{k: v for k, v in r.items() if k not in ("topic", "timestamp")} for r in as_json(
            out.stdout)], key=str)  # fmt: skip


def test_json_output_round_trips_any_bytes_through_produce(served: str) -> None:
    """Bytes that are not UTF-8 were printed with backslash escapes, which
    produce sent as those characters: ``b"\\x80"`` and the text ``\\x80`` came
    out alike, and neither went back as it was."""
    every = bytes(range(256))
    sent = [
        ProducerRecord(
            every,
            every,
            [("bin", every), ("text", "é\\x80".encode()), ("none", None), ("bin", b"again")],
        ),  # a name may repeat
        ProducerRecord("é\\x80 text".encode(), b"\xff\xfe", [("bin", b"\x80")]),
        ProducerRecord(None, None),
        ProducerRecord(b"", b'{"base64": "AA=="}'),
    ]

    async def write() -> None:
        async with Admin(served) as admin, Producer(admin.cluster) as producer:
            await admin.create_topics({"binary": 1, "binary-copy": 1})
            await producer.send_many("binary", [ProducerRecord(r.value, r.key, r.headers, 0)
                                                for r in sent])  # fmt: skip

    anyio.run(write)
    out = gengroup("consume", "binary", "--from-beginning", "--until-end", "--json",
                   bootstrap=served)  # fmt: skip
    assert out.returncode == 0, out.stderr
    printed = as_json(out.stdout)
    assert printed[0]["headers"][1] == ["text", "é\\x80"]
    assert printed[0]["value"] == {"base64": base64.b64encode(every).decode()}
    assert printed[1]["value"] == "é\\x80 text"  # UTF-8 stays readable text
    copied = gengroup("produce", "binary-copy", "--format", "json", bootstrap=served,
                      input=out.stdout)  # fmt: skip
    assert copied.returncode == 0, copied.stderr

    async def read() -> list[Record]:
        async with Cluster(served) as cluster:
            return await read_partition(cluster, TopicPartition("binary-copy", 0), 0, None)

    got = anyio.run(read)
    assert [(r.key, r.value, list(r.headers)) for r in got] == [
        (r.key, r.value, list(r.headers)) for r in sent
    ]


def test_table_format_prints_a_header_and_a_row_per_record(served: str) -> None:
    seed(served, "tabled", partitions=1, per_partition=3)
    done = gengroup("consume", "tabled", "--from-beginning", "--until-end", "--format", "table",
                    bootstrap=served)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["partition", "offset", "timestamp", "key", "value"]
    assert [(ln.split()[0], ln.split()[1], ln.split()[-1]) for ln in lines[1:]] == [
        ("tabled[0]", str(i), f"p0-{i}") for i in range(3)
    ]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_a_group_member_cleanly_with_its_commit(served: str, sig: int) -> None:
    seed(served, "live", partitions=2, per_partition=4)
    group_id = f"live-{sig}"
    cmd = command("consume", "live", "--group", group_id, "--from-beginning",
                  "--bootstrap", served)  # fmt: skip
    with running(cmd) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        lines = [proc.stdout.readline() for _ in range(8)]
        assert sorted(lines) == sorted(f"p{p}-{i}\n" for p in range(2) for i in range(4))
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0
        assert proc.stdout.read() == ""
        err = proc.stderr.read()
        assert "Traceback" not in err and err.startswith("generation "), err
    assert committed(served, group_id) == {0: 4, 1: 4}


def test_a_signal_ends_a_direct_reader_cleanly(served: str) -> None:
    seed(served, "tail", partitions=1, per_partition=2)
    cmd = command("consume", "tail", "--from-beginning", "--bootstrap", served)
    with running(cmd) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert [proc.stdout.readline() for _ in range(2)] == ["p0-0\n", "p0-1\n"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert proc.stderr.read() == ""


def test_missing_topics_and_bad_usage(served: str) -> None:
    missing = gengroup("consume", "nope", "--until-end", bootstrap=served)
    assert missing.returncode == 3 and "'nope' does not exist" in missing.stderr, missing
    member = gengroup("consume", "nope", "--group", "g", "-n", "1", bootstrap=served)
    assert member.returncode == 3 and "Traceback" not in member.stderr, member
    seed(served, "two", partitions=2, per_partition=1)
    no_partition = gengroup("consume", "two", "--partition", "5", bootstrap=served)
    assert no_partition.returncode == 3 and "no partition 5" in no_partition.stderr
    both = gengroup("consume", "two", "--group", "g", "--partition", "0", bootstrap=served)
    assert both.returncode == 2 and "--partition" in both.stderr
    # --json is --format json (it used to be ignored), and conflicts with another format.
    json_out = gengroup("consume", "two", "--until-end", "--from-beginning", "--json",
                        bootstrap=served)  # fmt: skip
    assert sorted(str(r["value"]) for r in as_json(json_out.stdout)) == ["p0-0", "p1-0"]
    table = gengroup("consume", "two", "--json", "--format", "table", bootstrap=served)
    assert table.returncode == 2 and "--json is --format json" in table.stderr, table


def test_a_reader_gone_ends_the_command_on_an_idle_topic(served: str) -> None:
    """``consume ... | head -2`` where nothing more arrives: no write finds the
    pipe closed, and the command used to wait for records forever. It ends
    within a second of the reader leaving, cleanly."""
    seed(served, "quiet", partitions=1, per_partition=2)
    cmd = command("consume", "quiet", "--group", "quiet-head", "--from-beginning",
                  "--bootstrap", served)  # fmt: skip
    with running(cmd) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert [proc.stdout.readline() for _ in range(2)] == ["p0-0\n", "p0-1\n"]
        proc.stdout.close()  # as head does once it has its lines
        assert proc.wait(timeout=30) == 0
        assert "Traceback" not in proc.stderr.read()
    assert committed(served, "quiet-head") == {0: 2}


@pytest.mark.parametrize("group", [["--group", "outage"], []], ids=["member", "direct"])
def test_a_broker_gone_ends_the_command_after_its_timeout(group: list[str]) -> None:
    """A member in a generation used to notice a dead broker only when its
    session timed out (45 s) whatever --timeout said: the command now ends
    once the cluster has been unreachable for --timeout, with the one line of
    an unreachable cluster and exit code 1."""
    broker = subprocess.Popen(
        command("serve", "--initial-rebalance-delay-ms", "0"),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert broker.stdout is not None
        bootstrap = broker.stdout.readline().strip().removeprefix("bootstrap ")
        seed(bootstrap, "doomed-data", partitions=1, per_partition=1)
        cmd = command("consume", "doomed-data", *group, "--from-beginning", "--timeout", "3",
                      "--bootstrap", bootstrap, "--config", os.devnull)  # fmt: skip
        with running(cmd) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            assert proc.stdout.readline() == "p0-0\n"
            broker.kill()
            broker.wait(timeout=30)
            # The session timeout is 45 s: well before it, the command has ended.
            assert proc.wait(timeout=30) == 1
            err = proc.stderr.read()
            assert "Traceback" not in err, err
            assert err.splitlines()[-1].startswith("gengroup consume: "), err
            assert "connection refused" in err.splitlines()[-1], err
    finally:
        broker.kill()
        broker.wait(timeout=30)
        assert broker.stdout is not None
        broker.stdout.close()


@pytest.mark.parametrize("group", [["--group", "late"], []], ids=["member", "direct"])
def test_a_cluster_coming_up_after_the_command_started_is_waited_for(group: list[str]) -> None:
    """Started with (or just before) its broker: the first metadata request
    was not retried, and the command ended at once ("cluster unreachable for
    0.0 s") whatever --timeout said. It now waits, as produce and topics do."""
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    cmd = command("consume", "late-data", *group, "--from-beginning", "-n", "1",
                  "--timeout", "60", "--bootstrap", bootstrap, "--config", os.devnull)  # fmt: skip
    with running(cmd) as proc:
        time.sleep(2)  # a few failed attempts
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        broker = subprocess.Popen(
            command("serve", "--port", str(port), "--topic", "late-data:1",
                    "--initial-rebalance-delay-ms", "0"),
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            assert broker.stdout is not None
            assert broker.stdout.readline().strip() == f"bootstrap {bootstrap}"
            sent = gengroup("produce", "late-data", bootstrap=bootstrap, input="hello\n")
            assert sent.returncode == 0, sent.stderr
            assert proc.stdout is not None and proc.stderr is not None
            assert proc.wait(timeout=60) == 0, proc.stderr.read()
            assert proc.stdout.read() == "hello\n"
            assert "Traceback" not in proc.stderr.read()
        finally:
            broker.terminate()
            broker.wait(timeout=30)
            assert broker.stdout is not None
            broker.stdout.close()


@pytest.mark.parametrize("group", [["--group", "never"], []], ids=["member", "direct"])
def test_a_cluster_never_reachable_ends_the_command_after_its_timeout(group: list[str]) -> None:
    """No broker at the address: exit code 1 with one line naming the address and
    why it failed, once --timeout passed (it used to be at the first attempt)."""
    started = time.monotonic()
    down = gengroup("consume", "t", *group, "--timeout", "4", bootstrap="127.0.0.1:1")
    assert time.monotonic() - started >= 4
    assert down.returncode == 1, down.stderr
    assert down.stderr.startswith("gengroup consume: cluster unreachable"), down.stderr
    assert "127.0.0.1:1: connection refused" in down.stderr
    assert len(down.stderr.splitlines()) == 1, down.stderr


@pytest.mark.parametrize("until_end", [False, True])
async def test_a_direct_reader_prints_the_records_before_damaged_contents_then_fails(
    autojump_clock: trio.testing.MockClock, until_end: bool
) -> None:
    """Offsets 0-2 sound, 3-5 with a malformed record under a correct CRC, 6-8
    sound, in one answer: reading without a group (records decoded as they
    are fetched) prints 0-2, then ends with the damage, naming the partition
    and the offset, at once (not retried until --timeout). The damage used to
    hide 0-2."""
    sound = with_base_offset(encode_batch([(None, b"x%d" % i, (), 0) for i in range(3)]), 0)
    damaged = damaged_batch(3)
    after = with_base_offset(encode_batch([(None, b"z", (), 0)] * 3), 6)

    def answer(call: Intercepted) -> Respond:
        position = call.request.topics[0].partitions[0].fetch_offset
        data = (sound if position < 3 else b"") + bytes(damaged) + after
        return fetch_answer(call, data, 9)

    async with FakeCluster(topics={"t": 1}) as broker:
        async with Producer(broker.bootstrap) as producer:  # the end offset --until-end reads
            await producer.send_many("t", [b"r"] * 9)
        broker.control(ApiKey.FETCH, answer)
        argv = ["consume", "t", "--from-beginning", "--format", "json", "--timeout", "60"]
        args = build_parser().parse_args(argv + (["--until-end"] if until_end else []))
        out = io.BytesIO()
        printer = consume.Printer("json", None, None, out=out)
        positions = consume._Positions(View("partitions", enabled=False))
        started = trio.current_time()
        async with Cluster(broker.bootstrap, unreachable_timeout=60) as cluster:
            with pytest.raises(BaseException) as raised:
                await consume._read_directly(args, printer, anyio.Event(), cluster, positions)
        assert trio.current_time() - started < 10
    said = leaf(raised.value)  # what the command's error line says
    assert isinstance(said, CorruptRecordError), raised.value
    assert str(said).startswith("Fetch t[0]: record batch at offset 3: negative"), said
    printed = as_json(out.getvalue().decode())
    assert [(r["offset"], r["value"]) for r in printed] == [(i, f"x{i}") for i in range(3)]


async def member_until_end(broker: FakeCluster, *more: str) -> io.BytesIO:
    """`gengroup consume t --group g --until-end --format json` (and ``more``)
    read as a group member on ``broker``: what it printed."""
    argv = ["consume", "t", "--group", "g", "--until-end", *more]
    args = build_parser().parse_args([*argv, "--format", "json", "--timeout", "60"])
    out = io.BytesIO()
    printer = consume.Printer("json", None, None, out=out)
    positions = consume._Positions(View("partitions", enabled=False))
    with trio.fail_after(30):
        await consume._read_as_member(
            args, printer, anyio.Event(), broker.bootstrap, EMBEDDED_SETTINGS, positions
        )
    return out


async def test_a_group_member_reaches_the_end_past_markers_and_aborted_records(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """`consume --group G --from-beginning --until-end` on a partition whose
    last offsets hold a transaction marker, an aborted transaction and its
    marker (offsets 3-7 of 8): it prints 0-2, ends, and commits 8. It used to
    wait for a batch that never came (and to commit 3)."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as broker:
        async with Producer(broker.bootstrap) as producer:  # the end offset --until-end reads
            await producer.send_many("t", [b"r"] * recordless.END)
        broker.control(ApiKey.FETCH, recordless.fetch_answer)
        out = await member_until_end(broker, "--from-beginning")
        assert broker.committed_offsets("g") == {TopicPartition("t", 0): recordless.END}
    assert [r["offset"] for r in as_json(out.getvalue().decode())] == [0, 1, 2]


async def test_a_group_member_starting_right_before_markers_commits_past_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The group committed 3 before (offsets 3-7 hold a transaction marker, an
    aborted transaction and its marker): `consume --group G --until-end`
    prints nothing, ends, and commits 8, so the next run does not fetch them
    again. Nothing was handed out, so nothing was marked, and it committed 3
    again."""
    tp = TopicPartition("t", 0)
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as broker:
        async with Producer(broker.bootstrap) as producer:  # the end offset --until-end reads
            await producer.send_many("t", [b"r"] * recordless.END)
        broker.control(ApiKey.FETCH, recordless.fetch_answer)
        async with Admin(broker.bootstrap) as admin:
            await admin.reset_offsets("g", [tp], offset=3)
        out = await member_until_end(broker)
        assert broker.committed_offsets("g") == {tp: recordless.END}
    assert out.getvalue() == b""


@pytest.mark.parametrize("group", [False, True])
def test_ctrl_c_while_the_cluster_is_unreachable_ends_the_command_at_once(group: bool) -> None:
    """A wrong address: Ctrl-C ends the command at once (exit 0, nothing read), not
    once ``--timeout`` has passed (it used to wait for all of it)."""
    cmd = command("consume", "t", "--bootstrap", f"127.0.0.1:{free_port()}", "--timeout", "120")
    if group:
        cmd += ["--group", "g"]
    code, out, err = ctrl_c_until_it_ends(cmd)  # within half the --timeout
    assert code == 0
    assert (out, err) == ("", "")
