"""Loading: every problem named by its key path, hostile documents refused, nothing half-loaded."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from proxy.config import ConfigError, load_config, parse_config, parse_document

from .documents import GOOD, problems


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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "models: required key is missing"),
        ("- a\n- b\n", "<root>: the configuration must be a mapping of sections"),
        ("models: {a: [unclosed\n", "not valid YAML"),
        ("models: !!python/object:os.system {}\n", "not valid YAML"),
        ("store: {url: \x00}\n", "not valid YAML"),  # found by tests/hostile/test_fuzz_config.py
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


def test_overrides_are_validated_with_the_file() -> None:
    """`serve --host/--port` go through the loader: the loopback-only rule holds for the
    address actually served, with the error a bad file gets."""
    text = "models: {m: {provider: openai, base_url: 'http://127.0.0.1:1/v1', model: x}}\n"
    text += "routes: {r: {primary: m}}\nserver: {host: 127.0.0.1, port: 8080}\n"
    with pytest.raises(ConfigError) as refused:
        parse_config(text, env={}, overrides={"server": {"host": "0.0.0.0"}})
    assert [p.path for p in refused.value.problems] == ["server.admin_token_env"]
    assert "listening on 0.0.0.0" in str(refused.value)
    token = {"MIRRORGATE_ADMIN_TOKEN": "t"}
    served = parse_config(text, env=token, overrides={"server": {"host": "0.0.0.0", "port": 9}})
    assert (served.server.host, served.server.port) == ("0.0.0.0", 9)
    with pytest.raises(ConfigError, match=r"server\.port"):
        parse_config(text, env={}, overrides={"server": {"port": 70000}})


READ_ONLY_DOC = """
store: {url: "${MG_TEST_STORE_URL}"}
server: {host: 0.0.0.0}
models:
  prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: m, api_key_env: MG_PROD_KEY}
  cand: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: "${MG_CAND_MODEL}"}
routes: {bot: {primary: prod, shadows: [{model: cand}]}}
"""


def test_without_secrets_only_the_store_needs_its_variables() -> None:
    env = {"MG_TEST_STORE_URL": "sqlite:///x.db"}
    cfg = parse_config(READ_ONLY_DOC, env, secrets=False)
    assert cfg.store.url == "sqlite:///x.db"
    assert cfg.models["cand"].model == "${MG_CAND_MODEL}"  # unused by a reader: left as written
    with pytest.raises(ConfigError) as exc:
        parse_config(READ_ONLY_DOC, {}, secrets=False)
    assert {p.path for p in exc.value.problems} == {"store.url"}
    assert "MG_TEST_STORE_URL is not set" in str(exc.value.problems[0])


def test_serving_still_refuses_every_missing_secret() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(READ_ONLY_DOC, {"MG_TEST_STORE_URL": "sqlite:///x.db"})
    assert {"models.prod.api_key_env", "models.cand.model"} <= {p.path for p in exc.value.problems}
    env = {"MG_TEST_STORE_URL": "sqlite:///x.db", "MG_CAND_MODEL": "m"}
    with pytest.raises(ConfigError) as exc:
        parse_config(READ_ONLY_DOC, env)
    paths = {p.path for p in exc.value.problems}
    assert paths == {"models.prod.api_key_env", "server.admin_token_env"}


def test_without_secrets_a_key_left_invalid_names_its_unset_variable() -> None:
    doc = READ_ONLY_DOC.replace(
        'base_url: "http://127.0.0.1:9/v1", model: m, api_key_env',
        'base_url: "${MG_BASE_URL}", model: m, api_key_env',
    )
    with pytest.raises(ConfigError) as exc:
        parse_config(doc, {"MG_TEST_STORE_URL": "sqlite:///x.db"}, secrets=False)
    (problem,) = exc.value.problems
    assert problem.path == "models.prod.base_url"
    assert "environment variable MG_BASE_URL is not set" in problem.message
    env = {"MG_TEST_STORE_URL": "sqlite:///x.db", "MG_BASE_URL": "http://127.0.0.1:9/v1"}
    assert parse_config(doc, env, secrets=False).models["prod"].base_url == "http://127.0.0.1:9/v1"


def test_a_document_already_read_is_checked_as_its_text_would_be() -> None:
    env = {"MG_TEST_STORE_URL": "sqlite:///x.db", "MG_CAND_MODEL": "m", "MG_PROD_KEY": "k"}
    env["MIRRORGATE_ADMIN_TOKEN"] = "t"
    document = yaml.safe_load(READ_ONLY_DOC)
    assert parse_document(document, env) == parse_config(READ_ONLY_DOC, env)
    assert document == yaml.safe_load(READ_ONLY_DOC)  # read, not changed
    overrides = {"server": {"host": "127.0.0.1", "port": 9}}
    served = parse_document(document, env, overrides)
    assert (served.server.host, served.server.port) == ("127.0.0.1", 9)
    for text in (GOOD, READ_ONLY_DOC, "models: {}\nroutes: {r: {primary: ghost}}\n"):
        with pytest.raises(ConfigError) as from_text:
            parse_config(text, {})
        with pytest.raises(ConfigError) as from_document:
            parse_document(yaml.safe_load(text), {})
        assert from_document.value.problems == from_text.value.problems
    with pytest.raises(ConfigError, match="must be a mapping of sections"):
        parse_document(["a", "b"])
