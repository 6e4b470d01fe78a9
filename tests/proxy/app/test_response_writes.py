"""One write per answer: what the held-head transport sends, in which writes and in which order."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import orjson

from proxy.app.response_writes import CONTINUE, HeldHeadTransport
from proxy.app.serve import GatewayServer

HEAD, BODY = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n", b"body"


class Wire:
    """A transport that keeps what each call sent, as one list entry per system call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", data))

    def writelines(self, parts: Any) -> None:
        self.calls.append(("writev", b"".join(parts)))

    def close(self) -> None:
        self.calls.append(("close", b""))
        self.closing = True

    def write_eof(self) -> None:
        self.calls.append(("eof", b""))

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str) -> str:
        return f"real:{name}"


def run(script: Callable[[HeldHeadTransport, Wire], Any]) -> list[tuple[str, bytes]]:
    """Run `script` on a fresh loop, then one more turn of it; the wire's calls."""
    wire = Wire()

    async def main() -> None:
        held = HeldHeadTransport(wire, asyncio.get_running_loop())  # type: ignore[arg-type]
        script(held, wire)
        await asyncio.sleep(0)  # the end of the turn the script ran in
        await asyncio.sleep(0)

    asyncio.run(main())
    return wire.calls


def test_a_head_and_the_body_after_it_leave_in_one_write() -> None:
    def answer(held: HeldHeadTransport, wire: Wire) -> None:
        held.hold_next()
        held.write(HEAD)
        assert wire.calls == []  # held
        held.write(BODY)

    assert run(answer) == [("writev", HEAD + BODY)]


def test_a_head_without_a_body_in_the_same_turn_goes_out_alone_at_its_end() -> None:
    def stream_start(held: HeldHeadTransport, wire: Wire) -> None:
        held.hold_next()
        held.write(HEAD)

    assert run(stream_start) == [("write", HEAD)]


def test_only_the_head_is_held_and_later_writes_go_out_as_they_come() -> None:
    def stream(held: HeldHeadTransport, wire: Wire) -> None:
        held.hold_next()
        held.write(HEAD)
        held.write(b"event 1")
        held.write(b"event 2")

    assert run(stream) == [("writev", HEAD + b"event 1"), ("write", b"event 2")]


def test_the_interim_continue_is_never_held() -> None:
    def expecting(held: HeldHeadTransport, wire: Wire) -> None:
        held.hold_next()
        held.write(CONTINUE)
        assert wire.calls == [("write", CONTINUE)]
        held.write(HEAD)
        held.write(BODY)

    assert run(expecting) == [("write", CONTINUE), ("writev", HEAD + BODY)]


def test_closing_or_ending_the_write_side_sends_the_held_head_first() -> None:
    def closing(held: HeldHeadTransport, wire: Wire) -> None:
        held.hold_next()
        held.write(HEAD)
        held.close()

    def ending(held: HeldHeadTransport, wire: Wire) -> None:
        held.hold_next()
        held.write(HEAD)
        held.write_eof()

    assert run(closing) == [("write", HEAD), ("close", b"")]
    assert run(ending) == [("write", HEAD), ("eof", b"")]


def test_a_second_head_sends_a_first_that_got_no_body_then_is_held_itself() -> None:
    def pipelined(held: HeldHeadTransport, wire: Wire) -> None:
        held.hold_next()
        held.write(b"HEAD 1")  # an answer to HEAD: no body follows
        held.hold_next()
        held.write(b"HEAD 2")
        held.write(BODY)

    assert run(pipelined) == [("write", b"HEAD 1"), ("writev", b"HEAD 2" + BODY)]


def test_a_head_held_when_the_connection_closes_is_dropped_and_the_rest_delegates() -> None:
    def lost(held: HeldHeadTransport, wire: Wire) -> None:
        held.hold_next()
        held.write(HEAD)
        wire.closing = True  # the client hung up in the meantime
        assert held.is_closing()
        assert held.get_extra_info("peername") == "real:peername"

    assert run(lost) == []


CHAT = orjson.dumps({"model": "echo", "messages": [{"role": "user", "content": "hi"}]})


def test_answers_through_the_held_head_transport_read_whole_on_a_kept_alive_connection(
    start_gateway_server: Callable[..., GatewayServer],
) -> None:
    gw = start_gateway_server()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(CHAT) + CHAT
    )
    stream = orjson.dumps({**orjson.loads(CHAT), "stream": True})
    streamed = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(stream) + stream
    )
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        reader = sock.makefile("rb")
        for wire_request in (request, streamed, request):
            sock.sendall(wire_request)
            assert reader.readline().startswith(b"HTTP/1.1 200")
            head = {}
            while (line := reader.readline()) != b"\r\n":
                name, _, value = line.partition(b":")
                head[name.strip().lower()] = value.strip()
            if b"content-length" in head:
                body = reader.read(int(head[b"content-length"]))
                assert orjson.loads(body)["object"] == "chat.completion"
            else:  # chunked: read to the last chunk
                assert head[b"transfer-encoding"] == b"chunked"
                events = b""
                while (size := int(reader.readline(), 16)) > 0:
                    events += reader.read(size)
                    reader.readline()
                reader.readline()
                assert events.rstrip().endswith(b"data: [DONE]")
