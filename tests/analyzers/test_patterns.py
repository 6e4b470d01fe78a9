"""Operator regexes: compiled once, refused when they can backtrack exponentially."""

from __future__ import annotations

import pytest

from analyzers.errors import SpecError
from analyzers.patterns import backtracks_exponentially, compile_pattern


@pytest.mark.parametrize("source", [r"(a+)+", r"(\w+\s?)*", r"(\d+,?)+$", r"(x*y*)*", r"(?:a*)*b"])
def test_exponential_shapes_are_refused_with_the_way_out(source: str) -> None:
    assert backtracks_exponentially(source)
    with pytest.raises(SpecError) as info:
        compile_pattern(source, "checks[1].pattern")
    assert info.value.field == "checks[1].pattern"
    assert "backtrack exponentially" in info.value.message and "(?>" in info.value.message


@pytest.mark.parametrize(
    "source",
    [r"max_weight\s*=\s*(\d+)", r"(?>a+)+", r"(a++)+", r"(\d+,)+", r"^[a-z]+$", r"(ab)+"],
)
def test_linear_and_atomic_patterns_compile(source: str) -> None:
    assert not backtracks_exponentially(source)
    assert compile_pattern(source, "p").pattern == source


def test_what_does_not_compile_is_named_by_its_field() -> None:
    with pytest.raises(SpecError, match=r"^p: not a valid regular expression"):
        compile_pattern("(unclosed", "p")
    with pytest.raises(SpecError, match="must be a string"):
        compile_pattern(42, "p")
