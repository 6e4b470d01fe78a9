"""Analyzer plugins installed through an entry point, run by a real gateway off the client path."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa

from analyzers.plugins import ENTRY_POINT_GROUP
from proxy.app.serve import GatewayServer
from proxy.config import ConfigError, parse_config
from tests.conftest import InProcessGateway, wait_until

MODULE = "mirrorgate_test_gateway_plugins"
SOURCE = '''
import threading

from analyzers.views import Finding

GATE = threading.Event()


class Slow:
    """Waits for the test to open the gate: proves the client never waits for analyzers."""

    name = "slowmark"

    def analyze_exchange(self, exchange):
        GATE.wait(30)
        words = float(len(exchange.answer.text.split()))
        return [Finding("slowmark", "words", value=words, severity="critical")]

    def analyze_pair(self, pair):
        same = pair.primary.answer.text == pair.candidate.answer.text
        return [Finding("slowmark", "same", value=float(same))]


class Boom:
    name = "boom"

    def analyze_exchange(self, exchange):
        raise RuntimeError("this plugin is broken")

    def analyze_pair(self, pair):
        raise RuntimeError("this plugin is broken")
'''


def stored_findings(gw: GatewayServer, request_id: str) -> list[SimpleNamespace]:
    """The `findings` rows stored for `request_id`, oldest first, read straight from the table."""
    query = sa.text("SELECT * FROM findings WHERE request_id = :request_id ORDER BY id")
    with gw.gateway.store.engine.connect() as conn:
        rows = conn.execute(query, {"request_id": request_id}).mappings().all()
    return [SimpleNamespace(**row) for row in rows]


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    site = tmp_path / "site"
    (site / MODULE).mkdir(parents=True)
    (site / MODULE / "__init__.py").write_text(SOURCE)
    dist = site / "mirrorgate_test_gateway_plugins-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mg-test-plugins\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent(f"""\
            [{ENTRY_POINT_GROUP}]
            slowmark = {MODULE}:Slow
            boom = {MODULE}:Boom
            """)
    )
    monkeypatch.syspath_prepend(str(site))
    module = importlib.import_module(MODULE)
    yield module
    module.GATE.set()
    sys.modules.pop(MODULE, None)
    importlib.invalidate_caches()


def test_plugins_run_off_the_client_path_and_fail_alone(
    plugins: Any, start_gateway: Callable[..., InProcessGateway]
) -> None:
    gw = start_gateway(extra={"analyzers": ["slowmark", "boom", "length"]})
    response = gw.http.post(
        "/v1/chat/completions",
        json={"model": "echo", "messages": [{"role": "user", "content": "count my words"}]},
        timeout=10,
    )
    # The answer arrived although the slow analyzer is still blocked on its gate.
    assert response.status_code == 200 and "count my words" in response.text
    request_id = response.headers["x-mirrorgate-request-id"]
    assert not plugins.GATE.is_set()
    assert stored_findings(gw, request_id) == []
    plugins.GATE.set()
    findings = wait_until(
        lambda: len(f := stored_findings(gw, request_id)) >= 2 and f,
        what="findings of slowmark and length",
    )
    by_analyzer = {f.analyzer: f for f in findings}
    assert by_analyzer["slowmark"].value == len(
        response.json()["choices"][0]["message"]["content"].split()
    )
    assert "length" in by_analyzer and "boom" not in by_analyzer
    # A plugin's severity is stored with its finding (what a canary's `findings` metric reads).
    assert (by_analyzer["slowmark"].severity, by_analyzer["length"].severity) == ("critical", None)
    errors = gw.gateway.registry.get_sample_value(
        "mirrorgate_analyzer_errors_total", {"analyzer": "boom"}
    )
    assert errors == 1


def test_unknown_analyzers_are_named_at_start(plugins: Any) -> None:
    text = """
models: {prod: {provider: openai, base_url: "http://h/v1", model: m}}
routes: {bot: {primary: prod}}
analyzers: [slowmark, nonesuch]
"""
    with pytest.raises(ConfigError) as info:
        parse_config(text, {})
    (problem,) = info.value.problems
    assert problem.path == "analyzers[1]" and "unknown analyzer 'nonesuch'" in problem.message
    assert "slowmark" in problem.message
