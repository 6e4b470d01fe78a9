"""What the crash journal costs a request: CPU per request and added latency, journal on vs off.

    .venv/bin/python -m bench.journal [--rounds 3] [--seconds 4] [--out bench/out/journal]

Two `mirrorgate serve` processes, identical but for `store.journal` (true / false), in front of
one mock upstream, both pinned to the gateway's CPU (only one is under load at a time), and the
mock called directly as the floor. Per round, every cell {non-stream, stream} x {c=1, c=16} runs
the three targets back to back in a rotating order, so that each sees the same machine; the
report gives the median over rounds of each cell's p50 and p99 latency and of the gateway's CPU
per request (from /proc), and the difference on - off.

Then `Journal.append` alone, in this process, for records like the client path's: without bodies
(the bench's gateways keep none), and with 2 KB and 16 KB of bodies under `bodies: full` and
`redacted`, one call at a time: the time the event loop spends in it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from bench.loadgen import LoadResult
from bench.processes import ServerProcess, free_port, http_ok
from bench.report import percentile
from bench.targets import HOST, CpuLayout, Rig, _base_env
from proxy.core.records import Arm, ExchangeRecord, Status, Usage
from proxy.store.journal import Journal

CELLS = [(False, 1), (False, 16), (True, 1), (True, 16)]
"""(stream, concurrency)."""


@dataclass
class Target:
    name: str
    port: int
    model: str
    server: ServerProcess | None


def mock(rig: Rig, port: int) -> ServerProcess:
    behavior = rig.work / "mock-behavior.yaml"
    behavior.write_text("record_requests: false\n")
    argv = [
        str(rig.python), "-m", "proxy.cli", "--log-level", "warning", "mock-upstream",
        "--host", HOST, "--port", str(port), "--behavior", str(behavior),
    ]  # fmt: skip
    return ServerProcess(
        "mock-upstream", rig.layout.pin(rig.layout.mock, argv), cwd=rig.repo, env=_base_env(),
        ready=http_ok(f"http://{HOST}:{port}/healthz"), log_path=rig.work / "mock.log",
    )  # fmt: skip


def gateway(rig: Rig, name: str, port: int, mock_port: int, journal: bool) -> ServerProcess:
    """`mirrorgate serve` on a SQLite store of its own, `bodies: none`, as the main bench."""
    db = rig.work / f"{name}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    config = rig.work / f"{name}.yaml"
    config.write_text(
        f"server: {{host: {HOST}, port: {port}}}\n"
        f'store: {{url: "sqlite:///{db}", bodies: none, journal: {str(journal).lower()}}}\n'
        "models:\n"
        f'  fake: {{provider: openai, base_url: "http://{HOST}:{mock_port}/v1", model: fake,'
        " price: {input_per_mtok: 0.15, output_per_mtok: 0.6}}\n"
        "routes:\n"
        "  bench: {primary: fake}\n"
    )
    argv = [str(rig.python), "-m", "proxy.cli", "serve", "--config", str(config)]
    return ServerProcess(
        name, rig.layout.pin(rig.layout.gateway, argv), cwd=rig.repo, env=_base_env(),
        ready=http_ok(f"http://{HOST}:{port}/readyz"), log_path=rig.work / f"{name}.log",
    )  # fmt: skip


def load(
    rig: Rig, target: Target, stream: bool, concurrency: int, seconds: float, warmup: float
) -> tuple[LoadResult, float]:
    """One closed loop; (its result, the target server's CPU seconds during the measured part)."""
    output = rig.work / "load.json"
    output.unlink(missing_ok=True)
    argv = [
        str(rig.python), str(rig.repo / "bench" / "loadgen.py"), "--host", HOST,
        "--port", str(target.port), "--model", target.model, "--concurrency", str(concurrency),
        "--seconds", str(seconds), "--warmup", str(warmup), "--output", str(output), "--announce",
    ]  # fmt: skip
    if stream:
        argv.append("--stream")
    argv = rig.layout.pin(rig.layout.load, argv)
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        proc.stdout.readline()  # "measuring"
        before = target.server.cpu_seconds() if target.server is not None else 0.0
        _, err = proc.communicate()
        after = target.server.cpu_seconds() if target.server is not None else 0.0
    if proc.returncode != 0 or not output.exists():
        raise RuntimeError(f"load generator failed ({proc.returncode}): {err[-2000:]}")
    return LoadResult(**json.loads(output.read_text())), after - before


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def grid(rig: Rig, targets: list[Target], rounds: int, seconds: float) -> dict[str, Any]:
    samples: dict[tuple[bool, int, str], list[dict[str, float]]] = {}
    for round_ in range(rounds):
        for stream, concurrency in CELLS:
            order = targets[round_ % 3 :] + targets[: round_ % 3]
            for target in order:
                result, cpu = load(rig, target, stream, concurrency, seconds, warmup=0.5)
                latencies = sorted(result.latencies)
                done = max(result.requests, 1)
                samples.setdefault((stream, concurrency, target.name), []).append(
                    {
                        "requests": result.requests,
                        "errors": result.errors,
                        "rps": result.requests / (result.elapsed_s or 1.0),
                        "p50_ms": percentile(latencies, 50) * 1000,
                        "p99_ms": percentile(latencies, 99) * 1000,
                        "cpu_us": cpu * 1e6 / done,
                    }
                )
                print(
                    f"round {round_ + 1} {'stream' if stream else 'plain'} c={concurrency} "
                    f"{target.name}: {samples[(stream, concurrency, target.name)][-1]}",
                    file=sys.stderr,
                )
    return {
        f"{'stream' if s else 'non-stream'} c={c} {name}": {
            key: statistics.median(run[key] for run in runs) for key in runs[0]
        }
        for (s, c, name), runs in samples.items()
    }


def record(body_bytes: int) -> ExchangeRecord:
    text = ("The parcel left the depot; write to ann@example.com. " * 400)[: max(body_bytes, 1)]
    third = body_bytes // 3
    return ExchangeRecord(
        request_id="r" * 32, route="bench", target="fake", upstream_model="fake",
        arm=Arm.PRIMARY, endpoint="chat.completions", provider="openai", streamed=False,
        started_at=datetime.now(UTC), duration_s=0.01, ttft_s=None, overhead_s=0.0004,
        status=Status.OK, http_status=200, usage=Usage(120, 40), cost_usd=0.00004,
        request_body=text[:third] if body_bytes else None,
        response_body=text[: body_bytes - 2 * third] if body_bytes else None,
        response_text=text[:third] if body_bytes else None,
    )  # fmt: skip


def append_cost(count: int = 20_000) -> dict[str, dict[str, float]]:
    """Microseconds per `Journal.append` (median, p99), one record at a time."""
    out: dict[str, dict[str, float]] = {}
    cases = [("no bodies", 0, "none"), ("2 KB bodies, full", 2048, "full"),
             ("2 KB bodies, redacted", 2048, "redacted"),
             ("16 KB bodies, redacted", 16_000, "redacted")]  # fmt: skip
    for name, size, policy in cases:
        with tempfile.TemporaryDirectory() as folder:
            journal = Journal(
                Path(folder), registry=CollectorRegistry(), bodies_policy=policy,
                max_body_bytes=16_384,
            )  # fmt: skip
            journal.open()
            template = record(size)
            times = []
            for i in range(count):
                one = _with_id(template, i)
                t0 = time.perf_counter_ns()
                journal.append(one)
                times.append(time.perf_counter_ns() - t0)
                journal.settled((one,))
            journal.close()
        times.sort()
        out[name] = {
            "median_us": times[len(times) // 2] / 1000,
            "p99_us": times[int(len(times) * 0.99)] / 1000,
        }
        print(f"append {name}: {out[name]}", file=sys.stderr)
    return out


def _with_id(template: ExchangeRecord, i: int) -> ExchangeRecord:
    return dataclasses.replace(template, request_id=f"req-{i}")


def markdown(results: dict[str, Any], appends: dict[str, dict[str, float]]) -> str:
    lines = [
        "| cell | direct p50 ms | off p50 ms | on p50 ms | on - off p50 ms | off p99 ms | "
        "on p99 ms | off CPU µs/req | on CPU µs/req | on - off CPU µs/req |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for stream, c in CELLS:
        cell = f"{'stream' if stream else 'non-stream'} c={c}"
        d, off, on = (results[f"{cell} {n}"] for n in ("direct", "journal-off", "journal-on"))
        lines.append(
            f"| {cell} | {d['p50_ms']:.2f} | {off['p50_ms']:.2f} | {on['p50_ms']:.2f} | "
            f"{on['p50_ms'] - off['p50_ms']:+.2f} | {off['p99_ms']:.2f} | {on['p99_ms']:.2f} | "
            f"{off['cpu_us']:.0f} | {on['cpu_us']:.0f} | {on['cpu_us'] - off['cpu_us']:+.0f} |"
        )
    return "\n".join(lines) + "\n\n" + markdown_appends(appends)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--out", type=Path, default=Rig.repo_root() / "bench" / "out" / "journal")
    parser.add_argument("--appends-only", action="store_true")
    args = parser.parse_args(argv)
    appends = append_cost()
    if args.appends_only:
        print(markdown_appends(appends))
        return 0
    rig = Rig.create(args.out)
    layout = CpuLayout.for_machine()
    rig = Rig(rig.repo, rig.work, rig.python, rig.litellm_venv, layout)
    ports = {name: free_port() for name in ("mock", "on", "off")}
    servers = [
        mock(rig, ports["mock"]),
        gateway(rig, "journal-on", ports["on"], ports["mock"], journal=True),
        gateway(rig, "journal-off", ports["off"], ports["mock"], journal=False),
    ]
    for server in servers:
        server.launch()
    try:
        for server in servers:
            server.wait_ready()
        targets = [
            Target("direct", ports["mock"], "fake", None),
            Target("journal-off", ports["off"], "bench", servers[2]),
            Target("journal-on", ports["on"], "bench", servers[1]),
        ]
        results = grid(rig, targets, args.rounds, args.seconds)
        appended = metric(ports["on"], "mirrorgate_journal_appended_total")
        on_bytes = metric(ports["on"], "mirrorgate_journal_bytes")
    finally:
        for server in servers:
            server.stop()
    (rig.work / "results.json").write_text(json.dumps({"grid": results, "appends": appends}))
    print(markdown(results, appends))
    print(f"\njournal-on appended {appended:.0f} records; {on_bytes:.0f} bytes left at the end")
    return 0


def markdown_appends(appends: dict[str, dict[str, float]]) -> str:
    lines = ["| `Journal.append` | median µs | p99 µs |", "|---|---|---|"]
    lines += [f"| {n} | {v['median_us']:.1f} | {v['p99_us']:.1f} |" for n, v in appends.items()]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
