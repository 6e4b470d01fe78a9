"""Closed-loop HTTP/1.1 load generator for chat completions, written against raw asyncio.

Each worker owns one keep-alive connection and sends its next request as soon as the previous
answer has been read to the end. The client is hand-written (an `asyncio.Protocol` that parses the
status line, the headers and a content-length or chunked body) because httpx or aiohttp would spend
more CPU per request than the gateways we measure; uvloop drives it when installed.

For streamed answers it also records the time to first token: the arrival of the first SSE `data:`
event whose `choices[0].delta.content` is a non-empty string (the role-only first event and the
usage event do not count). A streamed answer counts as an error unless it ends with `data: [DONE]`.

`--ramp S` spreads the workers' first requests evenly over S seconds, in the warm-up and again in
the measured phase, and `--think S` makes each worker pause a random 0 to S seconds (uniform,
seeded) before each later request; the pause is not part of any latency. Both are for an upstream
with a constant delay (a paced mock model): workers that start together stay in lock-step, and
workers that start apart drift into lock-step (answers whose delays end within one tick of the
mock's event-loop timer go out together, and then stay together), so that every request of a round
arrives within a millisecond — which no set of independent clients does. A short random pause
keeps them independent; it lowers the request rate a little (a mean of S/2 per request).

Run as a process (`python bench/loadgen.py --port P --concurrency 16 --seconds 10`); it prints one
JSON object (`LoadResult.to_json`) with every latency sample, so that `bench/run.py` can merge the
samples of several load processes before taking percentiles.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import cast

import orjson

DEFAULT_MESSAGES = [
    {"role": "system", "content": "You are a concise assistant for the mirrorgate benchmark."},
    {"role": "user", "content": "Summarise the benefits of shadow traffic in two sentences."},
]


def request_bytes(
    host: str, port: int, path: str, model: str, stream: bool, api_key: str = "bench",
    system: str = "",
) -> bytes:  # fmt: skip
    """The complete HTTP/1.1 request every worker sends, body included; `system` replaces the
    default system message."""
    messages = DEFAULT_MESSAGES
    if system:
        messages = [{"role": "system", "content": system}, *DEFAULT_MESSAGES[1:]]
    payload: dict[str, object] = {"model": model, "messages": messages}
    if stream:
        payload["stream"] = True
    body = orjson.dumps(payload)
    head = (
        f"POST {path} HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\n"
        "Content-Type: application/json\r\n"
        "Accept: */*\r\n"
        f"Authorization: Bearer {api_key}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "\r\n"
    )
    return head.encode("ascii") + body


class ProtocolError(Exception):
    """The server sent something this minimal client does not understand."""


class ResponseParser:
    """Incremental parser for one HTTP/1.1 response; `feed` returns True once it is complete."""

    def __init__(self, stream: bool) -> None:
        self.stream = stream
        self.status = 0
        self.first_content_at: float | None = None
        self.saw_done = False
        self.keep_alive = True
        self._buf = bytearray()
        self._state = "head"  # head -> length | chunk_size -> chunk_data -> done
        self._remaining = 0
        self._sse = bytearray()

    def feed(self, data: bytes, now: float) -> bool:
        self._buf += data
        while True:
            if self._state == "head":
                end = self._buf.find(b"\r\n\r\n")
                if end < 0:
                    return False
                self._parse_head(bytes(self._buf[:end]))
                del self._buf[: end + 4]
            elif self._state == "length":
                take = min(self._remaining, len(self._buf))
                if self.stream:
                    self._events(bytes(self._buf[:take]), now)
                del self._buf[:take]
                self._remaining -= take
                if self._remaining == 0:
                    self._state = "done"
                    return True
                return False
            elif self._state == "chunk_size":
                end = self._buf.find(b"\r\n")
                if end < 0:
                    return False
                size = int(bytes(self._buf[:end]).split(b";", 1)[0], 16)
                del self._buf[: end + 2]
                self._remaining = size
                self._state = "chunk_data" if size else "trailer"
            elif self._state == "chunk_data":
                if len(self._buf) < self._remaining + 2:
                    return False
                if self.stream:
                    self._events(bytes(self._buf[: self._remaining]), now)
                del self._buf[: self._remaining + 2]
                self._state = "chunk_size"
            elif self._state == "trailer":
                end = self._buf.find(b"\r\n")
                if end < 0:
                    return False
                del self._buf[: end + 2]
                if end == 0:  # the empty line after the last chunk (no trailers are sent)
                    self._state = "done"
                    return True
            else:
                raise ProtocolError(
                    f"data after the end of the response: {bytes(self._buf[:80])!r}"
                )

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ProtocolError(f"bad status line {lines[0][:80]!r}")
        self.status = int(parts[1])
        chunked = False
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                self.keep_alive = b"close" not in value.lower()
        if chunked:
            self._state = "chunk_size"
        elif length:
            self._state, self._remaining = "length", length
        else:
            self._state = "done"

    def _events(self, data: bytes, now: float) -> None:
        """Split the body into SSE events; note the first content event and the [DONE] marker."""
        self._sse += data
        while True:
            end = self._sse.find(b"\n\n")
            if end < 0:
                return
            event = bytes(self._sse[:end])
            del self._sse[: end + 2]
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    self.saw_done = True
                elif self.first_content_at is None and _has_content(payload):
                    self.first_content_at = now


def _has_content(payload: bytes) -> bool:
    if b'"content"' not in payload:
        return False
    try:
        choices = orjson.loads(payload).get("choices") or []
    except (orjson.JSONDecodeError, AttributeError):
        return False
    for choice in choices:
        delta = choice.get("delta") or {}
        if isinstance(delta.get("content"), str) and delta["content"]:
            return True
    return False


class ClientProtocol(asyncio.Protocol):
    """One keep-alive connection; `request` sends bytes and waits for the parsed response."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._parser: ResponseParser | None = None
        self._done: asyncio.Future[ResponseParser] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        parser, done = self._parser, self._done
        if parser is None or done is None or done.done():
            return
        try:
            if parser.feed(data, now):
                done.set_result(parser)
        except (ProtocolError, ValueError) as exc:
            done.set_exception(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._done is not None and not self._done.done():
            self._done.set_exception(ConnectionError(f"connection lost: {exc}"))

    async def request(self, data: bytes, stream: bool) -> ResponseParser:
        if self.transport is None:
            raise ConnectionError("not connected")
        self._parser = ResponseParser(stream)
        self._done = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return await self._done


@dataclass
class LoadResult:
    """What one load process measured (latencies in seconds, in completion order)."""

    requests: int = 0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    started: float = 0.0
    """Wall clock (time.time) at the start of the measured phase."""
    elapsed_s: float = 0.0
    cpu_s: float = 0.0
    """CPU time this load process used during the measured phase (its own cost)."""

    def error(self, kind: str) -> None:
        self.errors += 1
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1

    def to_json(self) -> str:
        return json.dumps(asdict(self))


@dataclass(frozen=True)
class LoadSpec:
    """One closed-loop run."""

    host: str
    port: int
    path: str
    model: str
    stream: bool
    concurrency: int
    seconds: float
    """Stop after this many seconds of measurement (0: no time limit)."""
    requests: int
    """Stop after this many measured requests in total (0: no count limit)."""
    warmup_s: float
    api_key: str = "bench"
    announce: bool = False
    """Print `measuring` on stdout when the measured phase starts (after the warm-up)."""
    ramp_s: float = 0.0
    """Worker i of n sends its first request of each phase i/n of this many seconds late."""
    think_s: float = 0.0
    """Each worker pauses a random 0 to this many seconds before each request after its first."""
    system: str = ""
    """The system message to send instead of the default one (empty: the default)."""


class _Budget:
    """Shared stop condition of all workers: a request count and/or a deadline."""

    def __init__(self, requests: int, deadline: float) -> None:
        self.left = requests if requests > 0 else -1
        self.deadline = deadline

    def take(self) -> bool:
        if time.perf_counter() >= self.deadline or self.left == 0:
            return False
        if self.left > 0:
            self.left -= 1
        return True


async def _connect(spec: LoadSpec) -> ClientProtocol:
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(ClientProtocol, spec.host, spec.port)
    return protocol


async def _worker(
    spec: LoadSpec,
    data: bytes,
    budget: _Budget,
    result: LoadResult | None,
    delay_s: float = 0.0,
    rng: random.Random | None = None,
) -> None:
    """Send requests back to back until the budget is spent; record them if `result` is set.

    The first request waits `delay_s` (the worker's place in the ramp), each later one a random
    pause of up to `spec.think_s` drawn from `rng`."""
    conn = await _connect(spec)
    if delay_s > 0:
        await asyncio.sleep(delay_s)
    first = True
    try:
        while budget.take():
            if not first and rng is not None and spec.think_s > 0:
                await asyncio.sleep(rng.uniform(0.0, spec.think_s))
            first = False
            if conn.closed:
                conn = await _connect(spec)
            t0 = time.perf_counter()
            try:
                parser = await conn.request(data, spec.stream)
            except (ConnectionError, ProtocolError, ValueError) as exc:
                if result is not None:
                    result.error(type(exc).__name__)
                if conn.transport is not None:
                    conn.transport.close()
                conn = await _connect(spec)
                continue
            t1 = time.perf_counter()
            if not parser.keep_alive and conn.transport is not None:
                conn.transport.close()
            if result is None:
                continue
            if parser.status != 200:
                result.error(f"http_{parser.status}")
            elif spec.stream and not parser.saw_done:
                result.error("stream_without_done")
            elif spec.stream and parser.first_content_at is None:
                result.error("stream_without_content")
            else:
                result.requests += 1
                result.latencies.append(t1 - t0)
                if parser.first_content_at is not None:
                    result.ttfts.append(parser.first_content_at - t0)
    finally:
        if conn.transport is not None:
            conn.transport.close()


async def run_load(spec: LoadSpec) -> LoadResult:
    """Warm up (unrecorded), then run the measured closed loop."""
    data = request_bytes(
        spec.host, spec.port, spec.path, spec.model, spec.stream, spec.api_key, spec.system
    )
    delays = [spec.ramp_s * i / spec.concurrency for i in range(spec.concurrency)]
    rngs = [random.Random(i) for i in range(spec.concurrency)]  # reproducible pauses
    if spec.warmup_s > 0:
        warm = _Budget(0, time.perf_counter() + spec.warmup_s)
        await asyncio.gather(
            *(_worker(spec, data, warm, None, d, r) for d, r in zip(delays, rngs, strict=True))
        )
    if spec.announce:  # tell the parent to take its "before" readings now
        sys.stdout.write("measuring\n")
        sys.stdout.flush()
    limit = spec.seconds if spec.seconds > 0 else 86_400.0
    result = LoadResult(started=time.time())
    budget = _Budget(spec.requests, time.perf_counter() + limit)
    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(
        *(_worker(spec, data, budget, result, d, r) for d, r in zip(delays, rngs, strict=True))
    )
    result.elapsed_s = time.perf_counter() - t0
    result.cpu_s = time.process_time() - cpu0
    return result


def _parse_args(argv: list[str] | None) -> tuple[LoadSpec, str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/v1/chat/completions")
    parser.add_argument("--model", default="bench")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--requests", type=int, default=0)
    parser.add_argument(
        "--warmup", type=float, default=1.0, help="seconds of unrecorded load first"
    )
    parser.add_argument("--output", default="-", help="file for the JSON result (-: stdout)")
    parser.add_argument(
        "--announce", action="store_true", help="print 'measuring' when the warm-up is over"
    )
    parser.add_argument(
        "--api-key-env", default="", help="send the key held by this environment variable"
    )
    parser.add_argument(
        "--ramp", type=float, default=0.0,
        help="spread the workers' first requests of each phase evenly over this many seconds",
    )  # fmt: skip
    parser.add_argument(
        "--think", type=float, default=0.0,
        help="pause a random 0 to this many seconds before each request after a worker's first",
    )  # fmt: skip
    parser.add_argument(
        "--system", default="", help="send this system message instead of the default one"
    )
    args = parser.parse_args(argv)
    api_key = os.environ.get(args.api_key_env, "bench") if args.api_key_env else "bench"
    spec = LoadSpec(
        args.host, args.port, args.path, args.model, args.stream, args.concurrency,
        args.seconds, args.requests, args.warmup, api_key, args.announce, args.ramp, args.think,
        args.system,
    )  # fmt: skip
    return spec, args.output


def main(argv: list[str] | None = None) -> int:
    spec, output = _parse_args(argv)
    try:
        import uvloop  # noqa: PLC0415 - optional speed-up

        result = uvloop.run(run_load(spec))
    except ImportError:
        result = asyncio.run(run_load(spec))
    if output == "-":
        sys.stdout.write(result.to_json())
    else:
        Path(output).write_text(result.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
