"""Request bodies parsed and written again with every integer exact."""

from __future__ import annotations

import orjson
import pytest

from proxy.core.exact_json import dumps_exact, loads_exact


@pytest.mark.parametrize("number", [2**64, 2**70, -(2**63) - 1, -(2**80), 10**30])
def test_integers_orjson_would_make_floats_stay_integers(number: int) -> None:
    body = b'{"seed": %d, "list": [1, {"n": %d}], "f": 1.5}' % (number, number)
    assert isinstance(orjson.loads(body)["seed"], float)  # what this module is for
    value = loads_exact(body)
    assert value == {"seed": number, "list": [1, {"n": number}], "f": 1.5}
    assert dumps_exact(value) == b'{"seed":%d,"list":[1,{"n":%d}],"f":1.5}' % (number, number)


def test_everything_else_takes_orjson_and_comes_out_as_orjson_writes_it() -> None:
    body = '{"model": "m", "n": 18446744073709551615, "low": -9223372036854775808, "t": "é"}'
    value = loads_exact(body.encode())
    assert value["n"] == 2**64 - 1 and value["low"] == -(2**63)
    assert dumps_exact(value) == orjson.dumps(value)


def test_a_float_that_large_is_still_a_float() -> None:
    assert loads_exact(b'{"x": 1e300, "y": 3.0e19}') == {"x": 1e300, "y": 3.0e19}


@pytest.mark.parametrize("body", [b"{", b"[" * 2000 + b"]" * 2000, b'{"x": NaN}'])
def test_bad_json_is_a_value_error(body: bytes) -> None:
    with pytest.raises(ValueError):
        loads_exact(body)


def test_deep_nesting_with_a_big_integer_is_a_value_error_not_a_recursion_error() -> None:
    body = b"[" * 1000 + b"%d" % 2**70 + b"]" * 1000
    try:
        value = loads_exact(body)
    except ValueError as exc:
        assert "nested too deeply" in str(exc)
    else:
        for _ in range(1000):
            value = value[0]
        assert value == 2**70
