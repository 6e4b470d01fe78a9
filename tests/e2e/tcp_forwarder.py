"""A TCP forwarder on 127.0.0.1 that can cut a service off and bring it back: put it between a
gateway and its database to make the store unavailable on demand.

`cut()` aborts every forwarded connection (both sides: the client sees a reset, the server sees
its client go away) and, until `restore()`, answers every new connection by closing it at once.
It runs its own event loop in a thread, so the test's blocking code can drive it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any


class TcpForwarder:
    """127.0.0.1:`port` → `target_host`:`target_port`."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._loop = asyncio.new_event_loop()
        self._up = True
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0
        self.refused = 0
        """Connections answered by closing them while cut."""
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-forwarder")
        self._thread.start()
        self._call(self._listen())

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            if not self._up:
                self.refused += 1
                writer.transport.abort()
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self._target)
            except OSError:
                writer.transport.abort()
                return
            if not self._up:  # cut while connecting
                self.refused += 1
                writer.transport.abort()
                up_writer.transport.abort()
                return
            self._writers |= {writer, up_writer}
            try:
                await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
            finally:
                for each in (writer, up_writer):
                    self._writers.discard(each)
                    each.transport.abort()
        finally:
            self._handlers.discard(task)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy one direction; when it ends (or fails) the whole connection ends."""
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.transport.abort()

    async def _set(self, up: bool) -> None:
        self._up = up
        if not up:
            for writer in list(self._writers):
                writer.transport.abort()

    def cut(self) -> None:
        """Reset every open connection and refuse new ones until `restore`."""
        self._call(self._set(False))

    def restore(self) -> None:
        """Forward new connections again."""
        self._call(self._set(True))

    async def _shutdown(self) -> None:
        await self._set(False)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._handlers:  # every connection was aborted: their handlers are ending
            await asyncio.wait(set(self._handlers), timeout=5)

    def close(self) -> None:
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> TcpForwarder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
