"""Process supervision: the broker's JVM, its watchdog, and no orphans.

The JVM runs in its own process group (it is the group leader, so its pid is
the group id) and every signal goes to the whole group. Two safety nets keep a
broker from outliving the Python process that started it:

* :func:`track` registers a broker's emergency stop with an ``atexit`` hook
  that SIGKILLs every broker still alive when the interpreter exits normally;
* a tiny watchdog process per JVM holds the read end of a pipe whose write end
  only this process has. :meth:`JvmProcess.stop` writes to the pipe before
  closing it ("disarmed"); if this process dies without stopping the broker
  (even by SIGKILL), the watchdog reads a bare end-of-file and terminates the
  broker's process group, then removes its data directory.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from ._base import KafkaHarnessError, tail

__all__ = ["JvmProcess", "free_ports", "killpg", "run_logged", "spawn", "track", "untrack"]

_WATCHDOG_WAIT: Final = 10.0

# The watchdog runs as `python -I -S -c _WATCHDOG_SOURCE PGID [DIR]`, stdin = the
# read end of a pipe. Data before end-of-file means "disarmed"; bare end-of-file
# means the owner died: terminate the broker's process group, then remove DIR.
_WATCHDOG_SOURCE: Final = """
import os, shutil, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
pgid = int(sys.argv[1])
if sys.stdin.buffer.read():
    sys.exit(0)
def gone():
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return True
    return False
if not gone():
    os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.2)
    if not gone():
        os.killpg(pgid, signal.SIGKILL)
        time.sleep(0.5)
if len(sys.argv) > 2 and sys.argv[2]:
    shutil.rmtree(sys.argv[2], ignore_errors=True)
"""


def killpg(pgid: int, sig: signal.Signals) -> bool:
    """Signal a process group.

    Returns:
        False if the group no longer exists (or the id now names another's group).
    """
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # the id now names a group that is not ours
        return False
    return True


def free_ports(count: int, exclude: Sequence[int] = ()) -> list[int]:
    """Pick ``count`` distinct free loopback ports, none of them in ``exclude``.

    The ports are free when picked; another process may still take one before
    the broker binds it (the broker's start retries with new ports).
    """
    socks: list[socket.socket] = []
    try:
        ports: list[int] = []
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if port not in exclude and port not in ports:
                ports.append(port)
        return ports
    finally:
        for sock in socks:
            sock.close()


def spawn(
    command: Sequence[str], *, cwd: Path, output: Path, new_session: bool = False
) -> subprocess.Popen[bytes]:
    """Start ``command`` with no stdin, its stdout and stderr appended to ``output``.

    Args:
        command: The argument vector.
        cwd: The working directory.
        output: The log file.
        new_session: Make the process the leader of a new session and process group.
    """
    with output.open("ab") as out:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=new_session,
        )


def run_logged(
    command: Sequence[str], *, cwd: Path, output: Path, timeout: float, doing: str, lines: int
) -> None:
    """Run ``command`` to completion, its stdout and stderr appended to ``output``.

    Args:
        command: The argument vector.
        cwd: The working directory.
        output: The log file.
        timeout: Seconds after which the process is killed.
        doing: What the command does, for the error message.
        lines: How many of the log's last lines the error message quotes.

    Raises:
        KafkaHarnessError: The command ran out of time or exited with a non-zero code.
    """
    proc = spawn(command, cwd=cwd, output=output)
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise KafkaHarnessError(
            f"{doing} did not finish within {timeout:.0f} s:\n{tail(output, lines)}"
        ) from None
    if code != 0:
        raise KafkaHarnessError(f"{doing} failed (exit code {code}):\n{tail(output, lines)}")


class JvmProcess:
    """A started JVM leading its own process group, watched by a watchdog.

    Args:
        command: The argument vector.
        cwd: The working directory.
        output: The file the process's stdout and stderr are appended to.
        cleanup: A directory the watchdog removes after terminating an orphaned
            process (``None``: keep it).
    """

    def __init__(
        self, command: Sequence[str], *, cwd: Path, output: Path, cleanup: Path | None
    ) -> None:
        self._proc = spawn(command, cwd=cwd, output=output, new_session=True)
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._watchdog_fd: int | None = None
        try:
            self._arm_watchdog("" if cleanup is None else str(cleanup))
        except BaseException:
            killpg(self.pid, signal.SIGKILL)
            self._proc.wait()
            raise

    @property
    def pid(self) -> int:
        """The process id, also the id of its process group."""
        return self._proc.pid

    def poll(self) -> int | None:
        """The exit code, or ``None`` while the process runs."""
        return self._proc.poll()

    def stop(self, *, kill: bool, timeout: float) -> None:
        """End the process group and disarm the watchdog.

        Args:
            kill: SIGKILL at once; otherwise SIGTERM, then SIGKILL after ``timeout``.
            timeout: Seconds to wait after SIGTERM.
        """
        proc, pgid = self._proc, self._proc.pid
        try:
            if proc.poll() is None:
                if kill:
                    killpg(pgid, signal.SIGKILL)
                    proc.wait()
                else:
                    killpg(pgid, signal.SIGTERM)
                    try:
                        proc.wait(timeout=timeout)
                    except subprocess.TimeoutExpired:
                        killpg(pgid, signal.SIGKILL)
                        proc.wait()
        finally:
            # The JVM led its own group; kill anything that might linger in it.
            killpg(pgid, signal.SIGKILL)
            self.disarm()

    def kill_now(self, wait: float = 10.0) -> None:
        """SIGKILL the process group and wait up to ``wait`` seconds (exit hooks).

        The watchdog stays armed: :meth:`disarm` it once the caller may.
        """
        killpg(self._proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=wait)

    def disarm(self) -> None:
        """Tell the watchdog the process was stopped on purpose, and reap it. Idempotent."""
        fd, self._watchdog_fd = self._watchdog_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.write(fd, b"disarm\n")
            os.close(fd)
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            try:
                watchdog.wait(timeout=_WATCHDOG_WAIT)
            except subprocess.TimeoutExpired:
                watchdog.kill()
                watchdog.wait()

    def _arm_watchdog(self, cleanup: str) -> None:
        if not sys.executable:
            return
        read_fd, write_fd = os.pipe()
        try:
            self._watchdog = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG_SOURCE, str(self.pid), cleanup],
                stdin=read_fd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError:
            os.close(write_fd)  # no watchdog: the atexit hook still covers normal exits
            return
        finally:
            os.close(read_fd)
        self._watchdog_fd = write_fd


# ---------------------------------------------------------------- atexit


_live: dict[object, Callable[[], None]] = {}
_live_lock = threading.Lock()
_atexit_registered = False


def track(owner: object, emergency_stop: Callable[[], None]) -> None:
    """Have ``emergency_stop`` called at interpreter exit unless :func:`untrack` ran first.

    Args:
        owner: The key (a broker).
        emergency_stop: Kills what ``owner`` runs; must not block for long.
    """
    global _atexit_registered
    with _live_lock:
        if not _atexit_registered:
            atexit.register(_stop_all_at_exit)
            _atexit_registered = True
        _live[owner] = emergency_stop


def untrack(owner: object) -> None:
    """Forget ``owner`` (it was stopped). Idempotent."""
    with _live_lock:
        _live.pop(owner, None)


def _stop_all_at_exit() -> None:
    with _live_lock:
        stops = list(_live.values())
    for stop in stops:
        with contextlib.suppress(Exception):
            stop()
