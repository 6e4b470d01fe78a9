"""Running a gateway under uvicorn: as the `serve` command, or in a background thread.

SIGHUP reloads the configuration file (`proxy.app.reload`; a gateway not started from a file
logs that it has none and keeps serving). Stopping (SIGTERM, SIGINT, or `GatewayServer.stop`)
drains: the listening socket closes
and idle connections with it, in-flight exchanges get `server.drain_timeout_s` to finish, then
the gateway cuts the rest (each recorded as `shutdown`, its client told in its wire format),
uvicorn gets `CUT_GRACE_S` for what is left, and the lifespan drains the recorder.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

import uvicorn

from analyzers.errors import PluginError
from proxy.config import MirrorgateConfig
from proxy.observability import gcpause
from proxy.store import StoreError, masked_url

from .connection import connection_cap_warning, limited_protocol
from .gateway import Gateway
from .siblings import WorkerSiblings
from .switching import set_switch_interval

log = logging.getLogger("mirrorgate")

CUT_GRACE_S = 5
"""After the cut, how long uvicorn still waits for connections and tasks (the cut exchanges'
last words, admin calls) before it cancels them."""


def _uvicorn_config(
    gateway: Gateway,
    host: str,
    port: int,
    log_level: str | None = "warning",
    app: Any = None,
) -> uvicorn.Config:
    """`log_level`: uvicorn's loggers' own level; None leaves them at the root's (`serve`).
    `app`: what to serve instead of `gateway.app` (a worker's, guarding its private socket)."""
    return uvicorn.Config(
        gateway.app if app is None else app,
        host=host,
        port=port,
        loop="uvloop",
        http=limited_protocol(gateway.config.server.limits, gateway.connection_metrics),
        lifespan="on",
        interface="asgi3",
        proxy_headers=False,
        # Proxied answers carry the upstream's own date; uvicorn would add a second one.
        server_header=False,
        date_header=False,
        access_log=False,  # the gateway writes its own (`mirrorgate.access`)
        log_config=None,  # uvicorn's lines go through the gateway's handler and format
        log_level=log_level,
        timeout_graceful_shutdown=CUT_GRACE_S,
        timeout_keep_alive=gateway.config.server.limits.keep_alive_s,
    )


class _DrainingServer(uvicorn.Server):
    """uvicorn, draining the gateway's exchanges before it stops (see the module docstring),
    reloading the configuration on SIGHUP, and exiting 0 after a signal.

    uvicorn re-raises the captured signal after shutting down, so the process would die by it
    (status -15) even though every exchange was recorded; orchestrators and scripts read that
    as a crash.
    """

    tick_s = 0.1
    """uvicorn's tick: how often the loop looks at `should_exit` and refreshes its headers."""

    def __init__(
        self,
        config: uvicorn.Config,
        gateway: Gateway,
        on_started: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self.gateway = gateway
        self._on_started = on_started
        self._exit_asked: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self._on_started is not None:
            self._on_started()

    async def main_loop(self) -> None:
        # uvicorn's own loop (Server.main_loop: a tick every 0.1 s until on_tick says to exit),
        # with the wait between ticks cut short by `exit_soon`: a stop, SIGTERM or Ctrl-C starts
        # the drain at once rather than at the next tick.
        self._exit_asked = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit_asked.wait(), self.tick_s)
            should_exit = await self.on_tick(counter)

    def exit_soon(self) -> None:
        """Stop serving (thread-safe): what `should_exit = True` does, at once."""
        self.should_exit = True
        loop, asked = self._loop, self._exit_asked
        if loop is not None and asked is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: it already ended
                loop.call_soon_threadsafe(asked.set)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self._captured_signals.clear()
        self.exit_soon()

    def handle_hangup(self, sig: int, frame: FrameType | None) -> None:
        """SIGHUP: reload the configuration, on the event loop (a signal handler must not
        await); serving goes on whatever the reload's outcome."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not serving yet, or no more
            log.warning("SIGHUP ignored: the gateway is not serving")
            return
        loop.call_soon_threadsafe(self._spawn_reload)

    def _spawn_reload(self) -> None:
        if self.gateway.reloader is None:
            log.warning("SIGHUP: this gateway was not started from a configuration file")
            return
        self.gateway.background.spawn(self.gateway.reloader.reload("SIGHUP"), "reload")

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = signal.signal(signal.SIGHUP, self.handle_hangup)
            try:
                yield
            finally:
                signal.signal(signal.SIGHUP, previous)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Stop accepting and close idle connections (uvicorn does both again, harmlessly).
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        proxy = self.gateway.proxy
        drain_s = self.gateway.config.server.drain_timeout_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_s
        # In slices, so that a second Ctrl-C (uvicorn's force_exit) cuts at once.
        while not self.force_exit and loop.time() < deadline:
            if await proxy.drained(min(0.1, deadline - loop.time())):
                break
        cut = proxy.cut()
        if cut:
            log.warning(
                "stopping: %d exchange(s) still running after %gs were cut (recorded as shutdown)",
                cut,
                drain_s,
            )
        await super().shutdown(sockets)


def run_gateway(
    config: MirrorgateConfig, source: Callable[[], MirrorgateConfig] | None = None
) -> int:
    """Serve until SIGINT or SIGTERM; on each, stop accepting, give in-flight requests
    `server.drain_timeout_s`, cut and record the rest, drain the recorder; then exit 0. SIGHUP
    reloads the configuration from `source` (the file `config` was read from).
    A start-up failure the user can fix (the address cannot be listened on, the store cannot
    be used, an analyzer plugin fails) is one line on stderr and exit 1."""
    try:
        listener = listen(config.server.host, config.server.port)
    except ListenError as exc:
        print(f"mirrorgate: {exc}", file=sys.stderr)
        return 1
    return serve_listener(config, source, listener)


@dataclass(frozen=True, slots=True)
class WorkerRole:
    """How one worker of `serve --workers` speaks to the process that forked it."""

    index: int
    """The worker's number, 0 to `server.workers` - 1."""
    ready: Callable[[], None]
    """Called once the worker serves (its lifespan started, its socket accepting)."""
    failed: Callable[[str], None]
    """Called with the one-line reason when the worker cannot start."""
    reload_siblings: Callable[[], None]
    """Asks the other workers to reload (after `POST /admin/reload` reloaded this one)."""
    siblings: WorkerSiblings
    """Where every worker answers privately (for the merged `/metrics`)."""
    private: socket.socket
    """This worker's private loopback socket (served beside `listener`)."""


def serve_listener(
    config: MirrorgateConfig,
    source: Callable[[], MirrorgateConfig] | None,
    listener: socket.socket,
    worker: WorkerRole | None = None,
) -> int:
    """Serve on `listener` as `run_gateway` describes; as one worker of several when `worker`
    is given (its start-up failure goes to `worker.failed`, not stderr, and it does not say it
    listens: the parent does, once every worker is ready)."""

    def fail(message: str) -> int:
        listener.close()
        if worker is None:
            print(f"mirrorgate: {message}", file=sys.stderr)
        else:
            worker.private.close()
            worker.failed(message)
        return 1

    try:
        # Alone in this process: all its CPU is the gateway's (see `Gateway`'s `cpu_clock`), and
        # its start-up objects are frozen unless MIRRORGATE_GC_FREEZE=0 (gcpause.freeze_wanted).
        freeze = gcpause.freeze_wanted(os.environ)
        # The loop waits at most ~1 ms for one of the gateway's threads to give up the GIL.
        set_switch_interval(os.environ)
        gateway = Gateway(
            config,
            cpu_clock=time.process_time,
            freeze_gc=freeze,
            source=source,
            reload_siblings=worker.reload_siblings if worker is not None else None,
            siblings=worker.siblings if worker is not None else None,
        )
        # Reached and migrated before serving: a store that cannot be opened is one line on
        # stderr and exit 1, not a startup traceback (the lifespan's own migrate is then a no-op).
        gateway.store.migrate()
    except PluginError as exc:
        return fail(f"analyzers: {exc}")
    except StoreError as exc:
        return fail(store_problem(config.store.url, exc))
    open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if open_files != resource.RLIM_INFINITY and (worker is None or worker.index == 0):
        warning = connection_cap_warning(config.server.limits, open_files)
        if warning is not None:
            log.warning(warning)
    host, port = config.server.host, config.server.port
    app = None if worker is None else worker.siblings.guarded(gateway.app)
    server = _DrainingServer(
        _uvicorn_config(gateway, host, port, None, app),
        gateway,
        on_started=worker.ready if worker is not None else None,
    )
    if worker is None:
        log.info("listening on %s", listening_url(listener))
    server.run(sockets=[listener] if worker is None else [listener, worker.private])
    if not server.started and worker is not None:
        worker.failed("the gateway stopped during start-up (see the log above)")
    return 0 if server.started else 1


def listening_url(listener: socket.socket) -> str:
    """`http://host:port` of a bound socket (IPv6 hosts in brackets)."""
    bound = listener.getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    return f"http://{shown}:{bound[1]}"


class ListenError(Exception):
    """The gateway's address cannot be listened on; the message says why, in one line."""


def listen(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A listening TCP socket on `host:port` (`SO_REUSEADDR`, as uvicorn binds; `SO_REUSEPORT`
    too when `reuse_port`, so that several sockets share the port), or `ListenError` naming the
    address and the reason."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {host}:{port}: unknown host ({exc.strerror})") from exc
    family, _, _, _, address = infos[0]
    try:
        return socket.create_server(address, family=family, backlog=2048, reuse_port=reuse_port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ListenError(f"port {port} on {host} is in use") from exc
        if exc.errno == errno.EACCES:
            raise ListenError(f"port {port} on {host} needs privileges this user lacks") from exc
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ListenError(f"cannot listen on {host}: not an address of this machine") from exc
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


def store_problem(url: str, exc: StoreError) -> str:
    """One line naming the store (its password hidden) and why it cannot be used."""
    shown = masked_url(url)
    cause = next(iter(str(exc).strip().splitlines()), type(exc).__name__)
    cause = cause.replace(url, shown).removeprefix(f"{shown}: ")
    return f"cannot use the store at {shown}: {cause}"


class GatewayServer:
    """A real gateway on 127.0.0.1 in a background thread (for tests, the demo and benchmarks).

    `with GatewayServer(config) as gw:` blocks until it listens; `gw.url` is its base URL and
    `gw.gateway` the running `Gateway`. Leaving the block shuts it down the way SIGTERM would
    (on asyncio's own loop, not uvloop: this runs in a thread, beside whatever else does).
    """

    def __init__(self, config: MirrorgateConfig, **gateway_kwargs: Any) -> None:
        self.gateway = Gateway(config, **gateway_kwargs)
        self.server = _DrainingServer(
            _uvicorn_config(self.gateway, "127.0.0.1", config.server.port), self.gateway
        )
        self._thread = threading.Thread(target=self._run, name="mirrorgate-gateway", daemon=True)
        self._failure: BaseException | None = None
        self.port = 0

    def _run(self) -> None:
        try:
            asyncio.run(self.server.serve())
        except BaseException as exc:  # reported to the thread that waits for startup
            self._failure = exc

    def __enter__(self) -> GatewayServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.server.should_exit = True
                raise RuntimeError(f"gateway failed to start: {self._failure!r}")
            self._thread.join(0.01)
        sockets = [s for srv in self.server.servers for s in srv.sockets]
        self.port = sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.exit_soon()
        self._thread.join(60 + 2 * self.gateway.config.server.drain_timeout_s)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
