"""How long one client's huge exchange makes the others wait (issue 12, item 1).

Starts `mirrorgate mock-upstream` twice (the hostile models on one, the probe's on the other, so
that the mock's own token counting never makes the probe wait) and `mirrorgate serve` in front
of both, then runs each scenario while a probe client sends small requests one after the other
on one keep-alive connection. Prints, per scenario, how many probe requests were answered while
it ran and how long the slowest one waited: on an idle machine that is the longest the gateway's
event loop was held. The scenarios are those of tests/hostile/test_event_loop.py:

- `hangups`: three 9.9 MB prompts on a stream without usage, each client hanging up after the
  first event (the gateway then estimates the tokens of the prompt and of the answer so far);
- `big-answer`: a 2.5 MB streamed answer without usage, read to its end;
- `readers`: 30 streams of 300 KB prompts without usage, whose clients all hang up at once.

    .venv/bin/python bench/event_loop.py
    .venv/bin/python bench/event_loop.py --gateway-path /tmp/main-src   # another tree's gateway

`--gateway-path` runs the gateway from another source tree (e.g. a `git archive` of
main), to compare a change with what it replaces; the mocks always run from this tree.
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

ROOT = Path(__file__).resolve().parent.parent
PROMPT = ("The parcel weighs 150 kg and ships on Monday; " * 210_000)[:9_800_000]
LINE = "Our answer, sentence after sentence, without any usage report. "
HOSTILE = {
    "record_requests": False,
    "models": {
        "long-no-usage": {"usage": False, "answer": {"type": "echo", "answer_tokens": 2000},
                          "tokens_per_second": 200},
        "big-answer": {"usage": False, "answer": {"type": "fixed", "text": LINE, "repeat": 40_000},
                       "stream_chunk_tokens": 4096},
    },
}  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_FROM_TREE = (
    "import runpy, sys; "
    "sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in repr(f)]; "
    "sys.path.insert(0, sys.argv.pop(1)); "
    "runpy.run_module('proxy.cli', run_name='__main__', alter_sys=True)"
)
"""Runs `proxy.cli` from the tree given first, past this venv's editable install of this one."""


def start(args: list[str], log: Path, tree: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "proxy.cli"]
    if tree.resolve() != ROOT:
        command = [sys.executable, "-c", _FROM_TREE, str(tree)]
    with log.open("wb") as out:
        return subprocess.Popen([*command, *args], stdout=out, stderr=subprocess.STDOUT)


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.01)


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def recorded(url: str, route: str) -> int:
    """Exchanges of `route` the gateway counted (its requests counter, read from /metrics)."""
    total = 0.0
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith("mirrorgate_requests_total{") and f'route="{route}"' in line:
            total += float(line.rpartition(" ")[2])
    return int(total)


class Probe:
    def __init__(self, url: str) -> None:
        self.url = url
        self.done: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        body = {"model": "probe", "messages": [{"role": "user", "content": "ping"}]}
        with httpx.Client(timeout=60) as client:
            while not self._stop.is_set():
                sent = time.perf_counter()
                client.post(self.url + "/v1/chat/completions", json=body).raise_for_status()
                self.done.append((sent, time.perf_counter()))

    def __enter__(self) -> Probe:
        self._thread.start()
        wait_for(lambda: len(self.done) >= 20, "the probe's first answers")
        self.done.clear()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)


def raw_stream(host: str, port: int, payload: dict[str, Any]) -> socket.socket:
    body = orjson.dumps(payload)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}:{port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    sock = socket.create_connection((host, port), timeout=60)
    sock.sendall(head + body)
    return sock


def first_event(sock: socket.socket) -> None:
    seen = b""
    while b"data: " not in seen.partition(b"\r\n\r\n")[2]:
        chunk = sock.recv(65536)
        if not chunk:
            raise SystemExit(f"stream closed early: {seen[:200]!r}")
        seen += chunk


def stream_request(model: str, content: str) -> dict[str, Any]:
    return {"model": model, "stream": True, "messages": [{"role": "user", "content": content}]}


def hangups(url: str, host: str, port: int) -> None:
    before = recorded(url, "long-no-usage")
    for n in range(3):
        sock = raw_stream(host, port, stream_request("long-no-usage", f"{n} {PROMPT}"))
        first_event(sock)
        sock.close()
        wait_for(lambda n=n: recorded(url, "long-no-usage") - before > n, "a hang-up's record")


def big_answer(url: str, host: str, port: int) -> None:
    before = recorded(url, "big-answer")
    payload = stream_request("big-answer", "everything")
    with (
        httpx.Client(timeout=60) as client,
        client.stream("POST", url + "/v1/chat/completions", json=payload) as response,
    ):
        for _ in response.iter_bytes():
            pass
    wait_for(lambda: recorded(url, "big-answer") > before, "the big answer's record")


def readers(url: str, host: str, port: int) -> None:
    before = recorded(url, "long-no-usage")
    prompt = PROMPT[:300_000]
    socks = [
        raw_stream(host, port, stream_request("long-no-usage", f"r{n} {prompt}")) for n in range(30)
    ]
    for sock in socks:
        first_event(sock)
    for sock in socks:
        sock.close()
    wait_for(lambda: recorded(url, "long-no-usage") - before >= 30, "the readers' records")


SCENARIOS = {"hangups": hangups, "big-answer": big_answer, "readers": readers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateway-path", type=Path, default=ROOT)
    parser.add_argument("--scenarios", nargs="*", default=list(SCENARIOS))
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="mirrorgate-event-loop-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        mocks = {}
        for name, behavior in (("hostile", HOSTILE), ("quiet", {"record_requests": False})):
            path = folder / f"{name}.yaml"
            path.write_text(yaml.safe_dump(behavior))
            port = free_port()
            processes.append(start(["mock-upstream", "--port", str(port), "--behavior", str(path)],
                                   folder / f"{name}.log", ROOT))  # fmt: skip
            mocks[name] = f"http://127.0.0.1:{port}"
            wait_for(lambda u=mocks[name]: answers(u + "/_mock/stats"), f"mock {name}")
        port = free_port()
        models = {
            name: {"provider": "openai", "base_url": mocks[mock] + "/v1", "model": name,
                   "timeout_s": 60}
            for name, mock in (("probe", "quiet"), ("long-no-usage", "hostile"),
                               ("big-answer", "hostile"))
        }  # fmt: skip
        config = {
            "server": {"port": port},
            "store": {"url": f"sqlite:///{folder / 'records.db'}", "bodies": "redacted"},
            "models": models,
            "routes": {name: {"primary": name} for name in models},
        }
        (folder / "gateway.yaml").write_text(yaml.safe_dump(config))
        processes.append(start(["serve", "--config", str(folder / "gateway.yaml")],
                               folder / "gateway.log", options.gateway_path))  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: answers(url + "/readyz"), "the gateway")
        print(f"gateway from {options.gateway_path}; logs in {folder}\n")
        print("| scenario | probe answers | probe p50 | worst probe wait |")
        print("|---|---|---|---|")
        for name in options.scenarios:
            with Probe(url) as probe:
                SCENARIOS[name](url, "127.0.0.1", port)
            waits = sorted(done - sent for sent, done in probe.done)
            print(
                f"| {name} | {len(waits)} | {waits[len(waits) // 2] * 1000:.1f} ms "
                f"| {waits[-1] * 1000:.0f} ms |",
                flush=True,
            )
    finally:
        for process in reversed(processes):
            process.send_signal(signal.SIGKILL if process is processes[0] else signal.SIGTERM)
            process.wait(30)


if __name__ == "__main__":
    main()
