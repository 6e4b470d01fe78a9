"""bench/judge_look.py's step, checked so that its figures time what they say: a 10 % canary of
sticky users whose records carry their unit (or none), read back with breakdowns by unit."""

from __future__ import annotations

from pathlib import Path

from bench import judge_look


def test_the_step_is_a_canary_of_users_and_the_look_reads_their_units(tmp_path: Path) -> None:
    records, checks = judge_look._records(200, 3000, seed=34)  # as `measure` makes them
    canary = [r for r in records if r.arm.value == "canary"]
    assert 0.03 < len(canary) / len(records) < 0.25  # a tenth of the users, lognormal activity
    assert len({r.sticky_unit for r in records}) <= 200
    assert [c.sticky_unit for c in checks] == [r.sticky_unit for r in records]
    with_units = judge_look.measure(f"sqlite:///{tmp_path / 'a.db'}", 200, 3000, looks=1)
    assert with_units["canary_samples"] == len(canary)  # under the cap: every sample
    assert 0 < with_units["unit_groups"] <= 200
    plain = judge_look.measure(f"sqlite:///{tmp_path / 'b.db'}", 200, 3000, looks=1, units=False)
    assert plain["unit_groups"] == 0
