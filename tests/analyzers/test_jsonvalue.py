"""Answers as strict JSON, and JSON values compared and described for the checks' reasons."""

from __future__ import annotations

from analyzers.jsonvalue import describe, json_equal, json_type, parse_json


def test_one_strict_document_parses() -> None:
    document = parse_json('{"max_weight": 150, "ok": true}')
    assert document.ok and document.value == {"max_weight": 150, "ok": True}
    assert not document.too_large and document.problem == ""


def test_what_is_not_strict_json_says_why_without_quoting_the_text() -> None:
    for text, why in [
        ("", "empty"),
        ("   ", "empty"),
        ('{"a": NaN}', "NaN is not valid JSON"),
        ('{"a": 1} trailing', "not JSON: Extra data at line 1 column 10"),
        ("{'a': 1}", "not JSON: Expecting property name"),
        ('"\\ud800"', "unpaired surrogate"),
    ]:
        document = parse_json(text)
        assert not document.ok and why in document.problem, (text, document.problem)
        assert "trailing" not in document.problem


def test_a_text_beyond_the_limit_is_undecided_not_wrong() -> None:
    document = parse_json("[" + "1," * 10 + "1]", max_chars=10)
    assert not document.ok and document.too_large and "limit 10" in document.problem


def test_equality_by_value_booleans_apart_and_with_a_tolerance() -> None:
    assert json_equal(150, 150.0)
    assert not json_equal(1, True) and not json_equal(True, 1) and json_equal(False, False)
    assert json_equal(0.1 + 0.2, 0.3, tolerance=1e-9) and not json_equal(0.1 + 0.2, 0.3)
    assert json_equal({"a": [1, {"b": 2}]}, {"a": [1.0, {"b": 2}]})
    assert not json_equal({"a": 1}, {"a": 1, "b": 2})
    assert not json_equal([1, 2], [1])
    assert not json_equal("1", 1)


def test_types_and_descriptions() -> None:
    assert [json_type(v) for v in (None, True, 3, 2.5, "x", [], {})] == [
        "null", "boolean", "number", "number", "string", "array", "object"
    ]  # fmt: skip
    assert describe(100) == "100" and describe("kg") == '"kg"'
    assert describe([1, 2]) == "an array of 2 items" and describe({"a": 1}) == "an object of 1 item"
    assert describe("secret answer", quote=False) == "a string of 13 chars"
    long = describe("x" * 100)
    assert len(long) == 40 and long.endswith("…")
