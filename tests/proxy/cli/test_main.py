"""The command line: exit codes and messages."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
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
    assert capsys.readouterr().err == f"mirrorgate: {tmp_path / 'missing.yaml'}: no such file\n"
    assert main(["serve", "--config", str(tmp_path)]) == 1  # a folder: one line too
    assert capsys.readouterr().err == f"mirrorgate: {tmp_path}: cannot read (Is a directory)\n"


def test_usage_errors_exit_2() -> None:
    with pytest.raises(SystemExit) as info:
        main(["no-such-command"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["serve", "--port", "eighty"])
    assert info.value.code == 2


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"mirrorgate {importlib.metadata.version('mirrorgate')}\n"


def test_a_bad_log_level_is_a_usage_error_naming_the_choices(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--log-level", "bogus", "check-config", "x.yaml"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "argument --log-level: invalid choice: 'bogus'" in err and "Traceback" not in err
    monkeypatch.setenv("MIRRORGATE_LOG_LEVEL", "loud")
    with pytest.raises(SystemExit) as done:
        main(["check-config", "x.yaml"])
    assert done.value.code == 2
    assert "$MIRRORGATE_LOG_LEVEL must be one of debug, info" in capsys.readouterr().err


def test_help_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["mock-upstream", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: 9999)" in out and "(default: 127.0.0.1)" in out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--debug" in capsys.readouterr().out


def test_an_unexpected_failure_is_one_line_and_debug_shows_the_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(_args: object) -> int:
        raise RuntimeError("the disk is on fire\nsecond line")

    monkeypatch.setattr(sys.modules["proxy.cli.main"], "cmd_check_config", broken)
    assert main(["check-config", "x.yaml"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "mirrorgate: check-config failed: RuntimeError: the disk is on fire "
        "(--debug shows the traceback)\n"
    )
    assert main(["--debug", "check-config", "x.yaml"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "second line" in err


@pytest.mark.e2e  # the command as a real process, twice: its exit into a closed pipe
def test_output_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`mirrorgate check-config | head -0`: no traceback, no 'Exception ignored' at exit."""
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    for args in (["check-config", str(path)], ["--help"]):
        read, write = os.pipe()
        os.close(read)  # the reader is gone before the first byte
        try:
            done = subprocess.run(
                [sys.executable, "-m", "proxy.cli", *args],
                check=False,
                stdout=write,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
            )
        finally:
            os.close(write)
        assert done.stderr == "", args
        assert done.returncode in (0, 141), args


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


def test_demo_guard_print_config_prints_the_guard_scenes_configuration_as_a_valid_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["demo", "--scene", "guard", "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# The configuration `mirrorgate demo --scene guard` runs")
    config_file = tmp_path / "guard.yaml"
    config_file.write_text(printed)
    monkeypatch.setenv("MIRRORGATE_DEMO_KEY", "anything")
    assert main(["check-config", str(config_file)]) == 0
    checked = capsys.readouterr().out
    assert "ok (4 models, 2 routes, 2 rules)" in checked
    assert "rule_adaptation" in printed and "on_rule_regression: switch" in printed
    assert "type: phantom_rule" in printed and "probes:" in printed


def test_demo_scene_is_one_of_the_built_scenes_and_restore_goes_with_guard(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--scene", "nonesuch"])
    assert exited.value.code == 2
    assert "invalid choice: 'nonesuch'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--scene", "experiment", "--restore"])
    assert exited.value.code == 2
    assert "--restore goes with --scene guard" in capsys.readouterr().err
    assert main(["demo", "--scene", "experiment", "--print-config"]) == 0
    assert "system_prompt_append" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--restore"])
    assert exited.value.code == 2
    assert "--restore goes with --scene guard" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "{rollback,guard,experiment}" in shown
