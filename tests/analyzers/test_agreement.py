"""Agreement modes, and the disagreement attributable to a candidate beyond the noise floor.

Interval reference values are Newcombe's (1998, "Interval estimation for the difference between
independent proportions: comparison of eleven methods", Table II, method 10)."""

from __future__ import annotations

import pytest

from analyzers.agreement import (
    AgreementSpec,
    DisagreementEstimate,
    agree,
    attributable_disagreement,
)
from analyzers.errors import SpecError


@pytest.mark.parametrize(
    ("spec", "a", "b", "expected"),
    [
        (AgreementSpec("exact"), "150 kg", "150 kg", True),
        (AgreementSpec("exact"), "150 kg", "150 kg.", False),
        (AgreementSpec("normalized"), "Max  150 KG.", "max 150 kg", True),
        (AgreementSpec("normalized"), "max 150 kg", "max 100 kg", False),
        (AgreementSpec("json_fields"), '{"a": 1, "b": [1]}', '{"b": [1.0], "a": 1}', True),
        (AgreementSpec("json_fields"), '{"a": 1}', '{"a": true}', False),
        (AgreementSpec("json_fields", ("max_weight",)),
         '{"max_weight": 150, "note": "x"}', '{"max_weight": 150.0, "note": "y"}', True),
        (AgreementSpec("json_fields", ("$.order.kg",)),
         '{"order": {"kg": 150}}', '{"order": {"kg": 100}}', False),
        (AgreementSpec("json_fields", ("w",)), '{"w": 1}', '{"x": 1}', False),
        (AgreementSpec("json_fields", ("w",)), '{"x": 1}', '{"x": 2}', None),
        (AgreementSpec("json_fields", ("w",)), '{"w": 1}', "w is 1", None),
        (AgreementSpec("json_fields", ("$.w",), tolerance=0.5), '{"w": 1}', '{"w": 1.4}', True),
        (AgreementSpec("numeric"), "It is 150kg.", "Max: 150.0 kg", True),
        (AgreementSpec("numeric"), "150 kg", "100 kg", False),
        (AgreementSpec("numeric"), "150 then 2", "150", False),
        (AgreementSpec("numeric", tolerance=0.01), "pi is 3.14159", "pi ≈ 3.14", True),
        (AgreementSpec("numeric"), "rules v2", "rules v3", None),
        (AgreementSpec("numeric"), "no numbers", "none either", None),
        (AgreementSpec("numeric", ("$.w",), 1.0), '{"w": 10}', '{"w": 11}', True),
        (AgreementSpec("numeric", ("$.w",)), '{"w": "10"}', '{"w": 10}', None),
    ],
)  # fmt: skip
def test_agree(spec: AgreementSpec, a: str, b: str, expected: bool | None) -> None:
    assert agree(a, b, spec) is expected
    assert agree(b, a, spec) is expected  # symmetric


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"mode": "fuzzy"}, "mode"),
        ({"mode": "numeric", "tolerance": -1}, "tolerance"),
        ({"mode": "numeric", "tolerance": float("nan")}, "tolerance"),
        ({"mode": "exact", "fields": ("a",)}, "fields"),
        ({"mode": "json_fields", "fields": "a"}, "fields"),
        ({"mode": "json_fields", "fields": ("a", "$..b")}, "fields[1]"),
        ({"mode": "json_fields", "fields": ("",)}, "fields[0]"),
    ],
)
def test_agreement_spec_names_the_bad_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        AgreementSpec(**kwargs)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_agreement_spec_is_frozen_and_hashable() -> None:
    spec = AgreementSpec("json_fields", ["a"])  # type: ignore[arg-type]
    assert spec.fields == ("a",)
    assert hash(spec) == hash(AgreementSpec("json_fields", ("a",)))


@pytest.mark.parametrize(
    ("candidate", "noise", "estimate", "low", "high"),
    [
        ((56, 70), (48, 80), 0.2000, 0.0524, 0.3339),
        ((9, 10), (3, 10), 0.6000, 0.1705, 0.8090),
        ((6, 7), (2, 7), 0.5714, 0.0582, 0.8062),
        ((5, 56), (0, 29), 0.0893, -0.0381, 0.1926),
        ((0, 10), (0, 20), 0.0000, -0.1611, 0.2775),
        ((10, 10), (0, 10), 1.0000, 0.6075, 1.0000),
    ],
)
def test_attributable_disagreement_matches_newcombe(
    candidate: tuple[int, int], noise: tuple[int, int], estimate: float, low: float, high: float
) -> None:
    result = attributable_disagreement(*candidate, *noise)
    assert result.estimate == pytest.approx(estimate, abs=5e-5)
    assert result.low == pytest.approx(low, abs=5e-5)
    assert result.high == pytest.approx(high, abs=5e-5)


def test_attributable_disagreement_unpacks_and_knows_when_it_knows_nothing() -> None:
    estimate, low, high = attributable_disagreement(10, 100, 10, 100)
    assert estimate == 0.0
    assert low < 0 < high  # the candidate differs no more than the primary does from itself
    assert attributable_disagreement(3, 10, 0, 0) == DisagreementEstimate(None, -1.0, 1.0)
    with pytest.raises(ValueError):
        attributable_disagreement(11, 10, 0, 10)
    with pytest.raises(ValueError):
        attributable_disagreement(-1, 10, 0, 10)
