"""What the fuzzers share: one hypothesis profile for CI, the example count, and a tally of the
inputs tried.

The profile is derandomized (the same examples every run, no example database), has no per-example
deadline (a shared CI machine is slow at random moments) and `MIRRORGATE_FUZZ_EXAMPLES` examples per
test (default `DEFAULT_EXAMPLES`); set it higher to search longer locally:

    MIRRORGATE_FUZZ_EXAMPLES=2000 .venv/bin/python -m pytest -q -m fuzz tests/hostile

`MIRRORGATE_FUZZ_REPORT=FILE` writes how many inputs each endpoint or loader test was given (JSON)
at the end of the run, for docs/security.md's figures.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, settings

DEFAULT_EXAMPLES = 40

EXAMPLES = int(os.environ.get("MIRRORGATE_FUZZ_EXAMPLES", DEFAULT_EXAMPLES))

FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
        HealthCheck.filter_too_much,
    ],
    print_blob=False,
)

TRIED: Counter[str] = Counter()
"""Inputs tried per endpoint (or loader property), over the whole run."""
ANSWERS: Counter[str] = Counter()
"""What they got: "<endpoint> <status>" (or "<property> <outcome>") → count."""


def flush_report() -> None:
    """Write the tally where `MIRRORGATE_FUZZ_REPORT` says (a module's teardown calls it)."""
    report = os.environ.get("MIRRORGATE_FUZZ_REPORT")
    if report:
        _flush(Path(report))


def _flush(path: Path) -> None:
    """Merge this process's tally into the report (several pytest workers may write it)."""
    old: dict[str, dict[str, int]] = {}
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except ValueError:
            old = {}
    for name, tally in (("inputs", TRIED), ("answers", ANSWERS)):
        merged = old.setdefault(name, {})
        merged.update(tally)
        old[name] = dict(sorted(merged.items()))
    path.write_text(json.dumps(old, indent=2) + "\n")
