"""The cross-checks, one per config section, and the order the loader runs them in."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from proxy.config import (
    MirrorgateConfig,
    credential_warnings,
    feedback_app_tokens,
    feedback_open,
    feedback_warnings,
    parse_config,
    reviewer_tokens,
    unavailable_evidence,
)
from proxy.config.checks import DOCUMENT_CHECKS, SPEC_CHECKS, check_model_keys, check_server

from .documents import problems


def test_cross_references_are_checked() -> None:
    text = """
models:
  prod: {provider: openai, base_url: "http://h/v1", model: m}
  claude: {provider: anthropic, base_url: "http://h", model: c}
routes:
  r1: {primary: nope, fallback: claude, shadows: [{model: ghost}, {model: prod}, {model: prod}]}
  r2: {primary: prod, fallback: claude, canary: {model: prod}}
rules:
  p: {routes: [r9]}
"""
    found = problems(text)
    assert "routes.r1.primary: model 'nope' is not defined under models" in found
    assert "routes.r1.shadows[0].model: model 'ghost' is not defined under models" in found
    assert "routes.r1.shadows[2].model: 'prod' is shadowed twice" in found
    assert "routes.r2.canary.model: the canary cannot be the primary itself" in found
    assert any(p.startswith("routes.r2.fallback: the fallback must speak") for p in found)
    assert "rules.p.routes[0]: route 'r9' is not defined" in found


def test_non_loopback_listener_requires_an_admin_token() -> None:
    text = """
server: {host: 0.0.0.0}
models: {prod: {provider: openai, base_url: "http://h/v1", model: m}}
routes: {r: {primary: prod}}
"""
    assert any(p.startswith("server.admin_token_env:") for p in problems(text, {}))
    assert parse_config(text, {"MIRRORGATE_ADMIN_TOKEN": "t"}).server.host == "0.0.0.0"


def test_feedback_secrets_must_be_long_enough_to_be_secrets() -> None:
    text = """
models: {prod: {provider: openai, base_url: "http://h/v1", model: m}}
routes: {r: {primary: prod}}
"""
    found = problems(text, {"MIRRORGATE_FEEDBACK_TOKENS": "a-long-enough-token-1, short",
                            "MIRRORGATE_FEEDBACK_SIGNING_KEY": "too-short"})  # fmt: skip
    assert any(p.startswith("server.feedback_tokens_env:") for p in found)
    assert any(p.startswith("server.feedback_signing_key_env:") for p in found)
    env = {"MIRRORGATE_FEEDBACK_TOKENS": " a-long-enough-token-1 ,, another-long-token-2 "}
    assert feedback_app_tokens(env["MIRRORGATE_FEEDBACK_TOKENS"]) == [
        "a-long-enough-token-1", "another-long-token-2"]  # fmt: skip
    assert parse_config(text, env).server.feedback_tokens_env == "MIRRORGATE_FEEDBACK_TOKENS"


def test_reviewer_tokens_must_be_long_and_never_the_admin_token() -> None:
    text = """
server: {reviewer_tokens_env: TEAM_REVIEWERS}
models: {prod: {provider: openai, base_url: "http://h/v1", model: m}}
routes: {r: {primary: prod}}
"""
    short = problems(text, {"TEAM_REVIEWERS": "a-long-enough-reviewer-1,short"})
    assert any(p.startswith("server.reviewer_tokens_env:") and "16" in p for p in short)
    admin = "the-admin-token-itself"
    same = problems(text, {"TEAM_REVIEWERS": f"a-long-enough-reviewer-1, {admin}",
                           "MIRRORGATE_ADMIN_TOKEN": admin})  # fmt: skip
    assert any(p.startswith("server.reviewer_tokens_env:") and "admin" in p for p in same)
    env = {"TEAM_REVIEWERS": " a-long-enough-reviewer-1 ,, another-long-reviewer-2 "}
    assert reviewer_tokens(env["TEAM_REVIEWERS"]) == [
        "a-long-enough-reviewer-1", "another-long-reviewer-2"]  # fmt: skip
    assert parse_config(text, env).server.reviewer_tokens_env == "TEAM_REVIEWERS"


def test_feedback_is_open_only_on_loopback_with_nothing_configured_and_that_is_a_warning() -> None:
    loopback = parse_config("""
models: {prod: {provider: openai, base_url: "http://h/v1", model: m}}
routes: {r: {primary: prod}}
""", {})  # fmt: skip
    public = loopback.model_copy(
        update={"server": loopback.server.model_copy(update={"host": "0.0.0.0"})}
    )
    assert feedback_open(loopback, {})
    (warning,) = feedback_warnings(loopback, {})
    assert warning.path == "server.feedback_tokens_env" and "sidecar" in warning.message
    assert not feedback_open(public, {}) and feedback_warnings(public, {}) == []
    for configured in ({"MIRRORGATE_FEEDBACK_TOKENS": "x" * 20},
                       {"MIRRORGATE_FEEDBACK_SIGNING_KEY": "y" * 40}):  # fmt: skip
        assert not feedback_open(loopback, configured)
        assert feedback_warnings(loopback, configured) == []


MODEL = {"provider": "openai", "base_url": "http://h/v1", "model": "m"}
CLAUDE = {"provider": "anthropic", "base_url": "http://h", "model": "c"}
# Valid section by section, wrong across sections: one problem for each spec check.
EVERY_SECTION_WRONG: dict[str, Any] = {
    "server": {"host": "0.0.0.0"},
    "models": {"prod": MODEL, "claude": CLAUDE},
    "routes": {"bot": {"primary": "prod", "fallback": "claude"}},
    "rules": {
        "a": {
            "routes": ["bot"],
            "probes": {
                "parameter": "w = (?P<value>\\d+)",
                "values": [2],
                "targets": ["claude"],
                "expect": [{"name": "e", "type": "json_path", "path": "$.w", "equals": "{value}"}],
            },
        },
        "b": {"routes": ["bot"]},
    },
    "judge": {"model": "ghost"},
    "analyzers": ["no-such-analyzer"],
}


def test_each_section_check_reports_its_own_section() -> None:
    cfg = MirrorgateConfig.model_validate(EVERY_SECTION_WRONG)
    found = {check.__name__: [p.path for p in check(cfg, {})] for check in SPEC_CHECKS}
    assert found == {
        "check_routes": ["routes.bot.fallback"],
        "check_guards": [],
        "check_experiments": [],
        "check_judge": ["judge.model"],
        "check_analyzers": ["analyzers[0]"],
        "check_rules": ["rules.b.routes[0]"],
        "check_probes": ["rules.a.probes.targets[0]"],
        "check_server": ["server.admin_token_env"],
    }
    assert check_server(cfg, {"MIRRORGATE_ADMIN_TOKEN": "t"}) == []


def test_the_loader_runs_the_section_checks_in_their_order() -> None:
    found = problems(yaml.safe_dump(EVERY_SECTION_WRONG), env={})
    assert [p.split(":")[0] for p in found] == [
        "routes.bot.fallback",
        "judge.model",
        "analyzers[0]",
        "rules.b.routes[0]",
        "rules.a.probes.targets[0]",
        "server.admin_token_env",
    ]


def test_document_checks_find_every_reference_before_validation() -> None:
    raw = {
        "models": {"prod": {**MODEL, "api_key_env": "UNSET_KEY"}, "broken": "not a mapping"},
        "routes": {
            "bot": {"primary": "ghost", "shadows": [{"model": "prod"}, "junk"], "canary": 3},
            "odd": ["not", "a", "mapping"],
        },
        "rules": {"p": {"routes": ["bot", "nowhere", 7]}, "q": None},
    }
    found = {check.__name__: [str(p) for p in check(raw, {})] for check in DOCUMENT_CHECKS}
    assert found == {
        "check_model_keys": ["models.prod.api_key_env: environment variable UNSET_KEY is not set"],
        "check_route_references": ["routes.bot.primary: model 'ghost' is not defined under models"],
        "check_rule_references": ["rules.p.routes[1]: route 'nowhere' is not defined"],
    }
    assert check_model_keys(raw, {"UNSET_KEY": "k"}) == []


EVIDENCE = """
models:
  prod: {provider: openai, base_url: "http://h/v1", model: m}
  cand: {provider: openai, base_url: "http://h/v1", model: c}
  judge-model: {provider: openai, base_url: "http://h/v1", model: j}
routes:
  shadowed: {primary: prod, shadows: [{model: cand}], canary: {model: cand}}
  unshadowed: {primary: prod, canary: {model: cand, analysis: {metrics: [error_rate, judge_score]}}}
"""


def test_evidence_metrics_are_judged_only_where_their_evidence_exists() -> None:
    plain = parse_config(EVIDENCE.replace(", analysis: {metrics: [error_rate, judge_score]}", ""))
    assert set(unavailable_evidence(plain, "shadowed")) == {
        "judge_score", "findings", "rule_adaptation"
    }  # fmt: skip
    assert "no probes" in unavailable_evidence(plain, "shadowed")["rule_adaptation"]
    assert "no LLM judge" in unavailable_evidence(plain, "shadowed")["judge_score"]
    judged = parse_config(
        EVIDENCE.replace(", analysis: {metrics: [error_rate, judge_score]}", "")
        + "judge: {model: judge-model}\nanalyzers: [refusal]\n"
    )
    assert set(unavailable_evidence(judged, "shadowed")) == {"rule_adaptation"}
    # The judge scores shadow pairs only: a canary that is not shadowed is never scored.
    assert (
        "not among the route's shadows" in unavailable_evidence(judged, "unshadowed")["judge_score"]
    )
    # The defaults list both metrics, which are then left out where they cannot be judged.
    assert {"judge_score", "findings"} <= set(plain.routes["shadowed"].canary.analysis.metrics)  # type: ignore[union-attr]


def test_an_evidence_metric_listed_without_its_evidence_is_an_error() -> None:
    found = problems(EVIDENCE)
    assert found == [
        "routes.unshadowed.canary.analysis.metrics[1]: 'judge_score' cannot be judged: no LLM "
        "judge is configured (the `judge` section)"
    ]
    text = (
        EVIDENCE.replace("[error_rate, judge_score]", "[findings]")
        + "judge: {model: judge-model}\n"
    )
    assert problems(text) == [
        "routes.unshadowed.canary.analysis.metrics[0]: 'findings' cannot be judged: no analyzers "
        "are configured (the `analyzers` list)"
    ]
    assert parse_config(text + "analyzers: [refusal]\n").routes["unshadowed"].canary is not None


def test_findings_severity_is_one_of_the_severities() -> None:
    text = EVIDENCE.replace(
        "analysis: {metrics: [error_rate, judge_score]}", "analysis: {findings_severity: %s}"
    )
    cfg = parse_config(text % "critical")
    assert cfg.routes["unshadowed"].canary.analysis.findings_severity == "critical"  # type: ignore[union-attr]
    assert (
        parse_config(text.replace(", analysis: {findings_severity: %s}", ""))
        .routes["unshadowed"]
        .canary.analysis.findings_severity
        == "warning"
    )  # type: ignore[union-attr]
    (found,) = problems(text % "fatal")
    assert found.startswith("routes.unshadowed.canary.analysis.findings_severity:")
    assert "'info', 'warning' or 'critical'" in found


def test_rollback_to_fallback_needs_a_fallback_and_defaults_to_primary() -> None:
    route: dict[str, Any] = {"primary": "prod", "canary": {"model": "cand"}}
    doc: dict[str, Any] = {"models": {"prod": MODEL, "cand": MODEL}, "routes": {"bot": route}}
    cfg = parse_config(yaml.safe_dump(doc), env={})
    assert cfg.routes["bot"].canary is not None
    assert cfg.routes["bot"].canary.rollback_to == "primary"
    route["canary"]["rollback_to"] = "fallback"
    assert [p.split(":")[0] for p in problems(yaml.safe_dump(doc), env={})] == [
        "routes.bot.canary.rollback_to"
    ]
    route["canary"]["rollback_to"] = "elsewhere"
    assert [p.split(":")[0] for p in problems(yaml.safe_dump(doc), env={})] == [
        "routes.bot.canary.rollback_to"
    ]
    route.update({"fallback": "prod", "canary": {"model": "cand", "rollback_to": "fallback"}})
    fine = parse_config(yaml.safe_dump(doc), env={})
    assert fine.routes["bot"].canary is not None
    assert fine.routes["bot"].canary.rollback_to == "fallback"


def test_credential_warnings_name_keyless_arms_on_other_hosts_and_opt_ins() -> None:
    primary = {"provider": "openai", "base_url": "https://primary.example/v1", "model": "p"}
    elsewhere = {"provider": "openai", "base_url": "https://other.example/v1", "model": "o"}
    doc: dict[str, Any] = {
        "models": {
            "prod": primary,
            "same-host": {**primary, "model": "s", "pass_client_key": True},  # the key's own host
            "keyless": elsewhere,
            "keyed": {**elsewhere, "api_key_env": "OTHER_KEY"},
            "opted-in": {**elsewhere, "pass_client_key": True},
            "opted-out": {**primary, "pass_client_key": False},
        },
        "routes": {
            "bot": {
                "primary": "prod",
                "fallback": "keyless",
                "shadows": [{"model": "same-host"}, {"model": "keyed"}, {"model": "opted-in"}],
                "canary": {"model": "opted-out"},
            }
        },
        "judge": {"model": "keyless"},
    }
    cfg = parse_config(yaml.safe_dump(doc), env={"OTHER_KEY": "k"})
    found = [(p.path, p.message) for p in credential_warnings(cfg)]
    assert [path for path, _ in found] == [
        "models.opted-in.pass_client_key", "models.opted-out", "models.keyless", "models.keyless",
    ]  # fmt: skip
    messages = dict(found[:2])
    assert "https://other.example:443" in messages["models.opted-in.pass_client_key"]
    assert "canary of route 'bot'" in messages["models.opted-out"]
    assert "fallback of route 'bot' sends no key" in found[2][1]
    assert "judge" in found[3][1]
    judged = credential_warnings(
        parse_config(
            yaml.safe_dump({**doc, "routes": {"bot": {"primary": "prod"}}}), {"OTHER_KEY": "k"}
        )
    )
    assert [(p.path, "judge" in p.message) for p in judged] == [("models.keyless", True)]


def test_a_guard_needs_a_rule_candidates_for_switch_and_same_format_candidates() -> None:
    anthropic = {"provider": "anthropic", "base_url": "http://127.0.0.1:9", "model": "c"}
    models = {"prod": MODEL, "cand": MODEL, "claude": anthropic}
    route: dict[str, Any] = {"primary": "prod", "guard": {"on_rule_regression": "switch"}}
    doc: dict[str, Any] = {"models": models, "routes": {"bot": route}}
    found = problems(yaml.safe_dump(doc), env={})
    assert [p.split(":")[0] for p in found] == ["routes.bot.guard", "routes.bot.guard.candidates"]
    assert "a guard needs a rule set governing the route" in found[0]
    doc["rules"] = {"r": {"routes": ["bot"], "checks": [{"name": "j", "type": "json"}]}}
    route["guard"]["candidates"] = ["prod", "claude", "cand", "cand"]
    found = problems(yaml.safe_dump(doc), env={})
    assert [p.split(":")[0] for p in found] == [
        "routes.bot.guard.candidates[0]",
        "routes.bot.guard.candidates[1]",
        "routes.bot.guard.candidates[3]",
    ]
    assert "is the route's primary" in found[0] and "speaks anthropic" in found[1]
    route["guard"]["candidates"] = ["cand"]
    assert parse_config(yaml.safe_dump(doc), env={}).routes["bot"].guard is not None
    route["guard"] = {"on_rule_regression": "alert"}  # alert needs no candidate
    assert parse_config(yaml.safe_dump(doc), env={}).routes["bot"].guard is not None


def test_guard_candidates_must_be_defined_models() -> None:
    route = {"primary": "prod", "guard": {"candidates": ["ghost"]}}
    doc = {"models": {"prod": MODEL}, "routes": {"bot": route}}
    found = problems(yaml.safe_dump(doc), env={})
    assert found[0].startswith("routes.bot.guard.candidates[0]") and "ghost" in found[0]


@pytest.mark.parametrize(
    "guard",
    [
        {"on_rule_regression": "rollback"},
        {"candidates": "cand"},
        {"min_samples": 0},
        {"min_samples": "many"},
        {"interval_s": -1},
        {"interval_s": 10**9},
        {"unknown_key": 1},
        "switch",
    ],
)
def test_a_malformed_guard_is_refused_naming_its_key(guard: Any) -> None:
    route = {"primary": "prod", "guard": guard}
    doc = {"models": {"prod": MODEL, "cand": MODEL}, "routes": {"bot": route}}
    found = problems(yaml.safe_dump(doc), env={})
    assert any(p.startswith("routes.bot.guard") for p in found), found


PHANTOM_BASE = """
models: {prod: {provider: openai, base_url: "http://h/v1", model: m}}
routes: {bot: {primary: prod}}
rules:
  shipping:
    routes: [bot]
"""


def test_a_phantom_rule_check_needs_a_parameter_somewhere() -> None:
    found = problems(
        PHANTOM_BASE
        + """
    checks: [{name: json, type: json}, {name: phantom, type: phantom_rule}]
    versions:
      v2: {checks: [{name: phantom-v2, type: phantom_rule}]}
"""
    )
    assert any(p.startswith("rules.shipping.checks[1].parameter: a phantom_rule check needs")
               for p in found)  # fmt: skip
    assert any(p.startswith("rules.shipping.versions.v2.checks[0].parameter:") for p in found)


def test_a_phantom_rule_parameter_needs_the_group_value() -> None:
    found = problems(
        PHANTOM_BASE
        + """
    checks: [{name: phantom, type: phantom_rule, parameter: 'max_weight = (\\d+)'}]
"""
    )
    assert found == [
        "rules.shipping.checks[0].parameter: needs a named group 'value', "
        "e.g. 'max_weight\\s*=\\s*(?P<value>\\d+)'"
    ]


def test_a_phantom_rule_takes_the_rules_probes_parameter_and_no_other() -> None:
    probes = """
    probes:
      parameter: 'max_weight\\s*=\\s*(?P<value>\\d+)'
      values: [150]
      expect: [{name: follows, type: contains, value: "{value}"}]
"""
    config = parse_config(
        PHANTOM_BASE + "    checks: [{name: phantom, type: phantom_rule}]" + probes, {}
    )
    assert config.rules["shipping"].value_parameter() == r"max_weight\s*=\s*(?P<value>\d+)"
    found = problems(
        PHANTOM_BASE
        + "    checks: [{name: phantom, type: phantom_rule, parameter: 'w=(?P<value>\\d+)'}]"
        + probes
    )
    assert len(found) == 1
    assert found[0].startswith("rules.shipping.checks[0].parameter: differs from probes.parameter")


def test_a_phantom_rule_with_its_own_parameter_is_valid_without_probes() -> None:
    config = parse_config(
        PHANTOM_BASE
        + "    checks: [{name: phantom, type: phantom_rule, parameter: 'tier=(?P<value>\\w+)'}]",
        {},
    )
    assert config.rules["shipping"].value_parameter() == r"tier=(?P<value>\w+)"


def test_a_hostile_phantom_rule_parameter_is_named_by_its_key_path() -> None:
    for value, expected in (
        ("42", "Input should be a valid string"),
        ("[a, b]", "Input should be a valid string"),
        ("{value: x}", "Input should be a valid string"),
        ("'(?P<value>'", "not a valid regular expression"),
        ("'(?P<value>(a+)+)'", "backtrack"),
        ("'(?P<value>\\d*)'", "matches the empty string"),
    ):
        found = problems(
            PHANTOM_BASE + f"    checks: [{{name: p, type: phantom_rule, parameter: {value}}}]"
        )
        assert len(found) == 1 and found[0].startswith("rules.shipping.checks[0]"), found
        assert expected in found[0], found
    huge = "'(?P<value>x)" + "y" * 200_000 + "'"
    config = parse_config(
        PHANTOM_BASE + f"    checks: [{{name: p, type: phantom_rule, parameter: {huge}}}]", {}
    )
    assert config.rules["shipping"].value_parameter() == huge.strip("'")


def test_a_keyless_arm_on_the_primarys_own_host_is_warned_about_unless_it_opts_in() -> None:
    # The primary's origin is no licence: without api_key_env or pass_client_key: true the
    # fallback sends no key, wherever it is; opted in on the same host, nothing to warn about.
    primary = {"provider": "openai", "base_url": "https://primary.example/v1", "model": "p"}
    doc: dict[str, Any] = {
        "models": {"prod": primary, "same-host": {**primary, "model": "s"}},
        "routes": {"bot": {"primary": "prod", "fallback": "same-host"}},
    }
    found = [(p.path, p.message) for p in credential_warnings(parse_config(yaml.safe_dump(doc)))]
    assert len(found) == 1 and found[0][0] == "models.same-host", found
    assert "fallback of route 'bot' sends no key" in found[0][1]
    doc["models"]["same-host"]["pass_client_key"] = True
    assert credential_warnings(parse_config(yaml.safe_dump(doc))) == []


def test_experiment_problems_are_named_by_key_path() -> None:
    text = """
models:
  prod: {provider: openai, base_url: "http://h/v1", model: m}
  cand: {provider: openai, base_url: "http://h/v1", model: m2}
  claude: {provider: anthropic, base_url: "http://h", model: c}
routes:
  bot:
    primary: prod
    experiment:
      arms:
        control: {model: prod}
        cheaper: {model: cand}
        other: {model: claude}
        ghost: {model: nowhere}
      weights: {control: 50, cheaper: 30, extra: 20}
      unit: user
      primary_metric: "check:valid"
      guardrails: [error_rate, happiness]
      minimum_detectable_effect: 0.03
  solo:
    primary: prod
    experiment:
      arms: {control: {model: prod}}
      weights: {control: 100}
      minimum_detectable_effect: 0
"""
    found = problems(text, env={})
    paths = [p.split(":")[0] for p in found]
    assert "routes.bot.experiment.arms.ghost.model" in paths
    assert "routes.bot.experiment.unit" in paths
    assert "routes.solo.experiment.arms" in paths
    assert "routes.solo.experiment.minimum_detectable_effect" in paths
    fixed = text.replace("        ghost: {model: nowhere}\n", "").replace(
        "unit: user", "unit: header:x-user"
    )
    fixed = fixed[: fixed.index("  solo:")]
    found = problems(fixed, env={})
    assert [p.split(":")[0] for p in found] == [
        "routes.bot.experiment.weights",
        "routes.bot.experiment.weights.extra",
        "routes.bot.experiment.arms.other.model",
        "routes.bot.experiment.primary_metric",
        "routes.bot.experiment.guardrails[1]",
    ]
    assert "'valid' is not a check" in found[3] and "unknown metric 'happiness'" in found[4]
    good = fixed.replace("extra: 20", "other: 20").replace("        other: {model: claude}\n", "")
    good = good.replace("cheaper: 30, other: 20", "cheaper: 50").replace(
        '"check:valid"', "completion_rate"
    )
    good = good.replace("happiness", "latency_p95")
    assert parse_config(good, {}).routes["bot"].experiment is not None


HUMAN_PREFERENCE_EXPERIMENT = """
models:
  prod: {provider: openai, base_url: "http://h/v1", model: m}
  cand: {provider: openai, base_url: "http://h/v1", model: m2}
store: {bodies: redacted}
routes:
  bot:
    primary: prod
    shadows: [{model: cand}]
    experiment:
      arms:
        control: {model: prod}
        cheaper: {model: cand}
      unit: header:x-user
      primary_metric: human_preference
      guardrails: [error_rate, human_preference]
      minimum_detectable_effect: 0.05
"""


def test_human_preference_judges_an_experiment_only_where_its_pairs_can_exist() -> None:
    spec = parse_config(HUMAN_PREFERENCE_EXPERIMENT, {}).routes["bot"].experiment
    assert spec is not None and spec.primary_metric == "human_preference"
    paths = ["routes.bot.experiment.primary_metric", "routes.bot.experiment.guardrails[1]"]

    def refused(text: str, why: str) -> None:
        found = problems(text, env={})
        assert [p.split(":")[0] for p in found] == paths, found
        assert all(why in p and "arm 'cheaper'" in p for p in found), found

    refused(
        HUMAN_PREFERENCE_EXPERIMENT.replace("bodies: redacted", "bodies: none"),
        "store.bodies is none",
    )
    # No shadow answers for the arm's model: no pair of it with control can exist.
    refused(HUMAN_PREFERENCE_EXPERIMENT.replace("    shadows: [{model: cand}]\n", ""), "shadow")
    # A prompt variant on the arm: the shadow's answer (client's prompt) is not the arm's.
    variant = HUMAN_PREFERENCE_EXPERIMENT.replace(
        "cheaper: {model: cand}", "cheaper: {model: cand, system_prompt_append: be brief}"
    )
    refused(variant, "no system_prompt_append")
    # The metric with hostile text around it is still an unknown metric, by key path.
    hostile = HUMAN_PREFERENCE_EXPERIMENT.replace(
        "primary_metric: human_preference", 'primary_metric: "human_preference\\u0000x"'
    )
    found = problems(hostile, env={})
    assert found[0].startswith("routes.bot.experiment.primary_metric") and "unknown" in found[0]


def test_several_workers_on_sqlite_is_refused_naming_both_keys() -> None:
    text = """
server: {workers: 2}
store: {url: "sqlite:///gateway.db"}
models: {prod: {provider: openai, base_url: "http://h/v1", model: m}}
routes: {bot: {primary: prod}}
"""
    found = problems(text)
    assert len(found) == 1
    assert found[0].startswith("server.workers: 2 workers need store.url on PostgreSQL")
    assert "SQLite" in found[0]
    on_postgres = text.replace("sqlite:///gateway.db", "postgresql+psycopg://u@127.0.0.1/db")
    assert parse_config(on_postgres, {}).server.workers == 2
    assert parse_config(text.replace("workers: 2", "workers: 1"), {}).server.workers == 1


@pytest.mark.parametrize("workers", [0, 65])
def test_the_worker_count_is_bounded(workers: int) -> None:
    found = problems(f"server: {{workers: {workers}}}\n")
    assert [p for p in found if p.startswith("server.workers:")], found
