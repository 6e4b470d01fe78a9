"""The layout of proxy/: every package is entered through its public face, and tests/ mirrors
the source tree.

import-linter (`make check`) keeps the layers and the forbidden imports; this test keeps what it
cannot see: a module of one package imports another package only by the names that package's
`__init__.py` exports in `__all__`, never from its private modules. And every module of proxy/,
alerts/ and analyzers/ has a test module named after it — `tests/<its folder>/test_<module>.py`
or `test_<module>_<anything>.py` — unless `COVERED_ELSEWHERE` says which test covers it.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROXY = ROOT / "proxy"
PACKAGES = sorted(
    p.name for p in PROXY.iterdir() if (p / "__init__.py").is_file() and p.name != "mock_upstream"
)


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        (node.lineno, node.module, [a.name for a in node.names])
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
    ] + [
        (node.lineno, alias.name, [])
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ]


def test_every_package_has_a_public_face() -> None:
    assert {"core", "config", "upstream", "store", "observability", "gateway", "mirror"} <= set(
        PACKAGES
    )
    for name in PACKAGES:
        module = importlib.import_module(f"proxy.{name}")
        exported = getattr(module, "__all__", None)
        assert exported, f"proxy.{name} declares no __all__"
        missing = [n for n in exported if not hasattr(module, n)]
        assert not missing, f"proxy.{name}.__all__ names what it does not define: {missing}"
        assert module.__doc__ and len(module.__doc__.split()) > 10, f"proxy.{name} says nothing"


@pytest.mark.parametrize("package", PACKAGES)
def test_other_packages_are_imported_through_their_face(package: str) -> None:
    wrong = []
    for path in sorted((PROXY / package).rglob("*.py")):
        for line, module, names in _imports(path):
            parts = module.split(".")
            if parts[0] != "proxy" or len(parts) < 2 or parts[1] == package:
                continue
            if parts[1] == "mock_upstream":
                continue  # a package of its own; the layering contract says who may use it
            face = importlib.import_module(f"proxy.{parts[1]}")
            if len(parts) > 2:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
            else:
                hidden = [n for n in names if n not in face.__all__]
                if hidden:
                    wrong.append(f"{path.relative_to(ROOT)}:{line} takes {hidden} from {module}")
    assert not wrong, "\n".join(wrong)


SOURCES = ("proxy", "alerts", "analyzers")
TESTS = ROOT / "tests"

COVERED_ELSEWHERE: dict[str, str] = {
    # what the console's pages are handed: every page's tests build it through the app's wiring
    "proxy/console/parts.py": "tests/proxy/console/test_router.py",
    # the whole demo, run as `mirrorgate demo`
    "proxy/cli/demo.py": "tests/e2e/test_demo.py",
    "proxy/cli/demo_guard.py": "tests/e2e/test_demo_guard.py",
    "proxy/cli/demo_experiment.py": "tests/e2e/test_demo_experiment.py",
    # every line `mirrorgate rollout` prints, against a real gateway
    "proxy/cli/rollout_text.py": "tests/proxy/cli/test_rollout.py",
    # calls off the client path: a shadow past its timeout_s, a failing candidate, each record
    # reaching the sinks (and the probes' own test does the same for probes)
    "proxy/mirror/calls.py": "tests/proxy/mirror/test_shadow.py",
    # the fake model's routes, connections, prompts and formats, through the official SDKs
    "proxy/mock_upstream/app.py": "tests/proxy/mock_upstream/test_recording.py",
    "proxy/mock_upstream/connection.py": "tests/proxy/mock_upstream/test_server.py",
    "proxy/mock_upstream/conversation.py": "tests/proxy/mock_upstream/test_answers.py",
    "proxy/mock_upstream/responses_format.py": "tests/proxy/mock_upstream/test_openai_format.py",
    "proxy/mock_upstream/wire.py": "tests/proxy/mock_upstream/test_openai_format.py",
    # `mirrorgate replay` end to end: sources, jobs, resuming, writing pairs, the summary
    "proxy/replay/job.py": "tests/proxy/replay/test_command.py",
    "proxy/replay/resume.py": "tests/proxy/replay/test_command.py",
    "proxy/replay/runner.py": "tests/proxy/replay/test_command.py",
    "proxy/replay/source.py": "tests/proxy/replay/test_command.py",
    "proxy/replay/summary.py": "tests/proxy/replay/test_command.py",
    "proxy/replay/writer.py": "tests/proxy/replay/test_command.py",
    # `mirrorgate report` end to end: the model it builds, its Markdown and HTML, the charts
    "proxy/report/agreement.py": "tests/proxy/report/test_command.py",
    "proxy/report/charts.py": "tests/proxy/report/test_command.py",
    "proxy/report/html.py": "tests/proxy/report/test_command.py",
    "proxy/report/html_quality.py": "tests/proxy/report/test_command.py",
    "proxy/report/markdown.py": "tests/proxy/report/test_command.py",
    "proxy/report/model.py": "tests/proxy/report/test_command.py",
    "proxy/report/style.py": "tests/proxy/report/test_command.py",
    # check verdicts and feedback, stored by the gateway and read back by the report
    "proxy/store/checks.py": "tests/proxy/report/test_checks.py",
    "proxy/store/feedback.py": "tests/proxy/api/test_feedback.py",
    # the connection pool, with a fake clock, at the end of the HTTP/1.1 client's tests
    "proxy/upstream/pool.py": "tests/proxy/upstream/test_http11.py",
    # every check type passing, failing and refusing bad config, through compile_check
    "analyzers/checkbase.py": "tests/analyzers/test_checks.py",
    "analyzers/json_checks.py": "tests/analyzers/test_checks.py",
    "analyzers/schema.py": "tests/analyzers/test_checks.py",
    "analyzers/text_checks.py": "tests/analyzers/test_checks.py",
    # the canary judge's verdicts, from its statistics
    "analyzers/verdicts.py": "tests/analyzers/test_judge_stats.py",
    # the plugin protocol: views, answers, the built-in analyzers and plugin failures
    "analyzers/answer.py": "tests/analyzers/test_plugins.py",
    "analyzers/builtin_analyzers.py": "tests/analyzers/test_plugins.py",
    "analyzers/errors.py": "tests/analyzers/test_plugins.py",
    "analyzers/views.py": "tests/analyzers/test_plugins.py",
    # which HTTP outcome becomes which sink error
    "alerts/errors.py": "tests/alerts/test_sink.py",
}
"""Modules without a test module of their own, each with the test that covers it. Keep it short:
a module that gets its own test module comes off the list (the test below says so)."""


def _source_modules() -> list[str]:
    return sorted(
        path.relative_to(ROOT).as_posix()
        for package in SOURCES
        for path in (ROOT / package).rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    )


def _own_tests(module: str) -> list[Path]:
    path = Path(module)
    folder = TESTS / path.parent
    return sorted([*folder.glob(f"test_{path.stem}.py"), *folder.glob(f"test_{path.stem}_*.py")])


def test_every_source_module_has_a_test_module() -> None:
    missing = [m for m in _source_modules() if not _own_tests(m) and m not in COVERED_ELSEWHERE]
    assert not missing, (
        "no test module: add tests/<folder>/test_<module>.py, or (only if another test really "
        "covers it) an entry in COVERED_ELSEWHERE:\n" + "\n".join(missing)
    )


def test_the_covered_elsewhere_list_is_true() -> None:
    modules = set(_source_modules())
    wrong = []
    for module, covering in COVERED_ELSEWHERE.items():
        if module not in modules:
            wrong.append(f"{module} is not a source module (any more)")
        elif _own_tests(module):
            wrong.append(f"{module} has {_own_tests(module)[0].relative_to(ROOT)}: take it off")
        if not (ROOT / covering).is_file():
            wrong.append(f"{module}: {covering} does not exist")
    assert not wrong, "\n".join(wrong)


def test_every_test_folder_is_a_package() -> None:
    folders = {p.parent for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts}
    loose = [
        f.relative_to(ROOT).as_posix() for f in sorted(folders) if not (f / "__init__.py").is_file()
    ]
    assert not loose, loose
