"""The config sections as specs: loaded frozen, each field validated with its key path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from proxy.config import parse_config
from proxy.config.specs import LimitsSpec, ServerSpec, StoreSpec

from .documents import ENV, GOOD, problems


def test_good_config_loads_into_frozen_specs() -> None:
    cfg = parse_config(GOOD, ENV)
    assert cfg.models["cand"].model == "cand-1"
    assert cfg.models["cand"].base_url == "http://127.0.0.1:9/v1"
    assert cfg.routes["support-bot"].shadows[0].sample == 0.25
    assert cfg.rules["shipping-policy"].versions["v2"].checks[0].equals == 150
    with pytest.raises(Exception, match="frozen"):
        cfg.server.port = 1  # type: ignore[misc]


def test_overload_shedding_settings_are_validated() -> None:
    cfg = parse_config(GOOD, ENV)
    assert (cfg.server.shadow_shed_lag_ms, cfg.server.shadow_shed_busy_percent) == (10.0, 70.0)
    off = GOOD.replace(
        "port: 8080}", "port: 8080, shadow_shed_lag_ms: 0, shadow_shed_busy_percent: 0}"
    )
    assert parse_config(off, ENV).server.shadow_shed_lag_ms == 0
    bad = GOOD.replace(
        "port: 8080}", "port: 8080, shadow_shed_lag_ms: 0.5, shadow_shed_busy_percent: 120}"
    )
    found = problems(bad)
    assert any(p.startswith("server.shadow_shed_lag_ms: ") and "at least 1 ms" in p for p in found)
    assert any(p.startswith("server.shadow_shed_busy_percent: ") for p in found), found


def test_server_limits_have_serious_defaults_and_are_validated() -> None:
    limits = parse_config(GOOD, ENV).server.limits
    assert (limits.max_header_bytes, limits.max_headers, limits.keep_alive_s) == (65536, 100, 75)
    assert limits.max_response_bytes == limits.max_stream_bytes == 64 * 1024 * 1024
    bad = GOOD.replace(
        "port: 8080}",
        "port: 8080, limits: {header_timeout_s: 0, max_headers: 2, body_timeout_s: 90,"
        " body_total_timeout_s: 60, max_surprise: 1}}",
    )
    found = problems(bad)
    for key in ("header_timeout_s", "max_headers", "max_surprise"):
        assert any(p.startswith(f"server.limits.{key}: ") for p in found), (key, found)
    gap_only = bad.replace("header_timeout_s: 0, max_headers: 2, ", "")
    assert problems(gap_only.replace(", max_surprise: 1", "")) == [
        "server.limits: body_timeout_s (90) must not exceed body_total_timeout_s (60)"
    ]


def test_removed_judge_keys_are_refused_saying_why() -> None:
    base = (
        "models:\n  prod: {provider: openai, base_url: 'http://h/v1', model: m}\n"
        "  cand: {provider: openai, base_url: 'http://h/v1', model: c}\n"
        "routes:\n  bot: {primary: prod, canary: {model: cand, analysis: %s}}\n"
    )
    (window,) = problems(base % "{window_s: 60}")
    assert window.startswith("routes.bot.canary.analysis:")
    assert "window_s was removed: each step is judged on all of its evidence" in window
    (spending,) = problems(base % "{thresholds: {spending_scale_looks: 180}}")
    assert spending.startswith("routes.bot.canary.analysis.thresholds:")
    assert "spending_scale_looks was removed" in spending


def test_rule_of_names_the_one_rule_set_of_a_route() -> None:
    cfg = parse_config(
        "models:\n  prod: {provider: openai, base_url: 'http://h/v1', model: m}\n"
        "routes:\n  bot: {primary: prod}\n  other: {primary: prod}\n"
        "rules:\n  shipping: {routes: [bot], checks: [{name: j, type: json}]}\n",
        {},
    )
    assert cfg.rule_of("bot") == "shipping"
    assert cfg.rule_of("other") is None


PROBES = r"""
    probes:
      parameter: 'max_weight\s*=\s*(?P<value>\d+)'
      values: [150, 175]
      expect: [{name: follows, type: json_path, path: $.max_weight, equals: "{value}"}]
"""
GUARDED = "    primary: prod\n    guard: {on_rule_regression: switch, candidates: [safe]}\n"


def with_probes(block: str = PROBES) -> str:
    return GOOD.replace("    checks: [{name: valid-json, type: json}]\n", block, 1)


def test_a_rules_probes_and_a_routes_guard_load_with_their_defaults() -> None:
    cfg = parse_config(with_probes().replace("    primary: prod\n", GUARDED, 1), ENV)
    probes = cfg.rules["shipping-policy"].probes
    assert probes is not None
    assert (probes.values, probes.sample, probes.max_per_hour, probes.max_concurrency) == (
        [150, 175], 0.05, 200, 4
    )  # fmt: skip
    assert probes.expect[0].equals == "{value}"
    guard = cfg.routes["support-bot"].guard
    assert guard is not None and (guard.on_rule_regression, guard.min_samples) == ("switch", 30)


def test_probes_need_a_value_group_and_values_to_ask() -> None:
    no_group = PROBES.replace("(?P<value>", "(")
    no_values = PROBES.replace("      values: [150, 175]\n", "")
    for block, expected in (
        (no_group, "needs a named group 'value'"),
        (no_values, "probes need 'values', or 'scale'/'offset'"),
    ):
        found = problems(with_probes(block))
        assert len(found) == 1 and found[0].startswith("rules.shipping-policy.probes"), found
        assert expected in found[0]


def test_log_settings_have_defaults_and_refuse_what_they_cannot_mean() -> None:
    server = parse_config(GOOD, ENV).server
    assert (server.log_format, server.access_log_sample) == ("text", 1.0)
    fine = GOOD.replace("port: 8080}", "port: 8080, log_format: json, access_log_sample: 0}")
    assert parse_config(fine, ENV).server.log_format == "json"
    for bad, key in (
        ("log_format: xml", "log_format"),
        ("log_format: [json]", "log_format"),
        ("access_log_sample: 1.5", "access_log_sample"),
        ("access_log_sample: -0.1", "access_log_sample"),
        ("access_log_sample: lots", "access_log_sample"),
        ("access_log_sample: .nan", "access_log_sample"),
    ):
        found = problems(GOOD.replace("port: 8080}", f"port: 8080, {bad}}}"))
        assert [p.split(":")[0] for p in found] == [f"server.{key}"], (bad, found)


def test_the_alert_link_template_is_an_http_url_with_known_placeholders() -> None:
    default = parse_config(GOOD, ENV).alerts.generator_url
    assert default.startswith("https://") and default.endswith("docs/runbook.md#{anchor}")
    for bad, says in (
        ("'ftp://x/{route}'", "http:// or https://"),
        ("'https://x/{who}'", "unknown placeholder {who}"),
        ("'https://x/{}'", "unknown placeholder"),
        ("'https://x/{route'", "not a valid template"),
        ("7", "string"),
    ):
        found = problems(GOOD + f"\nalerts: {{generator_url: {bad}}}\n")
        assert len(found) == 1 and found[0].startswith("alerts.generator_url: "), (bad, found)
        assert says in found[0], (bad, found)
    long = "https://x/" + "{route}" * 1000
    (found,) = problems(GOOD + f"\nalerts: {{generator_url: '{long}'}}\n")
    assert found.startswith("alerts.generator_url: ") and "2000" in found


def test_a_routes_operation_field_is_a_dotted_path_of_plain_names() -> None:
    routed = "    fallback: safe\n"
    good = GOOD.replace(routed, routed + "    operation_field: metadata.operation_id\n")
    assert parse_config(good, ENV).routes["support-bot"].operation_field == "metadata.operation_id"
    assert parse_config(GOOD, ENV).routes["support-bot"].operation_field is None
    for bad in ("metadata..id", "meta data", "a.b.c.d.e.f.g.h.i", "'body:m.id'", "''", "x" * 300):
        found = problems(GOOD.replace(routed, f"{routed}    operation_field: {bad}\n"))
        assert any(p.startswith("routes.support-bot.operation_field: ") for p in found), found


def test_evalset_and_require_eval_keys_load_and_bad_values_are_named_by_key_path() -> None:
    good = GOOD.replace(
        '    canary: {model: cand, steps: [1, 5, 25], sticky: "header:x-user-id"}\n',
        '    canary: {model: cand, steps: [1, 5, 25], sticky: "header:x-user-id",\n'
        "             require_eval: {set: sets/support, max_drop: 0.05, max_age: 12h}}\n"
        "    evalset: {task: regex, tasks: {refund: 'refund|money back'}, min_per_task: 3}\n",
    )
    route = parse_config(good, ENV).routes["support-bot"]
    assert route.canary is not None and route.canary.require_eval is not None
    assert route.canary.require_eval.set_name == "support"
    assert route.canary.require_eval.min_cases == 20
    assert route.evalset.tasks == {"refund": "refund|money back"}
    assert parse_config(GOOD, ENV).routes["support-bot"].evalset.task == "none"
    bad = {
        "evalset: {task: 'header:'}": "routes.support-bot.evalset.task",
        "evalset: {task: 'body:a b'}": "routes.support-bot.evalset.task",
        "evalset: {task: regex}": "routes.support-bot.evalset",
        "evalset: {tasks: {a: x}}": "routes.support-bot.evalset",
        "evalset: {task: regex, tasks: {a: '('}}": "routes.support-bot.evalset.tasks",
        "evalset: {task: regex, tasks: {a: " + "x" * 1001 + "}}": "routes.support-bot.evalset",
        "evalset: {held_out: 0.9}": "routes.support-bot.evalset.held_out",
        "evalset: {min_per_task: -1}": "routes.support-bot.evalset.min_per_task",
        "evalset: {difficulty: {long_chars: 0}}": "routes.support-bot.evalset.difficulty",
        "evalset: {surprise: 1}": "routes.support-bot.evalset.surprise",
    }
    for line, path in bad.items():
        text = GOOD.replace("    fallback: safe\n", f"    fallback: safe\n    {line}\n")
        found = problems(text)
        assert any(p.startswith(path) for p in found), (line, found)
    gates = {
        "{set: s, max_age: 7 days}": "max_age",
        "{set: s, max_age: 0d}": "max_age",
        "{set: s, max_drop: -0.1}": "max_drop",
        "{set: s, max_drop: 2}": "max_drop",
        "{set: ''}": "set",
        '{set: "a\\x01b"}': "set",
        "{set: s, min_cases: 0}": "min_cases",
        "{max_drop: 0.1}": "set",
    }
    for gate, key in gates.items():
        text = GOOD.replace(
            'sticky: "header:x-user-id"}', f'sticky: "header:x-user-id", require_eval: {gate}}}'
        )
        found = problems(text)
        assert any(p.startswith(f"routes.support-bot.canary.require_eval.{key}") for p in found), (
            gate,
            found,
        )


def test_a_rule_classifier_needs_a_rule_set_on_the_route() -> None:
    text = GOOD[: GOOD.index("rules:")].replace(
        "    fallback: safe\n", "    fallback: safe\n    evalset: {task: rule}\n"
    )
    assert any(p.startswith("routes.support-bot.evalset.task") for p in problems(text))


def test_the_judges_both_orders_is_on_by_default_and_only_a_boolean() -> None:
    base = (
        "models:\n  prod: {provider: openai, base_url: 'http://h/v1', model: m}\n"
        "routes:\n  bot: {primary: prod}\n"
        "judge: {model: prod%s}\n"
    )
    judge = parse_config(base % "", ENV).judge
    assert judge is not None and judge.both_orders is True
    one = parse_config(base % ", both_orders: false", ENV).judge
    assert one is not None and one.both_orders is False
    for bad in ("[true]", "'sometimes'", "{x: 1}", "'" + "y" * 10_000 + "'"):
        (problem,) = problems(base % f", both_orders: {bad}")
        assert problem.startswith("judge.both_orders:"), problem


CONFIGURATION_DOC = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


@pytest.mark.parametrize("spec", [ServerSpec, LimitsSpec, StoreSpec])
def test_every_key_of_the_server_and_store_sections_has_a_row_in_the_configuration_doc(
    spec: type[ServerSpec | LimitsSpec | StoreSpec],
) -> None:
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", CONFIGURATION_DOC.read_text(), re.MULTILINE))
    sections = {"limits"}  # a table of its own (`server.limits`)
    missing = sorted(set(spec.model_fields) - rows - sections)
    assert not missing, f"{spec.__name__} keys missing from docs/configuration.md: {missing}"
