"""The JSONPath subset of rule checks: what each path selects, and paths refused at compile time."""

from __future__ import annotations

from typing import Any

import pytest

from analyzers.errors import SpecError
from analyzers.jsonpath import compile_path

DOC: dict[str, Any] = {
    "max_weight": 150,
    "parcel": {"sizes": [10, 20, 30], "max weight": 5, "it's": True},
    "items": [{"id": 1}, {"id": 2}, {"name": "no id"}],
}


@pytest.mark.parametrize(
    ("path", "found"),
    [
        ("$", [DOC]),
        ("$.max_weight", [150]),
        ("$.parcel.sizes[0]", [10]),
        ("$.parcel.sizes[-1]", [30]),
        ("$.parcel.sizes[3]", []),
        ("$['parcel']['max weight']", [5]),
        ('$.parcel["it\'s"]', [True]),
        ("$.items[*].id", [1, 2]),
        ("$.parcel.sizes.*", [10, 20, 30]),
        ("$.missing.deeper", []),
        ("$.max_weight.not_an_object", []),
        ("$[ 'max_weight' ]", [150]),
    ],
)
def test_what_each_path_selects(path: str, found: list[Any]) -> None:
    compiled = compile_path(path)
    assert compiled.find(DOC) == found
    assert str(compiled) == path


def test_wildcards_go_through_objects_in_order_and_arrays_item_by_item() -> None:
    assert compile_path("$.*").find({"b": 1, "a": 2}) == [1, 2]
    assert compile_path("$[*][*]").find([[1, 2], [3]]) == [1, 2, 3]


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("max_weight", "starts with '$'"),
        ("$..max_weight", "recursive descent"),
        ("$.", "member name"),
        ("$.1abc", "member name"),
        ("$[?(@.a)]", ""),
        ("$[1:2]", ""),
        ("$.a b", "unexpected"),
        ("$['unclosed", ""),
    ],
)
def test_paths_outside_the_subset_are_refused_naming_the_field(path: str, why: str) -> None:
    with pytest.raises(SpecError) as info:
        compile_path(path, field="checks[0].path")
    assert "checks[0].path" in str(info.value)
    assert why in str(info.value)


def test_a_path_must_be_a_string() -> None:
    with pytest.raises(SpecError, match="must be a string"):
        compile_path(3)  # type: ignore[arg-type]
