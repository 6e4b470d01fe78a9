"""Every configuration in examples/ passes `check-config` and serves: `mirrorgate serve` on a free
port, against the fake model, answers /readyz 200 and proxies one request. Only the fake model's
address, the listen address and the store are substituted (the PostgreSQL example gets a schema
of its own on the machine's server)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy.cli.main import main
from proxy.mock_upstream import MockUpstreamServer
from tests.e2e.conftest import Process, free_port

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIGS = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
FAKE_MODEL = "http://127.0.0.1:9999"
ENV = {
    "OPENAI_API_KEY": "sk-example",
    "MIRRORGATE_ADMIN_TOKEN": "example-admin-token-0123456789abcdef",
}


def test_every_example_is_listed_and_described() -> None:
    assert CONFIGS == [
        "alertmanager.yaml", "canary-rules.yaml", "minimal.yaml", "postgres-replicas.yaml",
        "probes.yaml", "shadow.yaml",
    ]  # fmt: skip
    readme = (EXAMPLES / "README.md").read_text()
    for name in [*CONFIGS, "alertmanager-receiver.yml", "evals/shipping.jsonl"]:
        assert f"`{name}`" in readme, name
        assert (EXAMPLES / name).exists(), name


@pytest.mark.parametrize("name", CONFIGS)
def test_the_example_passes_check_config(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key, value in {**ENV, "MIRRORGATE_STORE_URL": "postgresql+psycopg://u@h:5432/d"}.items():
        monkeypatch.setenv(key, value)
    assert main(["check-config", str(EXAMPLES / name)]) == 0
    out = capsys.readouterr().out
    assert "ok (" in out and "sends no key" not in out, out
    text = (EXAMPLES / name).read_text()
    assert text.startswith("#"), "an example opens with a comment saying what it is for"
    assert FAKE_MODEL in text


@pytest.fixture(scope="module")
def fake_model() -> Iterator[MockUpstreamServer]:
    with MockUpstreamServer() as upstream:
        yield upstream


@pytest.mark.parametrize("name", CONFIGS)
def test_the_example_serves_one_request(
    name: str, fake_model: MockUpstreamServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env = dict(ENV)
    if name == "postgres-replicas.yaml":
        url, _ = request.getfixturevalue("pg_schema")
        env["MIRRORGATE_STORE_URL"] = url
    text = (EXAMPLES / name).read_text().replace(FAKE_MODEL, fake_model.url)
    text = text.replace("sqlite:///mirrorgate.db", f"sqlite:///{tmp_path}/mirrorgate.db")
    config = tmp_path / name
    config.write_text(text)
    port = free_port()
    args = ["serve", "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    gateway = Process(args, tmp_path / "serve.log", env)
    try:
        url = f"http://127.0.0.1:{port}"
        gateway.wait_ready(url + "/readyz", f"mirrorgate serve {name}")
        answer = httpx.post(
            url + "/v1/chat/completions",
            json={"model": "support-bot", "messages": [{"role": "user", "content": "hello"}]},
            headers={"x-user-id": "u1"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-mirrorgate-arm"] == "primary"
        assert answer.json()["choices"][0]["message"]["content"]
    finally:
        assert gateway.terminate() == 0, gateway.output()


def test_the_eval_set_example_has_the_documented_fields() -> None:
    lines = (EXAMPLES / "evals/shipping.jsonl").read_text().splitlines()
    items = [json.loads(line) for line in lines]
    assert len(items) >= 3
    assert len({item["id"] for item in items}) == len(items)
    for item in items:
        assert {"id", "input", "expect"} <= set(item), item
