"""The fake model server as a raw ASGI app: routing, pacing and fault injection.

Raw ASGI with orjson, because benchmarks compare "direct to the mock" against "through the
gateway" and the mock must not be the bottleneck: with no delay configured a request costs a body
read, one JSON parse, a cached tokenisation and one JSON dump — no sleep, no framework.

Endpoints (all JSON): `POST /v1/chat/completions`, `/v1/completions`, `/v1/responses`,
`/v1/embeddings`, `/v1/messages`; `GET /v1/models`; and the control surface `GET /_mock/requests`,
`GET /_mock/stats`, `GET /_mock/behavior`, `POST /_mock/reset`, `GET /healthz`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send

from proxy.mock_upstream.answers import compose
from proxy.mock_upstream.anthropic_format import MessagesFormat, anthropic_error
from proxy.mock_upstream.behavior import (
    BehaviorSpec,
    DisconnectFault,
    EndlessStreamFault,
    ErrorFault,
    GarbageFault,
    HeaderFloodFault,
    HugeBodyFault,
    MalformedChunkFault,
    ModelBehaviorSpec,
    ResetFault,
    TimeoutFault,
)
from proxy.mock_upstream.connection import ClientConnection
from proxy.mock_upstream.conversation import RequestError
from proxy.mock_upstream.embeddings import embeddings_body, read_embedding_request
from proxy.mock_upstream.faults import FaultSchedule, InjectedFault, RateCounter
from proxy.mock_upstream.openai_format import (
    ChatCompletionsFormat,
    CompletionsFormat,
    openai_error,
)
from proxy.mock_upstream.recording import RequestRecorder
from proxy.mock_upstream.responses_format import ResponsesFormat
from proxy.mock_upstream.tokens import TokenCounter
from proxy.mock_upstream.wire import Frame, WireFormat

_EMBEDDINGS = "/v1/embeddings"


def create_app(behavior: BehaviorSpec) -> MockUpstreamApp:
    """The mock upstream ASGI app for `behavior`."""
    return MockUpstreamApp(behavior)


class MockUpstreamApp:
    """ASGI app answering OpenAI and Anthropic requests as `behavior` says.

    `recorder` and `faults` are public so in-process tests can read or reset them directly.
    """

    def __init__(self, behavior: BehaviorSpec, tokens: TokenCounter | None = None) -> None:
        self.behavior = behavior
        self.tokens = tokens or TokenCounter()
        self.faults = FaultSchedule()
        self.memory = RateCounter()
        """The per-model counters of memorised answers (`answer.memorised.rate`)."""
        self.memorised = 0
        """Answers given from memory rather than from the prompt (for GET /_mock/stats)."""
        self.recorder = RequestRecorder(behavior.max_recorded_requests, behavior.record_requests)
        self._extra_headers = tuple(
            (k.lower().encode("latin-1"), v.encode("latin-1"))
            for k, v in behavior.response_headers.items()
        )
        self.abandoned = 0
        """Non-streamed requests whose client hung up while the answer was being delayed."""
        self._formats: dict[str, WireFormat] = {
            "/v1/chat/completions": ChatCompletionsFormat(),
            "/v1/completions": CompletionsFormat(),
            "/v1/responses": ResponsesFormat(),
            "/v1/messages": MessagesFormat(),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            connection = ClientConnection(scope, receive, send, self._extra_headers)
            await self._http(scope["method"], scope["path"], connection)
        elif scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})

    async def _http(self, method: str, path: str, client: ClientConnection) -> None:
        if path.startswith("/_mock/") or path == "/healthz":
            await self._control(method, path, client)
            return
        headers: list[tuple[bytes, bytes]] = client.scope["headers"]
        anthropic = path == "/v1/messages" or any(k == b"anthropic-version" for k, _ in headers)
        error = anthropic_error if anthropic else openai_error
        fmt = self._formats.get(path)
        if method == "GET" and path == "/v1/models":
            await client.send_json(200, orjson.dumps(self._models(anthropic)))
        elif fmt is None and path != _EMBEDDINGS:
            await client.send_json(404, error(404, f"Unknown path {path}"))
        elif method != "POST":
            await client.send_json(405, error(405, f"Method {method} not allowed on {path}"))
        elif (raw := await client.read_body()) is not None:
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                body = raw.decode("utf-8", errors="replace")
            self.recorder.record(method, path, headers, body, raw)
            try:
                if not isinstance(body, dict):
                    raise RequestError("the request body must be a JSON object")
                if self.behavior.api_key is not None and not self._authorized(headers):
                    raise RequestError("Invalid API key (mirrorgate mock upstream)", 401)
                if fmt is None:
                    await self._embed(body, client)
                else:
                    await self._answer(fmt, body, client)
            except RequestError as exc:
                await client.send_json(exc.status, error(exc.status, exc.message))

    async def _answer(
        self, fmt: WireFormat, body: dict[str, Any], client: ClientConnection
    ) -> None:
        prompt = fmt.read(body)
        spec = self.behavior.for_model(prompt.model)
        fault = self.faults.pick(prompt.model, spec, prompt.stream)
        if fault is not None and not await _before_answer(fault, fmt, client):
            return
        turn = compose(prompt, spec, self.tokens, lambda rate: self._recall(prompt.model, rate))
        if prompt.stream:
            await _stream(list(fmt.frames(turn)), spec, fault, client)
        elif isinstance(fault, GarbageFault):
            await client.send_json(200, fault.body.encode())
        elif isinstance(fault, HugeBodyFault):
            await _send_huge(fmt.body(turn), fault, client)
        elif await _delay_unless_gone(_body_delay_s(spec, turn.output_tokens), client):
            await client.send_json(200, fmt.body(turn), _flood(fault))
        else:
            self.abandoned += 1

    def _recall(self, model: str, rate: float) -> bool:
        """Whether this answer of `model` comes from memory, on the model's own counter."""
        recalled = self.memory.due(model, "memorised", rate)
        self.memorised += recalled
        return recalled

    async def _embed(self, body: dict[str, Any], client: ClientConnection) -> None:
        request = read_embedding_request(body)
        spec = self.behavior.for_model(request.model)
        fault = self.faults.pick(request.model, spec, stream=False)
        if fault is not None and not await _before_answer(fault, None, client):
            return
        if isinstance(fault, GarbageFault):
            await client.send_json(200, fault.body.encode())
            return
        dimensions = request.dimensions or spec.embedding_dimensions
        await _pause(spec.latency_ms / 1000)
        await client.send_json(200, embeddings_body(request, dimensions, self.tokens, spec.usage))

    async def _control(self, method: str, path: str, client: ClientConnection) -> None:
        payload: Any
        if method == "POST" and path == "/_mock/reset":
            self.recorder.clear()
            self.faults.reset()
            self.memory.clear()
            self.memorised = 0
            self.abandoned = 0
            payload = {"reset": True}
        elif method == "GET" and path == "/_mock/requests":
            payload = self.recorder.requests()
        elif method == "GET" and path == "/_mock/stats":
            paths = dict(self.recorder.paths)
            faults = dict(self.faults.injected)
            payload = {
                "total": sum(paths.values()),
                "paths": paths,
                "faults": faults,
                "abandoned": self.abandoned,
                "memorised": self.memorised,
            }
        elif method == "GET" and path == "/_mock/behavior":
            payload = self.behavior.model_dump(mode="json")
        elif method == "GET" and path == "/healthz":
            payload = {"status": "ok"}
        else:
            await client.send_json(404, openai_error(404, f"Unknown control path {method} {path}"))
            return
        await client.send_json(200, _dumps(payload))

    def _authorized(self, headers: list[tuple[bytes, bytes]]) -> bool:
        key = (self.behavior.api_key or "").encode()
        given = dict(headers)
        return given.get(b"authorization") == b"Bearer " + key or given.get(b"x-api-key") == key

    def _models(self, anthropic: bool) -> dict[str, Any]:
        """GET /v1/models in the caller's format: the models the behaviour file names."""
        names = list(self.behavior.models) or ["mock-model"]
        data: list[dict[str, Any]]
        if anthropic:
            data = [
                {"type": "model", "id": n, "display_name": n, "created_at": "2025-01-01T00:00:00Z"}
                for n in names
            ]
            return {"data": data, "has_more": False, "first_id": names[0], "last_id": names[-1]}
        data = [
            {"id": n, "object": "model", "created": 1735689600, "owned_by": "mirrorgate-mock"}
            for n in names
        ]
        return {"object": "list", "data": data}


async def _before_answer(
    fault: InjectedFault, fmt: WireFormat | None, client: ClientConnection
) -> bool:
    """Apply the faults that strike before any answer; False when the request is finished."""
    if isinstance(fault, ResetFault):
        await client.drop(reset=True)
        return False
    if isinstance(fault, TimeoutFault):
        try:
            async with asyncio.timeout(fault.stall_s):
                await client.wait_gone()
            return False
        except TimeoutError:
            return True
    if isinstance(fault, ErrorFault):
        body = (fmt.error if fmt else openai_error)(fault.status, fault.message)
        await client.send_json(fault.status, body)
        return False
    return True


async def _stream(
    frames: list[Frame],
    spec: ModelBehaviorSpec,
    fault: InjectedFault | None,
    client: ClientConnection,
) -> None:
    """Send SSE frames, paced as `spec` says, with the mid-stream faults applied.

    Unpaced streams go out in one write (the same SSE events, without a syscall per event);
    paced ones event by event, so the client sees each delta arrive on time, until it hangs up.
    """
    if isinstance(fault, MalformedChunkFault):
        broken = Frame(b"data: " + fault.data.encode() + b"\n\n", False)
        frames.insert(min(fault.after_chunks, len(frames)), broken)
    cut = isinstance(fault, DisconnectFault)
    if isinstance(fault, DisconnectFault):
        frames = frames[: fault.after_chunks]
    await client.start_events(_flood(fault))
    if isinstance(fault, EndlessStreamFault):
        await _endless(frames, fault, client)
        return
    if spec.ttft_ms > 0 or spec.tokens_per_second > 0:
        gone = asyncio.ensure_future(client.wait_gone())
        try:
            first_text = True
            for frame in frames:
                if frame.text:
                    await _pause(_gap_s(spec, first_text))
                    first_text = False
                if gone.done():  # nobody reads the rest of a long paced stream
                    return
                await client.send_events(frame.data)
        finally:
            gone.cancel()
        frames = []
    await client.send_events(b"".join(frame.data for frame in frames), more=cut)
    if cut:
        await client.drop(reset=False)


async def _endless(
    frames: list[Frame], fault: EndlessStreamFault, client: ClientConnection
) -> None:
    """The frames up to the first text delta, then that delta again until the client leaves."""
    first = next((i for i, frame in enumerate(frames) if frame.text), len(frames) - 1)
    await client.send_events(b"".join(frame.data for frame in frames[: first + 1]))
    again = frames[first].data * max(1, 16384 // max(1, len(frames[first].data)))
    gone = asyncio.ensure_future(client.wait_gone())
    try:
        while not gone.done():
            await client.send_events(again)
            await asyncio.sleep(fault.interval_ms / 1000)  # also lets `gone` hear the close
    finally:
        gone.cancel()


async def _send_huge(body: bytes, fault: HugeBodyFault, client: ClientConnection) -> None:
    """`body` (a JSON object) with a filler field in front, `fault.bytes` long in all."""
    head = b'{"mock_padding":"'
    filler = max(0, fault.bytes - len(body) - len(head) - 2)
    if not fault.chunked:
        await client.send_json(200, head + b"x" * filler + b'",' + body[1:])
        return
    await client.send({"type": "http.response.start", "status": 200,
                       "headers": [(b"content-type", b"application/json")]})  # fmt: skip
    piece = b"x" * (1 << 20)
    await client.send_events(head)
    while filler > 0:
        await client.send_events(piece[:filler])
        filler -= len(piece)
    await client.send_events(b'",' + body[1:], more=False)


def _flood(fault: InjectedFault | None) -> list[tuple[bytes, bytes]]:
    """The extra headers of a `header_flood` answer (none for any other)."""
    if not isinstance(fault, HeaderFloodFault):
        return []
    value = b"v" * fault.value_bytes
    return [(b"x-mock-flood-%d" % i, value) for i in range(fault.count)]


def _gap_s(spec: ModelBehaviorSpec, first: bool) -> float:
    """Wait before a streamed delta: the time to first token, then one piece at the set pace."""
    if first:
        return spec.ttft_ms / 1000
    return spec.stream_chunk_tokens / spec.tokens_per_second if spec.tokens_per_second else 0.0


def _body_delay_s(spec: ModelBehaviorSpec, output_tokens: int) -> float:
    """Non-stream delay: `latency_ms`, else the time a stream of the same answer would take."""
    if spec.latency_ms > 0:
        return spec.latency_ms / 1000
    pace = output_tokens / spec.tokens_per_second if spec.tokens_per_second > 0 else 0.0
    return spec.ttft_ms / 1000 + pace


async def _delay_unless_gone(seconds: float, client: ClientConnection) -> bool:
    """Wait `seconds` before answering; False (at once) if the client hangs up meanwhile."""
    if seconds <= 0:  # the zero-delay path must not even enter the event loop's timer heap
        return True
    try:
        async with asyncio.timeout(seconds):
            await client.wait_gone()
    except TimeoutError:
        return True
    return False


async def _pause(seconds: float) -> None:
    if seconds > 0:  # the zero-delay path must not even enter the event loop's timer heap
        await asyncio.sleep(seconds)


def _dumps(payload: object) -> bytes:
    """JSON of a control answer. The recorded requests may nest as deep as a client sent them
    (the gateway forwards up to 255 levels; with the recorder's own levels that is beyond
    orjson's limit), so the stdlib, whose limit is about 1,000, writes what orjson cannot."""
    try:
        return orjson.dumps(payload)
    except TypeError:
        return json.dumps(payload).encode()
