"""What redaction costs per record: `redact` on the bodies of the store and fleet benches' records.

The recorder's writer thread redacts every exchange's request body, response body and answer text
under `store.bodies: redacted`; this times exactly that (`apply_bodies_policy`, the three `redact`
calls and the record it rebuilds) on one thread, for the record of `bench.store_write` (2.7 KB of
text, one e-mail address) and the record of `bench.fleet` (2.1 KB of chat JSON, one e-mail
address), plus a body with one of each secret kind in it, where every pass has work to do.

    .venv/bin/python -m bench.redaction [--seconds 1.0]

Each figure is the best of five rounds of `--seconds / 5` each, in CPU µs (`time.process_time`):
per record (`apply_bodies_policy`), and per body (`redact`).
To compare with another checkout, run the same command with that checkout on `PYTHONPATH`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import time
from collections.abc import Callable

from bench import fleet, store_write
from proxy.core.records import ExchangeRecord
from proxy.store.redaction import apply_bodies_policy, redact

_SECRETS = (
    "key sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz_0123456789-abc, ghp_" + "A1b2C3d4E5" * 4,
    "aws AKIAIOSFODNN7EXAMPLE, AIzaSyD3f9Gh2Jk5Lm8Np1Qr4St7Vw0Xy3Za6Bc, xoxb-1234567890-abcdef",
    "Authorization: Bearer abcdefghijklmnopqrstu, jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln",
    "db password=hunter2!x, api_key: abc123, sk_live_51HqLyjK9z8X7w6V5u4, mail ann@example.com",
)


def secrets_record() -> ExchangeRecord:
    """The store bench's record with one secret of each kind in every body (and a secret field)."""
    said = " ".join(_SECRETS)
    request = {"model": "support-bot", "api_key": "k-123", "messages": [{"content": said}]}
    return dataclasses.replace(
        store_write.make_record(0),
        request_body=json.dumps(request),
        response_body="data: " + json.dumps({"choices": [{"delta": {"content": said}}]}),
        response_text=said,
    )


def best_us(call: Callable[[], object], seconds: float) -> float:
    """CPU microseconds per call (`time.process_time`, so that other work on a shared machine
    counts less): the best of five rounds of `seconds / 5`."""
    start = time.perf_counter()
    call()
    once = max(time.perf_counter() - start, 1e-7)
    n = max(1, int(seconds / 5 / once))
    rounds = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(n):
            call()
        rounds.append((time.process_time() - start) / n)
    return min(rounds) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="per figure")
    args = parser.parse_args()
    records = {
        "store_write": store_write.make_record(0),
        "fleet": fleet.make_record(0, 0),
        "secrets": secrets_record(),
    }
    for name, record in records.items():
        bodies = {
            "request_body": record.request_body or "",
            "response_body": record.response_body or "",
            "response_text": record.response_text or "",
        }
        size = sum(len(b) for b in bodies.values())
        whole = best_us(functools.partial(apply_bodies_policy, record, "redacted"), args.seconds)
        parts = "   ".join(
            f"{field} {best_us(functools.partial(redact, body), args.seconds):5.1f}"
            for field, body in bodies.items()
        )
        print(
            f"{name:12} {size:5,} chars   record {whole:6.1f} µs   {parts}"
            f"   load {os.getloadavg()[0]:.2f}"
        )


if __name__ == "__main__":
    main()
