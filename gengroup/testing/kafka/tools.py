"""Find the ``java`` and ``mvn`` executables the Kafka test harness runs.

A missing or too old tool is a :class:`KafkaHarnessError` naming the package to
install, never a bare ``FileNotFoundError`` from deep inside ``subprocess``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from ._base import INSTALL_HINT, MIN_JAVA, KafkaHarnessError

__all__ = ["check_java_version", "find_java", "find_mvn", "missing_tool"]


def missing_tool(what: str, detail: str) -> KafkaHarnessError:
    """The error for a tool the harness needs but cannot run.

    Args:
        what: The tool, as the user knows it (``"Java (`java`)"``).
        detail: What went wrong, completing "..., but ...".

    Returns:
        The error, ending with how to install the tools.
    """
    return KafkaHarnessError(
        f"{what} is required to run the Apache Kafka test broker, but {detail}. "
        f"Install Java {MIN_JAVA}+ and Maven 3, e.g. with: {INSTALL_HINT}"
    )


def _resolve_tool(
    name: str, what: str, explicit: str | os.PathLike[str] | None, home_var: str | None
) -> str:
    if explicit is not None:
        path = os.fspath(explicit)
        if os.sep in path or (os.altsep and os.altsep in path):
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
            raise missing_tool(what, f"{path!r} does not exist or is not executable")
        found = shutil.which(path)
        if found is None:
            raise missing_tool(what, f"{path!r} was not found on PATH")
        return found
    if home_var is not None and (home := os.environ.get(home_var)):
        candidate = os.path.join(home, "bin", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found is None:
        where = f"${home_var}/bin/{name} nor " if home_var else ""
        raise missing_tool(what, f"neither {where}`{name}` on PATH was found")
    return found


def find_java(java: str | os.PathLike[str] | None = None) -> str:
    """Locate the ``java`` executable.

    Args:
        java: An explicit path or command name; when omitted, ``$JAVA_HOME/bin/java``
            and then ``java`` on ``PATH`` are tried.

    Returns:
        The path of the executable.

    Raises:
        KafkaHarnessError: No usable ``java`` was found.
    """
    return _resolve_tool("java", "Java (`java`)", java, "JAVA_HOME")


def find_mvn(mvn: str | os.PathLike[str] | None = None) -> str:
    """Locate Maven, needed only the first time, to fetch the jars.

    Like :func:`find_java`, with ``$MAVEN_HOME/bin/mvn`` tried before ``mvn``
    on ``PATH`` when ``mvn`` is not given; raises :class:`KafkaHarnessError`
    if none is usable.
    """
    return _resolve_tool("mvn", "Maven (`mvn`)", mvn, "MAVEN_HOME")


_java_majors: dict[str, int] = {}


def check_java_version(java: str) -> None:
    """Raise unless ``java`` is at least Java :data:`MIN_JAVA` (an unknown format passes)."""
    major = _java_majors.get(java)
    if major is None:
        try:
            done = subprocess.run(
                [java, "-version"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise missing_tool("Java (`java`)", f"{java!r} could not be run ({exc})") from exc
        text = (done.stderr + done.stdout).decode(errors="replace")
        match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
        if match is None:
            return  # an unknown format: let the broker itself complain if it must
        major = int(match.group(1))
        if major == 1 and match.group(2):  # "1.8.0_392" is Java 8
            major = int(match.group(2))
        _java_majors[java] = major
    if major < MIN_JAVA:
        raise missing_tool(f"Java {MIN_JAVA}+", f"{java!r} is Java {major}")
