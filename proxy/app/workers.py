"""`serve --workers N`: N gateway processes on one port, forked and supervised by the first.

The parent binds one listening socket per worker, all on the same address with `SO_REUSEPORT`
(the kernel spreads new connections over them), before it forks: no worker can fail to bind,
and the port is fixed (even `port: 0`) before anything serves. It forks while it has no event
loop and no thread; each child closes its siblings' sockets, builds its own `Gateway` and runs
uvicorn on its own socket, exactly as a single `serve` does.

The parent serves nothing. It waits for signals (blocked, taken with `sigtimedwait`, so no
handler ever runs in the middle of its bookkeeping):

- start-up: it says "listening on ..." once every worker wrote "ready" on its pipe; a worker
  that cannot start (store unreachable, plugin error) makes it stop the others and exit 1 with
  that worker's one-line reason, instead of restarting it in a loop;
- a worker that dies later is restarted on the same socket (connections the kernel queued on
  it wait for the new worker) after a backoff of 0.5 s doubling to 30 s, reset once a worker
  has stayed up 60 s;
- SIGTERM or SIGINT is forwarded once to every worker (each drains as a single gateway does);
  the parent closes its copies of the sockets first, so the kernel stops queueing on them, and
  exits 0 when every worker exited 0; a worker still starting (it serves nothing yet) ends at
  once with exit code 0, so a stop during start-up is a clean stop too;
- SIGHUP is forwarded to every worker (each reloads its own configuration); a worker that was
  asked `POST /admin/reload` reloads itself and sends SIGHUP to the parent, which forwards it to
  the others only.

The workers run in process groups of their own, so that a Ctrl-C in a terminal reaches them
once, through the parent, and they ask the kernel for SIGTERM should the parent die.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from proxy.config import MirrorgateConfig
from proxy.observability import tag_worker

from .serve import ListenError, WorkerRole, listen, listening_url, serve_listener
from .siblings import WorkerSiblings

log = logging.getLogger("mirrorgate.workers")

RESTART_FIRST_S = 0.5
"""Wait before restarting a worker that died, the first time."""
RESTART_MAX_S = 30.0
"""The longest wait before a restart (the wait doubles at each death in a row)."""
STABLE_S = 60.0
"""A worker up this long resets its restart wait to `RESTART_FIRST_S`."""

_SIGNALS = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
_PR_SET_PDEATHSIG = 1


def reuse_port_listeners(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` listening sockets sharing `host:port` (`SO_REUSEPORT`); with port 0, the port
    the first one was given. `ListenError` if any cannot be bound (the others are closed)."""
    first = listen(host, port, reuse_port=True)
    listeners = [first]
    try:
        for _ in range(count - 1):
            listeners.append(listen(host, first.getsockname()[1], reuse_port=True))
    except ListenError:
        for listener in listeners:
            listener.close()
        raise
    return listeners


def restart_waits(planned_s: float, up_s: float) -> tuple[float, float]:
    """(the wait before this restart, the one planned for the next) for a worker that died
    after `up_s` seconds up, when `planned_s` was planned: doubling up to `RESTART_MAX_S`, from
    `RESTART_FIRST_S` again once a worker stayed up `STABLE_S`."""
    wait_s = RESTART_FIRST_S if up_s >= STABLE_S else planned_s
    return wait_s, min(wait_s * 2, RESTART_MAX_S)


@dataclass(slots=True)
class _Worker:
    index: int
    listener: socket.socket
    pid: int = 0
    started_at: float = 0.0
    restart_wait_s: float = RESTART_FIRST_S
    restart_at: float | None = None
    """When to fork it again (None: alive, or not to restart)."""
    ready_pipe: int | None = None
    """The parent's end of the readiness pipe, during the first start only."""
    said: bytes = b""
    """What the worker wrote on its pipe so far."""
    status: int | None = None
    """Its exit code once reaped (a negative number: killed by that signal)."""


def run_workers(
    config: MirrorgateConfig, source: Callable[[], MirrorgateConfig] | None = None
) -> int:
    """Serve with `config.server.workers` processes (see the module docstring); the exit code
    of `serve`: 0 after a clean stop, 1 if the port cannot be bound or a worker cannot start."""
    server = config.server
    try:
        listeners = reuse_port_listeners(server.host, server.port, server.workers)
    except ListenError as exc:
        print(f"mirrorgate: {exc}", file=sys.stderr)
        return 1
    if threading.active_count() > 1:  # a fork copies only the calling thread
        log.warning("forking workers beside %d other thread(s)", threading.active_count() - 1)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        supervisor = _Supervisor(config, source, listeners)
    except ListenError as exc:
        for listener in listeners:
            listener.close()
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        print(f"mirrorgate: {exc}", file=sys.stderr)
        return 1
    try:
        return supervisor.run()
    finally:
        for listener in [*listeners, *supervisor.private]:
            listener.close()
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class _Supervisor:
    def __init__(
        self,
        config: MirrorgateConfig,
        source: Callable[[], MirrorgateConfig] | None,
        listeners: list[socket.socket],
    ) -> None:
        self.config = config
        self.source = source
        self.listeners = listeners
        self.workers = [_Worker(i, listener) for i, listener in enumerate(listeners)]
        # Each worker's private socket, on loopback whatever the public host (the merged
        # /metrics fetches the siblings' expositions there).
        self.private = [listen("127.0.0.1", 0) for _ in listeners]
        self.private_ports = tuple(p.getsockname()[1] for p in self.private)
        self.stopping = False

    # --- the parent's loop ------------------------------------------------------------------------

    def run(self) -> int:
        for worker in self.workers:
            self._fork(worker, first=True)
        problem = self._wait_ready()
        if self.stopping:  # stopped while starting: the workers' ends say how it went
            return self._wait_all()
        if problem is not None:
            print(f"mirrorgate: {problem}", file=sys.stderr)
            self._stop(signal.SIGTERM)
            self._wait_all()
            return 1
        log.info(
            "listening on %s (%d workers)", listening_url(self.listeners[0]), len(self.workers)
        )
        while True:
            now = time.monotonic()
            due = [w.restart_at for w in self.workers if w.restart_at is not None]
            timeout = max(0.0, min(due) - now) if due else 60.0
            info = signal.sigtimedwait(_SIGNALS, timeout)
            if info is None:
                self._restart_due()
                continue
            if info.si_signo in (signal.SIGTERM, signal.SIGINT):
                self._stop(info.si_signo)
                return self._wait_all()
            if info.si_signo == signal.SIGHUP:
                self._forward_hangup(info.si_pid)
            else:
                self._reap()

    def _wait_ready(self) -> str | None:
        """Until every worker said "ready": None, or the first one's reason for failing."""
        while not self.stopping:
            waiting = {w.ready_pipe: w for w in self.workers if w.ready_pipe is not None}
            if not waiting:
                return None
            readable, _, _ = select.select(list(waiting), [], [], 0.05)
            for fd in readable:
                problem = self._read_pipe(waiting[fd])
                if problem is not None:
                    return problem
            info = signal.sigtimedwait(_SIGNALS, 0)
            if info is None:
                continue
            if info.si_signo in (signal.SIGTERM, signal.SIGINT):
                self._stop(info.si_signo)
            elif info.si_signo == signal.SIGHUP:
                self._forward_hangup(info.si_pid)
            else:  # SIGCHLD: a ready worker died (one still starting: its pipe says so)
                self._reap()
        return None

    def _read_pipe(self, worker: _Worker) -> str | None:
        if worker.ready_pipe is None:
            return None
        chunk = os.read(worker.ready_pipe, 4096)
        worker.said += chunk
        if chunk and b"\n" not in worker.said:
            return None
        os.close(worker.ready_pipe)
        worker.ready_pipe = None
        line = worker.said.decode(errors="replace").partition("\n")[0]
        if line == "ready":
            log.info("worker %d (pid %d) ready", worker.index, worker.pid)
            return None
        if line.startswith("error "):
            return line.removeprefix("error ")
        status = self._wait_for(worker)
        return f"worker {worker.index} (pid {worker.pid}) exited before it was ready ({status})"

    def _wait_for(self, worker: _Worker) -> str:
        _, code = os.waitpid(worker.pid, 0)
        worker.status = os.waitstatus_to_exitcode(code)
        return _described(worker.status)

    def _reap(self) -> None:
        """Take the exit of every worker that ended (but one still starting, whose end its
        pipe reports) and plan its restart unless stopping."""
        for worker in self._alive():
            if worker.ready_pipe is not None and not self.stopping:
                continue
            pid, code = os.waitpid(worker.pid, os.WNOHANG)
            if pid == 0:
                continue
            worker.status = os.waitstatus_to_exitcode(code)
            if self.stopping:
                log.info(
                    "worker %d (pid %d) exited (%s)",
                    worker.index,
                    pid,
                    _described(worker.status),
                )
                continue
            now = time.monotonic()
            wait_s, worker.restart_wait_s = restart_waits(
                worker.restart_wait_s, now - worker.started_at
            )
            worker.restart_at = now + wait_s
            log.warning(
                "worker %d (pid %d) exited (%s): restarting it in %gs",
                worker.index,
                pid,
                _described(worker.status),
                wait_s,
            )

    def _restart_due(self) -> None:
        now = time.monotonic()
        for worker in self.workers:
            if worker.restart_at is not None and worker.restart_at <= now:
                self._fork(worker, first=False)

    def _forward_hangup(self, sender: int) -> None:
        """SIGHUP to every live worker but `sender` (a worker that reloaded itself already)."""
        for worker in self._alive():
            if worker.pid != sender:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signal.SIGHUP)
        log.info("SIGHUP forwarded to the workers")

    def _stop(self, signo: int) -> None:
        """Forward `signo` once to every live worker, after closing the parent's sockets."""
        self.stopping = True
        for listener in [*self.listeners, *self.private]:
            listener.close()
        for worker in self.workers:
            worker.restart_at = None
        for worker in self._alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signo)
        log.info("%s forwarded to the workers", signal.Signals(signo).name)

    def _wait_all(self) -> int:
        """Wait until every worker exited (further stop signals are ignored: forwarded once);
        0 if each exited 0."""
        while self._alive():
            info = signal.sigtimedwait(_SIGNALS, 1.0)
            if info is not None and info.si_signo == signal.SIGCHLD:
                self._reap()
            elif info is None:
                self._reap()  # a SIGCHLD merged with one already taken
        return 0 if all(w.status == 0 for w in self.workers) else 1

    def _alive(self) -> list[_Worker]:
        return [w for w in self.workers if w.pid and w.status is None]

    # --- forking ----------------------------------------------------------------------------------

    def _fork(self, worker: _Worker, *, first: bool) -> None:
        read_end, write_end = os.pipe() if first else (None, None)
        worker.restart_at = None
        worker.status = None
        worker.said = b""
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the worker: never returns
            if read_end is not None:
                os.close(read_end)
            self._be_worker(worker, write_end)
        if write_end is not None:
            os.close(write_end)
        worker.pid = pid
        worker.ready_pipe = read_end
        worker.started_at = time.monotonic()
        log.info("worker %d started (pid %d)", worker.index, pid)

    def _be_worker(self, worker: _Worker, pipe: int | None) -> None:
        code = 1
        try:
            parent = os.getppid()
            _leave_terminal_group_and_follow(parent)
            for signo in (signal.SIGHUP, signal.SIGCHLD):
                signal.signal(signo, signal.SIG_DFL)
            # Until uvicorn takes them over (and after it gives them back), a stop forwarded
            # by the parent ends a worker that serves nothing yet: quietly, with exit code 0.
            for signo in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signo, _stop_before_serving)
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            tag_worker(worker.index)
            for other in self.workers:
                if other is not worker:
                    other.listener.close()
                    self.private[other.index].close()
                    if other.ready_pipe is not None:
                        os.close(other.ready_pipe)
            role = WorkerRole(
                worker.index,
                ready=lambda: _say(pipe, "ready"),
                failed=lambda message: _say(pipe, f"error {message}", stderr=pipe is None),
                reload_siblings=lambda: os.kill(parent, signal.SIGHUP),
                siblings=WorkerSiblings(worker.index, self.private_ports),
                private=self.private[worker.index],
            )
            code = serve_listener(self.config, self.source, worker.listener, role)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # the worker's last words, then its own exit
            traceback.print_exc()
        finally:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


def _stop_before_serving(signo: int, frame: object) -> None:
    raise SystemExit(0)


def _say(pipe: int | None, line: str, stderr: bool = False) -> None:
    """One line to the parent's readiness pipe (ignored once the pipe is gone)."""
    if stderr:
        print(f"mirrorgate: {line.removeprefix('error ')}", file=sys.stderr)
    if pipe is None:
        return
    with contextlib.suppress(OSError):
        os.write(pipe, line.replace("\n", " ").encode() + b"\n")
        os.close(pipe)


def _leave_terminal_group_and_follow(parent: int) -> None:
    """A process group of the worker's own (a terminal's Ctrl-C reaches the parent alone, which
    forwards it once), and SIGTERM from the kernel should the parent die (Linux)."""
    os.setpgid(0, 0)
    name = ctypes.util.find_library("c")
    if name is not None:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(name, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _described(status: int) -> str:
    if status < 0:
        return f"killed by {signal.Signals(-status).name}"
    return f"exit code {status}"
