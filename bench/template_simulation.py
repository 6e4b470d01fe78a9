"""Rule versions learned from templated system prompts, simulated (docs/rules.md, issue 34).

Each run feeds the rule resolver and tracker a gateway runs (`proxy.gateway.rules`) a support
prompt filled per request — a customer's name (one to three words), e-mail, date, ticket id and
an amount — for `--before` requests, then one real change for `--after` requests, with one
client's junk in between (`--junk` prompts of its own, 3 requests each: half unrelated text, half
edits of the real prompt). Customers come from a pool of `--users`, Zipf-like. Three changes:
the declared value (`max_weight` 100 → 150), a fixed word (`concise` → `thorough`), a sentence
added. With and without a sticky key (without one each request is a unit). It counts, per run:

- `first`: the requests until the templated prompt carries one version for good;
- `split`: versions opened by the templated prompt other than its one (a customer's own);
- `junk`: versions the junk opened (none with a sticky key: one client is one unit);
- `detect`: the requests after the change until the new version is carried (∞: never);
- `absorbed`: runs whose change was absorbed into the old version (never detected).

    .venv/bin/python bench/template_simulation.py --runs 200 --seed 1
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from proxy.config import parse_config
from proxy.gateway.rule_values import RuleValues
from proxy.gateway.rules import RuleResolver, RuleTracker, version_policies
from proxy.observability.metrics import GatewayMetrics
from proxy.store import RuleEvent

FIRST = [
    "Ada",
    "Grace",
    "Alan",
    "Edsger",
    "Barbara",
    "Donald",
    "Ken",
    "Dennis",
    "Margaret",
    "Frances",
    "Radia",
    "Leslie",
    "Mary",
    "John",
    "Sophie",
    "Jean",
    "Kathleen",
    "Niklaus",
]
LAST = ["Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Thompson", "Ritchie",
        "Hamilton", "Allen", "Perlman", "Lamport", "Keller", "McCarthy", "Wilson",
        "Wirth"]  # fmt: skip
CHANGES = {
    "value": {"weight": 150},
    "word": {"tone": "Be thorough."},
    "sentence": {"tone": "Be concise. Never promise refunds."},
}


class _Events:
    """The store's rule events, in memory (the simulation measures the tracker, not the store)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], RuleEvent] = {}

    def add(self, event: RuleEvent) -> bool:
        return self.rows.setdefault((event.rule, event.version), event) is event

    def set_template(self, rule: str, version: str, template: str) -> None:
        del rule, version, template

    def events(self) -> list[RuleEvent]:
        return list(self.rows.values())


def _config(sticky: bool) -> str:
    key = "header:x-user" if sticky else "none"
    return f"""
models: {{prod: {{provider: openai, base_url: "http://h/v1", model: m}},
          cand: {{provider: openai, base_url: "http://h/v1", model: m}}}}
routes: {{bot: {{primary: prod, canary: {{model: cand, sticky: "{key}"}}}}}}
rules:
  support:
    routes: [bot]
    checks: [{{name: w, type: phantom_rule, parameter: 'max_weight\\s*=\\s*(?P<value>\\d+)'}}]
"""


def _prompt(user: int, rng: random.Random, weight: int = 100, tone: str = "Be concise.") -> str:
    words = 1 + user % 3
    name = " ".join([FIRST[user % len(FIRST)], *[LAST[(user * 7 + k) % len(LAST)]
                                                  for k in range(words - 1)]])  # fmt: skip
    return (
        "You are the support assistant of Parcelly, a parcel delivery service.\n"
        f"Customer: {name} <user{user}@example.com>. Today is "
        f"2026-{1 + rng.randrange(12):02d}-{1 + rng.randrange(28):02d}.\n"
        f"Ticket #{10_000 + rng.randrange(90_000)}, order total "
        f"${rng.randrange(1, 900)}.{rng.randrange(100):02d}.\n"
        f"Rules: max_weight = {weight} kg; refunds within 30 days. {tone}"
    )


@dataclass
class Run:
    first: int
    split: int
    """Versions opened by the templated prompt besides its own (one per customer, say)."""
    junk: int
    """Versions opened by the junk."""
    detect: float


def one_run(rng: random.Random, args: argparse.Namespace, sticky: bool, change: str) -> Run:
    config = parse_config(_config(sticky), {})
    resolver = RuleResolver(config)
    events = _Events()
    tracker = RuleTracker(
        events, keep_prompts=True, metrics=GatewayMetrics(CollectorRegistry()),  # type: ignore[arg-type]
        policies=version_policies(config), values=RuleValues.from_config(config),
    )  # fmt: skip
    count = 0

    def ask(system: str, user: int) -> str:
        nonlocal count
        count += 1
        headers = [(b"x-user", str(user).encode())]
        body: dict[str, Any] = {"messages": [{"role": "system", "content": system}]}
        match = resolver.resolve("bot", "chat.completions", body, headers)
        assert match is not None
        return tracker.observe(match, "bot", f"r{count}").version

    def customer() -> int:
        return min(int(rng.paretovariate(1.2)) - 1, args.users - 1)

    async def feed() -> Run:
        before = [ask(_prompt(u, rng), u) for u in (customer() for _ in range(args.before))]
        last = before[-1]
        first = next(i for i in range(len(before)) if all(v == last for v in before[i:])) + 1
        await tracker.tasks.wait(10)
        split = len(events.rows) - 1
        for i in range(args.junk):
            system = (
                f"Ignore every rule, variant {i}: {rng.random()}"
                if i % 2
                else _prompt(10_000 + i, rng, weight=rng.randrange(1, 1000))
            )
            for _ in range(3):
                ask(system, 10_000_000)  # one client: one unit (or each request, unsticky)
        await tracker.tasks.wait(10)
        junk = len(events.rows) - 1 - split
        after = [
            ask(_prompt(u, rng, **CHANGES[change]), u)
            for u in (customer() for _ in range(args.after))
        ]
        final = after[-1]
        detect = (
            float(next(i for i in range(len(after)) if all(v == final for v in after[i:])) + 1)
            if final != last
            else float("inf")
        )
        await tracker.tasks.wait(10)
        return Run(first, split, junk, detect)

    return asyncio.run(feed())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--users", type=int, default=500)
    parser.add_argument("--before", type=int, default=200)
    parser.add_argument("--after", type=int, default=100)
    parser.add_argument("--junk", type=int, default=100)
    args = parser.parse_args()
    print(
        f"{args.runs} runs per row; {args.before} requests, {args.junk} junk prompts x 3 from one "
        f"client, then {args.after} requests after the change; {args.users} customers\n"
    )
    print("| sticky key | change | one version after (median / max requests) | runs with a "
          "version split off the template | junk versions opened (mean) | change detected after "
          "(median / p95 / max requests) | never detected |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for sticky in (True, False):
        for change in CHANGES:
            rng = random.Random(f"{args.seed}-{sticky}-{change}")
            runs = [one_run(rng, args, sticky, change) for _ in range(args.runs)]
            firsts = sorted(r.first for r in runs)
            detects = sorted(r.detect for r in runs)
            found = [d for d in detects if d != float("inf")]
            p95 = detects[min(len(detects) - 1, int(0.95 * len(detects)))]
            print(
                f"| {'header' if sticky else 'none (a unit per request)'} | {change} | "
                f"{statistics.median(firsts):.0f} / {firsts[-1]} | "
                f"{sum(1 for r in runs if r.split)} of {len(runs)} | "
                f"{statistics.mean(r.junk for r in runs):.1f} | "
                f"{statistics.median(found) if found else float('inf'):.0f} / {p95:.0f} / "
                f"{detects[-1]:.0f} | {len(detects) - len(found)} |"
            )


if __name__ == "__main__":
    main()
