"""A sample configuration and a helper that collects the problems a document has, shared by the
config tests."""

from __future__ import annotations

import pytest

from proxy.config import ConfigError, parse_config

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
