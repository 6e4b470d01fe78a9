"""The checks that need more than one field: one function per config section, in two lists.

`DOCUMENT_CHECKS` run on the raw YAML document, before validation, so that every reference to an
undefined model or route and every unset key variable is named even when a section is invalid:

- `check_model_keys` — `models.<m>.api_key_env` names a variable that is set;
- `check_route_references` — a route's primary, fallback, shadows, canary, guard candidates and
  experiment arms are defined models;
- `check_rule_references` — a rule set's routes are defined routes.

`SPEC_CHECKS` run on the validated config, each on its section, in this order:

- `check_routes` — agreement settings, shadows (same wire format as the primary, none twice), the
  canary (not the primary, same wire format) and the fallback (same wire format);
- `check_guards` — a guard's route is governed by a rule set, `switch` has candidates, each
  candidate speaks the primary's wire format and is not the primary;
- `check_experiments` — an experiment's weights name every arm and sum to 100, its arms speak
  the primary's wire format, its metrics are known (`check:<name>` a check of the route's rules);
- `check_judge` — the judge's model is defined;
- `check_analyzers` — every analyzer plugin named is installed;
- `check_rules` — one rule set per route, and each rule set's checks compile with unique names;
  every phantom_rule check has the rule's one value parameter;
- `check_probes` — a rule's probe targets are defined models that speak the wire format of every
  route of the rule, and its `expect` checks compile with a value in place of `{value}`;
- `check_server` — a listener beyond loopback has its admin token set; feedback tokens and the
  feedback signing key, when set, are long enough to be secrets.

`feedback_warnings` says what is allowed but worth knowing (feedback open on loopback).

Warnings, not errors (`check-config` prints them and exits 0): `rollout_warnings` (judged metrics
that cannot be evaluated) and `credential_warnings` (models that send no key, or the client's to
another host).

`SECRET_CHECKS` names the checks of the gateway's own secrets (`check_model_keys`,
`check_server`), which the read-only commands skip; `model_key_problems` checks the keys of the
models such a command calls.

Every check returns the problems it found, in document order; the loader runs the lists as they
are. A new section's check is a function here and one entry in a list.
"""

from __future__ import annotations

import importlib.metadata
import ipaddress
from collections.abc import Callable, Mapping
from typing import Any

from analyzers.checks import compile_check
from analyzers.errors import SpecError
from analyzers.experiments import METRICS
from analyzers.plugins import ENTRY_POINT_GROUP, available_analyzers
from analyzers.rule_flip import expect_for, value_text

from .errors import ConfigProblem
from .specs import (
    CheckSpec,
    MirrorgateConfig,
    ProbesSpec,
    RuleSpec,
    agreement_spec,
    experiment_unreviewable,
    unavailable_evidence,
)

EXPERIMENT_METRICS = tuple(METRICS)
"""The experiment metrics a config may name (besides `check:<name>`)."""

DocumentCheck = Callable[[Mapping[str, Any], Mapping[str, str]], list[ConfigProblem]]
"""A check of the raw document (a YAML mapping, before validation) and the environment."""
SpecCheck = Callable[[MirrorgateConfig, Mapping[str, str]], list[ConfigProblem]]
"""A check of one section of the validated config, with the environment."""


# --- the raw document ----------------------------------------------------------------------------


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def check_model_keys(raw: Mapping[str, Any], env: Mapping[str, str]) -> list[ConfigProblem]:
    """`models`: every key variable a model names is set."""
    problems = []
    for name, model in _dict(raw.get("models")).items():
        var = model.get("api_key_env") if isinstance(model, dict) else None
        if isinstance(var, str) and var and var not in env:
            problems.append(
                ConfigProblem(
                    f"models.{name}.api_key_env", f"environment variable {var} is not set"
                )
            )
    return problems


def check_route_references(raw: Mapping[str, Any], env: Mapping[str, str]) -> list[ConfigProblem]:
    """`routes`: every model a route names is defined under `models`."""
    models = _dict(raw.get("models"))
    problems = []

    def need(path: str, name: Any) -> None:
        if isinstance(name, str) and name not in models:
            problems.append(ConfigProblem(path, f"model '{name}' is not defined under models"))

    for rname, route in _dict(raw.get("routes")).items():
        fields = _dict(route)
        need(f"routes.{rname}.primary", fields.get("primary"))
        need(f"routes.{rname}.fallback", fields.get("fallback"))
        shadows = fields.get("shadows")
        for i, shadow in enumerate(shadows if isinstance(shadows, list) else ()):
            need(f"routes.{rname}.shadows[{i}].model", _dict(shadow).get("model"))
        need(f"routes.{rname}.canary.model", _dict(fields.get("canary")).get("model"))
        for arm, arm_spec in _dict(_dict(fields.get("experiment")).get("arms")).items():
            need(f"routes.{rname}.experiment.arms.{arm}.model", _dict(arm_spec).get("model"))
        candidates = _dict(fields.get("guard")).get("candidates")
        for i, name in enumerate(candidates if isinstance(candidates, list) else ()):
            need(f"routes.{rname}.guard.candidates[{i}]", name)
    return problems


def check_rule_references(raw: Mapping[str, Any], env: Mapping[str, str]) -> list[ConfigProblem]:
    """`rules`: every route a rule set governs is defined under `routes`."""
    routes = _dict(raw.get("routes"))
    problems = []
    for rule_name, rule in _dict(raw.get("rules")).items():
        names = _dict(rule).get("routes")
        for i, name in enumerate(names if isinstance(names, list) else ()):
            if isinstance(name, str) and name not in routes:
                problems.append(
                    ConfigProblem(
                        f"rules.{rule_name}.routes[{i}]", f"route '{name}' is not defined"
                    )
                )
    return problems


DOCUMENT_CHECKS: tuple[DocumentCheck, ...] = (
    check_model_keys,
    check_route_references,
    check_rule_references,
)
"""Run by the loader on the raw document, in this order, before validation."""


# --- the validated config, one section each ------------------------------------------------------


def check_routes(cfg: MirrorgateConfig, env: Mapping[str, str]) -> list[ConfigProblem]:
    """`routes`: agreement settings, and shadows, canary and fallback that the primary's clients
    can be served by (requests are never translated between wire formats)."""
    problems: list[ConfigProblem] = []
    for rname, route in cfg.routes.items():
        base = f"routes.{rname}"
        try:
            agreement_spec(route.agreement)
        except SpecError as exc:
            problems.append(ConfigProblem(f"{base}.agreement.{exc.field}", exc.message))
        seen: set[str] = set()
        primary = cfg.models.get(route.primary)
        for i, shadow in enumerate(route.shadows):
            candidate = cfg.models.get(shadow.model)
            if (
                primary is not None
                and candidate is not None
                and candidate.provider != primary.provider
            ):
                problems.append(
                    ConfigProblem(
                        f"{base}.shadows[{i}].model",
                        f"'{shadow.model}' speaks {candidate.provider} but the primary speaks "
                        f"{primary.provider}; requests are not translated between wire formats",
                    )
                )
            if shadow.model in seen:
                problems.append(
                    ConfigProblem(
                        f"{base}.shadows[{i}].model", f"'{shadow.model}' is shadowed twice"
                    )
                )
            seen.add(shadow.model)
        if route.canary is not None and route.canary.model == route.primary:
            problems.append(
                ConfigProblem(f"{base}.canary.model", "the canary cannot be the primary itself")
            )
        canary_model = cfg.models.get(route.canary.model) if route.canary else None
        if (
            primary is not None
            and canary_model is not None
            and canary_model.provider != primary.provider
        ):
            problems.append(
                ConfigProblem(
                    f"{base}.canary.model",
                    f"the canary must speak the primary's wire format ({primary.provider}); "
                    "requests are not translated between wire formats",
                )
            )
        problems.extend(_unavailable_metrics(cfg, rname))
        if route.evalset.task == "rule" and cfg.rule_of(rname) is None:
            problems.append(
                ConfigProblem(
                    f"{base}.evalset.task",
                    "'rule' classifies by rule version, but no rule set governs this route",
                )
            )
        if (
            route.canary is not None
            and route.canary.rollback_to == "fallback"
            and not route.fallback
        ):
            problems.append(
                ConfigProblem(
                    f"{base}.canary.rollback_to",
                    "'fallback' needs the route's fallback: set routes."
                    f"{rname}.fallback or roll back to 'primary'",
                )
            )
        fallback = cfg.models.get(route.fallback or "")
        if primary is not None and fallback is not None and fallback.provider != primary.provider:
            problems.append(
                ConfigProblem(
                    f"{base}.fallback",
                    f"the fallback must speak the primary's wire format ({primary.provider})",
                )
            )
    return problems


def _unavailable_metrics(cfg: MirrorgateConfig, rname: str) -> list[ConfigProblem]:
    """An evidence-backed metric listed explicitly where its evidence is never produced."""
    canary = cfg.routes[rname].canary
    if canary is None or "metrics" not in canary.analysis.model_fields_set:
        return []  # the default list leaves such metrics out by itself
    missing = unavailable_evidence(cfg, rname)
    return [
        ConfigProblem(
            f"routes.{rname}.canary.analysis.metrics[{i}]",
            f"'{metric}' cannot be judged: {missing[metric]}",
        )
        for i, metric in enumerate(canary.analysis.metrics)
        if metric in missing
    ]


def check_judge(cfg: MirrorgateConfig, env: Mapping[str, str]) -> list[ConfigProblem]:
    """`judge`: the judging model is defined."""
    if cfg.judge is not None and cfg.judge.model not in cfg.models:
        return [
            ConfigProblem("judge.model", f"model '{cfg.judge.model}' is not defined under models")
        ]
    return []


def check_analyzers(cfg: MirrorgateConfig, env: Mapping[str, str]) -> list[ConfigProblem]:
    """`analyzers`: every plugin named is a built-in or installed under the entry-point group."""
    if not cfg.analyzers:
        return []  # reading the installed entry points costs time; skip when none is named
    available = available_analyzers(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    return [
        ConfigProblem(
            f"analyzers[{i}]",
            f"unknown analyzer '{name}'; available: {', '.join(sorted(available))}",
        )
        for i, name in enumerate(cfg.analyzers)
        if name not in available
    ]


def check_rules(cfg: MirrorgateConfig, env: Mapping[str, str]) -> list[ConfigProblem]:
    """`rules`: a route is governed by one rule set at most, and every check compiles under a
    name unique in its list."""
    problems: list[ConfigProblem] = []
    governed: dict[str, str] = {}
    for rule_name, rule in cfg.rules.items():
        for i, route_name in enumerate(rule.routes):
            if route_name in governed:
                problems.append(
                    ConfigProblem(
                        f"rules.{rule_name}.routes[{i}]",
                        f"route '{route_name}' is already governed by rule set "
                        f"'{governed[route_name]}' (one rule set per route; put every check in it)",
                    )
                )
            governed.setdefault(route_name, rule_name)
        problems += _check_list(f"rules.{rule_name}.checks", rule.checks)
        for vname, version in rule.versions.items():
            problems += _check_list(f"rules.{rule_name}.versions.{vname}.checks", version.checks)
        problems += _check_phantom_parameters(rule_name, rule)
    return problems


def _check_phantom_parameters(rule_name: str, rule: RuleSpec) -> list[ConfigProblem]:
    """A phantom_rule check needs a parameter (its own or the rule's `probes.parameter`), and a
    rule has one: each version stores one value (`rule_events.rule_value`)."""
    problems = []
    lists = [(f"rules.{rule_name}.checks", rule.checks)]
    for vname, version in rule.versions.items():
        lists.append((f"rules.{rule_name}.versions.{vname}.checks", version.checks))
    chosen = rule.value_parameter()
    for path, checks in lists:
        for i, check in enumerate(checks):
            if check.type != "phantom_rule":
                continue
            if chosen is None:
                problems.append(
                    ConfigProblem(
                        f"{path}[{i}].parameter",
                        "a phantom_rule check needs 'parameter' (a regex with a named group "
                        "'value', where the rule's value sits in the system prompt) or the "
                        "rule's probes.parameter",
                    )
                )
            elif check.parameter is not None and check.parameter != chosen:
                source = "probes.parameter" if rule.probes is not None else "the first one"
                problems.append(
                    ConfigProblem(
                        f"{path}[{i}].parameter",
                        f"differs from {source} ({chosen!r}): a rule has one value parameter "
                        "(each version stores one value)",
                    )
                )
    return problems


def check_probes(cfg: MirrorgateConfig, env: Mapping[str, str]) -> list[ConfigProblem]:
    """`rules.<r>.probes`: every target is a defined model speaking the wire format of each
    route of the rule (a probe is the route's request, re-sent as it is), and `expect` compiles
    with a sample value (the first of `values`, else a number) in place of `{value}`."""
    problems: list[ConfigProblem] = []
    for rule_name, rule in cfg.rules.items():
        probes = rule.probes
        if probes is None:
            continue
        base = f"rules.{rule_name}.probes"
        wires = {
            route: cfg.models[cfg.routes[route].primary].provider
            for route in rule.routes
            if route in cfg.routes and cfg.routes[route].primary in cfg.models
        }
        for i, target in enumerate(probes.targets or ()):
            model = cfg.models.get(target)
            if model is None:
                problems.append(
                    ConfigProblem(f"{base}.targets[{i}]", f"model '{target}' is not defined")
                )
                continue
            for route, wire in wires.items():
                if model.provider != wire:
                    problems.append(
                        ConfigProblem(
                            f"{base}.targets[{i}]",
                            f"'{target}' speaks {model.provider} but route '{route}' speaks "
                            f"{wire}; requests are not translated between wire formats",
                        )
                    )
        problems += _check_list(f"{base}.expect", probes.expect, _sample_value(probes))
    return problems


def _sample_value(probes: ProbesSpec) -> str:
    """A value to compile `expect` with: the first configured one, else a generated number."""
    return value_text(probes.values[0]) if probes.values else "150"


def _check_list(
    path: str, checks: list[CheckSpec], probe_value: str | None = None
) -> list[ConfigProblem]:
    """Each check compiles, under a name unique in the list; `probe_value`: compile a probe's
    `expect` with this value in place of `{value}`."""
    problems = []
    seen: set[str] = set()
    for i, check in enumerate(checks):
        fields = check.model_dump(by_alias=True, exclude_none=True)
        if probe_value is not None:
            fields = expect_for(fields, probe_value)
        try:
            compile_check(fields)
        except SpecError as exc:
            where = f"{path}[{i}].{exc.field}" if exc.field else f"{path}[{i}]"
            problems.append(ConfigProblem(where, exc.message))
        if check.name in seen:
            problems.append(
                ConfigProblem(f"{path}[{i}].name", f"duplicate check name '{check.name}'")
            )
        seen.add(check.name)
    return problems


def check_server(cfg: MirrorgateConfig, env: Mapping[str, str]) -> list[ConfigProblem]:
    """`server`: the admin API is open without a token only on loopback; more than one worker
    needs a store the workers can share (PostgreSQL)."""
    server = cfg.server
    problems = []
    if server.workers > 1 and cfg.store.url.startswith("sqlite"):
        problems.append(
            ConfigProblem(
                "server.workers",
                f"{server.workers} workers need store.url on PostgreSQL (the workers share one "
                "store and one decider lock); store.url is SQLite, which takes one worker",
            )
        )
    if not _is_loopback(server.host) and not env.get(server.admin_token_env):
        return [
            *problems,
            ConfigProblem(
                "server.admin_token_env",
                f"{server.admin_token_env} must be set when listening on {server.host} "
                "(the admin API is only open without a token on loopback)",
            ),
        ]
    return [
        *problems,
        *_check_feedback_secrets(server.feedback_tokens_env, server.feedback_signing_key_env, env),
        *_check_reviewer_tokens(server.reviewer_tokens_env, server.admin_token_env, env),
    ]


_MIN_FEEDBACK_TOKEN_CHARS = 16
_MIN_SIGNING_KEY_CHARS = 32


def _check_feedback_secrets(
    tokens_env: str, key_env: str, env: Mapping[str, str]
) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    tokens = feedback_app_tokens(env.get(tokens_env))
    if any(len(token) < _MIN_FEEDBACK_TOKEN_CHARS for token in tokens):
        problems.append(
            ConfigProblem(
                "server.feedback_tokens_env",
                f"every token in {tokens_env} needs at least {_MIN_FEEDBACK_TOKEN_CHARS} "
                "characters (a short token can be guessed)",
            )
        )
    key = env.get(key_env)
    if key and len(key) < _MIN_SIGNING_KEY_CHARS:
        problems.append(
            ConfigProblem(
                "server.feedback_signing_key_env",
                f"{key_env} needs at least {_MIN_SIGNING_KEY_CHARS} characters",
            )
        )
    return problems


def _check_reviewer_tokens(
    tokens_env: str, admin_env: str, env: Mapping[str, str]
) -> list[ConfigProblem]:
    tokens = reviewer_tokens(env.get(tokens_env))
    problems = []
    if any(len(token) < _MIN_FEEDBACK_TOKEN_CHARS for token in tokens):
        problems.append(
            ConfigProblem(
                "server.reviewer_tokens_env",
                f"every token in {tokens_env} needs at least {_MIN_FEEDBACK_TOKEN_CHARS} "
                "characters (a short token can be guessed)",
            )
        )
    admin = env.get(admin_env)
    if admin and admin.strip() in tokens:
        problems.append(
            ConfigProblem(
                "server.reviewer_tokens_env",
                f"{tokens_env} holds the admin token ({admin_env}): a reviewer token must "
                "sign in as a reviewer only",
            )
        )
    return problems


def reviewer_tokens(value: str | None) -> list[str]:
    """The console's reviewer tokens of a `server.reviewer_tokens_env` value: comma separated,
    blanks around each ignored, empty entries dropped."""
    return [token.strip() for token in (value or "").split(",") if token.strip()]


def feedback_app_tokens(value: str | None) -> list[str]:
    """The application tokens of a `server.feedback_tokens_env` value: comma separated, blanks
    around each ignored, empty entries dropped."""
    return [token.strip() for token in (value or "").split(",") if token.strip()]


def feedback_open(cfg: MirrorgateConfig, env: Mapping[str, str]) -> bool:
    """Whether `POST /v1/feedback` takes posts without any token: only on a loopback listener
    with neither application tokens nor a signing key set (as the admin API without its
    token). Anywhere else every post needs an application token or a signed token."""
    server = cfg.server
    configured = feedback_app_tokens(env.get(server.feedback_tokens_env)) or env.get(
        server.feedback_signing_key_env
    )
    return _is_loopback(server.host) and not configured


def feedback_warnings(cfg: MirrorgateConfig, env: Mapping[str, str]) -> list[ConfigProblem]:
    """Feedback auth that is allowed but worth knowing about (`check-config` prints it, the
    gateway logs it at start): feedback open without a token on loopback."""
    if not feedback_open(cfg, env):
        return []
    server = cfg.server
    return [
        ConfigProblem(
            "server.feedback_tokens_env",
            "POST /v1/feedback takes corrections without a token on this loopback listener: "
            "every process that shares loopback (in sidecar mode, every container of the pod) "
            f"can post them; set {server.feedback_tokens_env} or "
            f"{server.feedback_signing_key_env} to require a token",
        )
    ]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_guards(cfg: MirrorgateConfig, env: Mapping[str, str]) -> list[ConfigProblem]:
    """`routes.<name>.guard`: the route is governed by a rule set (the guard judges its
    versions); `switch` has a candidate to switch to; each candidate speaks the primary's wire
    format and is not the primary itself (an error: a switch to the model that regressed is no
    switch, and a guard whose only candidate is its primary would judge an A/A run)."""
    problems = []
    for rname, route in cfg.routes.items():
        guard = route.guard
        if guard is None:
            continue
        base = f"routes.{rname}.guard"
        if cfg.rule_of(rname) is None:
            problems.append(
                ConfigProblem(
                    base,
                    f"a guard needs a rule set governing the route: list '{rname}' in some "
                    "rules.<name>.routes",
                )
            )
        if guard.on_rule_regression == "switch" and not guard.candidates:
            problems.append(
                ConfigProblem(
                    f"{base}.candidates",
                    "'switch' needs at least one candidate to switch to (or use 'alert')",
                )
            )
        primary = cfg.models.get(route.primary)
        seen: set[str] = set()
        for i, name in enumerate(guard.candidates):
            path = f"{base}.candidates[{i}]"
            if name == route.primary:
                problems.append(
                    ConfigProblem(
                        path, f"'{name}' is the route's primary: it cannot replace itself"
                    )
                )
            elif name in seen:
                problems.append(ConfigProblem(path, f"'{name}' is listed twice"))
            seen.add(name)
            model = cfg.models.get(name)
            if primary is not None and model is not None and model.provider != primary.provider:
                problems.append(
                    ConfigProblem(
                        path,
                        f"'{name}' speaks {model.provider} but the primary speaks "
                        f"{primary.provider}; requests are not translated between wire formats",
                    )
                )
    return problems


def check_experiments(cfg: MirrorgateConfig, env: Mapping[str, str]) -> list[ConfigProblem]:
    """`routes.<name>.experiment`: weights name every arm and sum to 100, each arm's model
    speaks the primary's wire format, and every metric is one the statistics know
    (`check:<name>` names a check of the rule set bound to the route)."""
    problems: list[ConfigProblem] = []
    for rname, route in cfg.routes.items():
        experiment = route.experiment
        if experiment is None:
            continue
        base = f"routes.{rname}.experiment"
        if experiment.weights is not None:
            missing = [a for a in experiment.arms if a not in experiment.weights]
            extra = [a for a in experiment.weights if a not in experiment.arms]
            if missing:
                problems.append(
                    ConfigProblem(f"{base}.weights", f"no weight for arm(s) {', '.join(missing)}")
                )
            for name in extra:
                problems.append(ConfigProblem(f"{base}.weights.{name}", f"'{name}' is not an arm"))
            total = sum(experiment.weights.values())
            if not missing and not extra and total != 100:
                problems.append(
                    ConfigProblem(f"{base}.weights", f"weights must sum to 100, not {total}")
                )
        primary = cfg.models.get(route.primary)
        for arm, spec in experiment.arms.items():
            model = cfg.models.get(spec.model)
            if primary is not None and model is not None and model.provider != primary.provider:
                problems.append(
                    ConfigProblem(
                        f"{base}.arms.{arm}.model",
                        f"'{spec.model}' speaks {model.provider}, the primary "
                        f"'{route.primary}' speaks {primary.provider}: requests are never "
                        "translated",
                    )
                )
        checks = _route_checks(cfg, rname)
        named = [("primary_metric", experiment.primary_metric)] + [
            (f"guardrails[{i}]", metric) for i, metric in enumerate(experiment.guardrails)
        ]
        for where, metric in named:
            problem = _experiment_metric_problem(metric, checks)
            if problem is None and metric == "human_preference":
                problem = _unreviewable_problem(cfg, rname)
            if problem is not None:
                problems.append(ConfigProblem(f"{base}.{where}", problem))
    return problems


def _unreviewable_problem(cfg: MirrorgateConfig, route: str) -> str | None:
    """Why `human_preference` cannot judge `route`'s experiment (None: every arm can be)."""
    missing = experiment_unreviewable(cfg, route)
    if not missing:
        return None
    reasons = "; ".join(f"arm '{arm}': {why}" for arm, why in missing.items())
    return f"human_preference needs blind-review pairs of every arm with control: {reasons}"


def _route_checks(cfg: MirrorgateConfig, route: str) -> set[str]:
    """The names of the checks of the rule set bound to `route` (every version's)."""
    rule = cfg.rule_of(route)
    if rule is None:
        return set()
    spec = cfg.rules[rule]
    names = {check.name for check in spec.checks}
    for version in spec.versions.values():
        names.update(check.name for check in version.checks)
    return names


def _experiment_metric_problem(metric: str, checks: set[str]) -> str | None:
    """What is wrong with an experiment's metric name (None: nothing)."""
    if metric.startswith("check:"):
        name = metric.partition(":")[2]
        if name in checks:
            return None
        known = ", ".join(sorted(checks)) or "none: no rule set with checks governs the route"
        return f"'{name}' is not a check of the route's rule set (its checks: {known})"
    if metric in EXPERIMENT_METRICS:
        return None
    return (
        f"unknown metric '{metric[:100]}' (one of: {', '.join(EXPERIMENT_METRICS)}, check:<name>)"
    )


SPEC_CHECKS: tuple[SpecCheck, ...] = (
    check_routes,
    check_guards,
    check_experiments,
    check_judge,
    check_analyzers,
    check_rules,
    check_probes,
    check_server,
)
"""Run by the loader on the validated config, in this order."""

SECRET_CHECKS: frozenset[DocumentCheck | SpecCheck] = frozenset({check_model_keys, check_server})
"""The checks of the gateway's own secrets, which a command that does not serve skips
(`load_config(..., secrets=False)`): `report` reads only the store, `replay` calls only its
candidates and checks their keys with `model_key_problems`."""


def model_key_problems(
    cfg: MirrorgateConfig, models: list[str], env: Mapping[str, str]
) -> list[ConfigProblem]:
    """`models.<m>.api_key_env` of each of `models` names a variable that is set."""
    return [
        ConfigProblem(
            f"models.{name}.api_key_env",
            f"environment variable {cfg.models[name].api_key_env} is not set",
        )
        for name in models
        if cfg.models[name].api_key_env and cfg.models[name].api_key_env not in env
    ]


def rollout_warnings(cfg: MirrorgateConfig, route: str | None = None) -> list[ConfigProblem]:
    """Judged metrics this configuration can never evaluate, per route with a canary (all routes,
    or one): they are left out of the judge's verdicts, so they cannot hold a rollout, but an SRE
    who asked for them should know. Not errors: `check-config` prints them and exits 0, the
    gateway logs them at start and `rollout status` shows them."""
    found: list[ConfigProblem] = []
    for rname, spec in cfg.routes.items():
        if spec.canary is None or (route is not None and rname != route):
            continue
        base = f"routes.{rname}.canary.analysis.metrics"
        wanted = set(spec.canary.analysis.metrics)
        shadowed = any(s.model == spec.canary.model and s.sample > 0 for s in spec.shadows)
        if "disagreement" in wanted and shadowed and spec.noise_sample <= 0:
            found.append(
                ConfigProblem(
                    base,
                    "disagreement is left out: the canary is shadowed but noise_sample is 0, so "
                    "there is no noise floor to judge its disagreement against (set "
                    f"routes.{rname}.noise_sample above 0, or drop the metric)",
                )
            )
        if "check_pass_rate" in wanted and cfg.rule_of(rname) is None:
            found.append(
                ConfigProblem(
                    base,
                    "check_pass_rate is left out: no rule set applies to this route",
                )
            )
    return found


def credential_warnings(cfg: MirrorgateConfig) -> list[ConfigProblem]:
    """Models whose calls will carry no key, or the client's key to another host (see
    `ModelSpec.pass_client_key`): a shadow, canary, fallback or judge with neither `api_key_env`
    nor `pass_client_key: true` sends no credentials (and will likely get 401); a
    `pass_client_key: true` shadow, canary or fallback on another origin than its route's primary
    receives credentials the client meant for the primary's host. Not errors: `check-config`
    prints them and the gateway logs them."""
    found: list[ConfigProblem] = []
    for rname, route in cfg.routes.items():
        primary = cfg.models.get(route.primary)
        if primary is None:
            continue
        roles = [(s.model, "shadow") for s in route.shadows]
        if route.canary is not None:
            roles.append((route.canary.model, "canary"))
        if route.fallback is not None:
            roles.append((route.fallback, "fallback"))
        for name, role in roles:
            model = cfg.models.get(name)
            if model is None or name == route.primary or model.api_key_env:
                continue
            if model.pass_client_key and model.origin != primary.origin:
                found.append(
                    ConfigProblem(
                        f"models.{name}.pass_client_key",
                        f"the {role} of route '{rname}' gets the client's credentials, meant for "
                        f"{primary.origin} (the primary '{route.primary}'), at {model.origin}",
                    )
                )
            elif not model.pass_client_key:
                found.append(
                    ConfigProblem(
                        f"models.{name}",
                        f"the {role} of route '{rname}' sends no key to {model.origin}: it has "
                        "neither api_key_env nor pass_client_key: true",
                    )
                )
    judge = cfg.models.get(cfg.judge.model) if cfg.judge is not None else None
    if cfg.judge is not None and judge is not None and not judge.api_key_env:
        found.append(
            ConfigProblem(
                f"models.{cfg.judge.model}",
                "the judge's calls send no key: they carry no client's credentials; set "
                "api_key_env",
            )
        )
    return found


def config_warnings(cfg: MirrorgateConfig, env: Mapping[str, str]) -> list[ConfigProblem]:
    """Every warning about a valid configuration, in the order `check-config` prints them and
    the gateway logs them at start: judged metrics never evaluable, credentials, feedback."""
    return [*rollout_warnings(cfg), *credential_warnings(cfg), *feedback_warnings(cfg, env)]
