"""Business operations: the id that ties a request to the operation it is part of.

One business operation (a support ticket, a checkout) is several model calls — classify,
retrieve, answer, a retry, a fallback — and it is the operation that succeeds or fails. A request
joins one with the header `x-mirrorgate-operation: <id>`, or with a body field its route names
(`routes.NAME.operation_field`, a dotted path such as `metadata.operation_id`, read like the
sticky key's `body:` form); the header wins. Every exchange of the request records the id
(`ExchangeRecord.operation_id`), and `POST /v1/outcomes` says what happened to the operation.

An id is 1 to 128 printable ASCII characters (space included, control characters not); anything
else is refused (400 in the caller's wire format), never truncated or guessed at.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .errors import RequestError
from .sticky import body_field

OPERATION_HEADER = "x-mirrorgate-operation"
"""The request header naming the operation a request is part of."""
MAX_OPERATION_ID_CHARS = 128

_HEADER_KEY = OPERATION_HEADER.encode()


def operation_id_problem(value: object) -> str | None:
    """Why `value` cannot be an operation id, or None when it can."""
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__}"
    if not value:
        return "must not be empty"
    if len(value) > MAX_OPERATION_ID_CHARS:
        return f"has {len(value)} characters; at most {MAX_OPERATION_ID_CHARS}"
    if not (value.isascii() and value.isprintable()):
        return "must be printable ASCII (no control characters)"
    return None


def request_operation(
    headers: Iterable[tuple[bytes, bytes]], payload: Mapping[str, Any], field: str | None
) -> str | None:
    """The operation a request is part of: its `x-mirrorgate-operation` header, else the body
    field `field` (when the route names one and the body has it), else None. Raises
    `RequestError` (400) for an id that is not valid, or a header given twice."""
    given = [raw for key, raw in headers if key == _HEADER_KEY]
    if len(given) > 1:
        raise RequestError(f"'{OPERATION_HEADER}' is given {len(given)} times; give it once")
    if given:
        value = given[0].decode("latin-1")
        problem = operation_id_problem(value)
        if problem is not None:
            raise RequestError(f"the '{OPERATION_HEADER}' header {problem}")
        return value
    if field is None:
        return None
    found = body_field(payload, field)
    if found is None:
        return None
    problem = operation_id_problem(found)
    if problem is not None or not isinstance(found, str):
        raise RequestError(f"the operation id in '{field}' {problem}")
    return found
