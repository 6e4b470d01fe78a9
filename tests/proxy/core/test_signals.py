"""One definition per signal: what a correction is, and a pair's agreement under the route's
mode, fields and tolerance (and how pairs stored without a verdict are read)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from analyzers.agreement import AgreementSpec
from analyzers.comparison import compare_text
from proxy.core.records import Arm, FeedbackRecord
from proxy.core.signals import Agreement, is_correction, judge_pair, pair_agreed


def feedback(**fields: Any) -> FeedbackRecord:
    values: dict[str, Any] = {
        "request_id": "r", "kind": "correction", "route": "bot", "target": "prod",
        "arm": Arm.PRIMARY, "created_at": datetime.now(UTC),
    }  # fmt: skip
    return FeedbackRecord(**{**values, **fields})


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"corrected": True}, True),
        ({"corrected": True, "correction": ""}, True),
        ({"correction": "150 kg"}, True),
        ({"corrected": False, "correction": "150 kg"}, True),
        ({"corrected": False}, False),
        ({"corrected": False, "correction": ""}, False),
        ({"kind": "score", "score": 1}, False),
        ({"kind": "label", "label": "wrong", "corrected": True}, False),
    ],
)
def test_a_correction_is_corrected_or_a_correction_text(
    fields: dict[str, Any], expected: bool
) -> None:
    assert is_correction(feedback(**fields)) is expected


ORDER = '{"order": {"weight": 150.0}, "note": "Shipped today."}'
ROUNDED = '{"order": {"weight": 150.4}, "note": "It ships today!"}'


def test_json_fields_with_a_tolerance_agree_where_the_texts_differ() -> None:
    spec = AgreementSpec("json_fields", ("$.order.weight",), 0.5)
    assert judge_pair(ORDER, ROUNDED, spec, both_ok=True) is Agreement.AGREE
    assert not compare_text(ORDER, ROUNDED).normalized  # what the old judge read: disagree
    strict = AgreementSpec("json_fields", ("$.order.weight",), 0.1)
    assert judge_pair(ORDER, ROUNDED, strict, both_ok=True) is Agreement.DISAGREE


def test_numeric_fields_disagree_where_the_json_documents_differ_elsewhere_too() -> None:
    spec = AgreementSpec("numeric", ("$.order.weight",), 1.0)
    assert judge_pair(ORDER, ROUNDED, spec, both_ok=True) is Agreement.AGREE
    far = '{"order": {"weight": 152}, "note": "Shipped today."}'
    assert judge_pair(ORDER, far, spec, both_ok=True) is Agreement.DISAGREE


def test_a_comparison_that_does_not_apply_is_no_verdict() -> None:
    spec = AgreementSpec("json_fields", ("$.order.weight",))
    assert judge_pair("not json", ORDER, spec, both_ok=True) is Agreement.NOT_APPLICABLE
    neither = ('{"other": 1}', '{"other": 2}')  # the field is in neither answer
    assert judge_pair(*neither, spec, both_ok=True) is Agreement.NOT_APPLICABLE
    assert judge_pair(ORDER, ORDER, spec, both_ok=False) is Agreement.NOT_APPLICABLE


def test_the_normalised_mode_reuses_a_comparison_already_made() -> None:
    spec = AgreementSpec("normalized")
    comparison = compare_text("Yes.", "  yes")
    assert judge_pair("Yes.", "  yes", spec, both_ok=True) is Agreement.AGREE
    assert judge_pair("Yes.", "  yes", spec, both_ok=True, comparison=comparison) is (
        Agreement.AGREE
    )
    assert judge_pair("Yes.", "No.", AgreementSpec("exact"), both_ok=True) is Agreement.DISAGREE


@pytest.mark.parametrize("mode", ["exact", "normalized", "json_fields", "numeric"])
def test_a_stored_verdict_is_read_as_it_is(mode: str) -> None:
    assert pair_agreed("agree", mode, exact_equal=False, normalized_equal=False) is True
    assert pair_agreed("disagree", mode, exact_equal=True, normalized_equal=True) is False
    assert pair_agreed("not_applicable", mode, exact_equal=True, normalized_equal=True) is None


def test_a_pair_stored_without_a_verdict_is_read_by_the_routes_mode() -> None:
    assert pair_agreed(None, "exact", exact_equal=False, normalized_equal=True) is False
    assert pair_agreed(None, "normalized", exact_equal=False, normalized_equal=True) is True
    assert pair_agreed(None, "json_fields", exact_equal=True, normalized_equal=True) is None
    assert pair_agreed(None, "numeric", exact_equal=True, normalized_equal=True) is None
