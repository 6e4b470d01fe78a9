"""Which operation a request is part of: the header, else the route's body field; ids that are
not printable ASCII of 1 to 128 characters are refused, never cut or guessed at."""

from __future__ import annotations

import pytest

from proxy.core import RequestError, operation_id_problem, request_operation

H = b"x-mirrorgate-operation"


def test_the_header_names_the_operation_and_wins_over_the_body_field() -> None:
    body = {"metadata": {"operation_id": "from-body"}}
    assert request_operation([(H, b"ticket-7")], body, "metadata.operation_id") == "ticket-7"
    assert request_operation([], body, "metadata.operation_id") == "from-body"
    assert request_operation([], body, None) is None
    assert request_operation([(b"x-other", b"v")], {}, "metadata.operation_id") is None
    assert request_operation([], {"metadata": "flat"}, "metadata.operation_id") is None
    assert (
        request_operation([], {"metadata": {"operation_id": None}}, "metadata.operation_id") is None
    )


@pytest.mark.parametrize(
    ("headers", "body", "message"),
    [
        ([(H, b"")], {}, "must not be empty"),
        ([(H, b"x" * 129)], {}, "at most 128"),
        ([(H, b"tab\there")], {}, "printable ASCII"),
        ([(H, "caf\u00e9".encode("latin-1"))], {}, "printable ASCII"),
        ([(H, b"a"), (H, b"b")], {}, "given 2 times"),
        ([], {"metadata": {"op": 42}}, "must be a string, not int"),
        ([], {"metadata": {"op": True}}, "must be a string, not bool"),
        ([], {"metadata": {"op": {"nested": "x"}}}, "must be a string, not dict"),
        ([], {"metadata": {"op": "line\nbreak"}}, "printable ASCII"),
    ],
)
def test_ids_that_are_not_printable_ascii_of_at_most_128_are_refused(
    headers: list[tuple[bytes, bytes]], body: dict[str, object], message: str
) -> None:
    with pytest.raises(RequestError, match=message) as caught:
        request_operation(headers, body, "metadata.op")
    assert caught.value.status == 400


def test_the_longest_id_and_spaces_are_fine() -> None:
    assert operation_id_problem("x" * 128) is None
    assert operation_id_problem("ticket 42 / step 1") is None
