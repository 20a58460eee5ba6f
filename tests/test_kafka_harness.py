"""Tests of the real-Kafka harness: gengroup.testing.kafka and its pytest plugin."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
import trio
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3

from gengroup._errors import GengroupError
from gengroup.admin import Admin, NewTopic
from gengroup.testing.kafka import (
    INSTALL_HINT,
    BrokerSecurity,
    KafkaBroker,
    KafkaCluster,
    KafkaHarnessError,
    ensure_jars,
    jar_dir,
    kafka_broker,
    make_certificates,
    new_cluster_id,
    probe_api_versions,
)
from gengroup.testing.kafka.cluster import cluster_properties
from gengroup.testing.kafka.config import Quorum, server_properties, write_config
from gengroup.testing.kafka.probe import exchange
from gengroup.testing.kafka.secure import LISTENERS, scram_format_args

# Idempotent with the same line in tests/conftest.py (a plugin is loaded once).
pytest_plugins = ["gengroup.testing.pytest_plugin"]

JOIN_GROUP = 11
API_VERSIONS = 18
OWNER_FLAG = "-Dgengroup.harness.owner="


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # a zombie still answers kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _harness_jvms(owner: int) -> list[int]:
    """Pids of live broker JVMs started by the process `owner`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        mine = b"kafka.Kafka" in args and f"{OWNER_FLAG}{owner}".encode() in args
        if mine and not _pid_gone(int(entry.name)):
            found.append(int(entry.name))
    return found


def _wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return bool(predicate())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no output within {timeout} s"
    return proc.stdout.readline()


def _reap(proc: subprocess.Popen[bytes], kill: Callable[[], None]) -> None:
    """Stop ``proc`` with ``kill`` if it still runs, close its stdout and kill the
    broker JVMs it started."""
    if proc.poll() is None:
        kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    for pid in _harness_jvms(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


@contextlib.contextmanager
def _cli(tmp_path: Path, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """Run ``python -m gengroup.testing.kafka``; kill it and its brokers at the end."""
    stderr_path = tmp_path / "cli-stderr.txt"
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gengroup.testing.kafka", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    try:
        yield proc, stderr_path
    finally:
        _reap(proc, proc.kill)


def _await_bootstrap(proc: subprocess.Popen[bytes], stderr_path: Path) -> bytes:
    """The CLI's stdout line, once its stderr line (written just after) is there too."""
    line = _read_line(proc, 150)
    assert _wait_until(lambda: "ready (pid" in stderr_path.read_text(), 10), stderr_path.read_text()
    return line


# ---------------------------------------------------------------- with a broker


@pytest.mark.kafka
def test_session_broker_answers_api_versions(kafka: KafkaBroker) -> None:
    assert kafka.running
    assert kafka.bootstrap == f"127.0.0.1:{kafka.port}"
    versions = probe_api_versions(kafka.host, kafka.port)
    assert versions[API_VERSIONS][0] == 0
    low, high = versions[JOIN_GROUP]
    assert low <= 9 <= high
    assert versions[14][1] >= 5  # SyncGroup
    assert kafka.log_path is not None and kafka.log_path.is_file()


@pytest.mark.kafka
async def test_async_broker_kill_and_restart(tmp_path: Path) -> None:
    async with kafka_broker(base_dir=tmp_path) as broker:
        port, data_dir, pid = broker.port, broker.data_dir, broker.pid
        assert data_dir is not None and pid is not None
        versions = await trio.to_thread.run_sync(probe_api_versions, broker.host, port)
        assert versions[JOIN_GROUP][1] >= 9

        await trio.to_thread.run_sync(broker.kill)
        assert not broker.running
        assert _pid_gone(pid) and _group_gone(pid)
        with pytest.raises(OSError):
            probe_api_versions(broker.host, port, timeout=2.0)
        assert data_dir.is_dir()  # kept for restart

        await trio.to_thread.run_sync(broker.restart)
        new_pid = broker.pid
        assert new_pid is not None and new_pid != pid
        assert broker.port == port and broker.data_dir == data_dir
        assert JOIN_GROUP in await trio.to_thread.run_sync(probe_api_versions, broker.host, port)
    assert not broker.running
    assert _pid_gone(new_pid) and _group_gone(new_pid)
    assert not data_dir.exists()


@pytest.mark.kafka
def test_async_broker_under_asyncio() -> None:
    async def run() -> tuple[int, int | None]:
        async with kafka_broker() as broker:
            versions = await anyio.to_thread.run_sync(probe_api_versions, broker.host, broker.port)
            return versions[JOIN_GROUP][1], broker.pid

    join_max, pid = anyio.run(run, backend="asyncio")
    assert join_max >= 9
    assert pid is not None and _pid_gone(pid)


@pytest.mark.kafka
def test_cli_prints_bootstrap_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = _free_port()
    with _cli(tmp_path, "--port", str(port)) as (proc, stderr_path):
        line = _await_bootstrap(proc, stderr_path)
        assert line == f"bootstrap 127.0.0.1:{port}\n".encode(), stderr_path.read_text()
        assert JOIN_GROUP in probe_api_versions("127.0.0.1", port)
        jvms = _harness_jvms(proc.pid)
        assert len(jvms) == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, stderr_path.read_text()
        assert proc.stdout is not None and proc.stdout.read() == b""  # exactly one line
        assert _pid_gone(jvms[0]) and _group_gone(jvms[0])
        assert _harness_jvms(proc.pid) == []


@pytest.mark.kafka
def test_watchdog_stops_broker_when_owner_is_sigkilled(tmp_path: Path) -> None:
    with _cli(tmp_path) as (proc, stderr_path):
        line = _await_bootstrap(proc, stderr_path)
        assert re.fullmatch(rb"bootstrap 127\.0\.0\.1:\d+\n", line), stderr_path.read_text()
        match = re.search(r"log (\S+)/broker\.log", stderr_path.read_text())
        assert match is not None
        data_dir = Path(match.group(1))
        jvms = _harness_jvms(proc.pid)
        assert len(jvms) == 1 and data_dir.is_dir()
        proc.kill()  # no atexit, no finally: only the watchdog can clean up
        proc.wait()
        assert _wait_until(lambda: _group_gone(jvms[0]), 30), "the JVM outlived its owner"
        assert _wait_until(lambda: not data_dir.exists(), 10)


_HOLDING_TEST = """
import time

pytest_plugins = ["gengroup.testing.pytest_plugin"]


def test_hold(kafka):
    print("holding", kafka.data_dir, flush=True)
    time.sleep(600)
"""


@pytest.mark.kafka
def test_a_pytest_run_killed_with_sigterm_leaves_no_broker(tmp_path: Path) -> None:
    """A pytest run and its process group get SIGTERM (as ``timeout`` or a job stop
    sends it): no handler, no atexit, yet the session broker's JVM and data go."""
    (tmp_path / "test_hold.py").write_text(_HOLDING_TEST)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "test_hold.py"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, signalled as a whole below
    )
    try:
        line = b""
        deadline = time.monotonic() + 240  # a hang guard: the broker's start, loaded machine
        while b"holding " not in line:
            line = _read_line(proc, max(1.0, deadline - time.monotonic()))
            assert line, "pytest ended before the broker started"
        data_dir = Path(line.split(b"holding ")[1].split()[0].decode())
        jvms = _harness_jvms(proc.pid)
        assert len(jvms) == 1 and data_dir.is_dir()
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == -signal.SIGTERM
        assert _wait_until(lambda: _group_gone(jvms[0]), 30), "the JVM outlived the pytest run"
        assert _wait_until(lambda: not data_dir.exists(), 10)
    finally:
        _reap(proc, lambda: os.killpg(proc.pid, signal.SIGKILL))


# ---------------------------------------------------------------- without a broker


def test_missing_java_path_is_a_typed_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-jdk" / "bin" / "java"
    with pytest.raises(KafkaHarnessError) as info:
        KafkaBroker(java=missing).start()
    message = str(info.value)
    assert str(missing) in message and INSTALL_HINT in message
    assert isinstance(info.value, GengroupError)


def test_java_absent_from_path_is_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(KafkaHarnessError, match="`java`") as info:
        KafkaBroker().start()
    assert INSTALL_HINT in str(info.value)


def test_missing_mvn_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(KafkaHarnessError, match="Maven") as info:
        ensure_jars("9.9.9", cache_root=tmp_path, mvn=tmp_path / "no-mvn")
    assert INSTALL_HINT in str(info.value)
    assert not jar_dir("9.9.9", tmp_path).exists()


def _fake_mvn(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "fake-mvn"
    script.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in\n'
        '  -DoutputDirectory=*) out="${a#-DoutputDirectory=}";;\n'
        '  -Dkafka.version=*) v="${a#-Dkafka.version=}";;\n'
        "esac; done\n" + textwrap.dedent(body)
    )
    script.chmod(0o755)
    return script


def test_concurrent_fetches_run_maven_once(tmp_path: Path) -> None:
    runs = tmp_path / "runs.txt"
    mvn = _fake_mvn(
        tmp_path,
        f"""\
        echo run >> {runs}
        sleep 1
        mkdir -p "$out"
        echo jar > "$out/kafka_2.13-$v.jar"
        echo jar > "$out/kafka-clients-$v.jar"
        echo jar > "$out/scala-library-2.13.18.jar"
        """,
    )
    cache = tmp_path / "cache"
    code = (
        "import sys; from gengroup.testing.kafka import ensure_jars; "
        "print(ensure_jars('9.9.9', cache_root=sys.argv[1], mvn=sys.argv[2]))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(cache), str(mvn)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(3)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    lib = jar_dir("9.9.9", cache)
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
        assert out.decode().strip() == str(lib)
    assert runs.read_text().splitlines() == ["run"]
    assert sorted(p.name for p in lib.iterdir()) == [
        ".gengroup-complete",
        "kafka-clients-9.9.9.jar",
        "kafka_2.13-9.9.9.jar",
        "scala-library-2.13.18.jar",
    ]
    assert [p.name for p in lib.parent.iterdir() if p.name.startswith(".fetch-")] == []
    # A damaged cache (a listed jar gone) is fetched again.
    (lib / "scala-library-2.13.18.jar").unlink()
    assert ensure_jars("9.9.9", cache_root=cache, mvn=mvn) == lib
    assert runs.read_text().splitlines() == ["run", "run"]


def test_failed_or_incomplete_fetch_leaves_no_cache(tmp_path: Path) -> None:
    failing = _fake_mvn(tmp_path, "echo 'Could not resolve dependencies' >&2\nexit 1\n")
    with pytest.raises(KafkaHarnessError, match="Could not resolve dependencies"):
        ensure_jars("9.9.9", cache_root=tmp_path / "c", mvn=failing)
    empty = _fake_mvn(tmp_path, 'mkdir -p "$out"\n')
    with pytest.raises(KafkaHarnessError, match=r"incomplete \(missing kafka_2\.13-9\.9\.9\.jar"):
        ensure_jars("9.9.9", cache_root=tmp_path / "c", mvn=empty)
    lib = jar_dir("9.9.9", tmp_path / "c")
    assert not lib.exists()
    assert [p.name for p in lib.parent.iterdir()] == [".lock"]


def test_cluster_ids_and_unique_names(unique_name: Callable[[str], str]) -> None:
    for _ in range(200):
        cluster_id = new_cluster_id()
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id)
    names = {unique_name("orders") for _ in range(100)}
    assert len(names) == 100 and all(n.startswith("orders-") for n in names)
    assert re.fullmatch(r"a-b-[0-9a-f]{12}", unique_name("a b/"))


def test_secure_broker_listeners_and_users(secure_kafka: KafkaBroker) -> None:
    """The secure broker: every listener on its own port, PEM files, SCRAM users formatted in."""
    assert secure_kafka.security is not None
    ports = {name: secure_kafka.listener_port(name) for name in LISTENERS}
    assert len({*ports.values(), secure_kafka.port, secure_kafka.controller_port}) == 6
    certs = secure_kafka.security.certificates
    assert certs.server.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8
    assert b"BEGIN CERTIFICATE" in certs.server.read_bytes()
    assert secure_kafka.data_dir is not None
    properties = (secure_kafka.data_dir / "server.properties").read_text()
    assert "listener.name.mtls.ssl.client.auth=required" in properties
    assert "listener.name.reauth.scram-sha-256.connections.max.reauth.ms=4000" in properties
    formatted = (secure_kafka.data_dir / "format.log").read_text()
    # The storage tool wrote bob's credentials, for both SCRAM mechanisms, as metadata records.
    assert formatted.count("UserScramCredentialRecord(name='bob'") == 2
    # The PLAINTEXT listener stays, for the readiness probe and inter-broker traffic.
    assert JOIN_GROUP in probe_api_versions(secure_kafka.host, secure_kafka.port)
    with pytest.raises(KafkaHarnessError, match="has no listener 'NOPE'"):
        secure_kafka.listener_port("NOPE")


def test_scram_users_the_storage_tool_cannot_carry_are_refused(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path)
    assert scram_format_args(BrokerSecurity(certs, scram_users={"bob": "pw"})) == [
        "--add-scram",
        "SCRAM-SHA-256=[name=bob,password=pw]",
        "--add-scram",
        "SCRAM-SHA-512=[name=bob,password=pw]",
    ]
    with pytest.raises(KafkaHarnessError, match="may not hold"):
        scram_format_args(BrokerSecurity(certs, scram_users={"bob": "a,b"}))
    with pytest.raises(KafkaHarnessError, match="has no listener 'SASL_SSL'"):
        KafkaBroker().listener_port("SASL_SSL")


# ---------------------------------------------------------------- a cluster of three


@pytest.mark.kafka
async def test_cluster_nodes_replicate_fail_over_and_come_back(
    kafka_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    cluster = kafka_cluster
    try:
        nodes = cluster.nodes
        assert cluster.running == [0, 1, 2]
        assert cluster.bootstrap == ",".join(n.bootstrap for n in nodes)
        ports = {p for n in nodes for p in (n.port, n.controller_port)}
        assert len(ports) == 6 and len({n.cluster_id for n in nodes}) == 1
        assert nodes[2].data_dir is not None
        properties = (nodes[2].data_dir / "server.properties").read_text()
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes)
        assert f"controller.quorum.voters={voters}\n" in properties
        assert "node.id=2\n" in properties and "min.insync.replicas=2\n" in properties
        assert "controller.quorum.bootstrap.servers" not in properties

        topic = unique_name("replicated")
        async with Admin(cluster.bootstrap) as admin:
            # Admin asks for one replica unless told; -1 takes the cluster's default.
            await admin.create_topics([NewTopic(topic, 2, replication_factor=-1)])
        brokers, states = await trio.to_thread.run_sync(cluster.partitions, [topic])
        assert brokers == {0, 1, 2}
        assert sorted(len(s.replicas) for s in states) == [3, 3]
        offsets_topic = [s for s in cluster.partitions()[1] if s.topic == "__consumer_offsets"]
        assert len(offsets_topic) == 3 and all(len(s.replicas) == 3 for s in offsets_topic)
        coordinator = await trio.to_thread.run_sync(cluster.coordinator_of, topic)
        assert coordinator in (0, 1, 2)

        leader = cluster.node_of_leader(topic, 0)
        victim = nodes[leader]
        pid, data_dir = victim.pid, victim.data_dir
        assert pid is not None
        await trio.to_thread.run_sync(cluster.kill, leader)
        assert _pid_gone(pid) and leader not in cluster.running

        def new_leader() -> bool:
            return cluster.node_of_leader(topic, 0) != leader

        assert await trio.to_thread.run_sync(_wait_until, new_leader, 60)
        await trio.to_thread.run_sync(cluster.restart, leader)
        assert victim.port == nodes[leader].port and victim.data_dir == data_dir
        assert victim.pid != pid
        await trio.to_thread.run_sync(cluster.wait_healthy)

        other = (leader + 1) % 3
        await trio.to_thread.run_sync(cluster.stop, other)
        assert other not in cluster.running and nodes[other].data_dir is not None
        with pytest.raises(KafkaHarnessError, match=rf"node\(s\) \[{other}\] not running"):
            cluster.wait_healthy(timeout=1)
    finally:
        await trio.to_thread.run_sync(cluster.heal)
    assert cluster.running == [0, 1, 2]


@pytest.mark.kafka
def test_cli_runs_a_cluster_with_brokers_3(tmp_path: Path) -> None:
    with _cli(tmp_path, "--brokers", "3") as (proc, stderr_path):
        line = _await_bootstrap(proc, stderr_path)
        assert re.fullmatch(rb"bootstrap (127\.0\.0\.1:\d+,){2}127\.0\.0\.1:\d+\n", line), line
        for address in line.split()[1].decode().split(","):
            assert JOIN_GROUP in probe_api_versions("127.0.0.1", int(address.split(":")[1]))
        jvms = _harness_jvms(proc.pid)
        assert len(jvms) == 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, stderr_path.read_text()
        assert all(_pid_gone(pid) and _group_gone(pid) for pid in jvms)


def test_cluster_configuration_without_a_broker(tmp_path: Path) -> None:
    quorum = Quorum("abc", {2: 9302, 0: 9300, 1: 9301})
    props = server_properties(tmp_path, 9200, 9300, {}, node_id=0, quorum=quorum)
    assert props["controller.quorum.voters"] == "0@127.0.0.1:9300,1@127.0.0.1:9301,2@127.0.0.1:9302"
    assert props["node.id"] == "0" and "controller.quorum.bootstrap.servers" not in props
    single = server_properties(tmp_path, 9200, 9300, {})
    assert single["controller.quorum.bootstrap.servers"] == "127.0.0.1:9300"
    assert "controller.quorum.voters" not in single
    assert cluster_properties(3)["min.insync.replicas"] == 2
    assert cluster_properties(1)["offsets.topic.replication.factor"] == 1
    assert cluster_properties(5)["default.replication.factor"] == 3
    with pytest.raises(KafkaHarnessError, match="at least one broker"):
        KafkaCluster(0)
    with pytest.raises(KafkaHarnessError, match="has not been started"):
        _ = KafkaCluster(3).bootstrap


@pytest.mark.kafka
def test_request_log_holds_the_requests_of_the_apis_named(tmp_path: Path) -> None:
    # The harness's own readiness probes (ApiVersions v0) may be logged too, and
    # their lines may land before or after this test's request: the test's
    # request is a v3 one under a software name of its own.
    started = time.time()
    with KafkaBroker(base_dir=tmp_path, request_log={"API_VERSIONS"}) as broker:
        request = ApiVersionsRequestV3(
            client_software_name="request-log-test", client_software_version="1"
        )
        exchange(broker.host, broker.port, request, ApiVersionsResponseV3, timeout=10)
        log = broker.request_log_path
        assert log is not None and log.parent == broker.data_dir

        def probed() -> list[dict[str, Any]]:
            lines = [line.split(" Completed request:", 1) for line in log.read_text().splitlines()]
            assert all(len(parts) == 2 for parts in lines), lines
            for stamp, _ in lines:
                assert started * 1000 <= int(stamp) <= time.time() * 1000
            return [json.loads(text) for _, text in lines]

        def ours() -> list[dict[str, Any]]:
            return [
                r for r in probed() if r["request"].get("clientSoftwareName") == "request-log-test"
            ]

        assert _wait_until(lambda: bool(ours()), 10)
        requests = probed()
        assert {r["requestHeader"]["requestApiKeyName"] for r in requests} == {"API_VERSIONS"}
        (mine,) = ours()
        assert mine["listener"] == "PLAINTEXT"
        assert mine["requestHeader"]["requestApiVersion"] == 3
        assert mine["requestHeader"]["clientId"] == "gengroup-harness"


def test_request_log_configuration(tmp_path: Path) -> None:
    write_config(tmp_path, {}, request_log=True)
    every = (tmp_path / "log4j2.properties").read_text()
    assert "logger.requests.name = kafka.request.logger" in every
    assert "logger.requests.level = DEBUG" in every and "RegexFilter" not in every
    assert every.count("= kafka.request.logger") == 1  # not also among the quiet loggers
    write_config(tmp_path, {}, request_log={"HEARTBEAT", "CONSUMER_GROUP_HEARTBEAT"})
    some = (tmp_path / "log4j2.properties").read_text()
    assert '"requestApiKeyName":"(CONSUMER_GROUP_HEARTBEAT|HEARTBEAT)"' in some
    write_config(tmp_path, {})
    quiet = (tmp_path / "log4j2.properties").read_text()
    assert "REQUESTS" not in quiet and "= kafka.request.logger" in quiet
