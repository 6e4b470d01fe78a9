"""CPU of the SSE observer per stream, on the streams the mock upstream sends.

    .venv/bin/python bench/stream_observer.py [--streams N]

Feeds whole streams (15 content events, OpenAI chat with and without the injected usage, Anthropic
messages) through `StreamObserver`, one upstream read per event as the gateway gets them, and prints
the microseconds of CPU per stream and per event. `run.py` does not run it.
"""

from __future__ import annotations

import argparse
import time

import orjson

from proxy.upstream.streaming import StreamObserver

HEAD = {"id": "chatcmpl-8a1f", "object": "chat.completion.chunk", "created": 1764700000,
        "model": "gpt-4o-mini", "system_fingerprint": "fp_0ba0d124f1"}  # fmt: skip
PIECES = ["The", " answer", " is", " that", " the", " refund", " window", " is", " thirty",
          " days", ",", " not", " fourteen", ".\n", "Thanks"]  # fmt: skip


def _chat_stream(include_usage: bool) -> list[bytes]:
    extra = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return b"data: " + orjson.dumps({**HEAD, "choices": [choice], **extra}) + b"\n\n"

    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    events += [chunk({"content": piece}) for piece in PIECES]
    events.append(chunk({}, "stop"))
    if include_usage:
        usage = {"prompt_tokens": 40, "completion_tokens": 15, "total_tokens": 55}
        events.append(b"data: " + orjson.dumps({**HEAD, "choices": [], "usage": usage}) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


def _anthropic_stream() -> list[bytes]:
    def event(name: str, payload: dict[str, object]) -> bytes:
        return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"

    usage = {"input_tokens": 40, "output_tokens": 1}
    events = [
        event("message_start", {"type": "message_start",
                                "message": {"id": "msg_1", "usage": usage}}),
        event("content_block_start", {"type": "content_block_start", "index": 0,
                                      "content_block": {"type": "text", "text": ""}}),
    ]  # fmt: skip
    events += [
        event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                      "delta": {"type": "text_delta", "text": piece}})
        for piece in PIECES
    ]  # fmt: skip
    events += [
        event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                "usage": {"output_tokens": 15}}),
        event("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    return events


def measure(endpoint: str, strip_usage: bool, events: list[bytes], streams: int) -> float:
    """Microseconds of CPU per whole stream."""
    started = time.process_time()
    for _ in range(streams):
        observer = StreamObserver(endpoint, strip_usage)
        for event in events:
            observer.feed(event)
        observer.close()
    return (time.process_time() - started) / streams * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=20_000)
    args = parser.parse_args()
    cases = [
        ("chat, usage injected and stripped", "chat.completions", True, _chat_stream(True)),
        ("chat, no usage asked", "chat.completions", False, _chat_stream(False)),
        ("anthropic messages", "messages", False, _anthropic_stream()),
    ]
    print("| stream | events | µs CPU per stream | µs per event |")
    print("|---|---:|---:|---:|")
    for label, endpoint, strip, events in cases:
        measure(endpoint, strip, events, 500)  # warm up
        per_stream = min(measure(endpoint, strip, events, args.streams) for _ in range(3))
        print(f"| {label} | {len(events)} | {per_stream:.1f} | {per_stream / len(events):.2f} |")


if __name__ == "__main__":
    main()
