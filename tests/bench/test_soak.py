"""bench/soak.py, run for a few seconds so that it does not rot: its real processes start, its load
mix is answered as it expects, and it finds a record for every answered request. (The 10-minute
run and its figures are in bench/README.md.)"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.e2e.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("soak", ROOT / "bench" / "soak.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["soak"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.e2e
def test_a_short_soak_records_every_answered_request(soak: ModuleType, tmp_path: Path) -> None:
    args = soak.parse_args(
        ["--duration", "3", "--rate", "30", "--sample-s", "0.5",
         "--port", str(free_port()), "--mock-port", str(free_port())]
    )  # fmt: skip
    result = soak.run(args, tmp_path)
    assert result["answered"] > 0
    assert result["records_missing"] == 0 and result["records_extra"] == 0
    assert result["records_client_path"] == result["answered"]
    assert result["malformed_served"] == 0
    served_kinds = {key.split("/")[0] for key in result["statuses"] if key.endswith("/200")}
    assert {"chat", "chat_stream", "messages"} <= served_kinds, result["statuses"]
    assert not result["memory_judged"]  # three seconds are no window for a slope
    assert soak.verdict(result) == []


def test_the_slope_is_least_squares_in_mib_per_minute(soak: ModuleType) -> None:
    mib = 2**20
    assert soak.slope_mib_per_min([(0.0, 100 * mib), (60.0, 102 * mib), (120.0, 104 * mib)]) == (
        pytest.approx(2.0)
    )
    assert soak.slope_mib_per_min([(0.0, mib)]) == 0.0
