"""Running the mock upstream: `serve` for the CLI, `MockUpstreamServer` for tests and benchmarks.

Both run uvicorn with uvloop and httptools, access log off. The HTTP protocol is uvicorn's
httptools protocol plus one thing: it hands the connection's transport to the app (scope extension
`mirrorgate.connection`), so the `reset` and `disconnect_mid_stream` faults can really close the
socket — ASGI has no way to do that.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, TextIO

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from proxy.mock_upstream.app import MockUpstreamApp, create_app
from proxy.mock_upstream.behavior import BehaviorSpec, load_behavior
from proxy.mock_upstream.connection import CONNECTION_EXTENSION


class ConnectionExposingProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with the transport in each request's scope extensions."""

    def on_message_begin(self) -> None:
        super().on_message_begin()
        extensions: dict[str, Any] = {CONNECTION_EXTENSION: self.transport}
        self.scope["extensions"] = extensions


def uvicorn_config(app: Any, host: str, port: int, **options: Any) -> uvicorn.Config:
    """The uvicorn settings the mock always runs with; `options` adds or overrides."""
    settings: dict[str, Any] = {
        "loop": "uvloop",
        "http": ConnectionExposingProtocol,
        "ws": "none",
        "lifespan": "on",
        "access_log": False,
        "log_level": "warning",
        "server_header": False,
        **options,
    }
    return uvicorn.Config(app, host=host, port=port, **settings)


def serve(host: str, port: int, behavior_path: str | None, out: TextIO | None = None) -> None:
    """Run the mock upstream in the foreground until interrupted (`mirrorgate mock-upstream`).

    Once the socket is bound it prints one line to `out` (standard output by default) with the
    address and the `base_url` each SDK takes — the bound port, so `--port 0` tells its choice.
    Raises `BehaviorError` (naming every problem by key path) before listening when the behaviour
    file is invalid.
    """
    behavior = load_behavior(behavior_path) if behavior_path else BehaviorSpec()
    config = uvicorn_config(create_app(behavior), host, port)
    _AnnouncingServer(config, out if out is not None else sys.stdout).run()


def listening_line(url: str) -> str:
    """The line `serve` prints once listening on `url` (`http://host:port`)."""
    return (
        f"mirrorgate mock-upstream listening on {url} "
        f"(OpenAI base_url {url}/v1, Anthropic base_url {url})"
    )


class _PromptServer(uvicorn.Server):
    """A uvicorn server that stops as soon as it is asked to, not at its next tick.

    uvicorn looks at `should_exit` every 0.1 s; `exit_soon()` (from any thread) and a signal
    also wake that wait, so a test's stop or a Ctrl-C does not wait out the rest of a tick."""

    tick_s = 0.1
    """uvicorn's tick: how often the loop looks at `should_exit` and refreshes its headers."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._exit_asked: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        # uvicorn's own loop (Server.main_loop: a tick every 0.1 s until on_tick says to exit),
        # with the wait between ticks cut short by `exit_soon`.
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
        self.exit_soon()


class _AnnouncingServer(_PromptServer):
    """A uvicorn server that prints `listening_line` once its socket is bound."""

    def __init__(self, config: uvicorn.Config, out: TextIO) -> None:
        super().__init__(config)
        self.out = out

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.started and self.servers:
            bound = self.servers[0].sockets[0].getsockname()
            host = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
            print(listening_line(f"http://{host}:{bound[1]}"), file=self.out, flush=True)


class _SignallingServer(_PromptServer):
    """A uvicorn server that sets `ready` once startup is over, successful or not."""

    def __init__(self, config: uvicorn.Config, ready: threading.Event) -> None:
        super().__init__(config)
        self.ready = ready

    async def startup(self, sockets: Any = None) -> None:
        try:
            await super().startup(sockets)
        finally:
            self.ready.set()


class MockUpstreamServer:
    """A real mock upstream on `host:port` (port 0: any free port) in a background thread.

        with MockUpstreamServer(BehaviorSpec()) as upstream:
            client = openai.OpenAI(base_url=upstream.url + "/v1", api_key="x")

    `url` is `http://host:port` (Anthropic SDKs take it as is, OpenAI SDKs add `/v1`). `app`
    gives direct access to the recorder and fault counters.
    """

    def __init__(
        self,
        behavior: BehaviorSpec | str | Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        startup_timeout_s: float = 10.0,
        shutdown_timeout_s: float = 1.0,
    ) -> None:
        if behavior is None:
            behavior = BehaviorSpec()
        elif not isinstance(behavior, BehaviorSpec):
            behavior = load_behavior(behavior)
        self.app: MockUpstreamApp = create_app(behavior)
        self.host = host
        self._startup_timeout_s = startup_timeout_s
        self._ready = threading.Event()
        config = uvicorn_config(
            self.app, host, port, log_config=None, timeout_graceful_shutdown=shutdown_timeout_s
        )
        self._server = _SignallingServer(config, self._ready)
        self._thread = threading.Thread(target=self._run, name="mock-upstream", daemon=True)
        self._failure: BaseException | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """`http://host:port`: the Anthropic SDK's `base_url`."""
        return f"http://{self.host}:{self.port}"

    @property
    def openai_url(self) -> str:
        """`http://host:port/v1`: the OpenAI SDK's `base_url`."""
        return self.url + "/v1"

    def start(self) -> MockUpstreamServer:
        """Start serving; returns once the socket is bound and the app has started."""
        self._thread.start()
        if not self._ready.wait(self._startup_timeout_s):
            self.stop()
            raise RuntimeError(f"mock upstream did not start within {self._startup_timeout_s}s")
        if self._failure is not None or not self._server.started:
            self.stop()
            raise RuntimeError("mock upstream failed to start") from self._failure
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        """Stop serving and wait for the thread to end."""
        self._server.exit_soon()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        try:
            self._server.run()
        except BaseException as exc:  # a failed startup calls sys.exit() in this thread
            self._failure = exc
            self._ready.set()

    def __enter__(self) -> MockUpstreamServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
