"""``gengroup produce``: lines from stdin or a file become records, as a user runs it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import anyio
import pytest

from gengroup import Admin, Cluster, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Delay, Intercepted
from gengroup.cli import build_parser, produce
from gengroup.io.fetch import read_partition
from gengroup.partitioner import partition_for_key
from gengroup.protocol.records import Record
from gengroup.protocol.versions import ApiKey
from tests.cli.conftest import Target, ctrl_c_until_it_ends, gengroup
from tests.cli.test_consume import free_port
from tests.embedded.test_cli import command


def create(bootstrap: str, topic: str, partitions: int) -> None:
    async def main() -> None:
        async with Admin(bootstrap) as admin:
            await admin.create_topics({topic: partitions})

    anyio.run(main)


def read_back(bootstrap: str, topic: str, partitions: int) -> dict[int, list[Record]]:
    """Every record of every partition, by partition."""

    async def main() -> dict[int, list[Record]]:
        async with Cluster(bootstrap) as cluster:
            return {
                p: await read_partition(cluster, TopicPartition(topic, p), 0, None)
                for p in range(partitions)
            }

    return anyio.run(main)


def keyed_lines_go_to_their_key_partition(bootstrap: str, topic: str) -> None:
    create(bootstrap, topic, 3)
    lines = "".join(f"user-{i % 7}|order {i}\n" for i in range(60))
    done = gengroup(
        "produce", topic, "--key-separator", "|", "--compression", "gzip", "--json",
        bootstrap=bootstrap, input=lines,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["records"] == 60 and summary["topic"] == topic
    got = read_back(bootstrap, topic, 3)
    assert {str(p): len(rs) for p, rs in got.items() if rs} == summary["partitions"]
    seen = []
    for p, records in got.items():
        for r in records:
            assert r.key is not None and r.value is not None
            assert partition_for_key(r.key, 3) == p
            seen.append((r.key.decode(), r.value.decode()))
    assert sorted(seen) == sorted((f"user-{i % 7}", f"order {i}") for i in range(60))
    # Per key, the order of the input.
    for p, records in got.items():
        for key in {r.key for r in records}:
            numbers = [int(r.value.split()[1]) for r in records if r.key == key and r.value]
            assert numbers == sorted(numbers), (p, key)


def test_raw_lines_with_keys_go_to_their_key_partition(target: Target) -> None:
    keyed_lines_go_to_their_key_partition(target.bootstrap, target.name("orders"))


def test_json_lines_carry_key_value_headers_and_partition(served: str) -> None:
    create(served, "events", 2)
    lines = "\n".join(
        [
            json.dumps({"key": "k", "value": "v1", "headers": {"h": "1", "n": None}}),
            "",
            json.dumps({"value": {"nested": [1, 2]}, "partition": 1}),
            json.dumps({"key": "gone", "value": None, "partition": 0, "offset": 99}),
            json.dumps({"value": "v2", "partition": 0, "headers": [["h", "1"], ["h", "2"]]}),
        ]
    )
    done = gengroup(
        "produce", "events", "--format", "json", "--partition", "0", "--acks", "1",
        "--compression", "zstd", bootstrap=served, input=lines,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr.strip() == "produced 4 records to events (2 partitions; 0: 3, 1: 1)"
    got = read_back(served, "events", 2)
    assert [(r.key, r.value, r.headers) for r in got[0]] == [
        (b"k", b"v1", (("h", b"1"), ("n", None))),
        (b"gone", None, ()),
        (None, b"v2", (("h", b"1"), ("h", b"2"))),  # a name may repeat
    ]
    assert [(r.key, r.value) for r in got[1]] == [(None, b'{"nested":[1,2]}')]


def test_a_file_to_one_partition_without_acks(served: str, tmp_path: Path) -> None:
    create(served, "audit", 3)
    path = tmp_path / "lines.txt"
    path.write_bytes(b"first\r\n\nthird")
    done = gengroup(
        "produce", "audit", "--file", str(path), "--partition", "2", "--acks", "0",
        "--json", bootstrap=served,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["partitions"] == {"2": 3}

    async def values() -> list[bytes | None]:
        async with Cluster(served) as cluster:
            # acks=0: wait until the broker wrote all three.
            records = await read_partition(cluster, TopicPartition("audit", 2), 0, 3)
            return [r.value for r in records]

    assert anyio.run(values) == [b"first", b"", b"third"]


def test_bad_input_and_bad_usage_say_so_in_one_line(served: str, tmp_path: Path) -> None:
    no_sep = gengroup("produce", "t", "--key-separator", ":", bootstrap=served, input="a:1\nb\n")
    assert no_sep.returncode == 1
    assert no_sep.stderr.strip() == "gengroup produce: line 2: no key separator ':'"
    not_json = gengroup("produce", "t", "--format", "json", bootstrap=served, input="{nope\n")
    assert not_json.returncode == 1 and "line 1: not JSON" in not_json.stderr
    pairs = gengroup("produce", "t", "--format", "json", bootstrap=served,
                     input='{"headers": [["a"]]}\n')  # fmt: skip
    assert pairs.returncode == 1
    assert "line 1: headers must be a list of [name, value] pairs or an object" in pairs.stderr
    lines = '{"value": "ok"}\n{"key": {"base64": "not base64!"}}\n'
    bad_base64 = gengroup("produce", "t", "--format", "json", bootstrap=served, input=lines)
    assert bad_base64.returncode == 1
    assert bad_base64.stderr.startswith("gengroup produce: line 2: key: base64 expected (")
    assert "Traceback" not in not_json.stderr
    # true is a bool, an int in Python: it used to reach the producer, whose
    # TypeError came out as a traceback.
    flag = gengroup("produce", "t", "--format", "json", bootstrap=served,
                    input='{"value": "a", "partition": true}\n')  # fmt: skip
    assert (flag.returncode, flag.stderr) == (
        1,
        "gengroup produce: line 1: partition must be a non-negative integer, got true\n",
    )
    # A lone surrogate has no UTF-8 form: the error used to name no line.
    lines = '{"value": "ok"}\n{"value": "\\ud800"}\n'
    surrogate = gengroup("produce", "t", "--format", "json", bootstrap=served, input=lines)
    assert (surrogate.returncode, surrogate.stderr) == (
        1,
        "gengroup produce: line 2: value: not UTF-8 text "
        "(surrogates not allowed: '\\ud800' at character 0)\n",
    )
    missing = gengroup("produce", "t", "--file", str(tmp_path / "none"), bootstrap=served)
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    both = gengroup("produce", "t", "--format", "json", "--key-separator", ":", bootstrap=served)
    assert both.returncode == 2
    codec = gengroup("produce", "t", "--compression", "brotli", bootstrap=served)
    assert codec.returncode == 2


def test_the_lines_before_an_unreadable_one_are_sent(served: str, tmp_path: Path) -> None:
    """docs/cli.md: "an unreadable line ends the command with exit code 1; the
    records before it were sent". The good lines read with it (in the same
    part of up to 1000 lines), the parts waiting to be sent and the records
    queued in the producer used to be dropped: 0 of 2, or some thousands of
    20,000, reached the topic. None after it is sent."""
    create(served, "few", 1)
    few = gengroup("produce", "few", "--key-separator", ":", bootstrap=served,
                   input="k:1\nk:2\nbad\nk:4\n")  # fmt: skip
    assert (few.returncode, few.stderr) == (1, "gengroup produce: line 3: no key separator ':'\n")
    assert [r.value for r in read_back(served, "few", 1)[0]] == [b"1", b"2"]

    # Many parts of 1000 lines, several reads of the file, then the bad line.
    create(served, "many", 2)
    path = tmp_path / "many.jsonl"
    good = [json.dumps({"key": f"k{i % 5}", "value": str(i)}) for i in range(20_000)]
    path.write_text("\n".join([*good, "[1, 2]", *good[:10]]) + "\n")
    many = gengroup("produce", "many", "--format", "json", "--file", str(path), bootstrap=served)
    assert (many.returncode, many.stderr) == (
        1,
        "gengroup produce: line 20001: expected a JSON object\n",
    )
    got = read_back(served, "many", 2)
    values = [r.value for records in got.values() for r in records]
    assert sorted(int(v or b"") for v in values) == list(range(20_000))


async def test_an_unreadable_line_waits_for_the_records_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``(echo k:1; sleep 1; echo bad) | gengroup produce T --key-separator :``:
    the bad line arrives while the first record's Produce waits at the
    broker. The error used to cancel that send and close the producer
    without a flush: the record was failed, not delivered."""
    monkeypatch.setenv("GENGROUP_PROGRESS", "never")
    produce_arrived = anyio.Event()

    def slow(call: Intercepted) -> Delay:
        produce_arrived.set()
        return Delay(1.0)

    async with FakeCluster(topics={"t": 1}) as cluster:
        cluster.control(ApiKey.PRODUCE, slow)
        argv = ["produce", "t", "--key-separator", ":", "--bootstrap", cluster.bootstrap]
        args = build_parser().parse_args(argv)
        r, w = os.pipe()
        os.write(w, b"k:1\n")

        async def bad_line_later() -> None:
            await produce_arrived.wait()
            os.write(w, b"bad\n")
            os.close(w)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(bad_line_later)
                with open(r, "rb") as stream:  # noqa: ASYNC230 -- a pipe written above
                    with pytest.raises(ValueError, match=r"^line 2: no key separator"):
                        await produce._produce(args, stream)
        finally:
            with contextlib.suppress(OSError):
                os.close(w)
        assert cluster.high_watermark("t") == 1


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"partition": true}', "line 7: partition must be a non-negative integer, got true"),
        ('{"partition": 1.0}', "line 7: partition must be a non-negative integer, got 1.0"),
        ('{"partition": -1}', "line 7: partition must be a non-negative integer, got -1"),
        ('{"key": "\\udc80"}', "line 7: key: not UTF-8 text (surrogates not allowed: "),
        ('{"headers": {"h": "\\ud800"}}', "line 7: header 'h': not UTF-8 text"),
        ('{"headers": [["\\ud800", "v"]]}', "line 7: header name '\\ud800': not UTF-8 text"),
    ],
)
def test_a_json_line_the_producer_would_refuse_is_an_error_naming_the_line(
    line: str, message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        produce.parse_json_line(line.encode(), 7)
    assert str(raised.value).startswith(message)


def test_a_lone_surrogate_inside_a_json_value_is_sent_escaped() -> None:
    record = produce.parse_json_line(b'{"value": {"a": "\\ud800"}, "partition": 0}', 1)
    assert record is not None
    assert (record.value, record.partition) == (b'{"a":"\\ud800"}', 0)


def test_an_unreachable_broker_is_one_line() -> None:
    down = gengroup("produce", "t", "--timeout", "1", bootstrap="127.0.0.1:1", input="x\n")
    assert down.returncode == 1, down
    assert "Traceback" not in down.stderr and "connection refused" in down.stderr
    assert len(down.stderr.strip().splitlines()) == 1, down.stderr


def test_empty_input_still_asks_the_cluster_for_the_topic(served: str) -> None:
    """No input used to make no request: a wrong address or a missing topic
    was "produced 0 records", exit code 0."""
    create(served, "present", 1)
    ok = gengroup("produce", "present", bootstrap=served)
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr == "produced 0 records to present (0 partitions; none)\n"
    for fmt, blank in (("raw", ""), ("json", "\n\n")):
        missing = gengroup("produce", "absent", "--format", fmt, bootstrap=served, input=blank)
        assert missing.returncode == 3, missing.stderr
        assert missing.stderr == (
            "gengroup produce: UNKNOWN_TOPIC_OR_PARTITION (3): topic 'absent' does not exist\n"
        )
    listed = json.loads(gengroup("topics", "list", "--json", bootstrap=served).stdout)
    assert "absent" not in [t["topic"] for t in listed]  # asked, not created
    down = gengroup("produce", "present", "--timeout", "1", bootstrap="127.0.0.1:1")
    assert down.returncode == 1, down.stderr
    assert "connection refused" in down.stderr and len(down.stderr.splitlines()) == 1


def test_timeout_inf_is_no_limit(served: str) -> None:
    """``--timeout`` is the producer's delivery_timeout and max_block, which
    take ``inf`` (no limit): the check refusing nan, 0 and negatives before
    connecting refused it too."""
    create(served, "unbounded", 1)
    done = gengroup("produce", "unbounded", "--timeout", "inf", bootstrap=served, input="a\nb\n")
    assert done.returncode == 0, done.stderr
    assert done.stderr == "produced 2 records to unbounded (1 partition; 0: 2)\n"
    empty = gengroup("produce", "unbounded", "--timeout", "inf", bootstrap=served)
    assert empty.returncode == 0, empty.stderr
    assert empty.stderr == "produced 0 records to unbounded (0 partitions; none)\n"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_the_input_and_what_was_read_is_sent_and_said(served: str, sig: int) -> None:
    """``tail -f log | gengroup produce T`` ended with Ctrl-C (or SIGTERM): the
    lines read are sent and the summary says so; no traceback. (Ctrl-C used
    to abort the interpreter: the abandoned read of stdin held its lock.)"""
    topic = f"tail-{sig}"
    create(served, topic, 1)
    cmd = command("produce", topic, "--bootstrap", served)
    with subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As from a terminal, whatever the test runner's own disposition.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as proc:
        try:
            assert proc.stdin is not None and proc.stderr is not None
            proc.stdin.write("one\ntwo\n")
            proc.stdin.flush()  # and left open, as tail -f leaves it
            deadline = time.monotonic() + 60
            while sum(map(len, read_back(served, topic, 1).values())) < 2:
                assert time.monotonic() < deadline, "the lines were not sent"
                time.sleep(0.2)
            proc.send_signal(sig)
            assert proc.wait(timeout=60) == 0
            assert proc.stderr.read() == f"produced 2 records to {topic} (1 partition; 0: 2)\n"
        finally:
            if proc.poll() is None:
                proc.kill()


async def test_stopping_the_input_while_sends_wait_loses_no_line_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The signal ends the reading, not the sending: 8,000 lines read in one go
    while the broker takes 1 s per Produce, the input stopped as the first
    Produce waits at the broker -- every line read is sent (cancelling the
    sends with the reading lost 3,000 of them)."""
    monkeypatch.setenv("GENGROUP_PROGRESS", "never")
    produce_arrived = anyio.Event()

    async def stop_soon(given: produce._Input) -> None:
        # The one read of the pipe returned every line before the first
        # Produce was sent, however slowly a loaded machine runs.
        await produce_arrived.wait()
        given.stop()

    def slow(call: Intercepted) -> Delay:
        produce_arrived.set()
        return Delay(1.0)

    monkeypatch.setattr(produce, "_stop_on_signal", stop_soon)
    async with FakeCluster(topics={"t": 1}) as cluster:
        cluster.control(ApiKey.PRODUCE, slow)
        args = build_parser().parse_args(["produce", "t", "--bootstrap", cluster.bootstrap])
        r, w = os.pipe()
        os.write(w, b"x\n" * 8000)
        try:
            with open(r, "rb") as stream:  # noqa: ASYNC230 -- a pipe written above
                counts = await produce._produce(args, stream)
        finally:
            os.close(w)
        assert sum(counts.values()) == 8000
        assert cluster.high_watermark("t") == 8000


async def test_empty_input_waits_out_a_topic_without_a_leader_and_names_a_missing_one(
    autojump_clock: object,
) -> None:
    """A topic just created has no leader for a moment (LEADER_NOT_AVAILABLE,
    retriable): it was said not to exist, exit 1."""
    from gengroup._errors import UnknownTopicOrPartition
    from gengroup.broker.faults import Fail
    from gengroup.cli._metadata import topic_metadata

    async with FakeCluster(topics={"t": 1}) as cluster, Cluster(cluster.bootstrap) as client:
        cluster.control(ApiKey.METADATA, lambda call: Fail(5), once=True)
        await topic_metadata(client, ["t"], 5.0)
        with pytest.raises(UnknownTopicOrPartition, match="'nope' does not exist"):
            await topic_metadata(client, ["t", "nope"], 5.0)


def test_ctrl_c_before_any_record_ends_the_command_at_once() -> None:
    """A wrong address and input that has sent nothing yet: Ctrl-C ends the
    input, and the command at once (it asked the cluster for the topic first,
    for up to ``--timeout``)."""
    cmd = command("produce", "t", "--bootstrap", f"127.0.0.1:{free_port()}", "--timeout", "120")
    code, _, err = ctrl_c_until_it_ends(cmd)  # within half the --timeout
    assert code == 0, err
    assert err == "produced 0 records to t (0 partitions; none)\n", err
