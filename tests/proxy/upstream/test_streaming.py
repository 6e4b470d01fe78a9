"""The SSE observer: events forwarded whole and unchanged, usage noted, injected usage removed."""

from __future__ import annotations

import orjson

from proxy.upstream.streaming import StreamObserver


def chunk(content: str | None, usage: object = None, with_usage_field: bool = True) -> bytes:
    body: dict[str, object] = {"id": "c1", "object": "chat.completion.chunk", "choices": []}
    if content is not None:
        body["choices"] = [{"index": 0, "delta": {"content": content}, "finish_reason": None}]
    if with_usage_field:
        body["usage"] = usage
    return b"data: " + orjson.dumps(body) + b"\n\n"


USAGE = {"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}


def test_injected_usage_chunk_and_usage_nulls_are_removed() -> None:
    observer = StreamObserver("chat.completions", strip_usage=True, clock=lambda: 1.0)
    stream = chunk("Hel") + chunk("lo") + chunk(None, USAGE) + b"data: [DONE]\n\n"
    out = observer.feed(stream) + observer.close()
    events = [e for e in out.split(b"\n\n") if e]
    assert [orjson.loads(e[6:]) for e in events[:-1]] == [
        {"id": "c1", "object": "chat.completion.chunk",
         "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]},
        {"id": "c1", "object": "chat.completion.chunk",
         "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": None}]},
    ]  # fmt: skip
    assert events[-1] == b"data: [DONE]"
    assert observer.text == "Hello" and observer.finished and not observer.malformed
    assert observer.usage is not None
    assert (observer.usage.input_tokens, observer.usage.cached_input_tokens) == (6, 4)
    assert observer.first_token_at == 1.0


def test_a_client_that_asked_for_usage_gets_every_byte_unchanged() -> None:
    observer = StreamObserver("chat.completions", strip_usage=False)
    stream = chunk("a") + chunk(None, USAGE) + b"data: [DONE]\n\n"
    assert observer.feed(stream) + observer.close() == stream


def test_events_split_anywhere_are_held_until_complete_and_crlf_works() -> None:
    observer = StreamObserver("chat.completions", strip_usage=False)
    stream = (chunk("x") + chunk("y")).replace(b"\n\n", b"\r\n\r\n") + b"data: [DONE]\r\n\r\n"
    out = b""
    for i in range(len(stream)):
        piece = observer.feed(stream[i : i + 1])
        if piece:
            assert piece.endswith(b"\r\n\r\n")  # only whole events are forwarded
        out += piece
    assert out + observer.close() == stream and observer.text == "xy"


def test_malformed_events_pass_through_and_are_flagged() -> None:
    observer = StreamObserver("chat.completions", strip_usage=True)
    out = observer.feed(b"data: {not json\n\n: keep-alive\n\n")
    assert out == b"data: {not json\n\n: keep-alive\n\n"
    assert observer.malformed and not observer.finished


def test_anthropic_usage_merges_message_start_and_delta() -> None:
    observer = StreamObserver("messages", strip_usage=False)
    events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 12, "output_tokens": 1,
                                                        "cache_read_input_tokens": 5}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
         "usage": {"output_tokens": 7}},
        {"type": "message_stop"},
    ]  # fmt: skip
    raw = b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n"  # type: ignore[attr-defined]
        for e in events
    )
    assert observer.feed(raw) == raw
    usage = observer.usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.cached_input_tokens) == (12, 7, 5)
    assert observer.finished and observer.text == "hi"


def ordered_chunk(content: str, usage_first: bool) -> bytes:
    """A chat chunk with `"usage":null` as its first or its last member, as upstreams write it."""
    choices = [{"index": 0, "delta": {"content": content}, "finish_reason": None}]
    members: dict[str, object] = {"id": "c1", "object": "chat.completion.chunk", "choices": choices}
    body = {"usage": None, **members} if usage_first else {**members, "usage": None}
    return b"data: " + orjson.dumps(body) + b"\n\n"


def forwarded_objects(out: bytes) -> list[object]:
    return [orjson.loads(e[6:]) for e in out.split(b"\n\n") if e and e != b"data: [DONE]"]


def test_usage_null_is_cut_wherever_it_stands_and_never_inside_the_content() -> None:
    tricky = 'say "usage":null, then \\ and "usage" : null\n'
    observer = StreamObserver("chat.completions", strip_usage=True)
    stream = ordered_chunk(tricky, usage_first=True) + ordered_chunk("é😀", usage_first=False)
    out = observer.feed(stream + b"data: [DONE]\n\n") + observer.close()
    assert forwarded_objects(out) == [
        {"id": "c1", "object": "chat.completion.chunk",
         "choices": [{"index": 0, "delta": {"content": tricky}, "finish_reason": None}]},
        {"id": "c1", "object": "chat.completion.chunk",
         "choices": [{"index": 0, "delta": {"content": "é😀"}, "finish_reason": None}]},
    ]  # fmt: skip
    assert observer.text == tricky + "é😀" and not observer.malformed


def test_a_spaced_usage_null_is_still_removed() -> None:
    observer = StreamObserver("chat.completions", strip_usage=True)
    event = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}], "usage" : null}\n\n'
    out = observer.feed(event)
    assert orjson.loads(out[6:]) == {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
    assert observer.text == "hi"


def test_a_stream_cut_into_reads_anywhere_forwards_what_it_forwards_whole() -> None:
    stream = (
        b": keep-alive\n\n"
        + ordered_chunk("a\nb", usage_first=False)
        + b"event: note\ndata: "
        + orjson.dumps({"choices": [{"delta": {"content": "c"}}]})
        + b"\n\n"
        + ordered_chunk('"q"', usage_first=True)
        + chunk(None, USAGE)
        + b"data: [DONE]\n\n"
    )  # fmt: skip
    whole = StreamObserver("chat.completions", strip_usage=True)
    expected = whole.feed(stream) + whole.close()
    assert whole.text == 'a\nbc"q"' and whole.usage is not None and whole.finished
    assert b'"usage":null' not in expected and b'"completion_tokens"' not in expected
    for cut in range(1, len(stream)):
        observer = StreamObserver("chat.completions", strip_usage=True)
        out = observer.feed(stream[:cut]) + observer.feed(stream[cut:]) + observer.close()
        assert out == expected, cut
        assert (observer.text, observer.usage, observer.events) == (
            whole.text, whole.usage, whole.events,
        )  # fmt: skip
