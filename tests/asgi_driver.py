"""A raw ASGI driver for tests: an ASGI app on an event loop of its own, called through httpx.

`AppThread` runs the app the way a server would: on an event loop in a background thread, with its
lifespan started when the thread starts and shut down (after the calls in flight) when it stops.
`sync_transport` and `async_transport` make httpx transports that call the app on that loop, so
plain `httpx` clients and the official SDKs work unchanged (pass `transport=` / `http_client=`).
The SDKs use `httpx2`, a fork of httpx with the same API: the transports are made for either.

Unlike `httpx.ASGITransport`, the response is handed to the client message by message as the app
sends it: a stream is read while the app is still producing it, chunk for chunk, in the order it
was sent, and closing a response early is the client hanging up (the app's `receive()` then
answers `http.disconnect`, as uvicorn's does; later `send()`s are dropped, as uvicorn drops them).
The request body is read from the client first and delivered as one `http.request` message per
chunk it gave.

What a server adds and this driver has not — sockets, flow control, slow or half-sent requests,
connection handling — is tested against real servers in tests/e2e/.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping
from types import ModuleType
from typing import Any
from urllib.parse import unquote

import httpx

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
ASGIApp = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
    Awaitable[None],
]
Event = tuple[Any, ...]
"""What a call hands its client: ("start", status, headers), ("body", bytes), ("end",) or
("error", exception)."""


class Call:
    """One request on the app's loop, as its client sees it: events arrive through `deliver`
    (called on the app's loop thread; it must not block), `hang_up` is the client going away."""

    def __init__(self, app_thread: AppThread, deliver: Callable[[Event], None]) -> None:
        self._loop = app_thread.loop
        self._deliver = deliver
        self._closed = asyncio.Event()  # the response is complete or the client is gone
        self._client_gone = False

    def hang_up(self) -> None:
        """The client closed its end (thread-safe; nothing happens once the response ended)."""
        self._loop.call_soon_threadsafe(self._gone)

    def _gone(self) -> None:
        self._client_gone = True
        self._closed.set()

    def _emit(self, event: Event) -> None:
        try:
            self._deliver(event)
        except Exception:  # the client's side is gone (e.g. its event loop is closed)
            self._gone()

    async def serve(self, app: ASGIApp, scope: Scope, chunks: list[bytes] | None) -> None:
        """Run the app for this request. `chunks`: the request body as sent; None for a client
        that sends its headers and then nothing, ever."""
        pending = None if chunks is None else (list(chunks) or [b""])
        complete = False

        async def receive() -> Message:
            if pending:
                body = pending.pop(0)
                return {"type": "http.request", "body": body, "more_body": bool(pending)}
            await self._closed.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            nonlocal complete
            if self._client_gone:
                return
            if message["type"] == "http.response.start":
                self._emit(("start", message["status"], list(message.get("headers", []))))
            elif message["type"] == "http.response.body":
                body = bytes(message.get("body", b""))
                if body:
                    self._emit(("body", body))
                if not message.get("more_body", False):
                    complete = True
                    self._closed.set()
                    self._emit(("end",))

        try:
            await app(scope, receive, send)
        except BaseException as exc:
            self._emit(("error", exc))
            raise
        if not complete:  # the app returned without finishing its answer: the connection drops
            self._emit(("error", RuntimeError("the app returned before its response was complete")))


class AppThread:
    """An ASGI app served on its own event loop in a daemon thread, lifespan included.

    `start()` runs the lifespan's startup and raises if the app refuses to start; `stop()` waits
    up to `drain_timeout_s` for the calls in flight, cancels what is left (as a server does at
    its graceful-shutdown deadline), runs the lifespan's shutdown and ends the thread.
    """

    def __init__(self, app: ASGIApp, *, name: str = "asgi-app") -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()
        """The loop the app runs on (for tests that schedule work on it)."""
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._inflight: set[asyncio.Future[Any]] = set()
        self._to_app: asyncio.Queue[Message] | None = None
        self._from_app: asyncio.Queue[Message] | None = None
        self._lifespan: asyncio.Task[None] | None = None
        self._state: dict[str, Any] = {}
        self._started = False

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Awaitable[Any], timeout_s: float | None = None) -> Any:
        """Run `coro` on the app's loop and return its result (call from any other thread)."""

        async def wrapped() -> Any:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrapped(), self.loop).result(timeout_s)

    def start(self, timeout_s: float = 30.0) -> None:
        self._thread.start()
        try:
            self.run(self._startup(), timeout_s)
        except BaseException:
            self._end_thread()
            raise
        self._started = True

    def stop(self, drain_timeout_s: float = 10.0) -> None:
        """Idempotent; safe after a failed start."""
        if not self._started:
            return
        self._started = False
        try:
            self.run(self._shutdown(drain_timeout_s), drain_timeout_s + 60)
        finally:
            self._end_thread()

    def open(
        self, scope: Scope, chunks: list[bytes] | None, deliver: Callable[[Event], None]
    ) -> Call:
        """Start one request (see `Call.serve`); its events go to `deliver`."""
        call = Call(self, deliver)
        scope = {**scope, "state": dict(self._state)}

        async def serve() -> None:
            task = asyncio.current_task()
            assert task is not None
            self._inflight.add(task)
            try:
                await call.serve(self.app, scope, chunks)
            finally:
                self._inflight.discard(task)

        future = asyncio.run_coroutine_threadsafe(serve(), self.loop)
        future.add_done_callback(_consume)
        return call

    def _end_thread(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        if not self._thread.is_alive():
            self.loop.close()

    async def _startup(self) -> None:
        self._to_app, self._from_app = asyncio.Queue(), asyncio.Queue()
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"},
                 "state": self._state}  # fmt: skip
        self._lifespan = asyncio.ensure_future(
            self.app(scope, self._to_app.get, self._from_app.put)
        )
        await self._to_app.put({"type": "lifespan.startup"})
        answer = await self._lifespan_answer()
        if answer["type"] != "lifespan.startup.complete":
            await asyncio.gather(self._lifespan, return_exceptions=True)
            raise RuntimeError(f"the app failed to start: {answer.get('message', '')}")

    async def _shutdown(self, drain_timeout_s: float) -> None:
        assert self._to_app is not None and self._lifespan is not None
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=drain_timeout_s)
        leftover = set(self._inflight)
        for task in leftover:
            task.cancel()
        await asyncio.gather(*leftover, return_exceptions=True)
        await self._to_app.put({"type": "lifespan.shutdown"})
        answer = await self._lifespan_answer()
        await self._lifespan
        if answer["type"] != "lifespan.shutdown.complete":
            raise RuntimeError(f"the app failed to shut down: {answer.get('message', '')}")

    async def _lifespan_answer(self) -> Message:
        assert self._from_app is not None and self._lifespan is not None
        getter = asyncio.ensure_future(self._from_app.get())
        await asyncio.wait({getter, self._lifespan}, return_when=asyncio.FIRST_COMPLETED)
        if getter.done():
            return getter.result()
        getter.cancel()
        self._lifespan.result()  # raises what the app raised
        raise RuntimeError("the app's lifespan ended without an answer")


def _consume(future: Any) -> None:
    """Retrieve a finished call's exception: the client already got it as an ("error", …) event."""
    if not future.cancelled():
        future.exception()


def http_scope(method: str, url: Any, headers: list[tuple[bytes, bytes]]) -> Scope:
    """The ASGI `http` scope a server would build for a request (`url`: an httpx/httpx2 URL)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": url.scheme,
        "path": unquote(url.path),
        "raw_path": url.raw_path.split(b"?")[0],
        "query_string": url.query,
        "root_path": "",
        "headers": [(key.lower(), value) for key, value in headers],
        "client": ("127.0.0.1", 50_000),
        "server": (url.host, url.port or (443 if url.scheme == "https" else 80)),
    }


def request_scope(request: Any) -> Scope:
    """The scope of an httpx/httpx2 `Request`."""
    return http_scope(request.method, request.url, list(request.headers.raw))


def status_without_body(
    app_thread: AppThread, method: str, url: Any, headers: list[tuple[bytes, bytes]]
) -> int:
    """The status the app answers to a request whose headers arrive and whose body never does
    (then the client hangs up). Raises what the app raised, or `TimeoutError` after 10 s."""
    inbox: queue.Queue[Event] = queue.Queue()
    call = app_thread.open(http_scope(method, url, headers), None, inbox.put)
    try:
        event = inbox.get(timeout=10)
    except queue.Empty:
        raise TimeoutError("the app did not answer without the body") from None
    finally:
        call.hang_up()
    if event[0] == "error":
        raise event[1]
    return int(event[1])


def sync_transport(app_thread: AppThread, http: ModuleType = httpx) -> Any:
    """A transport for a synchronous `http.Client` (httpx or httpx2) that calls the app of
    `app_thread` (from any thread but the app's)."""
    return _transports(http)[0](app_thread)


def async_transport(app_thread: AppThread, http: ModuleType = httpx) -> Any:
    """A transport for an `http.AsyncClient` running on another event loop than the app's."""
    return _transports(http)[1](app_thread)


@functools.cache
def _transports(http: Any) -> tuple[type, type]:
    """The two transport classes, built on the base classes of `http` (httpx or httpx2)."""

    def read_timeout(request: Any) -> float | None:
        timeout: dict[str, float | None] = request.extensions.get("timeout", {})
        return timeout.get("read")

    def response(request: Any, event: Event, stream: Any) -> Any:
        if event[0] == "error":
            raise event[1]
        _kind, status, headers = event
        return http.Response(
            status, headers=headers, stream=stream, request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )  # fmt: skip

    def broken(request: Any, event: Event) -> Exception:
        error: Exception = http.RemoteProtocolError(
            "the app broke off its response", request=request
        )
        error.__cause__ = event[1]
        return error

    def next_sync(inbox: queue.Queue[Event], timeout: float | None, request: Any) -> Event:
        try:
            return inbox.get(timeout=timeout)
        except queue.Empty:
            raise http.ReadTimeout("the app sent nothing in time", request=request) from None

    async def next_async(inbox: asyncio.Queue[Event], wait_s: float | None, request: Any) -> Event:
        try:
            return await asyncio.wait_for(inbox.get(), wait_s)
        except TimeoutError:
            raise http.ReadTimeout("the app sent nothing in time", request=request) from None

    class SyncBody(http.SyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(
            self, inbox: queue.Queue[Event], call: Call, timeout: float | None, request: Any
        ) -> None:
            self._inbox, self._call, self._timeout, self._request = inbox, call, timeout, request
            self._ended = False

        def __iter__(self) -> Iterator[bytes]:
            while not self._ended:
                event = next_sync(self._inbox, self._timeout, self._request)
                if event[0] == "body":
                    yield event[1]
                    continue
                self._ended = True
                if event[0] == "error":
                    raise broken(self._request, event)

        def close(self) -> None:
            if not self._ended:
                self._ended = True
                self._call.hang_up()

    class AsyncBody(http.AsyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(
            self, inbox: asyncio.Queue[Event], call: Call, timeout: float | None, request: Any
        ) -> None:
            self._inbox, self._call, self._timeout, self._request = inbox, call, timeout, request
            self._ended = False

        async def __aiter__(self) -> AsyncIterator[bytes]:
            while not self._ended:
                event = await next_async(self._inbox, self._timeout, self._request)
                if event[0] == "body":
                    yield event[1]
                    continue
                self._ended = True
                if event[0] == "error":
                    raise broken(self._request, event)

        async def aclose(self) -> None:
            if not self._ended:
                self._ended = True
                self._call.hang_up()

    class SyncTransport(http.BaseTransport):  # type: ignore[misc,name-defined]
        def __init__(self, app_thread: AppThread) -> None:
            self.app_thread = app_thread

        def handle_request(self, request: Any) -> Any:
            chunks = [bytes(chunk) for chunk in request.stream]
            inbox: queue.Queue[Event] = queue.Queue()
            timeout = read_timeout(request)
            call = self.app_thread.open(request_scope(request), chunks, inbox.put)
            try:
                first = next_sync(inbox, timeout, request)
            except BaseException:  # a client that gives up hangs up, as the async one does
                call.hang_up()
                raise
            return response(request, first, SyncBody(inbox, call, timeout, request))

    class AsyncTransport(http.AsyncBaseTransport):  # type: ignore[misc,name-defined]
        def __init__(self, app_thread: AppThread) -> None:
            self.app_thread = app_thread

        async def handle_async_request(self, request: Any) -> Any:
            chunks = [bytes(chunk) async for chunk in request.stream]
            loop = asyncio.get_running_loop()
            inbox: asyncio.Queue[Event] = asyncio.Queue()

            def deliver(event: Event) -> None:
                loop.call_soon_threadsafe(inbox.put_nowait, event)

            timeout = read_timeout(request)
            call = self.app_thread.open(request_scope(request), chunks, deliver)
            try:
                first = await next_async(inbox, timeout, request)
            except BaseException:
                call.hang_up()
                raise
            return response(request, first, AsyncBody(inbox, call, timeout, request))

    return SyncTransport, AsyncTransport
