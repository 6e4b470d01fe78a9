"""A property-based fuzzer (hypothesis) over the config loader and `mirrorgate check-config`.

Inputs: mutations of a valid config (a key dropped, a value replaced by another type, a huge or
negative number, NUL, unicode, deep nesting, an unknown key), and YAML text no careful author writes
(alias bombs, duplicate keys, deep flow nesting, Python tags, tabs, control characters, random
text). The properties:

- `parse_config` returns a config or raises `ConfigError` with at least one problem, each a key
  path (a string; empty only for what concerns the whole document) and a message — never any other
  exception; a mutation inside the document is named by a non-empty key path;
- no problem message carries the value of a secret from the environment (`api_key_env`);
- `mirrorgate check-config FILE` exits 0 for a valid file and 1 naming the problems otherwise.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from proxy.cli import main
from proxy.config import ConfigError, MirrorgateConfig, parse_config
from tests.hostile.fuzzing import ANSWERS, FUZZ, TRIED, flush_report
from tests.proxy.config.documents import GOOD

pytestmark = pytest.mark.fuzz

SECRET = "sk-fuzz-SECRET-0123456789abcdef"
ENV = {"OPENAI_API_KEY": SECRET, "CAND_MODEL": "cand-1"}
BASE: dict[str, Any] = yaml.safe_load(GOOD)


@pytest.fixture(scope="module", autouse=True)
def _report() -> Any:
    yield
    flush_report()


def key_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value of the document (mapping keys and list indexes)."""
    paths: list[tuple[Any, ...]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            paths.append((*prefix, key))
            paths += key_paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            paths.append((*prefix, index))
            paths += key_paths(value, (*prefix, index))
    return paths


PATHS = key_paths(BASE)

weird_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**63, -(2**63), 10**400, -1, 0, 2**31]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["\x00", "a\x00b", "é" * 200, "\U0001f600", "${UNSET}", "${X:-", "x" * 5000]),
)
weird_values = st.recursive(
    weird_scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


@st.composite
def mutated_docs(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        try:
            parent = _parent(doc, path)
            parent[path[-1]]
        except (KeyError, IndexError, TypeError):
            continue
        action = draw(st.sampled_from(["drop", "replace", "replace", "nest", "unknown"]))
        if action == "drop":
            del parent[path[-1]]
        elif action == "replace":
            parent[path[-1]] = draw(weird_values)
        elif action == "nest":
            depth = draw(st.integers(1, 200))
            value: Any = parent[path[-1]]
            for _ in range(depth):
                value = {"x": value}
            parent[path[-1]] = value
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = draw(weird_values)
    return doc


def bomb(levels: int, width: int) -> str:
    lines = ['a0: &a0 ["lol"]']
    for n in range(1, levels):
        lines.append(f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * width) + "]")
    return "\n".join(lines) + f"\nserver: {{port: 8080}}\nx: *a{levels - 1}\n"


raw_texts = st.one_of(
    st.builds(bomb, st.integers(2, 12), st.integers(2, 12)),
    st.builds(lambda n: "server: " + "[" * n + "]" * n, st.integers(1, 5000)),
    st.builds(
        lambda n: "server:\n" + "".join("  " * i + f"k{i}:\n" for i in range(n)),
        st.integers(1, 300),
    ),
    st.sampled_from(
        [
            "",
            "~",
            "[]",
            "42",
            "'x'",
            "server: {port: 8080}\nserver: {port: 9090}\n",
            "models: {a: {provider: openai}, a: {provider: anthropic}}",
            "!!python/object/apply:os.system ['true']",
            "server: !!binary aGVsbG8=",
            "server:\n\tport: 1",
            "server: {port: 0x1F90}",
            "server: {port: 1e999}",
            "server: {port: .inf}",
            "store: {url: \x00}",
            "\ufeffserver: {}",
            "%YAML 1.1\n---\n{}",
            "--- {}\n--- {}\n",
            "? [a, b]\n: c",
            "server: &s {port: 1}\nstore: *s",
            "routes: {r: {primary: *undefined}}",
        ]
    ),
    st.text(max_size=200),
)


def check_outcome(text: str, *, inside: bool) -> None:
    """`parse_config(text)` gives a config or a `ConfigError` as the module docstring says."""
    try:
        config = parse_config(text, ENV)
    except ConfigError as exc:
        ANSWERS["config ConfigError"] += 1
        assert exc.problems, "a ConfigError names at least one problem"
        for problem in exc.problems:
            assert isinstance(problem.path, str) and isinstance(problem.message, str)
            assert problem.message, problem
        if inside:
            assert any(p.path for p in exc.problems), [str(p) for p in exc.problems]
        assert SECRET not in str(exc)
        return
    ANSWERS["config valid"] += 1
    assert isinstance(config, MirrorgateConfig)


@FUZZ
@given(doc=mutated_docs())
def test_a_mutated_config_is_valid_or_names_its_problems(doc: dict[str, Any]) -> None:
    TRIED["config: mutated document"] += 1
    check_outcome(yaml.safe_dump(doc, allow_unicode=True), inside=True)


@FUZZ
@given(text=raw_texts)
def test_hostile_yaml_is_refused_by_name(text: str) -> None:
    TRIED["config: hostile YAML text"] += 1
    check_outcome(text, inside=False)


@FUZZ
@given(doc=mutated_docs())
def test_check_config_exits_0_or_1_naming_the_problems(
    doc: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, capsys: Any
) -> None:
    TRIED["check-config: mutated document"] += 1
    path = tmp_path_factory.mktemp("cfg") / "fuzzed.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    capsys.readouterr()
    code = main(["check-config", str(path)])
    out, err = capsys.readouterr()
    assert code in (0, 1)
    if code == 0:
        assert "ok (" in out
    else:
        assert "problem(s)" in err and err.count("\n  ") >= 1, err
    assert SECRET not in out + err


def test_check_config_process_exit_codes(tmp_path: Path) -> None:
    """The real command, once each way (the fuzzed calls above run `main` in process)."""
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(GOOD)
    bad.write_text(bomb(10, 10))
    env = {"PATH": "/usr/bin:/bin", **ENV}
    run = [sys.executable, "-m", "proxy.cli", "check-config"]
    ok = subprocess.run(
        [*run, str(good)], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert ok.returncode == 0, ok.stderr
    refused = subprocess.run(
        [*run, str(bad)], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 1
    assert "200000 nodes" in refused.stderr
    assert "Traceback" not in refused.stderr
