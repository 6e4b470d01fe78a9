"""The workers benchmark's own parts: the gateway it starts is a valid configuration with the
worker count asked, and its per-request figures are the arithmetic they claim."""

from __future__ import annotations

from bench.workers import ROUTE, gateway_config, per_request
from proxy.config import parse_config


def test_the_benchmarked_gateway_config_is_valid_with_the_workers_asked() -> None:
    text = gateway_config(9001, 9002, "postgresql+psycopg://postgres@127.0.0.1:5432/test", 2)
    config = parse_config(text, {})
    assert (config.server.port, config.server.workers) == (9002, 2)
    assert config.routes[ROUTE].primary == "fast"
    assert config.models["fast"].base_url == "http://127.0.0.1:9001/v1"


def test_per_request_figures() -> None:
    result = {"requests": 2000, "errors": 0, "elapsed_s": 4.0, "cpu_s": 0.2}
    figures = per_request(result, gateway_cpu_s=0.5, busy_s=6.0)
    assert figures == {
        "requests": 2000,
        "errors": 0,
        "req_per_s": 500,
        "gateway_cpu_us_per_request": 250,
        "loadgen_cpu_us_per_request": 100,
        "machine_busy_cores": 1.5,
    }
