"""Garbage-collection pauses under a steady load, with the start-up freeze on and off (issue 17).

    .venv/bin/python bench/pauses.py                      # 600 s each way (~21 minutes)
    .venv/bin/python bench/pauses.py --duration 120       # a shorter run
    .venv/bin/python bench/pauses.py --modes off          # only the freeze off

It starts the mock upstream and `mirrorgate serve` the way `bench/run.py` does (bench/targets.py:
the plain route `bench`, SQLite with `bodies: none`, gateway pinned to its own core, the mock and
the client on the other), and per mode drives a steady closed loop (bench/loadgen.py:
`--concurrency` workers, each pausing a random 0 to `--think` seconds between requests, which holds
the rate below saturation) for `--duration` seconds. `freeze on` is `serve` as shipped; `freeze off`
sets `MIRRORGATE_GC_FREEZE=0`. The gateway is restarted for each mode, so neither inherits the
other's heap. `mirrorgate_gc_pause_seconds` is read from /metrics after the warm-up and at the end;
the difference is tabled per generation (count, sum, the largest bucket reached, the count over 5
ms) next to the client's latency percentiles. Markdown to stdout, progress to stderr, `--json FILE`
the same as one object.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import targets
from bench.loadgen import LoadResult
from bench.processes import port_free
from bench.report import Percentiles, percentile, table

METRIC = "mirrorgate_gc_pause_seconds"
OVER_MS = 5.0
"""The bound issue 17 holds pauses to: no pause over 5 ms in a 10-minute run."""
MODES = {"on": {}, "off": {"MIRRORGATE_GC_FREEZE": "0"}}


@dataclass
class Generation:
    """One generation's pause histogram: cumulative bucket counts by upper bound, count, sum."""

    buckets: dict[float, float] = field(default_factory=dict)
    count: float = 0.0
    sum_s: float = 0.0

    def minus(self, before: Generation) -> Generation:
        return Generation(
            {le: n - before.buckets.get(le, 0.0) for le, n in self.buckets.items()},
            self.count - before.count,
            self.sum_s - before.sum_s,
        )

    def largest_bucket(self) -> float | None:
        """The upper bound of the smallest bucket that holds every pause (None: no pause)."""
        if self.count <= 0:
            return None
        return min(le for le, n in self.buckets.items() if n >= self.count)

    def over(self, seconds: float) -> float:
        """Pauses longer than `seconds`, which must be a bucket bound."""
        return self.count - self.buckets[seconds]


def parse_pauses(text: str) -> dict[str, Generation]:
    """The `mirrorgate_gc_pause_seconds` histogram in a /metrics page, by generation."""
    out: dict[str, Generation] = {}
    for family in text_string_to_metric_families(text):
        if family.name != METRIC:
            continue
        for sample in family.samples:
            gen = out.setdefault(sample.labels.get("generation", ""), Generation())
            if sample.name == f"{METRIC}_bucket":
                gen.buckets[float(sample.labels["le"])] = sample.value
            elif sample.name == f"{METRIC}_count":
                gen.count = sample.value
            elif sample.name == f"{METRIC}_sum":
                gen.sum_s = sample.value
    return out


def pauses_between(
    before: dict[str, Generation], after: dict[str, Generation]
) -> dict[str, Generation]:
    return {g: h.minus(before.get(g, Generation())) for g, h in sorted(after.items())}


def _metrics() -> str:
    url = f"http://{targets.HOST}:{targets.MIRRORGATE_PORT}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
    return body.decode()


def _log(message: str) -> None:
    print(f"[pauses {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_mode(rig: targets.Rig, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One gateway, one steady load: the pauses it measured and what the client saw."""
    gateway = targets.mirrorgate(rig, env=MODES[mode])
    gateway.log_path = rig.work / f"mirrorgate-{mode}.log"  # each mode keeps its own log
    output = rig.work / f"load-{mode}.json"
    output.unlink(missing_ok=True)
    argv = rig.layout.pin(rig.layout.load, [
        str(rig.python), str(rig.repo / "bench" / "loadgen.py"),
        "--host", targets.HOST, "--port", str(targets.MIRRORGATE_PORT), "--model", targets.ROUTE,
        "--concurrency", str(args.concurrency), "--seconds", str(args.duration),
        "--warmup", str(args.warmup), "--think", str(args.think), "--ramp", "0.05",
        "--output", str(output), "--announce",
    ])  # fmt: skip
    with gateway:
        with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as load:
            if load.stdout is not None:
                load.stdout.readline()  # "measuring": the warm-up is over
            before, cpu0, load0 = parse_pauses(_metrics()), gateway.cpu_seconds(), _loadavg()
            _log(f"freeze {mode}: measuring {args.duration:.0f} s (load average {load0})")
            load.communicate()
        after, cpu1, load1 = parse_pauses(_metrics()), gateway.cpu_seconds(), _loadavg()
    if load.returncode != 0 or not output.exists():
        raise SystemExit(f"load generator failed ({load.returncode})")
    result = LoadResult(**json.loads(output.read_text()))
    latency = Percentiles.of_seconds(result.latencies)
    ms = sorted(1e3 * s for s in result.latencies)
    return {
        "mode": mode,
        "requests": result.requests,
        "errors": result.errors,
        "rate": result.requests / result.elapsed_s if result.elapsed_s else 0.0,
        "gateway_cpu_us_per_req": 1e6 * (cpu1 - cpu0) / max(result.requests, 1),
        "latency_ms": None if latency is None else asdict(latency),
        "p999_ms": percentile(ms, 99.9) if ms else 0.0,
        "loadavg": [load0, load1],
        "pauses": {g: asdict(h) for g, h in pauses_between(before, after).items()},
        "_pauses": pauses_between(before, after),
    }


def markdown(runs: list[dict[str, Any]]) -> str:
    client = table(
        ["freeze", "req/s", "errors", "gateway CPU µs/req", "p50 ms", "p99 ms", "p99.9 ms",
         "max ms", "load average (start, end)"],
        [[r["mode"], f"{r['rate']:.0f}", str(r["errors"]), f"{r['gateway_cpu_us_per_req']:.0f}",
          f"{r['latency_ms']['p50']:.2f}", f"{r['latency_ms']['p99']:.2f}", f"{r['p999_ms']:.2f}",
          f"{r['latency_ms']['max']:.1f}", " / ".join(r["loadavg"])] for r in runs],
    )  # fmt: skip
    rows = []
    for r in runs:
        for gen, h in r["_pauses"].items():
            largest = h.largest_bucket()
            rows.append([
                r["mode"], gen, f"{h.count:.0f}", f"{1e3 * h.sum_s:.1f}",
                f"{1e3 * h.sum_s / h.count:.2f}" if h.count else "-",
                "-" if largest is None else f"≤ {1e3 * largest:g}",
                f"{h.over(OVER_MS / 1e3):.0f}",
            ])  # fmt: skip
    gc_table = table(
        ["freeze", "generation", "pauses", "sum ms", "mean ms", "largest bucket ms",
         f"over {OVER_MS:g} ms"],
        rows,
    )  # fmt: skip
    return f"{client}\n\n{gc_table}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="measured seconds per mode")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--think",
        type=float,
        default=0.012,
        help="each worker pauses a random 0 to S s between requests (paces the rate)",
    )
    parser.add_argument("--modes", default="on,off", help="comma-separated: on, off")
    parser.add_argument("--out", type=Path, default=Path("bench/out/pauses"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)  # fmt: skip
    for port in (targets.MOCK_PORT, targets.MIRRORGATE_PORT):
        if not port_free(targets.HOST, port):
            raise SystemExit(f"port {port} is taken")
    rig = targets.Rig.create(args.out.resolve())
    runs = []
    with targets.mock_upstream(rig):
        for mode in args.modes.split(","):
            runs.append(run_mode(rig, mode.strip(), args))
    print(markdown(runs))
    if args.json is not None:
        args.json.write_text(
            json.dumps([{k: v for k, v in r.items() if k != "_pauses"} for r in runs], indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
