"""The plugin API: `analyzers` exports what docs/checks.md documents, and the doc's plugin runs.

docs/checks.md is a plugin author's guide, so it is tested like code: its table of the package's
names matches `analyzers.__all__`, its examples import only those names, and the complete plugin
it shows (pyproject.toml, modules and tests, each a code block headed by its path) is installed in
a throwaway site directory and loaded through its entry points, as the gateway loads analyzers.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, ClassVar

import pytest

import analyzers
from analyzers import (
    ENTRY_POINT_GROUP,
    Answer,
    BaseCheck,
    Check,
    ExchangeView,
    Finding,
    Outcome,
    PairView,
    run_safely,
)
from analyzers.plugins import available_analyzers, load_analyzers

ROOT = Path(__file__).resolve().parents[2]
CHECKS_DOC = ROOT / "docs" / "checks.md"
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
PATH_COMMENT = re.compile(r"# (\S+\.(?:py|toml))")
API_HEADING = "### The plugin API"


def code_blocks(doc: Path, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(doc.read_text()) if lang == language]


def documented_files() -> dict[str, str]:
    """The doc's code blocks that are files of the example plugin, by their first line's path."""
    files = {}
    for body in code_blocks(CHECKS_DOC, "python") + code_blocks(CHECKS_DOC, "toml"):
        match = PATH_COMMENT.fullmatch(body.split("\n", 1)[0])
        if match:
            files[match.group(1)] = body
    return files


def api_table() -> list[str]:
    """The first column of the table under the plugin API heading."""
    text = CHECKS_DOC.read_text()
    assert API_HEADING in text, f"docs/checks.md has no {API_HEADING!r} section"
    section = text.split(API_HEADING, 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE)


def analyzers_imports(source: str) -> list[tuple[str, list[str]]]:
    """(module, names) of every import of `analyzers` or a module inside it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "analyzers":
                found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] == "analyzers"]
    return found


# --- the face and its documentation -------------------------------------------------------------


def test_the_package_exports_a_documented_face() -> None:
    assert len(set(analyzers.__all__)) == len(analyzers.__all__)
    missing = [name for name in analyzers.__all__ if not hasattr(analyzers, name)]
    assert not missing, f"analyzers.__all__ names what it does not define: {missing}"
    assert analyzers.__doc__ and "Analyzer" in analyzers.__doc__
    assert ENTRY_POINT_GROUP == "mirrorgate.analyzers"


def test_every_exported_name_is_in_the_docs_table_and_nothing_else_is() -> None:
    table = api_table()
    undocumented = sorted(set(analyzers.__all__) - set(table))
    assert not undocumented, f"exported but not in docs/checks.md {API_HEADING}: {undocumented}"
    not_exported = sorted(set(table) - set(analyzers.__all__))
    assert not not_exported, f"documented in docs/checks.md but not exported: {not_exported}"


def test_the_docs_examples_import_only_exported_names() -> None:
    imported: set[str] = set()
    for source in code_blocks(CHECKS_DOC, "python"):
        for module, names in analyzers_imports(source):
            assert module == "analyzers", f"docs/checks.md imports from {module}, not the face"
            imported.update(names)
    assert imported, "docs/checks.md shows no `from analyzers import …`"
    hidden = sorted(imported - set(analyzers.__all__))
    assert not hidden, f"docs/checks.md imports names analyzers does not export: {hidden}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: doc.name)
def test_no_doc_shows_code_importing_from_inside_analyzers(doc: Path) -> None:
    inside = [
        module
        for source in code_blocks(doc, "python")
        for module, _ in analyzers_imports(source)
        if module != "analyzers"
    ]
    assert not inside, f"{doc.name} shows code importing {inside}; use `from analyzers import …`"


# --- the documented plugin, installed -----------------------------------------------------------


@dataclass(frozen=True)
class InstalledPlugin:
    """The doc's plugin, installed: its analyzers' entry-point names and its top-level package."""

    analyzers: list[str]
    package: str
    tests: Path


@pytest.fixture
def documented_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InstalledPlugin]:
    """Write the doc's plugin files, and a dist-info built from its pyproject.toml, on sys.path."""
    files = documented_files()
    assert "pyproject.toml" in files, "docs/checks.md shows no pyproject.toml of a plugin"
    for relative, body in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(body)
    project = tomllib.loads(files["pyproject.toml"])["project"]
    plugins: dict[str, str] = project["entry-points"][ENTRY_POINT_GROUP]
    site = tmp_path / "src"  # setuptools' src layout, as the doc's tree draws it
    packages = [p.name for p in site.iterdir() if (p / "__init__.py").is_file()]
    assert len(packages) == 1, packages
    dist_info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    entries = "".join(f"{name} = {target}\n" for name, target in plugins.items())
    (dist_info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entries}")
    monkeypatch.syspath_prepend(str(site))  # also invalidates the import caches
    yield InstalledPlugin(list(plugins), packages[0], tmp_path / "tests")
    for module in [m for m in sys.modules if m.split(".")[0] == packages[0]]:
        del sys.modules[module]
    importlib.invalidate_caches()


def view(text: str, arm: str = "primary", status: str = "ok") -> ExchangeView:
    return ExchangeView(route="bot", target="prod", arm=arm, answer=Answer(text), status=status)


def test_the_documented_plugin_runs_through_its_entry_points(
    documented_plugin: InstalledPlugin,
) -> None:
    assert documented_plugin.analyzers == ["tone", "politeness"]
    available = available_analyzers(entry_points(group=ENTRY_POINT_GROUP))
    assert documented_plugin.package not in sys.modules  # nothing is imported until selected
    length, tone, politeness = load_analyzers(["length", "tone", "politeness"], available)

    shout = view("Please hold on!!")
    assert run_safely(tone, "exchange", shout) == ((Finding("tone", "exclamations", 2.0),), None)
    assert run_safely(politeness, "exchange", shout) == (
        (Finding("politeness", "polite", 1.0, "pass", "says please or thank you"),),
        None,
    )
    assert run_safely(politeness, "exchange", view("No.")) == (
        (Finding("politeness", "polite", 0.0, "fail", "says neither please nor thank you"),),
        None,
    )
    assert run_safely(politeness, "exchange", view("   ")) == (
        (Finding("politeness", "polite", 0.0, "fail", "empty answer (only whitespace)"),),
        None,
    )
    failed = view("", status="timeout")
    assert run_safely(tone, "exchange", failed) == ((), None)
    assert run_safely(politeness, "exchange", failed) == ((), None)

    louder = PairView(view("Fine."), view("Fine!!!", arm="shadow"))
    assert run_safely(tone, "pair", louder) == (
        (Finding("tone", "louder_by", 3.0, "louder"),),
        None,
    )
    assert run_safely(politeness, "pair", louder) == ((), None)
    assert run_safely(length, "exchange", shout)[1] is None  # the built-ins still load beside it


class CrashingCheck(BaseCheck):
    name = "crashing"
    type: ClassVar[str] = "crashing"

    def evaluate(self, answer: Answer) -> tuple[Outcome, str]:
        raise RuntimeError("check bug")


def test_the_documented_check_is_a_check_and_a_crash_in_one_is_an_error(
    documented_plugin: InstalledPlugin,
) -> None:
    [politeness] = load_analyzers(
        ["politeness"], available_analyzers(entry_points(group=ENTRY_POINT_GROUP))
    )
    plugin: Any = politeness  # the doc's class; `check` is its own attribute, not the protocol's
    documented_check = plugin.check
    assert isinstance(documented_check, Check)
    assert (documented_check.name, documented_check.type) == ("polite", "polite")

    crashing = type(plugin)(check=CrashingCheck())
    findings, failure = run_safely(crashing, "exchange", view("Please."))
    assert failure is None  # the check's crash is its verdict, not the analyzer's failure
    assert findings == (
        Finding("politeness", "crashing", None, "error", "check crashed: RuntimeError: check bug"),
    )


def test_the_documented_plugin_tests_pass(documented_plugin: InstalledPlugin) -> None:
    [path] = sorted(documented_plugin.tests.glob("test_*.py"))
    spec = importlib.util.spec_from_file_location(f"{documented_plugin.package}_doc_tests", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tests = [getattr(module, name) for name in dir(module) if name.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        test()  # each asserts on what run_safely returned
