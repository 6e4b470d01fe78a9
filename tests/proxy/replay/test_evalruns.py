"""A set's identity (manifest, or a plain file), the config fingerprint, scores per stratum.
Runs scored end to end: tests/proxy/replay/test_evalset_command.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.config import MirrorgateConfig, parse_config
from proxy.replay.evalruns import SetProblem, config_fingerprint, identify


def test_a_built_set_is_named_by_its_manifest_and_a_file_by_its_stem(tmp_path: Path) -> None:
    built = tmp_path / "support"
    built.mkdir()
    (built / "cases.jsonl").write_text("")
    (built / "held_out.jsonl").write_text("")
    (built / "manifest.json").write_text(
        json.dumps({"name": "support", "version": 4, "route": "bot", "content_hash": "sha256:1"})
    )
    for path in (built, built / "cases.jsonl"):
        identity = identify(path)
        assert (identity.name, identity.version, identity.route) == ("support", 4, "bot")
        assert identity.cases_path == built / "cases.jsonl"
    with pytest.raises(SetProblem, match="held-out part"):
        identify(built / "held_out.jsonl")
    plain = tmp_path / "shipping.jsonl"
    plain.write_text('{"id": 1}\n')
    identity = identify(plain)
    assert (identity.name, identity.version, identity.route) == ("shipping", 0, None)
    assert identity.content_hash.startswith("sha256:")
    (built / "manifest.json").write_text("{not json")
    with pytest.raises(SetProblem, match="cannot read"):
        identify(built)


def test_the_fingerprint_follows_the_model_and_the_rules_never_the_key() -> None:
    def config(model: str, prompt: str, key_env: str = "K") -> MirrorgateConfig:
        return parse_config(
            json.dumps(
                {
                    "models": {
                        "m": {
                            "provider": "openai",
                            "base_url": "http://127.0.0.1:1/v1",
                            "model": model,
                            "api_key_env": key_env,
                        }
                    },
                    "routes": {"bot": {"primary": "m"}},
                    "rules": {
                        "r": {
                            "routes": ["bot"],
                            "checks": [{"name": "c", "type": "contains", "value": prompt}],
                        }
                    },
                }
            ),
            env={"K": "secret-1", "L": "secret-2"},
        )

    base = config_fingerprint(config("a", "x"), "m", "bot")
    assert base == config_fingerprint(config("a", "x"), "m", "bot")
    assert base != config_fingerprint(config("b", "x"), "m", "bot")
    assert base != config_fingerprint(config("a", "y"), "m", "bot")
    assert base != config_fingerprint(config("a", "x"), "m", None)
