"""Two answers compared as text and as JSON, the way agreement is measured."""

from __future__ import annotations

from analyzers.comparison import MAX_COMPARED_CHARS, compare_text, normalize


def test_normal_form_folds_case_space_unicode_and_trims_punctuation() -> None:
    assert normalize("  Hello,   WORLD!! ") == "hello, world"
    assert normalize("«ﬁne»") == "fine"  # NFKC: the ligature; the quotes are trimmed
    assert normalize("...") == ""


def test_exact_normalised_and_json_equality() -> None:
    same = compare_text("The limit is 150 kg.", "the limit is 150 kg")
    assert not same.exact and same.normalized and same.json_equal is None
    json = compare_text('{"max_weight": 150, "unit": "kg"}', '{"unit": "kg", "max_weight": 100}')
    assert json.json_equal is False
    assert json.json_fields == {"max_weight": False, "unit": True}
    assert compare_text("[1, 2]", " [1,2] ").json_equal is True
    assert compare_text('{"a": 1}', "not json").json_equal is None


def test_length_ratio_and_truncation() -> None:
    assert compare_text("abcd", "ab").length_ratio == 0.5
    assert compare_text("", "x").length_ratio is None
    long = "x" * (MAX_COMPARED_CHARS + 1)
    compared = compare_text(long, long + "y")
    assert compared.truncated and compared.normalized and not compared.exact
