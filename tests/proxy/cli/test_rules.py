"""`mirrorgate rules [RULE]` against a gateway in process: what it prints, and its exit codes."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from proxy.cli.main import build_parser, cmd_rules
from tests.asgi_driver import sync_transport
from tests.conftest import InProcessGateway
from tests.proxy.api.test_rule_templates import TOKEN, templated_gateway


def run(
    gw: InProcessGateway, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cmd_rules(build_parser().parse_args(["rules", *args]), sync_transport(gw.app_thread))
    out, err = capsys.readouterr()
    return code, out, err


def test_lists_versions_templates_and_slots(
    start_gateway: Callable[..., InProcessGateway],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MIRRORGATE_ADMIN_TOKEN", TOKEN)
    monkeypatch.delenv("MIRRORGATE_URL", raising=False)
    gw = templated_gateway(start_gateway)
    code, out, _ = run(gw, capsys, "support")
    assert code == 0
    assert "rule support: template auto, a new version needs 3 requests from 2 units" in out
    assert out.count("    template: ") == 2 and "1 slots: ⟨customer⟩" in out
    assert "| Customer: ⟨customer⟩ <<email>>, ticket <ticket>." in out
    assert ", value 150" in out and ", value 100" in out
    code, out, _ = run(gw, capsys, "--json")
    assert code == 0 and json.loads(out)["rules"][0]["rule"] == "support"
    code, _, err = run(gw, capsys, "nope")
    assert code == 1 and "no rule 'nope'" in err
    monkeypatch.setenv("MIRRORGATE_ADMIN_TOKEN", "wrong")
    code, _, err = run(gw, capsys)
    assert code == 1 and err.startswith("mirrorgate: ")
