"""Where mirrorgate spends its CPU: py-spy samples folded into components of the request path.

`record` attaches py-spy to the running gateway (`py-spy record --gil --threads --nonblocking
--format raw`; non-blocking so that sampling does not stop the gateway 250 times a second): only
samples of a thread that holds the GIL are kept, so idle threads waiting on a queue or on
epoll do not count, and each sample stands for 1/rate seconds of interpreter time. C extensions
(orjson, httptools, sqlite3) are charged to the Python line that called them.

`fold` assigns every sample to one component: walking the stack from the leaf towards the root,
the first frame that belongs to a known component owns the sample (so `logging` called by httpx is
charged to logging, and `anyio` called by httpcore to the upstream client). Frames of the event
loop and of generic stdlib modules are passed over unless nothing else claims the sample.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXPORTER = "OTLP exporter (batch encode + POST, its thread)"
COMPONENTS: list[tuple[str, tuple[str, ...]]] = [
    ("logging (per-request log lines)", ("(logging/",)),
    ("access log line (formatted and written)", (
        "(proxy/gateway/access_log.py", "(proxy/observability/logs.py",
    )),
    ("crash journal append (client path)", ("(proxy/store/journal.py",)),
    ("prometheus metrics", ("(prometheus_client/", "(proxy/observability/metrics.py")),
    (EXPORTER, (
        "(opentelemetry/exporter/", "(opentelemetry/sdk/trace/export/", "(google/protobuf/",
        "(opentelemetry/proto/", "(requests/", "(urllib3/",
    )),
    ("OpenTelemetry spans (client path)", ("(opentelemetry/", "(proxy/observability/tracing.py")),
    ("recorder submit (client path)", ("(proxy/store/recorder.py",)),
    ("body redaction", ("(proxy/store/redaction.py",)),
    ("store writes (recorder thread: SQLite or PostgreSQL)", (
        "(sqlalchemy/", "(sqlmodel/", "(proxy/store/", "(sqlite3/", "(psycopg",
    )),
    ("token counting", ("(tiktoken", "(proxy/upstream/tokens.py")),
    ("SSE stream observer", ("(proxy/upstream/streaming.py",)),
    ("hand-off to the analysis worker (client path)", (
        "AnalysisWorker._put (", "AnalysisWorker.submit (", "AnalysisWorker.exchange_finished (",
    )),
    ("rule-flip probes (choice, flip, scoring)", (
        "(proxy/mirror/probes.py", "(analyzers/rule_flip.py", "(analyzers/adaptation.py",
    )),
    ("rule checks (analysis worker)", (
        "(analyzers/", "(proxy/mirror/analysis.py", "(proxy/gateway/rules.py",
        "(proxy/gateway/rule_values.py",
    )),
    ("shadow dispatch", ("(proxy/mirror/shadow.py", "(proxy/mirror/overload.py")),
    ("off-path calls (shadows and probes: read, record)", ("(proxy/mirror/calls.py",)),
    ("routing and canary rollout (assignment, judge, evidence)", (
        "(proxy/rollout/", "(proxy/gateway/routing.py",
    )),
    ("usage / pricing / record building", (
        "(proxy/upstream/usage.py", "(proxy/core/pricing.py", "(proxy/core/records.py",
        "ProxyHandler._record ", "ProxyHandler._emit ", "ModelCaller.record ",
    )),
    ("upstream client: httpx/httpcore/anyio", (
        "(httpx/", "(httpcore/", "(anyio/", "(h11/", "(sniffio/",
    )),
    ("upstream client: proxy/upstream_http + pool", (
        "(proxy/upstream/http11.py", "(proxy/upstream/pool.py",
    )),
    ("uvicorn + httptools server", ("(uvicorn/", "(httptools/")),
    ("FastAPI/Starlette (non-proxy routes)", ("(starlette/", "(fastapi/")),
    ("one write per answer (the held head and its body: the send system call)", (
        "(proxy/app/response_writes.py",
    )),
    ("asyncio tasks, events and timeouts (the handler's and uvicorn's)", (
        "(asyncio/tasks.py", "(asyncio/locks.py", "(asyncio/timeouts.py",
        "(asyncio/base_futures.py",
    )),
    ("mirrorgate handler (exchange, caller, asgi, headers, routing)", ("(proxy/",)),
]  # fmt: skip
"""(component, substrings of a frame's "function (file:line)" text), checked in order per frame.

Extend it when the gateway grows a module worth its own line in the profile.
"""
THREAD_COMPONENTS = {"OtelBatchSpan": EXPORTER}
"""Threads whose every sample belongs to one component, by name prefix (py-spy shortens the
exporter's namespace-package paths past recognition: `(common/_internal/...`)."""
FALLBACK_LOOP = "asyncio/uvloop event loop (its C code: polling, socket reads, callbacks)"
_ENTRY_FRAMES = ("(proxy/cli/", "(proxy/app/serve.py")
"""Start-up frames under every sample; left out of the inclusive function list."""
FALLBACK_OTHER = "other"


@dataclass
class Profile:
    """Folded py-spy samples of one run."""

    samples: int = 0
    rate_hz: int = 0
    by_component: Counter[str] = field(default_factory=Counter)
    by_thread: Counter[str] = field(default_factory=Counter)
    inclusive_proxy: Counter[str] = field(default_factory=Counter)
    """mirrorgate functions, counting every sample with the function anywhere on the stack."""
    self_top: Counter[str] = field(default_factory=Counter)
    """Leaf frames (where the interpreter was when sampled)."""

    def seconds(self, count: int) -> float:
        return count / self.rate_hz if self.rate_hz else 0.0

    def summary(self, cpu_us_per_request: float, seconds: float, top: int = 20) -> dict[str, Any]:
        """Shares and µs per request of components, mirrorgate functions and leaf frames.

        µs per request = share of the GIL-holding samples x the process's CPU per request, as
        measured from /proc (sample counts alone would also count the time a thread held the
        GIL while waiting for a CPU).
        """

        def us(count: int) -> float:
            return cpu_us_per_request * count / self.samples if self.samples else 0.0

        def share(count: int) -> float:
            return count / self.samples if self.samples else 0.0

        return {
            "seconds": seconds,
            "samples": self.samples,
            "rate_hz": self.rate_hz,
            "cpu_us_per_request": cpu_us_per_request,
            "gil_busy_share": self.seconds(self.samples) / seconds if seconds else 0.0,
            "threads": dict(self.by_thread),
            "components": [
                {"component": name, "share": share(n), "us_per_request": us(n)}
                for name, n in self.by_component.most_common()
            ],
            "mirrorgate_functions_inclusive": [
                {"function": name, "share": share(n), "us_per_request": us(n)}
                for name, n in self.inclusive_proxy.most_common(top)
            ],
            "top_leaf_frames": [
                {"frame": name, "share": share(n)} for name, n in self.self_top.most_common(top)
            ],
        }


def record(
    py_spy: Path, pid: int, seconds: float, rate_hz: int, output: Path
) -> subprocess.CompletedProcess[str]:
    """Sample `pid` for `seconds`; raw folded stacks go to `output`."""
    argv = [
        str(py_spy), "record", "--pid", str(pid), "--duration", str(int(seconds)),
        "--rate", str(rate_hz), "--gil", "--threads", "--nonblocking",
        "--format", "raw", "--output", str(output),
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=False)


def _component(frames: list[str]) -> str:
    if frames and "(asyncio/runners.py" in frames[-1]:
        # The loop's own C code (uvloop: polling, reading sockets, running callbacks): under
        # `uvicorn.Server.run`, but none of uvicorn's Python.
        return FALLBACK_LOOP
    for frame in reversed(frames):
        for name, needles in COMPONENTS:
            if any(needle in frame for needle in needles):
                return name
    if any("(asyncio/" in f or "uvloop" in f for f in frames):
        return FALLBACK_LOOP
    return FALLBACK_OTHER


def fold(raw: str, rate_hz: int) -> Profile:
    """Parse py-spy's raw output (`frame;frame;... count` per line) into a `Profile`."""
    profile = Profile(rate_hz=rate_hz)
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        thread = frames[0]
        if thread.startswith("thread ("):
            thread_name = thread.split(":", 1)[1].strip() if ":" in thread else "main"
            frames = frames[1:]
        else:
            thread_name = "main"
        profile.samples += count
        profile.by_thread[thread_name or "main"] += count
        component = next(
            (c for prefix, c in THREAD_COMPONENTS.items() if thread_name.startswith(prefix)),
            None,
        )
        profile.by_component[component or _component(frames)] += count
        if frames:
            profile.self_top[frames[-1]] += count
        seen: set[str] = set()
        for frame in frames:
            if "(proxy/" in frame and not any(entry in frame for entry in _ENTRY_FRAMES):
                function = (
                    frame.split(" (", 1)[0] + " (" + frame.split(" (", 1)[1].split(":")[0] + ")"
                )
                if function not in seen:
                    seen.add(function)
                    profile.inclusive_proxy[function] += count
    return profile
