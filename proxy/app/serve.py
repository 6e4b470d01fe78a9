"""Running a gateway under uvicorn: as the `serve` command, or in a background thread."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from types import FrameType, TracebackType
from typing import Any

import uvicorn

from analyzers.errors import PluginError
from proxy.config import MirrorgateConfig
from proxy.store import StoreError, masked_url

from .gateway import Gateway


def _uvicorn_config(
    gateway: Gateway, host: str, port: int, log_level: str = "warning"
) -> uvicorn.Config:
    return uvicorn.Config(
        gateway.app,
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        interface="asgi3",
        proxy_headers=False,
        # Proxied answers carry the upstream's own date; uvicorn would add a second one.
        server_header=False,
        date_header=False,
        access_log=False,
        log_level=log_level,
        timeout_graceful_shutdown=int(gateway.config.server.drain_timeout_s),
        timeout_keep_alive=75,
    )


class _DrainingServer(uvicorn.Server):
    """uvicorn, except that a shutdown by SIGTERM/SIGINT that drained cleanly exits with 0.

    uvicorn re-raises the captured signal after shutting down, so the process would die by it
    (status -15) even though nothing was lost; orchestrators and scripts read that as a crash.
    """

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self._captured_signals.clear()


def run_gateway(config: MirrorgateConfig) -> int:
    """Serve until SIGINT/SIGTERM; on either, stop accepting, finish in-flight requests, drain."""
    try:
        # Alone in this process: all its CPU is the gateway's (see `Gateway`'s `cpu_clock`).
        gateway = Gateway(config, cpu_clock=time.process_time)
        # Reached and migrated before serving: a store that cannot be opened is one line on
        # stderr and exit 1, not a startup traceback (the lifespan's own migrate is then a no-op).
        gateway.store.migrate()
    except PluginError as exc:
        print(f"mirrorgate: analyzers: {exc}", file=sys.stderr)
        return 1
    except StoreError as exc:
        print(f"mirrorgate: {store_problem(config.store.url, exc)}", file=sys.stderr)
        return 1
    server = _DrainingServer(
        _uvicorn_config(gateway, config.server.host, config.server.port, "info")
    )
    server.run()
    return 0 if server.started else 1


def store_problem(url: str, exc: StoreError) -> str:
    """One line naming the store (its password hidden) and why it cannot be used."""
    shown = masked_url(url)
    cause = next(iter(str(exc).strip().splitlines()), type(exc).__name__)
    cause = cause.replace(url, shown).removeprefix(f"{shown}: ")
    return f"cannot use the store at {shown}: {cause}"


class GatewayServer:
    """A real gateway on 127.0.0.1 in a background thread (for tests, the demo and benchmarks).

    `with GatewayServer(config) as gw:` blocks until it listens; `gw.url` is its base URL and
    `gw.gateway` the running `Gateway`. Leaving the block shuts it down the way SIGTERM would.
    """

    def __init__(self, config: MirrorgateConfig, **gateway_kwargs: Any) -> None:
        self.gateway = Gateway(config, **gateway_kwargs)
        self.server = uvicorn.Server(_uvicorn_config(self.gateway, "127.0.0.1", config.server.port))
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
        self.server.should_exit = True
        self._thread.join(60)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
