"""The ``gengroup`` command on a secured cluster: TLS and SASL from flags, the environment
and the config file, against real Apache Kafka (the ``secure_kafka`` fixture), and bad
security settings as usage errors (no broker needed)."""

from __future__ import annotations

import argparse
import base64
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from gengroup.cli._common import Connection, TokenCommand, UsageError, connection
from gengroup.io.security import Security
from gengroup.lake.spark import kafka_options
from gengroup.testing.kafka import KafkaBroker
from gengroup.testing.pytest_plugin import SECURE_PLAIN_USERS, SECURE_SCRAM_USERS
from tests.cli.conftest import gengroup

[(ALICE, ALICE_PASSWORD)] = SECURE_PLAIN_USERS.items()
[(BOB, BOB_PASSWORD)] = SECURE_SCRAM_USERS.items()


def unsecured_jwt(subject: str) -> str:
    """An unsigned JWT, which the broker's unsecured OAUTHBEARER validator accepts."""

    def part(claims: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")

    now = time.time()
    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'iat': now, 'exp': now + 3600})}."


def certs(broker: KafkaBroker) -> Any:
    assert broker.security is not None
    return broker.security.certificates


def scram_flags(broker: KafkaBroker, *, ca: bool = True) -> list[str]:
    """Flags of bob (SCRAM-SHA-512) on the SASL_SSL listener; the password comes separately."""
    flags = [
        "--bootstrap", broker.listener_bootstrap("SASL_SSL"),
        "--security-protocol", "SASL_SSL",
        "--sasl-mechanism", "SCRAM-SHA-512",
        "--sasl-username", BOB,
    ]  # fmt: skip
    return [*flags, "--ssl-cafile", str(certs(broker).ca)] if ca else flags


def round_trip(
    topic: str, flags: list[str], env: dict[str, str] | None = None, *, group: str | None = None
) -> list[str]:
    """Create ``topic``, produce three lines, consume them back; the lines read."""
    created = gengroup("topics", "create", topic, "--partitions", "2", *flags, env=env)
    assert created.returncode == 0, created.stderr
    produced = gengroup("produce", topic, "--json", *flags, input="a\nb\nc\n", env=env)
    assert produced.returncode == 0, produced.stderr
    assert json.loads(produced.stdout)["records"] == 3
    how = ["--group", group, "-n", "3"] if group else ["--until-end"]
    consumed = gengroup("consume", topic, "--from-beginning", *how, *flags, env=env, timeout=180)
    assert consumed.returncode == 0, consumed.stderr
    return sorted(consumed.stdout.splitlines())


def one_line_error(result: Any, code: int = 1) -> str:
    """The one stderr line of a failed command (no traceback)."""
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return str(lines[0])


# ---------------------------------------------------------------------------- real Kafka


@pytest.mark.kafka
def test_scram_over_sasl_ssl_from_flags_and_the_password_from_the_environment(
    secure_kafka: KafkaBroker, unique_name: Callable[[str], str]
) -> None:
    flags = scram_flags(secure_kafka)
    # The password on the command line ...
    topic = unique_name("cli-scram")
    assert round_trip(topic, [*flags, "--sasl-password", BOB_PASSWORD]) == ["a", "b", "c"]
    # ... or only in the environment, as a group member this time.
    env = {"GENGROUP_SASL_PASSWORD": BOB_PASSWORD}
    other = unique_name("cli-scram-env")
    assert round_trip(other, flags, env, group=unique_name("g")) == ["a", "b", "c"]
    described = gengroup("topics", "describe", other, "--json", *flags, env=env)
    assert described.returncode == 0, described.stderr
    assert [p["end_offset"] for p in json.loads(described.stdout)["partitions"]] != [0, 0]


@pytest.mark.kafka
def test_plain_from_the_config_file(
    secure_kafka: KafkaBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    ca = certs(secure_kafka).ca
    # A relative certificate path is relative to the config file's folder.
    config = tmp_path / "conf" / "gengroup.toml"
    config.parent.mkdir()
    config.write_text(
        f'bootstrap = "{secure_kafka.listener_bootstrap("SASL_SSL")}"\n'
        'security_protocol = "SASL_SSL"\n'
        'sasl_mechanism = "PLAIN"\n'
        f'sasl_username = "{ALICE}"\n'
        f'sasl_password = "{ALICE_PASSWORD}"\n'
        f'ssl_cafile = "{os.path.relpath(ca, config.parent)}"\n'
    )
    env = {"GENGROUP_CONFIG": str(config)}
    topic = unique_name("cli-plain")
    assert round_trip(topic, [], env) == ["a", "b", "c"]
    # A flag beats the file: bob with SCRAM, his password from the environment.
    listed = gengroup(
        "topics", "list", "--json", "--sasl-mechanism", "SCRAM-SHA-256", "--sasl-username", BOB,
        env={**env, "GENGROUP_SASL_PASSWORD": BOB_PASSWORD},
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert {"topic": topic, "partitions": 2} in json.loads(listed.stdout)
    # The file's password is wrong for bob: the flag's user name took effect.
    wrong = gengroup(
        "topics", "list", "--sasl-mechanism", "SCRAM-SHA-256", "--sasl-username", BOB, env=env
    )
    assert "SCRAM-SHA-256 authentication with" in one_line_error(wrong)


@pytest.mark.kafka
def test_mutual_tls_from_the_environment(
    secure_kafka: KafkaBroker, unique_name: Callable[[str], str]
) -> None:
    c = certs(secure_kafka)
    env = {
        "GENGROUP_BOOTSTRAP": secure_kafka.listener_bootstrap("MTLS"),
        "GENGROUP_SECURITY_PROTOCOL": "ssl",
        "GENGROUP_SSL_CAFILE": str(c.ca),
        "GENGROUP_SSL_CERTFILE": str(c.client_cert),
        "GENGROUP_SSL_KEYFILE": str(c.client_key),
    }
    assert round_trip(unique_name("cli-mtls"), [], env) == ["a", "b", "c"]
    # Without the client certificate the broker refuses the handshake.
    refused = gengroup(
        "groups", "list", "--timeout", "10",
        env={k: v for k, v in env.items() if "CERTFILE" not in k and "KEYFILE" not in k},
    )  # fmt: skip
    assert "rejected by the broker" in one_line_error(refused)


@pytest.mark.kafka
def test_wrong_password_is_one_line_and_exit_code_1(secure_kafka: KafkaBroker) -> None:
    flags = [*scram_flags(secure_kafka), "--timeout", "20"]
    for args in (["groups", "list"], ["produce", "never-created"], ["consume", "x", "--until-end"]):
        env = {"GENGROUP_SASL_PASSWORD": "not-bobs-password"}
        line = one_line_error(gengroup(*args, *flags, env=env, input="x\n"))
        assert line.startswith(f"gengroup {args[0]}: SCRAM-SHA-512 authentication with"), line
        assert "not-bobs-password" not in line


@pytest.mark.kafka
def test_an_unknown_certificate_authority_is_a_tls_error(secure_kafka: KafkaBroker) -> None:
    no_ca = scram_flags(secure_kafka, ca=False)
    env = {"GENGROUP_SASL_PASSWORD": BOB_PASSWORD}
    # The system's trust store does not know the test CA.
    line = one_line_error(gengroup("topics", "list", *no_ca, env=env))
    assert "certificate verify failed" in line, line
    other = [*no_ca, "--ssl-cafile", str(certs(secure_kafka).other_ca)]
    line = one_line_error(gengroup("topics", "list", *other, env=env))
    assert "certificate verify failed" in line, line


@pytest.mark.kafka
def test_a_certificate_for_another_host_and_no_host_name_check(
    secure_kafka: KafkaBroker,
) -> None:
    flags = [
        "--bootstrap", secure_kafka.listener_bootstrap("WRONG_HOST"),
        "--security-protocol", "SSL", "--ssl-cafile", str(certs(secure_kafka).ca),
    ]  # fmt: skip
    line = one_line_error(gengroup("topics", "list", *flags))
    assert "hostname mismatch" in line and "127.0.0.1" in line, line
    checked_not = gengroup("topics", "list", "--json", *flags, "--ssl-no-check-hostname")
    assert checked_not.returncode == 0, checked_not.stderr
    assert isinstance(json.loads(checked_not.stdout), list)
    # The same from the environment.
    env_off = gengroup("groups", "list", *flags, env={"GENGROUP_SSL_CHECK_HOSTNAME": "false"})
    assert env_off.returncode == 0, env_off.stderr


@pytest.mark.kafka
def test_oauthbearer_from_a_token_command_and_a_static_token(
    secure_kafka: KafkaBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    calls = tmp_path / "calls"
    script = tmp_path / "token.py"
    script.write_text(
        f"import sys\nopen({str(calls)!r}, 'a').write('x')\nprint({unsecured_jwt('carol')!r})\n"
    )
    common = [
        "--bootstrap", secure_kafka.listener_bootstrap("SASL_SSL"),
        "--security-protocol", "SASL_SSL", "--ssl-cafile", str(certs(secure_kafka).ca),
    ]  # fmt: skip
    by_command = [*common, "--sasl-oauth-token-command", shlex.join([sys.executable, str(script)])]
    topic = unique_name("cli-oauth")
    assert round_trip(topic, by_command, group=unique_name("g")) == ["a", "b", "c"]
    # Every command ran it for each connection it authenticated.
    assert len(calls.read_text()) >= 3
    # A static token, with the mechanism spelled out.
    token = unsecured_jwt("dan")
    static = [*common, "--sasl-mechanism", "OAUTHBEARER", "--sasl-oauth-token", token]
    listed = gengroup("topics", "list", "--json", *static)
    assert listed.returncode == 0, listed.stderr
    assert {"topic": topic, "partitions": 2} in json.loads(listed.stdout)
    # A failing command fails every attempt until --timeout; the error names what it said.
    failing = shlex.join([sys.executable, "-c", "import sys; sys.exit('no token today')"])
    by_failing = [*common, "--sasl-oauth-token-command", failing]
    line = one_line_error(gengroup("groups", "list", "--timeout", "5", *by_failing))
    assert "OAUTHBEARER" in line and "exited with status 1: no token today" in line, line


def land(topic: str, lake: Path, group: str, flags: list[str], env: dict[str, str]) -> None:
    """Create ``topic`` (2 partitions), produce 50 records, land them with ``lake sink``."""
    created = gengroup("topics", "create", topic, "--partitions", "2", *flags, env=env)
    assert created.returncode == 0, created.stderr
    lines = "".join(f"record {i}\n" for i in range(50))
    produced = gengroup("produce", topic, *flags, input=lines, env=env)
    assert produced.returncode == 0, produced.stderr
    sunk = gengroup(
        "lake", "sink", "--group", group, "--topic", topic, "--lake", str(lake),
        "--until-caught-up", "--file-max-age", "0.5", *flags, env=env, timeout=180,
    )  # fmt: skip
    assert sunk.returncode == 0, sunk.stderr


@pytest.mark.kafka
def test_lake_sink_on_a_secured_cluster(
    secure_kafka: KafkaBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    flags = scram_flags(secure_kafka)
    topic, lake, group = unique_name("cli-lake"), tmp_path / "lake", unique_name("lake")
    land(topic, lake, group, flags, {"GENGROUP_SASL_PASSWORD": BOB_PASSWORD})
    rows = sum(pq.read_table(p).num_rows for p in lake.glob("topic=*/partition=*/*.parquet"))
    assert rows == 50
    # A wrong password: one line, exit code 1 (the lake's own group: another is refused).
    bad = gengroup(
        "lake", "sink", "--group", group, "--topic", topic, "--lake", str(lake), *flags,
        env={"GENGROUP_SASL_PASSWORD": "wrong"}, timeout=180,
    )  # fmt: skip
    assert bad.returncode == 1, bad.stderr
    assert "AuthenticationError" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.kafka
@pytest.mark.parametrize("how", ["SCRAM-SHA-512", "mutual TLS"])
def test_lake_verify_reads_a_secured_cluster_with_spark(
    secure_kafka: KafkaBroker, unique_name: Callable[[str], str], tmp_path: Path, how: str
) -> None:
    """Spark's Kafka source (the Java client) gets the same security as the sink.

    Not OAUTHBEARER: the test broker's unsecured validator takes only unsigned
    tokens (``header.payload.``), which the Java client's token-file login refuses
    as malformed; the options it gets are checked by
    ``test_spark_kafka_options_of_each_kind_of_security``."""
    c = certs(secure_kafka)
    env: dict[str, str] = {}
    if how == "SCRAM-SHA-512":
        flags = scram_flags(secure_kafka)
        env["GENGROUP_SASL_PASSWORD"] = BOB_PASSWORD
    else:
        flags = [
            "--bootstrap", secure_kafka.listener_bootstrap("MTLS"), "--security-protocol", "SSL",
            "--ssl-cafile", str(c.ca), "--ssl-certfile", str(c.client_cert),
            "--ssl-keyfile", str(c.client_key),
        ]  # fmt: skip
    topic, lake, group = unique_name("cli-verify"), tmp_path / "lake", unique_name("lake")
    land(topic, lake, group, flags, env)
    verified = gengroup(
        "lake", "verify", "--topic", topic, "--lake", str(lake), "--group", group, "--json",
        *flags, env=env, timeout=600,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stderr[-3000:]
    report = json.loads(verified.stdout)
    assert report["ok"] is True, report
    assert report["totals"]["topic_records"] == report["totals"]["lake_records"] == 50, report


# ---------------------------------------------------------------------------- no broker


def namespace(**given: Any) -> argparse.Namespace:
    values: dict[str, Any] = {"bootstrap": "b:1", "client_id": None, "config": None}
    values.update(given)
    return argparse.Namespace(**values)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No GENGROUP_* variables and an empty home directory; that home."""
    for name in list(os.environ):
        if name.startswith("GENGROUP_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_security_settings_flag_beats_environment_beats_file(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Plaintext by default: no security settings at all.
    assert Connection("b:1").settings() == {}
    assert connection(namespace()).security == Security()
    ca = clean_env / "ca.pem"
    ca.write_text("not read before a connection")
    config = clean_env / "c.toml"
    config.write_text(
        'security_protocol = "SASL_SSL"\nsasl_mechanism = "PLAIN"\n'
        'sasl_username = "file-user"\nsasl_password = "file-pw"\nssl_cafile = "ca.pem"\n'
        "ssl_check_hostname = false\n"
    )
    got = connection(namespace(config=str(config)))
    assert got.security == Security(
        security_protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        sasl_username="file-user",
        sasl_password="file-pw",
        ssl_cafile=str(ca),
        ssl_check_hostname=False,
    )
    monkeypatch.setenv("GENGROUP_SASL_USERNAME", "env-user")
    monkeypatch.setenv("GENGROUP_SSL_CHECK_HOSTNAME", "yes")
    got = connection(namespace(config=str(config)))
    assert (got.security.sasl_username, got.security.ssl_check_hostname) == ("env-user", True)
    got = connection(
        namespace(config=str(config), sasl_username="flag-user", ssl_check_hostname=False)
    )
    assert (got.security.sasl_username, got.security.ssl_check_hostname) == ("flag-user", False)
    assert got.settings()["sasl_password"] == "file-pw"
    assert "file-pw" not in repr(got)


def test_token_settings_make_an_oauthbearer_provider(clean_env: Path) -> None:
    got = connection(namespace(security_protocol="SASL_SSL", sasl_oauth_token="t0ken"))
    assert got.security.sasl_mechanism == "OAUTHBEARER"
    provider = got.security.sasl_oauth_token_provider
    assert provider is not None and anyio.run(provider) == "t0ken"
    command = f"{shlex.quote(sys.executable)} -c 'print(\"  fresh  \")'"
    got = connection(namespace(security_protocol="SASL_SSL", sasl_oauth_token_command=command))
    assert isinstance(got.security.sasl_oauth_token_provider, TokenCommand)
    assert anyio.run(got.security.sasl_oauth_token_provider) == "fresh"
    with pytest.raises(RuntimeError, match="printed no token"):
        anyio.run(TokenCommand("true"))
    with pytest.raises(RuntimeError, match="status 3: nope"):
        anyio.run(TokenCommand("echo nope >&2; exit 3"), backend="trio")


@pytest.mark.parametrize(
    ("given", "env", "match"),
    [
        ({"security_protocol": "SASL_TLS"}, {}, "security_protocol must be one of"),
        ({"sasl_mechanism": "PLAIN"}, {}, "uses no SASL"),
        ({"security_protocol": "SASL_SSL"}, {}, "needs sasl_mechanism"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "MD5"}, {}, "needs sasl_mechanism"),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256"},
            {"GENGROUP_SASL_USERNAME": "u"},
            "needs sasl_password",
        ),
        ({"security_protocol": "SSL", "ssl_cafile": "/nonexistent.pem"}, {}, "is not a file"),
        ({"ssl_check_hostname": False}, {}, "uses no TLS"),
        ({}, {"GENGROUP_SSL_CHECK_HOSTNAME": "maybe"}, "must be true or false"),
        (
            {"security_protocol": "SASL_SSL", "sasl_oauth_token": "t"},
            {"GENGROUP_SASL_OAUTH_TOKEN_COMMAND": "echo t"},
            "not both",
        ),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_oauth_token": "t"},
            {},
            "is for OAUTHBEARER",
        ),
    ],
)
def test_bad_security_settings_are_usage_errors(
    clean_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    given: dict[str, Any],
    env: dict[str, str],
    match: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(UsageError, match=match):
        connection(namespace(**given))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("ssl_check_hostname = 'no'\n", "ssl_check_hostname must be true or false"),
        ("sasl_password = 12\n", "sasl_password must be a string"),
        ("sasl_pasword = 'x'\n", "unknown key 'sasl_pasword'"),
    ],
)
def test_bad_security_keys_in_the_config_file(clean_env: Path, text: str, match: str) -> None:
    config = clean_env / "c.toml"
    config.write_text(text)
    with pytest.raises(UsageError, match=match):
        connection(namespace(config=str(config)))


def test_bad_security_options_exit_2_in_one_line(tmp_path: Path) -> None:
    """Before any connection: the cluster address is never tried."""
    for args in (
        ["topics", "list", "--security-protocol", "TLS"],
        ["produce", "t", "--sasl-mechanism", "PLAIN"],
        ["consume", "t", "--security-protocol", "SSL", "--ssl-certfile", str(tmp_path / "no")],
        ["lag", "g", "--security-protocol", "SASL_SSL"],
        ["groups", "list", "--ssl-no-check-hostname"],
    ):
        result = gengroup(*args, bootstrap="127.0.0.1:1")
        line = one_line_error(result, 2)
        assert line.startswith(f"gengroup {args[0]}: security settings: "), line
    # A certificate file that is not PEM: found when the TLS context is built.
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    result = gengroup(
        "topics", "list", "--security-protocol", "SSL", "--ssl-cafile", str(bad),
        bootstrap="127.0.0.1:1",
    )  # fmt: skip
    assert "cannot be loaded" in one_line_error(result, 2)
    lake = gengroup(
        "lake", "sink", "--group", "g", "--topic", "t", "--lake", str(tmp_path / "lake"),
        "--sasl-mechanism", "PLAIN", bootstrap="127.0.0.1:1",
    )  # fmt: skip
    assert lake.returncode == 2 and "uses no SASL" in lake.stderr, lake.stderr


def test_spark_kafka_options_of_each_kind_of_security(tmp_path: Path) -> None:
    """What ``lake verify`` hands to Spark's Kafka source (the Java client's settings)."""
    import trustme

    authority = trustme.CA()
    leaf = authority.issue_cert("client.test")
    ca, cert, key = (tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem"))
    authority.cert_pem.write_to_path(str(ca))
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    assert not key.read_text().startswith("-----BEGIN PRIVATE KEY-----")  # SEC1 or PKCS#1
    assert kafka_options(Security()) == {"kafka.security.protocol": "PLAINTEXT"}
    scram = Security(
        security_protocol="SASL_SSL",
        ssl_cafile=ca,
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="bob",
        sasl_password='p"w\\d',
    )
    assert kafka_options(scram) == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(ca),
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="bob" password="p\\"w\\\\d";',
    }
    plain = Security(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="a",
        sasl_password="b",
    )
    assert kafka_options(plain)["kafka.sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
    )
    mtls = Security(
        security_protocol="SSL",
        ssl_cafile=ca,
        ssl_certfile=cert,
        ssl_keyfile=key,
        ssl_check_hostname=False,
    )
    got = kafka_options(mtls)
    assert got["kafka.ssl.keystore.type"] == "PEM"
    assert got["kafka.ssl.keystore.certificate.chain"] == cert.read_text()
    # The Java client's PEM key store reads PKCS#8 only: the key is converted.
    assert got["kafka.ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----")
    assert got["kafka.ssl.endpoint.identification.algorithm"] == ""
    # A certificate file holding its key too: each goes where it belongs.
    both = tmp_path / "both.pem"
    both.write_text(key.read_text() + cert.read_text())
    got = kafka_options(Security(security_protocol="SSL", ssl_certfile=both))
    assert got["kafka.ssl.keystore.certificate.chain"] == cert.read_text()
    assert "CERTIFICATE" not in got["kafka.ssl.keystore.key"]

    async def token() -> str:
        return "t"

    oauth = Security(
        security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=token
    )
    got = kafka_options(oauth, oauth_token_file=str(tmp_path / "token"))
    assert got["kafka.sasl.oauthbearer.token.endpoint.url"] == (tmp_path / "token").as_uri()
    assert got["kafka.sasl.login.callback.handler.class"].endswith(
        "OAuthBearerLoginCallbackHandler"
    )


def test_tls_to_a_plaintext_listener_is_one_line(served: str) -> None:
    """The broker closes a connection whose first bytes are a TLS ClientHello:
    each command says so in one line (it used to be a traceback of EndOfStream)."""
    for args in (["topics", "list"], ["produce", "t"], ["consume", "t", "--until-end"]):
        done = gengroup(
            *args, "--security-protocol", "SSL", "--timeout", "5", bootstrap=served, input="x\n"
        )
        line = one_line_error(done)
        assert "closed by the broker during the TLS handshake" in line, line
        assert "check security_protocol" in line, line
