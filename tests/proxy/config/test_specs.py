"""Configuration: every problem named by its key path, nothing half-loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.config.specs import ConfigError, load_config, parse_config

GOOD = """
server: {host: 127.0.0.1, port: 8080}
store: {url: "sqlite:///x.db", bodies: redacted}
models:
  prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: gpt-4o-mini,
         api_key_env: OPENAI_API_KEY, price: {input_per_mtok: 0.15, output_per_mtok: 0.6}}
  safe: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: gpt-4o}
  cand: {provider: openai, base_url: "${CAND_URL:-http://127.0.0.1:9/v1}", model: "${CAND_MODEL}"}
routes:
  support-bot:
    primary: prod
    fallback: safe
    shadows: [{model: cand, sample: 0.25}]
    canary: {model: cand, steps: [1, 5, 25], sticky: "header:x-user-id"}
rules:
  shipping-policy:
    routes: [support-bot]
    version: header:x-rule-version
    checks: [{name: valid-json, type: json}]
    versions:
      v2:
        match_prompt: 'max_weight\\s*=\\s*150'
        checks: [{name: max-weight, type: json_path, path: $.max_weight, equals: 150}]
"""
ENV = {"OPENAI_API_KEY": "sk-test", "CAND_MODEL": "cand-1"}


def problems(text: str, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, ENV if env is None else env)
    return [str(p) for p in info.value.problems]


def test_good_config_loads_into_frozen_specs() -> None:
    cfg = parse_config(GOOD, ENV)
    assert cfg.models["cand"].model == "cand-1"
    assert cfg.models["cand"].base_url == "http://127.0.0.1:9/v1"
    assert cfg.routes["support-bot"].shadows[0].sample == 0.25
    assert cfg.rules["shipping-policy"].versions["v2"].checks[0].equals == 150
    with pytest.raises(Exception, match="frozen"):
        cfg.server.port = 1  # type: ignore[misc]


def test_every_problem_is_named_by_key_path() -> None:
    text = """
models:
  prod: {provider: openai, base_url: "http://h/v1", model: m, colour: red}
  bad: {provider: cohere, base_url: "ftp://h", model: m, timeout_s: soon}
routes:
  r1: {primary: nope, fallback: prod, shadows: [{model: ghost, sample: 2}]}
rules:
  p: {routes: [r1, r9], checks: [{name: c, type: regex, pattern: "("}]}
"""
    found = problems(text)
    joined = "\n".join(found)
    for expected in (
        "models.prod.colour: unknown key",
        "models.bad.provider",
        "models.bad.base_url",
        "models.bad.timeout_s",
        "routes.r1.shadows[0].sample",
        "rules.p.checks[0]",
    ):
        assert expected in joined, (expected, found)


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


def test_missing_environment_variables_are_named() -> None:
    found = problems(GOOD, env={})
    assert "models.cand.model: environment variable CAND_MODEL is not set" in found
    assert "models.prod.api_key_env: environment variable OPENAI_API_KEY is not set" in found


def test_duplicate_keys_are_errors_not_overwrites() -> None:
    text = """
models:
  prod: {provider: openai, base_url: "http://h/v1", model: m}
routes:
  r1: {primary: prod}
  r1: {primary: prod}
"""
    assert problems(text) == ["routes: duplicate key 'r1' (line 6)"]


def test_non_loopback_listener_requires_an_admin_token() -> None:
    text = """
server: {host: 0.0.0.0}
models: {prod: {provider: openai, base_url: "http://h/v1", model: m}}
routes: {r: {primary: prod}}
"""
    assert any(p.startswith("server.admin_token_env:") for p in problems(text, {}))
    assert parse_config(text, {"MIRRORGATE_ADMIN_TOKEN": "t"}).server.host == "0.0.0.0"


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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "models: required key is missing"),
        ("- a\n- b\n", "<root>: the configuration must be a mapping of sections"),
        ("models: {a: [unclosed\n", "not valid YAML"),
        ("models: !!python/object:os.system {}\n", "not valid YAML"),
        ("models: {}\nroutes: {}\n", "models: "),
        ("models:\n  'bad name!': {provider: openai, base_url: 'http://h/v1', model: m}\n"
         "routes: {r: {primary: 'bad name!'}}\n", "models.bad name!"),
    ],
)  # fmt: skip
def test_hostile_and_malformed_documents(text: str, message: str) -> None:
    assert any(message in p for p in problems(text)), problems(text)


def test_billion_laughs_and_huge_files_are_refused(tmp_path: Path) -> None:
    laughs = "a: &a ['x','x','x','x','x','x','x','x','x']\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
        f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]\n"
        for i in range(8)
    )
    found = problems(laughs)
    assert found == ["<root>: the document expands to more than 200000 nodes"]
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (5 * 1024 * 1024))
    with pytest.raises(ConfigError, match="larger than"):
        load_config(big)


def test_file_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "missing.yaml")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(binary)
