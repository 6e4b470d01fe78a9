"""Resident memory of a gateway during a store outage under big bodies (issue 12, item 11).

Starts `mirrorgate mock-upstream` and `mirrorgate serve` on PostgreSQL (127.0.0.1:5432, database
`test`, a fresh schema) behind a TCP forwarder, cuts every database connection, sends 300 requests
of 2 MB, prints the gateway's resident memory before and at its peak and the recorder's counters,
restores the database and waits for every row.

    .venv/bin/python bench/outage_memory.py
    .venv/bin/python bench/outage_memory.py --gateway-path /tmp/main-src   # another tree's gateway
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path

import httpx
import sqlalchemy as sa
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from event_loop import ROOT, answers, free_port, start, wait_for

from tests.e2e.tcp_forwarder import TcpForwarder

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def rss_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
    return 0


def metric(text: str, name: str) -> float:
    return sum(
        float(line.rpartition(" ")[2]) for line in text.splitlines() if line.startswith(name)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateway-path", type=Path, default=ROOT)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--body-mb", type=float, default=2.0)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="mirrorgate-outage-memory-"))
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(PG)
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    url = f"{PG}?options=-csearch_path%3D{schema}"
    (folder / "mock.yaml").write_text(yaml.safe_dump({"record_requests": False}))
    mock_port = free_port()
    behavior = str(folder / "mock.yaml")
    mock = start(
        ["mock-upstream", "--port", str(mock_port), "--behavior", behavior],
        folder / "mock.log",
        ROOT,
    )
    try:
        with TcpForwarder("127.0.0.1", 5432) as forwarder:
            port = free_port()
            config = {
                "server": {"port": port},
                "store": {"url": url.replace("127.0.0.1:5432", f"127.0.0.1:{forwarder.port}")},
                "models": {"echo": {"provider": "openai", "model": "echo",
                                    "base_url": f"http://127.0.0.1:{mock_port}/v1"}},
                "routes": {"echo": {"primary": "echo"}},
            }  # fmt: skip
            (folder / "gateway.yaml").write_text(yaml.safe_dump(config))
            serve = ["serve", "--config", str(folder / "gateway.yaml")]
            gateway = start(serve, folder / "gateway.log", options.gateway_path)
            base = f"http://127.0.0.1:{port}"
            try:
                wait_for(lambda: answers(base + "/readyz"), "the gateway")
                with httpx.Client(timeout=60) as client:
                    hello = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
                    for _ in range(20):
                        client.post(base + "/v1/chat/completions", json=hello).raise_for_status()
                    before = peak = rss_mb(gateway.pid)
                    forwarder.cut()
                    filler = "x" * int(options.body_mb * 1_000_000)
                    for n in range(options.requests):
                        content = f"{n} {filler}"
                        body = {"model": "echo", "messages": [{"role": "user", "content": content}]}
                        client.post(base + "/v1/chat/completions", json=body).raise_for_status()
                        peak = max(peak, rss_mb(gateway.pid))
                    text = client.get(base + "/metrics").text
                print(f"gateway from {options.gateway_path}; logs in {folder}")
                print(f"resident memory: {before} MB before the outage, {peak} MB at its peak")
                held = metric(text, "mirrorgate_recorder_queue_bytes") / 2**20
                bare = metric(text, "mirrorgate_recorder_bodies_dropped_total")
                lost = metric(text, "mirrorgate_recorder_dropped_total")
                print(f"queue bytes {held:.0f} MiB, bodies dropped {bare:.0f}, dropped {lost:.0f}")
                forwarder.restore()
                wanted = options.requests + 20
                engine = sa.create_engine(url)

                def rows() -> int:
                    with engine.connect() as conn:
                        return int(conn.execute(sa.text("SELECT count(*) FROM exchanges")).scalar())

                wait_for(lambda: rows() >= wanted, "every row", timeout_s=300)
                print(f"rows after the outage: {rows()} of {wanted}")
                engine.dispose()
            finally:
                gateway.terminate()
                gateway.wait(60)
    finally:
        mock.terminate()
        mock.wait(30)
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


if __name__ == "__main__":
    main()
