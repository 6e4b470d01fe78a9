"""The command line: exit codes and messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli.main import main

GOOD = """
models: {prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: m}}
routes: {bot: {primary: prod}}
"""


def test_check_config_accepts_a_good_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "ok (1 models, 1 routes, 0 rules)" in out
    # Loopback with no feedback token: allowed, and said.
    assert "warning: server.feedback_tokens_env: POST /v1/feedback takes corrections" in out


def test_check_config_warns_of_judged_metrics_it_can_never_evaluate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "warn.yaml"
    path.write_text(
        GOOD.replace("model: m}}", "model: m}, cand: {provider: openai, "
                     "base_url: 'http://127.0.0.1:9/v1', model: c}}")
        .replace("{primary: prod}", "{primary: prod, shadows: [{model: cand}], "
                 "canary: {model: cand, analysis: {metrics: [error_rate, disagreement]}}}")
    )  # fmt: skip
    assert main(["check-config", str(path)]) == 0  # a warning, not an error
    out = capsys.readouterr().out
    assert "ok (2 models, 1 routes, 0 rules)" in out
    assert "warning: routes.bot.canary.analysis.metrics: disagreement is left out" in out


def test_check_config_names_every_problem_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace("primary: prod", "primary: nope, colour: red"))
    assert main(["check-config", str(path)]) == 1
    err = capsys.readouterr().err
    assert "2 problem(s)" in err
    assert "routes.bot.primary: model 'nope' is not defined under models" in err
    assert "routes.bot.colour: unknown key" in err


def test_config_defaults_to_the_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(GOOD)
    monkeypatch.setenv("MIRRORGATE_CONFIG", str(path))
    assert main(["check-config"]) == 0
    assert str(path) in capsys.readouterr().out


def test_serve_refuses_a_bad_config_before_listening(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--config", str(tmp_path / "missing.yaml")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_usage_errors_exit_2() -> None:
    with pytest.raises(SystemExit) as info:
        main(["no-such-command"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["serve", "--port", "eighty"])
    assert info.value.code == 2


def test_demo_print_config_prints_the_demos_configuration_as_a_valid_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["demo", "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# The configuration `mirrorgate demo` runs")
    config_file = tmp_path / "demo.yaml"
    config_file.write_text(printed)
    monkeypatch.setenv("MIRRORGATE_DEMO_KEY", "anything")
    assert main(["check-config", str(config_file)]) == 0
    checked = capsys.readouterr().out
    assert "ok (3 models, 1 routes, 1 rules)" in checked
    assert "sends no key" not in checked  # every model has its own
    assert "http://127.0.0.1:9999/v1" in printed and "canary:" in printed
