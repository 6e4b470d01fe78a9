"""The sample names a real gateway exposes, to check dashboards and alert rules against typos."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from proxy.app.gateway import Gateway
from tests.conftest import gateway_config

_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum"),
}
METRIC_NAME = re.compile(r"\bmirrorgate_[a-z0-9_]+\b")
"""A mirrorgate metric name inside a PromQL expression (label values never start with it)."""


def wired_registry(tmp_path: Path) -> CollectorRegistry:
    """The registry of a gateway with every optional part wired (rules and analysis, shadows,
    an alert sink): built, never started."""
    extra = {
        "routes": {"echo": {"primary": "echo", "shadows": [{"model": "stale"}]}},
        "rules": {"r": {"routes": ["echo"], "checks": [{"name": "j", "type": "json"}]}},
        "alerts": {"sinks": [{"type": "webhook", "url": "http://127.0.0.1:9/hook"}]},
    }
    config = gateway_config("http://127.0.0.1:9", f"sqlite:///{tmp_path / 'names.db'}", extra)
    registry = CollectorRegistry()
    Gateway(config, registry=registry).store.close()  # nothing else to close
    return registry


def exposed_sample_names(tmp_path: Path) -> set[str]:
    """Every `mirrorgate_*` sample name of a gateway with every optional part wired."""
    names: set[str] = set()
    families = [(f.name, f.type) for f in wired_registry(tmp_path).collect()]
    for name, kind in families:
        for suffix in _SUFFIXES.get(kind, ("",)):
            names.add(name + suffix)
    return {name for name in names if name.startswith("mirrorgate_")}
