"""`mirrorgate demo --scene guard`: models that memorised a rule, found and acted on (~1 min).

Built-in fake models, a gateway on SQLite and paced traffic through the official `openai` SDK, a
few requests a second on each of two routes (`RATE_PER_S`):

Act 1, before any rule change. Route `support-bot` (primary `prod`, a model that reads its
prompt) runs a canary of the cheaper `cand-a`, which memorised `max_weight = 100`. Rule-flip
probes ask both models the same live requests with the value flipped to 150 or 175: `prod`
follows, `cand-a` answers 100. The judge's `rule_adaptation` verdict fails and the canary is
rolled back, although `cand-a` passes every check of today's rule.

Act 2, a rule change. Route `returns-bot` is served by `legacy`, which memorised the same rule,
with shadows of `safe` (a follower) and `cand-a`. The rule changes to 150: `legacy` keeps
answering 100, and the route's guard switches it to `safe` by itself (not to `cand-a`: its
probes show it stuck), served as arm `fallback` until `mirrorgate rollout restore returns-bot`.

Ctrl-C ends it cleanly at any point; `--restore` gives `returns-bot` back at the end.
"""

from __future__ import annotations

import json
import logging
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import httpx
import openai
import yaml
from prometheus_client.parser import text_string_to_metric_families

from proxy.app import GatewayServer
from proxy.config import parse_config
from proxy.mock_upstream.behavior import parse_behavior
from proxy.mock_upstream.server import MockUpstreamServer

from .demo import DEMO_ENV, DEMO_KEY_ENV, _alert_receiver, _clock, _interval, _Scene

PATTERN = r"max_weight\s*=\s*(\d+)"
TEMPLATE = '{"max_weight": {1}, "answer": "Parcels up to {1} kg ship as standard."}'
FOLLOWER = {"type": "regex_from_system", "pattern": PATTERN, "template": TEMPLATE}
# Trained while the rule said 100: they answer 100 whatever the prompt says, cand-a always,
# legacy on 19 answers in 20.
MEMORISER = {**FOLLOWER, "memorised": {"value": "100", "rate": 1.0}}
MOSTLY_MEMORISER = {**FOLLOWER, "memorised": {"value": "100", "rate": 0.95}}
GUARD_BEHAVIOR: dict[str, Any] = {
    "record_requests": False,
    "default": {"ttft_ms": 30, "tokens_per_second": 800, "latency_ms": 40},
    "models": {
        "prod-model": {"answer": FOLLOWER},
        "safe-model": {"answer": FOLLOWER},
        "cand-a-model": {"answer": MEMORISER},
        "legacy-model": {"answer": MOSTLY_MEMORISER},
    },
}
CANARY_ROUTE = "support-bot"
GUARDED_ROUTE = "returns-bot"
CANARY_RULE = "shipping-policy"
GUARDED_RULE = "returns-policy"
QUESTIONS = {
    CANARY_ROUTE: ["Can I ship a 120 kg crate?", "What is the heaviest parcel you take?"],
    GUARDED_ROUTE: ["Can I send back a 130 kg pallet?", "What is the heaviest return you take?"],
}
PROMPTS = {
    CANARY_ROUTE: "You are the support bot of a parcel company. Shipping rule: max_weight = {w}.",
    GUARDED_ROUTE: "You are the returns desk of a parcel company. Returns rule: max_weight = {w}.",
}
RATE_PER_S = 2.0
"""Client requests a second on each route: a quiet service, where every decision must work."""
PROBE_SAMPLE = 0.5
CANARY_AT_S = 3.0
CHANGE_AFTER_S = 20.0
"""The rule of `returns-bot` changes once act 1 is over and the route has had this long on v1."""
CHANGE_BY_S = 60.0
"""...or at this time at the latest, if act 1 has not ended by then."""
AFTER_SWITCH_S = 6.0
STORY_LIMIT_S = 120.0


def guard_config(mock_url: str, db: Path, port: int, hook_url: str) -> str:
    """The scene's configuration: four fake models, a canaried route and a guarded route."""

    def model(name: str, inp: float, out: float) -> dict[str, Any]:
        return {
            "provider": "openai", "base_url": f"{mock_url}/v1", "model": f"{name}-model",
            "api_key_env": DEMO_KEY_ENV,
            "price": {"input_per_mtok": inp, "output_per_mtok": out},
        }  # fmt: skip

    def rule(route: str, extra_checks: list[dict[str, Any]]) -> dict[str, Any]:
        check = {"name": "max-weight", "type": "json_path", "path": "$.max_weight"}
        return {
            "routes": [route],
            "checks": [{"name": "valid-json", "type": "json"}, *extra_checks],
            "versions": {
                v: {"match_prompt": rf"max_weight\s*=\s*{w}\b", "checks": [{**check, "equals": w}]}
                for v, w in (("v1", 100), ("v2", 150))
            },
            "probes": {
                "parameter": r"max_weight\s*=\s*(?P<value>\d+)",
                "values": [150, 175],
                "expect": [{"name": "follows-flip", "type": "json_path", "path": "$.max_weight",
                            "equals": "{value}"}],
                "sample": PROBE_SAMPLE,
            },
        }  # fmt: skip

    doc = {
        "server": {
            "host": "127.0.0.1", "port": port, "route_refresh_s": 0.5,
            # The scene's evidence must come on a busy laptop too: shadows and probes not shed.
            "shadow_shed_lag_ms": 0, "shadow_shed_busy_percent": 0,
        },
        "store": {"url": f"sqlite:///{db}", "bodies": "redacted", "flush_interval_ms": 100},
        "models": {
            "prod": model("prod", 0.15, 0.60),
            "cand-a": model("cand-a", 0.10, 0.40),
            "safe": model("safe", 0.15, 0.60),
            "legacy": model("legacy", 0.12, 0.50),
        },
        "routes": {
            CANARY_ROUTE: {
                "primary": "prod",
                "canary": {
                    "model": "cand-a",
                    "steps": [10, 50],
                    "step_interval_s": 120,
                    "sticky": "header:x-user-id",
                    "analysis": {
                        "interval_s": 2,
                        "min_samples": 30,
                        "failure_limit": 2,
                        "metrics": ["error_rate", "check_pass_rate", "rule_adaptation"],
                    },
                },
            },
            GUARDED_ROUTE: {
                "primary": "legacy",
                "shadows": [{"model": "safe", "sample": 1.0}, {"model": "cand-a", "sample": 1.0}],
                "guard": {"on_rule_regression": "switch", "candidates": ["safe", "cand-a"],
                          "min_samples": 20, "interval_s": 1},
            },
        },
        "rules": {
            CANARY_RULE: rule(CANARY_ROUTE, []),
            GUARDED_RULE: rule(GUARDED_ROUTE, [{"name": "no-phantom", "type": "phantom_rule"}]),
        },
        "alerts": {"sinks": [{"type": "webhook", "url": hook_url}]},
    }  # fmt: skip
    return yaml.safe_dump(doc, sort_keys=False)


PRINTED_HEADER = """\
# The configuration `mirrorgate demo --scene guard` runs, as `--print-config` prints it: four
# models (prod and safe follow their prompt; cand-a and legacy memorised max_weight = 100), a
# route with a canary judged on rule_adaptation, a guarded route with two shadows, two rules whose
# rule-flip probes ask each model a flipped value, and a webhook for the alerts. The demo fills in
# its own addresses; here they are placeholders: the fake model (port 9999; the four models'
# behaviours are built into the demo, see docs/mock-upstream.md "A model that memorised a rule"),
# the gateway's port, the store and the webhook. Every model sends the key in MIRRORGATE_DEMO_KEY.
"""


def print_guard_config(out: TextIO) -> int:
    """Write the scene's configuration, with placeholder addresses, to `out`."""
    text = guard_config(
        "http://127.0.0.1:9999", Path("mirrorgate-demo.db"), 8080, "http://127.0.0.1:9000/alerts"
    )
    out.write(PRINTED_HEADER + text)
    return 0


class _Routes:
    """Per route: the rule's value in force and what clients saw (arm, answered value)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.weight = {CANARY_ROUTE: 100, GUARDED_ROUTE: 100}
        self.seen: dict[str, Counter[tuple[str, str]]] = {r: Counter() for r in self.weight}
        self.sent: Counter[str] = Counter()
        self.errors = 0

    def prompt(self, route: str) -> str:
        with self.lock:
            return PROMPTS[route].format(w=self.weight[route])

    def saw(self, route: str, arm: str | None, answer: str) -> None:
        with self.lock:
            self.sent[route] += 1
            if arm is None:
                self.errors += 1
            else:
                self.seen[route][(arm, answer)] += 1

    def arms(self, route: str) -> dict[str, int]:
        with self.lock:
            out: Counter[str] = Counter()
            for (arm, _), n in self.seen[route].items():
                out[arm] += n
            return dict(out)


def _answered(content: str | None) -> str:
    try:
        return str(json.loads(content or "")["max_weight"])
    except (ValueError, KeyError, TypeError):
        return "?"


def _traffic(url: str, route: str, routes: _Routes, stop: threading.Event) -> None:
    """One client of `route`, paced at `RATE_PER_S` (a late answer shortens the next wait)."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="demo", max_retries=0)
    turn = 0
    next_at = time.monotonic()
    try:
        while not stop.is_set():
            turn += 1
            messages: Any = [
                {"role": "system", "content": routes.prompt(route)},
                {"role": "user", "content": QUESTIONS[route][turn % len(QUESTIONS[route])]},
            ]
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model=route, messages=messages, extra_headers={"x-user-id": f"user-{turn % 97}"}
                )
                content = raw.parse().choices[0].message.content
                routes.saw(route, raw.headers.get("x-mirrorgate-arm"), _answered(content))
            except openai.OpenAIError:
                routes.saw(route, None, "")
            next_at += 1 / RATE_PER_S
            stop.wait(max(0.0, next_at - time.monotonic()))
    finally:
        client.close()


def _get(admin: httpx.Client, path: str) -> dict[str, Any]:
    response = admin.get(path)
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def probe_scores(admin: httpx.Client, rule: str) -> dict[str, dict[str, float]]:
    """target → {followed, stuck, other, probes, adaptation}: from `GET /admin/rules` when the
    gateway scores probes there, else from `mirrorgate_probe_results_total` on /metrics."""
    scores = _get(admin, "/admin/rules").get("probes")
    out: dict[str, dict[str, float]] = {}
    if isinstance(scores, Mapping):
        for target, score in (scores.get(rule) or {}).items():
            counts = {k: float(score.get(k, 0)) for k in ("followed", "stuck", "other")}
            rate = score.get("adaptation")
            if isinstance(rate, Mapping) and rate.get("low") is not None:
                counts["low"], counts["high"] = float(rate["low"]), float(rate["high"])
            out[target] = counts
    else:
        response = admin.get("/metrics")
        response.raise_for_status()
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                if sample.name != "mirrorgate_probe_results_total":
                    continue
                labels = sample.labels
                if labels.get("rule") != rule:
                    continue
                counts = out.setdefault(
                    labels["target"], {"followed": 0.0, "stuck": 0.0, "other": 0.0}
                )
                counts[labels["result"]] = counts.get(labels["result"], 0.0) + sample.value
    for counts in out.values():
        counts["probes"] = counts["followed"] + counts["stuck"] + counts["other"]
        counts["adaptation"] = counts["followed"] / counts["probes"] if counts["probes"] else 0.0
    return out


def _score_lines(scores: Mapping[str, Mapping[str, float]], indent: str = "  ") -> list[str]:
    def interval(s: Mapping[str, float]) -> str:
        return f" [{s['low']:.0%}, {s['high']:.0%}]" if "low" in s else ""

    return [
        f"{indent}{target:<8} adaptation {s['adaptation']:4.0%}{interval(s)}  "
        f"({s['followed']:g} followed, {s['stuck']:g} stuck, {s['other']:g} other of "
        f"{s['probes']:g} probes)"
        for target, s in sorted(scores.items())
    ]


class _Story:
    """The scene's script: what it watches, when it acts, what it prints."""

    def __init__(
        self,
        admin: httpx.Client,
        routes: _Routes,
        alerts: _Scene,
        stop: threading.Event,
        limit_s: float,
        out: Callable[[str], None],
    ) -> None:
        self.admin, self.routes, self.alerts, self.stop = admin, routes, alerts, stop
        self.limit_s, self.out = limit_s, out
        self.started = time.monotonic()
        self.canary_started_at: float | None = None
        self.refused_at: float | None = None
        self.changed_at: float | None = None
        self.switched_at: float | None = None
        self.seen_revision = {CANARY_ROUTE: 0, GUARDED_ROUTE: 0}
        self.warned = False
        self.canary_scores: dict[str, dict[str, float]] = {}
        self.guarded_scores: dict[str, dict[str, float]] = {}
        self.after_switch: dict[str, int] = {}

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def clock(self) -> str:
        return _clock(self.started)

    def run(self) -> None:
        out = self.out
        out("Act 1 - before any rule change: probes find the candidate that memorised the rule.")
        last_status = 0.0
        while not self.stop.wait(0.25):
            now = self.elapsed()
            if now >= self.limit_s:
                break
            if self.canary_started_at is None and now >= CANARY_AT_S:
                self._start_canary()
            canary = _get(self.admin, f"/admin/rollouts/{CANARY_ROUTE}")
            guarded = _get(self.admin, f"/admin/rollouts/{GUARDED_ROUTE}")
            self._events(CANARY_ROUTE, canary)
            self._events(GUARDED_ROUTE, guarded)
            if not self.warned:
                warning = self._alert(CANARY_ROUTE, ("verdict_fail",))
                if warning is not None:
                    self.warned = True
                    out(f"{self.clock()} !! warning alert sent: {warning['summary']}")
            if self.refused_at is None and canary["phase"] == "rolled_back":
                self.refused_at = now
                self._print_refusal(canary)
            if self.changed_at is None and (
                (self.refused_at is not None and now >= CHANGE_AFTER_S) or now >= CHANGE_BY_S
            ):
                self._change_rule()
            if self.switched_at is None and guarded["phase"] == "rolled_back":
                self.switched_at = now
                self._print_switch(guarded)
            if now - last_status >= 5:
                last_status = now
                out(self._status_line(canary, guarded))
            if self.switched_at is not None and now - self.switched_at >= AFTER_SWITCH_S:
                break
        self.after_switch = self._fallback_answers()

    def _start_canary(self) -> None:
        self.canary_started_at = self.elapsed()
        self.admin.post(
            f"/admin/rollouts/{CANARY_ROUTE}/start",
            json={"reason": "operator: try cand-a, 33% cheaper"},
        ).raise_for_status()
        self.out(f"{self.clock()} $ mirrorgate rollout start {CANARY_ROUTE}   (cand-a gets 10% "
                 f"of users; probes flip max_weight to 150/175 on {PROBE_SAMPLE:.0%} of "
                 "requests)")  # fmt: skip

    def _alert(
        self, route: str, kinds: tuple[str, ...], wait_s: float = 0
    ) -> dict[str, Any] | None:
        deadline = time.monotonic() + wait_s
        while True:
            with self.alerts.lock:
                found = next(
                    (
                        a
                        for a in self.alerts.alerts
                        if a.get("kind") in kinds and a.get("route") == route
                    ),
                    None,
                )
            if found is not None or time.monotonic() >= deadline:
                return found
            self.stop.wait(0.1)

    def _events(self, route: str, state: dict[str, Any]) -> None:
        for event in reversed(state["transitions"]):
            if event["revision"] > self.seen_revision[route]:
                self.seen_revision[route] = event["revision"]
                to = event["to_phase"]
                what = (
                    f"canary at {event['weight']:g}%"
                    if to == "progressing"
                    else to.replace("_", " ")
                )
                self.out(
                    f"{self.clock()} >> {route}: {what} by {event['actor']}: {event['reason']}"
                )

    def _print_refusal(self, state: dict[str, Any]) -> None:
        out = self.out
        took = self.refused_at - (self.canary_started_at or 0.0) if self.refused_at else 0.0
        out("")
        out(f"CANARY REFUSED {took:.1f}s after it started: cand-a passes today's rule, but "
            "does not follow a changed one; the primary 'prod' serves every user "
            "again.")  # fmt: skip
        out(f"  reason   {state['reason']}")
        for v in [v for v in state["verdicts"] if v["metric"].startswith("rule_adaptation")][:1]:
            out(f"  verdict  {v['metric']} ({v['scope']}): {v['verdict']}, not-followed share "
                f"{v['estimate']:+.2f} {_interval(v)} vs margin "
                f"{v['threshold']:g}; {v['n_primary']} prod vs {v['n_candidate']} cand-a "
                "probes")  # fmt: skip
        alert = self._alert(CANARY_ROUTE, ("verdict_fail", "rule_regression", "rollback"), 3.0)
        if alert is not None:
            out(
                f"  alert    -> webhook: [{alert['severity']}] {alert['kind']} "
                f"rule={alert.get('rule')}"
            )
            out(f"           example probe requests: {', '.join(alert['example_request_ids'][:3])}")
        self.canary_scores = probe_scores(self.admin, CANARY_RULE)
        out(f"  probes of rule {CANARY_RULE} per target (GET /admin/rules):")
        for line in _score_lines(self.canary_scores, "    "):
            out(line)
        out("")
        out(f"Act 2 - a rule change hits '{GUARDED_ROUTE}', whose production model 'legacy' "
            "memorised the rule (shadows: safe, cand-a).")  # fmt: skip

    def _change_rule(self) -> None:
        with self.routes.lock:
            self.routes.weight[GUARDED_ROUTE] = 150
        self.changed_at = self.elapsed()
        self.out(f"{self.clock()} the business rule changes on {GUARDED_ROUTE}: max_weight = 150 "
                 f"(new system prompt, rule {GUARDED_RULE} v1 -> v2)")  # fmt: skip

    def _print_switch(self, state: dict[str, Any]) -> None:
        out = self.out
        took = (self.switched_at or 0.0) - (self.changed_at or 0.0)
        serving = state["serving"]
        out("")
        out(f"SWITCHED {took:.1f}s after the rule changed: route '{GUARDED_ROUTE}' is served by "
            f"'{serving['primary']}' as arm {serving['arm']}, by the guard, with nobody at the "
            "keyboard.")  # fmt: skip
        out(f"  reason   {state['reason']}")
        event = next((e for e in state["transitions"] if e["actor"] == "guard"), None)
        evidence = event["evidence"] if event else {}
        if evidence:
            out(f"  primary  {evidence.get('primary')} fails "
                f"{evidence.get('primary_failure_rate_new', 0):.0%} "
                f"of {evidence.get('n_primary_new', 0):g} answers on {evidence.get('version')} vs "
                f"{evidence.get('primary_failure_rate_previous', 0):.0%} of "
                f"{evidence.get('n_primary_previous', 0):g} on {evidence.get('previous_version')}; "
                f"the others fail {evidence.get('others_failure_rate_new', 0):.0%}")  # fmt: skip
            for c in evidence.get("candidates", []):
                low = f"lower bound {c['low']:.0%}" if c.get("low") is not None else "too few"
                out(f"  candidate {c['name']:<7} {c['compliant']}/{c['answers']} compliant ({low})")
        alert = self._alert(GUARDED_ROUTE, ("rule_regression",), 3.0)
        if alert is not None:
            out(f"  alert    -> webhook: [{alert['severity']}] {alert['kind']} "
                f"rule={alert.get('rule')} "
                f"version={alert.get('rule_version')}")  # fmt: skip
            out(f"           {alert['summary']}")
            out(f"           example requests: {', '.join(alert['example_request_ids'][:3])}")
        self.guarded_scores = probe_scores(self.admin, GUARDED_RULE)
        out(f"  probes of rule {GUARDED_RULE} per target (why not cand-a):")
        for line in _score_lines(self.guarded_scores, "    "):
            out(line)
        out("")

    def _fallback_answers(self) -> dict[str, int]:
        with self.routes.lock:
            return {
                f"{arm} said {value}": n
                for (arm, value), n in self.routes.seen[GUARDED_ROUTE].items()
            }

    def _status_line(self, canary: dict[str, Any], guarded: dict[str, Any]) -> str:
        def served(route: str) -> str:
            return " ".join(f"{a} {n}" for a, n in sorted(self.routes.arms(route).items())) or "-"

        return (
            f"{self.clock()}    {CANARY_ROUTE}: {canary['phase'] or 'steady':<12} "
            f"({served(CANARY_ROUTE)})   {GUARDED_ROUTE}: {guarded['phase'] or 'steady':<12} "
            f"({served(GUARDED_ROUTE)})  "
            f"errors {self.routes.errors}"
        )

    def summary(self, restore: bool, url: str) -> list[str]:
        lines = ["", "What happened:"]
        if self.refused_at is not None and self.canary_started_at is not None:
            s = self.canary_scores
            lines.append(
                f"  act 1  {CANARY_ROUTE}: the canary of cand-a was refused by rule_adaptation "
                f"{self.refused_at - self.canary_started_at:.1f}s after it started, before any "
                "rule "
                f"changed (adaptation: " + ", ".join(f"{t} {v['adaptation']:.0%} of {v['probes']:g}"
                for t, v in sorted(s.items())) + ")"
            )  # fmt: skip
        else:
            lines.append(f"  act 1  {CANARY_ROUTE}: the canary was not refused in this run")
        if self.switched_at is not None and self.changed_at is not None:
            lines.append(
                f"  act 2  {GUARDED_ROUTE}: switched from legacy to safe by the guard "
                f"{self.switched_at - self.changed_at:.1f}s after the rule changed to 150"
            )
        else:
            lines.append(f"  act 2  {GUARDED_ROUTE}: no switch in this run")
        lines.append(
            f"  client requests: {RATE_PER_S:g}/s per route, "
            + ", ".join(f"{r} {n}" for r, n in sorted(self.routes.sent.items()))
        )
        answers = self._fallback_answers()
        lines.append(
            f"  {GUARDED_ROUTE} answers: "
            + ", ".join(f"{k} x{n}" for k, n in sorted(answers.items()))
        )
        command = f"mirrorgate rollout restore {GUARDED_ROUTE} --url {url}"
        if restore and self.switched_at is not None:
            response = self.admin.post(
                f"/admin/rollouts/{GUARDED_ROUTE}/restore", json={"reason": "demo: --restore"}
            )
            done = "done" if response.is_success else f"failed ({response.status_code})"
            lines.append(f"  restored {GUARDED_ROUTE} to its primary legacy ({command}): {done}")
        else:
            lines.append(f"  the way back, once legacy is fixed: {command}")
        return lines


def run_guard_demo(
    port: int = 8080,
    duration_s: float = 0.0,
    out: Callable[[str], None] = print,
    keep_running: bool = False,
    restore: bool = False,
) -> int:
    """Run the guard scene; return the exit code. Ctrl-C (or `duration_s`) ends it cleanly."""
    stop = threading.Event()

    def interrupt(_sig: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGINT, interrupt)
    for name in ("mirrorgate", "proxy"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in ("mirrorgate.rollouts", "mirrorgate.upstream", "mirrorgate.guard", "proxy.rollout"):
        logging.getLogger(name).setLevel(logging.ERROR)
    folder = Path(tempfile.mkdtemp(prefix="mirrorgate-demo-"))
    db = folder / "mirrorgate.db"
    alerts = _Scene()
    routes = _Routes()
    try:
        with (
            MockUpstreamServer(parse_behavior(GUARD_BEHAVIOR)) as mock,
            _alert_receiver(alerts) as hook,
        ):
            config = parse_config(guard_config(mock.url, db, port, hook), env=DEMO_ENV)
            try:
                gateway = GatewayServer(config, env=DEMO_ENV).__enter__()
            except RuntimeError as exc:
                out(f"mirrorgate: could not start the gateway on port {port} ({exc}); try --port 0")
                return 1
            _banner(out, gateway.url, mock.url, db)
            threads = [
                threading.Thread(target=_traffic, args=(gateway.url, r, routes, stop), daemon=True,
                                 name=f"demo-{r}")
                for r in (CANARY_ROUTE, GUARDED_ROUTE)
            ]  # fmt: skip
            try:
                with httpx.Client(base_url=gateway.url, timeout=10) as admin:
                    for thread in threads:
                        thread.start()
                    story = _Story(admin, routes, alerts, stop, duration_s or STORY_LIMIT_S, out)
                    story.run()
                    for line in story.summary(restore, gateway.url):
                        out(line)
                    if keep_running and not stop.is_set():
                        out(f"the gateway keeps serving at {gateway.url}; Ctrl-C to stop")
                        stop.wait()
            finally:  # a failure of the script still stops the traffic and the gateway
                stop.set()
                for thread in threads:
                    if thread.is_alive():
                        thread.join(timeout=15)
                gateway.stop()
            out(f"stopped cleanly; the records stay in {db}")
        return 0
    finally:
        signal.signal(signal.SIGINT, previous)


def _banner(out: Callable[[str], None], url: str, mock_url: str, db: Path) -> None:
    out("mirrorgate demo --scene guard: models that memorised a rule, found before and after it "
        "changes, in about a minute.")  # fmt: skip
    out(f"  gateway      {url}   (routes '{CANARY_ROUTE}' and '{GUARDED_ROUTE}', "
        f"{RATE_PER_S:g} client requests/s each)")  # fmt: skip
    out(f"  fake models  {mock_url}   (prod, safe follow their prompt; cand-a, legacy memorised "
        "max_weight = 100)")  # fmt: skip
    out(f"  rules        {url}/admin/rules   rollouts: {url}/admin/rollouts")
    out(f"  metrics      {url}/metrics")
    out(f"  records      {db}")
    out("Press Ctrl-C to stop.\n")
