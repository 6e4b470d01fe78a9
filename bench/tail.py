"""Where a plain request's tail is spent at c=1: in the gateway, or waiting for the upstream.

    .venv/bin/python -m bench.tail                 # 8 s at c=1, twice
    .venv/bin/python -m bench.tail --seconds 20 --repeats 3

It starts the mock upstream and `mirrorgate serve` as `bench/run.py` does (bench/targets.py: the
plain route `bench`, SQLite with `bodies: none`, the gateway on its own core, the mock and the
client on the other), then per repeat: the mock called directly at c=1 (the baseline), and the
gateway at c=1. For the gateway's requests it reads their records from the store, which split each
request's `duration_s` into `overhead_s` (the gateway's own time: reading, planning, the record,
writing the answer) and the rest, the wait for the upstream (from the request sent to the mock to
its answer read back on the gateway's event loop). It prints the percentiles of each, in ms, beside
what the client measured.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import targets
from bench.report import percentile


def closed_loop(rig: targets.Rig, port: int, model: str, seconds: float) -> list[float]:
    """Client latencies (seconds, sorted) of a c=1 closed loop on `model` at `port`."""
    output = rig.work / "tail-load.json"
    argv = [
        str(rig.python), str(rig.repo / "bench" / "loadgen.py"), "--host", targets.HOST,
        "--port", str(port), "--model", model, "--concurrency", "1", "--seconds", str(seconds),
        "--warmup", "0.5", "--output", str(output),
    ]  # fmt: skip
    subprocess.run(rig.layout.pin(rig.layout.load, argv), cwd=rig.repo, check=True)
    return sorted(json.loads(output.read_text())["latencies"])


def line(name: str, values: list[float]) -> str:
    values = sorted(values)
    cells = "  ".join(
        f"{label} {percentile(values, q) * 1e3:6.3f}"
        for label, q in (("p50", 50), ("p99", 99), ("p99.9", 99.9))
    )
    return f"  {name:38} {cells}  max {values[-1] * 1e3:6.2f} ms  (n {len(values):,})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench/out/tail"))
    args = parser.parse_args(argv)
    rig = targets.Rig.create(args.out.resolve())
    mock = targets.mock_upstream(rig).start()
    gateway = targets.mirrorgate(rig).start()
    database = rig.work / "gateway.db"
    try:
        for repeat in range(1, args.repeats + 1):
            direct = closed_loop(rig, targets.MOCK_PORT, targets.UPSTREAM_MODEL, args.seconds)
            with sqlite3.connect(database) as conn:
                (last,) = conn.execute("SELECT coalesce(max(id), 0) FROM exchanges").fetchone()
            client = closed_loop(rig, targets.MIRRORGATE_PORT, targets.ROUTE, args.seconds)
            gateway.stop()  # the recorder writes every record before the gateway exits
            with sqlite3.connect(database) as conn:
                rows = conn.execute(
                    "SELECT duration_s, overhead_s FROM exchanges WHERE id > ? AND route = ?",
                    (last, targets.ROUTE),
                ).fetchall()
            gateway = targets.mirrorgate(rig).start()  # a fresh store: mirrorgate() empties it
            measured = rows[-len(client) :]  # the warm-up's records come first
            print(f"repeat {repeat}")
            print(line("direct to the mock (client)", direct))
            print(line("through the gateway (client)", client))
            print(line("  its duration_s (gateway)", [d for d, _ in measured]))
            print(line("  its overhead_s (gateway's own)", [o for _, o in measured]))
            print(line("  the rest: waiting for the upstream", [d - o for d, o in measured]))
    finally:
        gateway.stop()
        mock.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
