"""Where the CLI finds its broker: --bootstrap, GENGROUP_BOOTSTRAP, then a TOML config file."""

from __future__ import annotations

import argparse
import json
import signal
from pathlib import Path

import pytest

from gengroup.cli._common import Connection, UsageError, connection
from tests.cli.conftest import gengroup
from tests.cli.test_consume import running, seed
from tests.embedded.test_cli import command


def args(**given: str | None) -> argparse.Namespace:
    values: dict[str, str | None] = {"bootstrap": None, "client_id": None, "config": None}
    values.update(given)
    return argparse.Namespace(**values)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No GENGROUP_* variables and an empty home directory; that home."""
    for name in ("GENGROUP_BOOTSTRAP", "GENGROUP_CLIENT_ID", "GENGROUP_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_flag_beats_environment_beats_file(
    clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(tmp_path / "c.toml", 'bootstrap = "file:1"\nclient_id = "from-file"\n')
    assert connection(args(config=str(config))) == Connection("file:1", "from-file")
    monkeypatch.setenv("GENGROUP_BOOTSTRAP", "env:1")
    assert connection(args(config=str(config))) == Connection("env:1", "from-file")
    monkeypatch.setenv("GENGROUP_CLIENT_ID", "env-id")
    got = connection(args(config=str(config), bootstrap="flag:1"))
    assert got == Connection("flag:1", "env-id")
    assert connection(args(client_id="flag-id", bootstrap="b:1")).client_id == "flag-id"


def test_the_file_from_the_environment_then_the_default_path(
    clean_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(UsageError, match="GENGROUP_BOOTSTRAP"):
        connection(args())
    write(clean_env / ".config/gengroup/config.toml", 'bootstrap = ["a:1", "b:2"]\n')
    assert connection(args()) == Connection("a:1,b:2", None)
    other = write(tmp_path / "other.toml", 'bootstrap = "other:1"\n')
    monkeypatch.setenv("GENGROUP_CONFIG", str(other))
    assert connection(args()).bootstrap == "other:1"
    # The flag names the file to read over the variable.
    flagged = write(tmp_path / "flagged.toml", 'bootstrap = "flagged:1"\n')
    assert connection(args(config=str(flagged))).bootstrap == "flagged:1"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (None, "from --config"),  # no such file
        ("bootstrap = \n", "not valid TOML"),
        ('bootstraps = "a:1"\n', "unknown key 'bootstraps'"),
        ("bootstrap = 9092\n", "string or list"),
        # Without a bootstrap address in it, the file is no answer either.
        ('client_id = "x"\n', "give --bootstrap"),
    ],
)
def test_bad_config_files_are_usage_errors(
    clean_env: Path, tmp_path: Path, text: str | None, match: str
) -> None:
    path = tmp_path / "gengroup.toml"
    if text is not None:
        write(path, text)
    with pytest.raises(UsageError, match=match):
        connection(args(config=str(path)))


def test_commands_use_the_config_file(served: str, tmp_path: Path) -> None:
    config = write(tmp_path / "gengroup.toml", f'bootstrap = "{served}"\nclient_id = "cfg-cli"\n')
    created = gengroup(
        "topics", "create", "configured", "--partitions", "2", env={"GENGROUP_CONFIG": str(config)}
    )
    assert created.returncode == 0, created.stderr
    home = tmp_path / "home"
    write(home / ".config/gengroup/config.toml", config.read_text())
    listed = gengroup("topics", "list", "--json", env={"HOME": str(home)})
    assert listed.returncode == 0, listed.stderr
    assert {"topic": "configured", "partitions": 2} in json.loads(listed.stdout)
    # The environment beats the file.
    env_wins = gengroup(
        "topics", "list", "--timeout", "1",
        env={"HOME": str(home), "GENGROUP_BOOTSTRAP": "127.0.0.1:1"},
    )  # fmt: skip
    assert env_wins.returncode == 1 and "127.0.0.1:1" in env_wins.stderr
    missing = gengroup("topics", "list", "--config", str(tmp_path / "nope.toml"))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1

    # The client id of the file is the one a group member sends.
    seed(served, "identified", partitions=1, per_partition=1)
    cmd = command("consume", "identified", "--group", "ids", "--from-beginning", "--config",
                  str(config))  # fmt: skip
    with running(cmd) as member:
        assert member.stdout is not None
        assert member.stdout.readline() == "p0-0\n"
        described = gengroup("groups", "describe", "ids", "--json", "--config", str(config))
        assert [m["client_id"] for m in json.loads(described.stdout)["members"]] == ["cfg-cli"]
        member.send_signal(signal.SIGINT)
        assert member.wait(timeout=60) == 0
