"""The layout of proxy/: every package is entered through its public face.

import-linter (`make check`) keeps the layers and the forbidden imports; this test keeps what it
cannot see: a module of one package imports another package only by the names that package's
`__init__.py` exports in `__all__`, never from its private modules.
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
