"""``gengroup serve``: the standalone embedded broker."""

from __future__ import annotations

import argparse
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from gengroup.cli import build_parser
from gengroup.cli._common import EXIT_INTERRUPTED, run
from gengroup.cli.serve import parse_topic
from gengroup.io.cluster import Cluster


def command(*args: str) -> list[str]:
    script = Path(sys.executable).with_name("gengroup")
    if script.exists():
        return [str(script), *args]
    return [
        sys.executable,
        "-c",
        "import sys; from gengroup.cli import main; sys.exit(main())",
        *args,
    ]


def test_parse_topic() -> None:
    assert parse_topic("payments:6") == ("payments", 6)
    assert parse_topic("plain") == ("plain", 1)
    for bad in ("x:0", ":3", "x:-1", "x:y", "a:b:2", "a b:1", "..:1"):  # names Kafka refuses too
        with pytest.raises(argparse.ArgumentTypeError):
            parse_topic(bad)


def test_parser_has_the_serve_subcommand() -> None:
    args = build_parser().parse_args(["serve", "--brokers", "2", "--topic", "t:3"])
    assert (args.command, args.brokers, args.topics, args.port) == ("serve", 2, [("t", 3)], 0)
    with pytest.raises(SystemExit):
        build_parser().parse_args([])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_serve_prints_bootstrap_and_stops_cleanly(sig: signal.Signals) -> None:
    cmd = command("serve", "--brokers", "2", "--topic", "payments:3", "--topic", "audit:1")
    async with await anyio.open_process(cmd) as process:
        assert process.stdout is not None
        with anyio.fail_after(20):
            line = b""
            while not line.endswith(b"\n"):
                line += await process.stdout.receive(1)
        text = line.decode().rstrip("\n")
        assert re.fullmatch(r"bootstrap 127\.0\.0\.1:\d+,127\.0\.0\.1:\d+", text), text
        bootstrap = text.split(" ", 1)[1]
        async with Cluster(bootstrap) as client:
            topics = await client.refresh_metadata(["payments", "audit"])
            assert len(topics["payments"].partitions) == 3
            assert len(topics["audit"].partitions) == 1
            assert sorted(client.brokers) == [0, 1]
        process.send_signal(sig)
        with anyio.fail_after(20):
            code = await process.wait()
        assert code == 0
        assert process.stderr is not None
        rest = b""
        async for chunk in process.stdout:
            rest += chunk
        assert rest == b""  # exactly one line on stdout


def test_serve_on_a_port_in_use_says_so_in_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            command("serve", "--port", str(port)), capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"gengroup serve: cannot listen on 127.0.0.1:{port}: address already in use"
    ], done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("serve", "--port", "99999"), "argument --port: must be at least 0 and at most 65535"),
        (("serve", "--brokers", "0"), "argument --brokers: must be at least 1, got 0"),
        (("serve", "--port", "65535", "--brokers", "2"), "give --port at most 65534, or 0"),
        (("serve", "--offsets-topic-partitions", "0"), "--offsets-topic-partitions: must be at"),
        (("serve", "--initial-rebalance-delay-ms", "-5"), "must be at least 0, got -5"),
        (("serve", "--topic", "pay/ments:3"), "has characters outside [a-zA-Z0-9._-]"),
        (("serve", "--topic", "a:2", "--topic", "a:3"), "gengroup serve: --topic a given twice"),
        (("demo", "--partitions", "0"), "argument --partitions: must be at least 1, got 0"),
        (("demo", "--rate", "x"), "argument --rate: expected an integer, got 'x'"),
        (("demo", "--duration", "nan"), "argument --duration: must be above 0 and at most 86400"),
        (("lag", "g", "--watch", "nan"), "argument --watch: must be above 0 and finite, got nan"),
        (("lag", "g", "--watch", "inf"), "argument --watch: must be above 0 and finite, got inf"),
        (("lag", "g", "--watch", "0"), "argument --watch: must be above 0 and finite, got 0"),
        (("lag", "g", "--watch", "-2"), "argument --watch: must be above 0 and finite, got -2"),
        (("groups", "list", "--timeout", "nan"), "argument --timeout: must be above 0 and finite"),
        (("groups", "list", "--timeout", "inf"), "argument --timeout: must be above 0 and finite"),
        (("produce", "t", "--timeout", "nan"), "argument --timeout: must be above 0, got nan"),
        (("produce", "t", "--timeout", "0"), "argument --timeout: must be above 0, got 0"),
        (("produce", "t", "--timeout", "-1"), "argument --timeout: must be above 0, got -1"),
        (("consume", "t", "--timeout", "-1"), "argument --timeout: must be above 0 and finite"),
    ],
)
def test_numbers_out_of_range_are_usage_errors(args: tuple[str, ...], said: str) -> None:
    """Caught by the parser, in one line, before anything starts (a broker
    with no offsets partitions used to start, and fail every FindCoordinator;
    ``lag --watch nan`` printed a report, then failed with exit code 1). The
    commands that connect are given an address where nothing listens: they
    stop before trying it."""
    if args[0] in ("lag", "groups", "produce", "consume"):
        args = (*args, "--bootstrap", "127.0.0.1:1")
    done = subprocess.run(command(*args), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert said in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("in_a_task_group", [False, True])
def test_ctrl_c_ends_a_command_in_one_line(
    in_a_task_group: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    async def interrupted() -> int:
        raise KeyboardInterrupt

    async def main() -> int:
        if not in_a_task_group:
            return await interrupted()
        async with anyio.create_task_group() as tg:
            tg.start_soon(interrupted)
            await anyio.sleep_forever()
        return 0

    assert run("gengroup x", main) == EXIT_INTERRUPTED == 130
    assert capsys.readouterr().err == "gengroup x: interrupted\n"


def test_without_the_cli_extra_the_command_says_what_to_install() -> None:
    """rich comes with the ``cli`` extra only: without it the command must say so
    in one line, not fail importing its subcommands with a traceback."""
    hide_rich = "import sys; sys.modules['rich'] = None; from gengroup.cli import main; "
    for args in ([], ["--help"], ["serve", "--help"]):
        done = subprocess.run(
            [sys.executable, "-c", hide_rich + f"sys.exit(main({args!r}))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [
            "gengroup: the gengroup command needs the 'cli' extra (rich is not installed): "
            "pip install 'gengroup[cli]'"
        ]
