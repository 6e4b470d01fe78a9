"""How many check results and findings per second the built-in checks and analyzers produce on
one core, on realistic 1-4 KB JSON answers — to show that analysis keeps up with the proxy.

    .venv/bin/python bench/analyzers_throughput.py [--seconds 1.0] [--answers 500] [--cpu 0]

Answers are shipping-quote JSON documents of 1-4 KB (a seeded generator: same answers on every
run), a tenth of them carrying a tool call. Three measurements, each a table row:

- **per check type, cold**: a fresh `Answer` for every run, so each JSON check pays its own
  parse — the worst case for one check alone;
- **rule set, shared parse**: every check of a realistic rule set on the same `Answer`
  (`run_checks`), the way the proxy runs them — the JSON is parsed once per answer;
- **analyzers**: the built-in analyzers on exchanges and on pairs, through `run_safely`.

The target: the proxy's ~1,500 requests/s, each answer checked once per arm that served or
shadowed it. The last lines say how many answers per second one core can check with the rule
set, and the headroom over 1,500.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analyzers.answer import Answer, ToolCall
from analyzers.checks import Check, compile_check, run_checks
from analyzers.plugins import default_analyzers, run_safely
from analyzers.views import ExchangeView, PairView

PROXY_RATE = 1_500
"""Requests per second the proxy sustains (bench/README.md)."""

QUOTE_SCHEMA = {
    "type": "object",
    "required": ["max_weight", "currency", "options"],
    "properties": {
        "max_weight": {"type": "number", "maximum": 150},
        "currency": {"enum": ["EUR", "USD", "GBP"]},
        "options": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["service", "price", "days"],
                "properties": {
                    "service": {"type": "string"},
                    "price": {"type": "number", "minimum": 0},
                    "days": {"type": "integer", "minimum": 1},
                },
            },
        },
    },
}

RULE_SET: list[dict[str, object]] = [
    {"name": "valid-json", "type": "json"},
    {"name": "quote-schema", "type": "json_schema", "schema": QUOTE_SCHEMA},
    {"name": "max-weight", "type": "json_path", "path": "$.max_weight", "equals": 150},
    {"name": "prices", "type": "json_path", "path": "$.options[*].price", "min": 0, "max": 500},
    {"name": "currency", "type": "json_path", "path": "$.currency", "in": ["EUR", "USD"]},
    {"name": "ref-format", "type": "json_path", "path": "$.reference", "regex": r"^Q-\d{6}$"},
    {"name": "mentions-kg", "type": "regex", "pattern": r"\bkg\b"},
    {"name": "no-old-limit", "type": "not_regex", "pattern": r"max_weight\D{0,5}100\b"},
    {"name": "has-currency", "type": "contains", "value": '"currency"'},
    {"name": "no-guarantee", "type": "not_contains", "value": "guaranteed"},
    {"name": "short-enough", "type": "max_chars", "max": 4_096},
    {"name": "no-refusal", "type": "refusal"},
    {"name": "books-shipment", "type": "tool_call", "tool": "book_shipment",
     "arguments_schema": {"type": "object", "required": ["reference"]}},
]  # fmt: skip

SERVICES = ["standard", "express", "economy", "overnight", "freight", "same-day", "pallet"]
WORDS = [
    "parcel",
    "weight",
    "limit",
    "kg",
    "depot",
    "courier",
    "insured",
    "tracking",
    "signature",
    "fragile",
    "remote",
]


def make_answers(count: int, seed: int = 7) -> list[Answer]:
    """`count` shipping quotes of 1-4 KB of JSON, a tenth with a tool call."""
    rng = random.Random(seed)
    answers = []
    for index in range(count):
        target = rng.randint(1_024, 4_096)
        document: dict[str, object] = {
            "reference": f"Q-{rng.randint(0, 999_999):06d}",
            "max_weight": rng.choice([150, 150, 150, 100]),
            "currency": rng.choice(["EUR", "USD", "GBP"]),
            "options": [],
            "notes": "",
        }
        options: list[dict[str, object]] = []
        while len(json.dumps(document)) < target - 200:
            options.append(
                {
                    "service": rng.choice(SERVICES),
                    "price": round(rng.uniform(3, 400), 2),
                    "days": rng.randint(1, 9),
                    "max_kg": rng.choice([30, 70, 150]),
                    "note": " ".join(rng.choices(WORDS, k=rng.randint(4, 12))),
                }
            )
            document["options"] = options
        document["notes"] = " ".join(rng.choices(WORDS, k=20))
        text = json.dumps(document, indent=rng.choice([None, 2]))
        calls: tuple[ToolCall, ...] = ()
        if index % 10 == 0:
            calls = (ToolCall("book_shipment", json.dumps({"reference": document["reference"]})),)
        answers.append(Answer(text, calls))
    return answers


def measure(seconds: float, step: Callable[[int], int]) -> tuple[float, float]:
    """Call `step(i)` (which returns how many results it produced) for about `seconds` of CPU
    time; return (results per CPU second, microseconds per result)."""
    produced, i = 0, 0
    start = time.process_time()
    deadline = start + seconds
    while True:
        produced += step(i)
        i += 1
        if i % 16 == 0 and time.process_time() >= deadline:
            break
    spent = time.process_time() - start
    return produced / spent, spent / produced * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="CPU seconds per row")
    parser.add_argument("--answers", type=int, default=500, help="distinct answers to cycle")
    parser.add_argument("--cpu", type=int, default=None, help="pin to this CPU (Linux)")
    args = parser.parse_args()
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})

    answers = make_answers(args.answers)
    sizes = sorted(len(a.text) for a in answers)
    checks: list[Check] = [compile_check(spec) for spec in RULE_SET]
    texts = [(a.text, a.tool_calls) for a in answers]
    n = len(answers)

    print(f"# analyzers throughput (one core, python {sys.version.split()[0]})\n")
    print(f"{n} answers, {sizes[0]}-{sizes[-1]} characters (median {sizes[n // 2]}), "
          f"{sum(1 for a in answers if a.tool_calls)} with a tool call\n")  # fmt: skip
    print("| measurement | results/s | µs/result |")
    print("|---|---:|---:|")

    def cold(check: Check) -> Callable[[int], int]:
        def step(i: int) -> int:
            text, calls = texts[i % n]
            check.run(Answer(text, calls))
            return 1

        return step

    for spec, check in zip(RULE_SET, checks, strict=True):
        rate, micros = measure(args.seconds, cold(check))
        print(f"| {spec['type']} `{spec['name']}` (cold) | {rate:,.0f} | {micros:.1f} |")

    def rule_set(i: int) -> int:
        text, calls = texts[i % n]
        return len(run_checks(checks, Answer(text, calls)))

    set_rate, set_micros = measure(args.seconds, rule_set)
    print(
        f"| rule set of {len(checks)} checks, shared parse | {set_rate:,.0f} | {set_micros:.1f} |"
    )

    analyzers = default_analyzers()
    views = [ExchangeView("bot", "prod", "primary", a) for a in answers]

    def exchanges(i: int) -> int:
        return sum(len(run_safely(a, "exchange", views[i % n])[0]) for a in analyzers)

    def pairs(i: int) -> int:
        view = PairView(views[i % n], views[(i + 1) % n], "shadow")
        return sum(len(run_safely(a, "pair", view)[0]) for a in analyzers)

    for label, step in (
        ("built-in analyzers, exchanges", exchanges),
        ("built-in analyzers, pairs", pairs),
    ):
        rate, micros = measure(args.seconds, step)
        print(f"| {label} (findings) | {rate:,.0f} | {micros:.1f} |")

    answers_per_s = set_rate / len(checks)
    headroom = answers_per_s / PROXY_RATE
    print(
        f"\nOne core checks {answers_per_s:,.0f} answers/s with the {len(checks)}-check rule "
        f"set: {headroom:.1f}x the proxy's {PROXY_RATE:,} requests/s "
        f"({headroom / 2:.1f}x when every request is also shadowed once)."
    )


if __name__ == "__main__":
    main()
