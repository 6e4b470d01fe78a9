"""The processes a benchmark starts: watched through /proc, stopped by PID.

`ServerProcess` starts a command (usually wrapped in `taskset -c CPUS` and `nice`, which both
exec, so the PID we hold is the server's own), waits for readiness on a condition with a
deadline, reads its resident memory and CPU time from /proc, and stops it — SIGTERM, then
SIGKILL after a grace period — together with any children it spawned, each by PID. Nothing
here signals a process this module did not start.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class StartupError(RuntimeError):
    """A server exited or did not become ready before its deadline (the log tail is attached)."""


def http_ok(url: str) -> Callable[[], bool]:
    """A readiness check: GET `url` answers 2xx."""

    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                return 200 <= int(response.status) < 300
        except (OSError, urllib.error.URLError):
            return False

    return check


def tcp_open(host: str, port: int) -> Callable[[], bool]:
    """A readiness check: a TCP connect to host:port succeeds."""

    def check() -> bool:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            return False

    return check


def port_free(host: str, port: int) -> bool:
    """Nothing listens on host:port yet (so we will not benchmark someone else's server)."""
    return not tcp_open(host, port)()


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel has free on `host` now (another process may take it before we bind)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def process_stats() -> Iterator[tuple[int, str, list[str]]]:
    """(pid, command name, the fields after the name) of every process /proc lets us read; a
    process gone since the listing is skipped."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone since the listing, or not ours to read
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        yield int(entry.name), name, rest.split()


def children(pid: int) -> list[int]:
    """Every descendant of `pid`, found by walking /proc/*/stat parent links."""
    parents: dict[int, list[int]] = {}
    for child, _name, fields in process_stats():
        parents.setdefault(int(fields[1]), []).append(child)
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def rss_bytes(pid: int) -> int:
    """VmRSS of one process, in bytes (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process (all its threads), in seconds."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def machine_busy_seconds() -> float:
    """Non-idle CPU time of the whole machine since boot, in seconds (from /proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / CLOCK_TICKS


class ServerProcess:
    """One server we started: `with ServerProcess(...) as proc:` starts it and waits until ready."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        ready: Callable[[], bool],
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        startup_timeout_s: float = 60.0,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self._ready = ready
        self.log_path = log_path
        self._env = env
        self._cwd = cwd
        self._startup_timeout_s = startup_timeout_s
        self._popen: subprocess.Popen[bytes] | None = None
        self.startup_s = 0.0
        self._launched_at = 0.0

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise RuntimeError(f"{self.name} is not running")
        return self._popen.pid

    def start(self) -> ServerProcess:
        """Launch and wait until ready (see `launch` and `wait_ready` to start several at once)."""
        self.launch()
        self.wait_ready()
        return self

    def launch(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._launched_at = time.monotonic()
        with self.log_path.open("wb") as log:
            self._popen = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self._env, cwd=self._cwd, start_new_session=True,
            )  # fmt: skip

    def wait_ready(self) -> None:
        """Poll the readiness check until it passes; raise `StartupError` on exit or deadline."""
        if self._popen is None:
            raise RuntimeError(f"{self.name} was not launched")
        deadline = self._launched_at + self._startup_timeout_s
        while not self._ready():
            if self._popen.poll() is not None:
                code = self._popen.returncode
                self._popen = None
                raise StartupError(f"{self.name} exited with {code}:\n{self.tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise StartupError(
                    f"{self.name} not ready after {self._startup_timeout_s:.0f}s:\n{self.tail()}"
                )
            time.sleep(0.1)
        self.startup_s = time.monotonic() - self._launched_at

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def pids(self) -> list[int]:
        """This server and every process it spawned (worker processes count towards its cost)."""
        return [self.pid, *children(self.pid)] if self._popen is not None else []

    def rss_bytes(self) -> int:
        """Resident memory of the server and its children together."""
        return sum(rss_bytes(pid) for pid in self.pids())

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids())

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the server and its children (by PID), SIGKILL whatever outlives the grace."""
        if self._popen is None:
            return
        popen, self._popen = self._popen, None
        family = [popen.pid, *children(popen.pid)]
        for pid in family:
            _signal(pid, signal.SIGTERM)
        try:
            popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            _signal(popen.pid, signal.SIGKILL)
            popen.wait(5)
        for pid in family[1:]:
            if Path(f"/proc/{pid}").exists():
                _signal(pid, signal.SIGKILL)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
