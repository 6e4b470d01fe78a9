"""The event loop belongs to clients (issue 12, item 1): one client's huge exchange never stops
the gateway from serving the others, and every exchange still gets its record.

A real `mirrorgate serve` in front of `mirrorgate mock-upstream`; the hostile clients speak raw
HTTP/1.1 on sockets, a probe client sends small requests all along on its own connection. What
is asserted is liveness and records: the probe's requests complete while each huge exchange is
in progress — from its request to its record being in the store — and every exchange, the
probe's and the hostile ones, is stored, with its usage estimated when the upstream reported
none. How long the probe waited at worst is a timing, printed for the record (run with `-s`),
never asserted.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from proxy.core import Status
from proxy.store import Store
from proxy.upstream.tokens import count_tokens
from tests.conftest import wait_until
from tests.e2e.conftest import GatewayProcess, Process, free_port

pytestmark = pytest.mark.e2e

SECRET = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz_0123456789"
BIG_PROMPT = ("The parcel weighs 150 kg and ships on Monday; " * 210_000)[:9_800_000]
"""A prompt just under the 10 MiB body limit once wrapped in JSON."""
ANSWER_LINE = "Our answer, sentence after sentence, without any usage report. "
BIG_ANSWER = ANSWER_LINE * 40_000
"""About 2.5 MB of answer text, streamed by an upstream that reports no usage."""
BEHAVIOR: dict[str, Any] = {
    "record_requests": False,
    "default": {"answer": {"type": "echo", "answer_tokens": 8}},
    "models": {
        # A long stream (2,000 tokens at 200 a second) that reports no usage: the hostile
        # client hangs up after the first event.
        "long-no-usage": {
            "usage": False,
            "answer": {"type": "echo", "answer_tokens": 2000},
            "tokens_per_second": 200,
        },
        "big-answer": {
            "usage": False,
            "answer": {"type": "fixed", "text": ANSWER_LINE, "repeat": 40_000},
            "stream_chunk_tokens": 4096,
        },
    },
}


@dataclass
class Gateway:
    url: str
    host: str
    port: int
    db_url: str

    def stored(self, route: str) -> int:
        with Store(self.db_url) as store:
            return store.count(route=route)

    def records(self, route: str) -> list[Any]:
        with Store(self.db_url) as store:
            return store.query(route=route)


def start_mock(folder: Path, name: str, behavior: dict[str, Any]) -> tuple[Process, str]:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(behavior))
    port = free_port()
    mock = Process(
        ["mock-upstream", "--port", str(port), "--behavior", str(path)], folder / f"{name}.log"
    )
    url = f"http://127.0.0.1:{port}"
    mock.wait_ready(url + "/_mock/stats", name)
    return mock, url


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The gateway, with the hostile models on one mock upstream and the probe's on another: the
    mock counts the tokens of every prompt itself, and must not be what makes the probe wait."""
    folder = tmp_path_factory.mktemp("event-loop")
    hostile, hostile_url = start_mock(folder, "hostile-mock", BEHAVIOR)
    try:
        quiet, quiet_url = start_mock(folder, "probe-mock", {"record_requests": False})
        try:
            db_url = f"sqlite:///{folder / 'records.db'}"
            models = {
                name: {"provider": "openai", "base_url": f"{url}/v1", "model": name,
                       "timeout_s": 30}
                for name, url in (("probe", quiet_url), ("long-no-usage", hostile_url),
                                  ("big-answer", hostile_url))
            }  # fmt: skip
            config = {
                "store": {"url": db_url, "bodies": "redacted", "flush_interval_ms": 20},
                "models": models,
                "routes": {name: {"primary": name} for name in models},
            }
            process = GatewayProcess(config, folder)
            try:
                yield Gateway(process.url, "127.0.0.1", process.port, db_url)
            finally:
                process.terminate()
        finally:
            quiet.terminate()
    finally:
        # Its streams of hung-up clients run on to their end (10 s): stop it at once, by PID.
        hostile.proc.kill()
        hostile.terminate()


@dataclass
class Probe:
    """Small requests, one after the other on one keep-alive connection, in a thread."""

    url: str
    done: list[tuple[float, float, int]] = field(default_factory=list)
    """(sent, answered, status) of each request, on `time.perf_counter`."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Probe:
        self._thread = threading.Thread(target=self._run, name="probe")
        self._thread.start()
        wait_until(lambda: len(self.done) >= 3, what="the probe's first answers")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(30)

    def _run(self) -> None:
        body = {"model": "probe", "messages": [{"role": "user", "content": "ping"}]}
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                sent = time.perf_counter()
                status = client.post(self.url + "/v1/chat/completions", json=body).status_code
                self.done.append((sent, time.perf_counter(), status))

    def answered_within(self, start: float, end: float) -> int:
        """Requests sent at or after `start` and answered by `end`."""
        return sum(1 for sent, answered, _ in self.done if sent >= start and answered <= end)

    def worst_wait_s(self) -> float:
        return max(answered - sent for sent, answered, _ in self.done)


def raw_post(gateway: Gateway, payload: dict[str, Any]) -> socket.socket:
    """Send one POST /v1/chat/completions on a raw socket; return the socket, unread."""
    body = orjson.dumps(payload)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {gateway.host}:{gateway.port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    sock = socket.create_connection((gateway.host, gateway.port), timeout=30)
    sock.sendall(head + body)
    return sock


def read_until_first_event(sock: socket.socket) -> None:
    seen = b""
    while b"\r\n\r\n" not in seen or b"data: " not in seen.partition(b"\r\n\r\n")[2]:
        chunk = sock.recv(65536)
        assert chunk, f"the gateway closed the stream before its first event: {seen[:300]!r}"
        seen += chunk
    assert seen.startswith(b"HTTP/1.1 200"), seen[:300]


def big_stream_request(tag: str) -> dict[str, Any]:
    content = f"{tag} {SECRET} " + BIG_PROMPT
    return {"model": "long-no-usage", "stream": True,
            "messages": [{"role": "user", "content": content}]}  # fmt: skip


def test_huge_prompts_whose_clients_hang_up_on_a_stream_do_not_stop_other_clients(
    gateway: Gateway,
) -> None:
    """The issue's freeze: a 9.9 MB prompt, a stream with no usage, a hang-up — the tokens are
    then counted by the gateway. Two in a row, each a new prompt."""
    exact_input = count_tokens(BIG_PROMPT)
    before = gateway.stored("probe")
    windows: list[tuple[float, float]] = []
    with Probe(gateway.url) as probe:
        for n in range(1, 3):
            start = time.perf_counter()
            sock = raw_post(gateway, big_stream_request(f"round {n}"))
            read_until_first_event(sock)
            sock.close()
            wait_until(lambda n=n: gateway.stored("long-no-usage") >= n, what=f"record {n}")
            windows.append((start, time.perf_counter()))
    asked = len(probe.done)
    for start, end in windows:
        assert probe.answered_within(start, end) >= 1, "no other client was served meanwhile"
    assert {status for _, _, status in probe.done} == {200}
    wait_until(lambda: gateway.stored("probe") - before == asked, what="every probe record")

    records = gateway.records("long-no-usage")
    assert len(records) == 2
    for record in records:
        assert record.status is Status.CLIENT_DISCONNECTED
        assert record.usage.estimated
        assert abs(record.usage.input_tokens - exact_input) / exact_input < 0.05
        assert record.request_body is not None and len(record.request_body) > 9_000_000
        assert SECRET not in record.request_body  # redacted on the recorder's thread
        assert "[REDACTED:openai_key]" in record.request_body
    print(f"\nhang-ups: probe answered {asked} requests, worst wait {probe.worst_wait_s():.3f}s")


def test_a_stream_without_usage_and_a_big_answer_does_not_stop_other_clients(
    gateway: Gateway,
) -> None:
    """The answer's tokens are counted by the gateway at the end of a 2.5 MB stream."""
    payload = {"model": "big-answer", "stream": True,
               "messages": [{"role": "user", "content": "tell me everything"}]}  # fmt: skip
    with Probe(gateway.url) as probe, httpx.Client(timeout=30) as client:
        start = time.perf_counter()
        url = gateway.url + "/v1/chat/completions"
        with client.stream("POST", url, json=payload) as response:
            assert response.status_code == 200
            received = sum(len(chunk) for chunk in response.iter_bytes())
        wait_until(lambda: gateway.stored("big-answer") >= 1, what="the big answer's record")
        end = time.perf_counter()
    asked = len(probe.done)
    assert received > len(BIG_ANSWER)
    assert probe.answered_within(start, end) >= 1, "no other client was served meanwhile"
    (record,) = gateway.records("big-answer")
    assert record.status is Status.OK and record.usage.estimated
    exact_output = count_tokens(BIG_ANSWER)
    assert abs(record.usage.output_tokens - exact_output) / exact_output < 0.05
    print(f"\nbig answer: probe answered {asked} requests, worst wait {probe.worst_wait_s():.3f}s")


def test_thirty_slow_readers_hanging_up_at_once_are_all_recorded_without_a_stall(
    gateway: Gateway,
) -> None:
    """After 30 slow readers hung up, records trickled in at one per 3 s: now all 30 land and
    the probe is served while they do."""
    prompt = BIG_PROMPT[:300_000]
    before = gateway.stored("long-no-usage")
    with Probe(gateway.url) as probe:
        readers = []
        for n in range(30):
            content = f"reader {n} {prompt}"
            payload = {"model": "long-no-usage", "stream": True,
                       "messages": [{"role": "user", "content": content}]}  # fmt: skip
            readers.append(raw_post(gateway, payload))
        for sock in readers:
            read_until_first_event(sock)
        start = time.perf_counter()
        for sock in readers:
            sock.close()
        wait_until(
            lambda: gateway.stored("long-no-usage") - before == 30, what="the 30 readers' records"
        )
        end = time.perf_counter()
    asked = len(probe.done)
    assert probe.answered_within(start, end) >= 1, "no other client was served meanwhile"
    print(f"\n30 readers: probe answered {asked} requests, worst wait {probe.worst_wait_s():.3f}s")
