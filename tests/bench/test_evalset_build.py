"""bench/evalset_build.py, small: 20,000 stored exchanges, a set of 200, on SQLite (and on
PostgreSQL where it runs), so the benchmark does not rot. The recorded numbers for 1,000,000:
bench/README.md."""

from __future__ import annotations

import socket

from bench.evalset_build import main
from tests.conftest import require_service


def _postgres_up() -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", 5432)) == 0


def test_the_benchmark_builds_a_stratified_set_from_a_bulk_seeded_store() -> None:
    require_service("postgresql", _postgres_up(), "PostgreSQL on 127.0.0.1:5432")
    results = main(["--rows", "20000", "--size", "200"])
    assert [r["backend"] for r in results] == ["sqlite", "postgresql"]
    for result in results:
        assert result["size"] == 200 and result["held_out"] == 20
        assert result["tasks"] == 30 and result["smallest_task"] >= 5  # min_per_task
        assert result["edge"] > 0  # the rare rule version is there
        assert set(result["references"]) == {"correction", "primary_passed", "review"}
        assert result["peak_mib"] < 64
