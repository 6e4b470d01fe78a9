"""`mirrorgate evalset build|history` and a built set run by `replay --eval-set DIR` against
the mock upstream: the primary side by side, every run archived, history in order, and the
flags' bad values refused."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.cli.main import main
from proxy.mock_upstream.server import MockUpstreamServer
from proxy.store import EvalStore, Store
from tests.conftest import seed_sqlite
from tests.proxy.replay.test_command import PRICE, body, seed


def write_config(tmp_path: Path, upstream: MockUpstreamServer, **evalset: Any) -> Path:
    def model(name: str) -> dict[str, Any]:
        return {"provider": "openai", "base_url": upstream.url + "/v1", "model": name,
                "price": PRICE}  # fmt: skip

    doc = {
        "store": {"url": f"sqlite:///{tmp_path / 'mg.db'}", "bodies": "redacted"},
        "models": {m: model(m) for m in ("rule-follower", "stale")},
        "routes": {
            "support-bot": {
                "primary": "rule-follower",
                "evalset": {"held_out": 0.2, "min_per_task": 0, **evalset},
            }
        },
    }
    path = tmp_path / "mirrorgate.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def config(tmp_path: Path, upstream: MockUpstreamServer, migrated_sqlite: Path) -> Path:
    path = write_config(tmp_path, upstream)
    url = f"sqlite:///{tmp_path / 'mg.db'}"
    seed_sqlite(url, migrated_sqlite)
    store = Store(url)
    marker = uuid.uuid4().hex
    seed(store, [(body(f"{marker}-{i}", 150), '{"max_weight": 150}') for i in range(40)])
    store.close()
    return path


def cli(*argv: str) -> int:
    return main(list(argv))


def test_build_run_rotate_run_and_the_history_in_order(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sets = tmp_path / "support"
    build = ["evalset", "build", "--config", str(config), "--route", "support-bot",
             "--since", "7d", "--size", "20", "--output", str(sets)]  # fmt: skip
    assert cli(*build) == 0
    out = capsys.readouterr().out
    assert "evaluation set support v1: 20 cases (+4 held out)" in out
    manifest = json.loads((sets / "manifest.json").read_text())
    assert manifest["cases"] == 20 and manifest["counts"]["reference"] == {"primary_passed": 20}
    # The set names its route: the primary runs beside the candidate on the same cases.
    replay = ["replay", "--config", str(config), "--candidate", "stale", "--eval-set", str(sets)]
    assert cli(*replay) == 0
    out = capsys.readouterr().out
    assert "rule-follower correct" in out and "stale correct" in out
    assert "stored as evaluation run" in out
    runs = EvalStore(Store(f"sqlite:///{tmp_path / 'mg.db'}")).runs()
    assert [(r.model, r.role, r.set_version) for r in runs] == [
        ("rule-follower", "primary", 1), ("stale", "candidate", 1),
    ]  # fmt: skip
    primary, stale = runs
    assert primary.run_group == stale.run_group
    assert (primary.overall.cases, primary.overall.passed) == (20, 20)
    assert (stale.overall.cases, stale.overall.passed) == (20, 0)  # answers max_weight 100
    assert stale.overall.mean_score == 0.0 and primary.overall.mean_score == 1.0
    assert primary.config_fingerprint != stale.config_fingerprint
    # The held-out part is never run.
    held = ["replay", "--config", str(config), "--candidate", "stale",
            "--eval-set", str(sets / "held_out.jsonl")]  # fmt: skip
    assert cli(*held) == 1
    assert "held-out part" in capsys.readouterr().err
    # Rotate a quarter, run again, and the history shows both versions in order.
    assert cli(*build, "--rotate", "0.25") == 0
    assert "rotated: kept 15, retired 5, added 5" in capsys.readouterr().out
    assert cli(*replay) == 0
    capsys.readouterr()
    assert cli("evalset", "history", "--config", str(config), "--set", "support") == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines[1:5]]
    assert [(r[2] + " " + r[3], r[4]) for r in rows] == [
        ("support v1", "rule-follower"), ("support v1", "stale"),
        ("support v2", "rule-follower"), ("support v2", "stale"),
    ]  # fmt: skip
    assert "100% (20/20)" in lines[1] and "0% (0/20)" in lines[2]


@pytest.mark.parametrize(
    ("argv", "code", "said"),
    [
        (["--size", "0"], 2, "--size must be between 1 and 100000"),
        (["--size", "-5"], 2, "--size must be between"),
        (["--size", "100000000"], 2, "--size must be between"),
        (["--rotate", "0"], 2, "--rotate must be more than 0"),
        (["--rotate", "1.5"], 2, "--rotate must be more than 0"),
        (["--rotate", "nan"], 2, "--rotate must be more than 0"),
        (["--since", "yesterday-ish"], 2, "--since"),
        (["--seed", "-1"], 2, "--seed must be between"),
        (["--route", "nope"], 1, "route 'nope' is not in"),
        (["--route", "x" * 5000], 1, "is not in"),
        (["--name", "../../etc"], 2, "the set's name"),
        (["--rotate", "0.5"], 1, "--rotate needs the set to rotate"),
    ],
)
def test_bad_build_flags_are_refused_and_nothing_is_written(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    argv: list[str], code: int, said: str,
) -> None:  # fmt: skip
    output = tmp_path / "out"
    base = {"--route": "support-bot", "--since": "7d", "--size": "10", "--output": str(output)}
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        base[flag] = value
    args = [a for pair in base.items() for a in pair]
    assert cli("evalset", "build", "--config", str(config), *args) == code
    assert said in capsys.readouterr().err
    assert not (output / "cases.jsonl").exists()


def test_build_refuses_to_overwrite_a_set_or_write_into_a_file(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["evalset", "build", "--config", str(config), "--route", "support-bot",
              "--size", "5"]  # fmt: skip
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert cli(*common, "--output", str(a_file)) == 1
    assert "not a directory" in capsys.readouterr().err
    assert cli(*common, "--output", str(tmp_path / "s")) == 0
    before = (tmp_path / "s" / "cases.jsonl").read_bytes()
    assert cli(*common, "--output", str(tmp_path / "s")) == 1
    assert "give --rotate F to rotate it" in capsys.readouterr().err
    assert (tmp_path / "s" / "cases.jsonl").read_bytes() == before


def test_history_without_runs_and_with_a_bad_limit(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("evalset", "history", "--config", str(config)) == 0
    assert "no evaluation runs stored" in capsys.readouterr().out
    assert cli("evalset", "history", "--config", str(config), "--limit", "0") == 2
    assert "--limit must be between" in capsys.readouterr().err
