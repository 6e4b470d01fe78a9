"""The PromQL of mirrorgate's Grafana dashboards, and Grafana's variable substitution, for tests
that check the queries against promtool (syntax) and a real Prometheus (data)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARDS = Path(__file__).resolve().parents[1] / "grafana" / "dashboards"


@dataclass(frozen=True)
class PanelQuery:
    """One PromQL expression shown on a dashboard: a panel target or an annotation."""

    dashboard: str
    """The dashboard's uid."""
    panel: str
    """The panel's title, or `annotation: <name>`."""
    ref: str
    """The target's refId (`A`, `B`…); empty for annotations."""
    expr: str
    instant: bool

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.dashboard, self.panel, self.ref)


def load_dashboards() -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(DASHBOARDS.glob("*.json"))]


def panel_queries(dashboards: Sequence[dict[str, Any]] | None = None) -> list[PanelQuery]:
    """Every PromQL expression of every panel and annotation of every dashboard."""
    out: list[PanelQuery] = []
    for board in dashboards if dashboards is not None else load_dashboards():
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                out.append(
                    PanelQuery(
                        board["uid"], panel["title"], target["refId"], target["expr"],
                        bool(target.get("instant")),
                    )
                )  # fmt: skip
        for annotation in board["annotations"]["list"]:
            if "expr" in annotation:
                name = f"annotation: {annotation['name']}"
                out.append(PanelQuery(board["uid"], name, "", annotation["expr"], False))
    return out


_REGEX_SPECIAL = re.compile(r"([\\^$*+?.()|\[\]{}])")


def regex_value(values: Sequence[str]) -> str:
    """A variable's value as Grafana writes it into a Prometheus `=~` matcher: regex-escaped
    (inside a PromQL string, so the backslash is doubled), several values as `(a|b)`."""
    escaped = [_REGEX_SPECIAL.sub(r"\\\\\1", value) for value in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def substitute(expr: str, variables: Mapping[str, str]) -> str:
    """Replace `$name` and `${name}` (longest names first, so `$__range` is not `$__rate…`)."""
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", variables[name]).replace("$" + name, variables[name])
    leftover = re.search(r"\$\{?\w+", expr)
    if leftover:
        raise ValueError(f"unsubstituted variable {leftover.group()} in {expr!r}")
    return expr
