"""JSON Schemas from check config: validated against their metaschema and compiled once, at start.

Validation uses `jsonschema-rs` (Rust): about 5 µs for a 3 KB answer against a typical schema,
where the pure-Python `jsonschema` takes about 1 ms — too slow to check every answer of a proxy
serving 1,500 requests a second on one core (see bench/analyzers_throughput.py).

- The dialect is the schema's `$schema` when it names a known draft (4, 6, 7, 2019-09,
  2020-12), else Draft 2020-12.
- `format` is an annotation, as 2020-12 says (not asserted; use `pattern`).
- References resolve inside the schema (`#/$defs/…`) and to the bundled metaschemas only. The
  validator is built `offline`: no reference is ever fetched (an analyzer does no I/O), and one
  that does not resolve is refused at compile time, naming the schema.
- `pattern` keywords run on Rust's regex engines, linear-time unless the pattern needs
  look-around or back-references (then a backtracking engine with a step limit; hitting the limit
  makes the check `error`, not `fail`).
"""

from __future__ import annotations

from typing import Any

import jsonschema_rs

from analyzers.errors import SpecError
from analyzers.jsonvalue import describe

Validator = jsonschema_rs.Validator
"""A compiled schema."""

_UNDECIDED_KINDS = ("BacktrackLimitExceeded", "RegexEngineFailure")


def _where(field: str, path: list[str | int]) -> str:
    return field + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _json_path(path: list[str | int]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def compile_schema(schema: Any, field: str) -> Validator:
    """A validator for `schema`; raise `SpecError` naming the key path inside the schema (e.g.
    `schema.properties.weight.type`) when it is not a valid schema of its dialect or holds a
    reference that does not resolve offline."""
    if not isinstance(schema, dict):
        raise SpecError(field, f"a JSON Schema must be an object, not {type(schema).__name__}")
    try:
        jsonschema_rs.meta.validate(schema)
    except jsonschema_rs.ValidationError as exc:
        where = _where(field, exc.instance_path)
        raise SpecError(where, f"not a valid JSON Schema: {_short(exc.message)}") from exc
    except (jsonschema_rs.ReferencingError, ValueError) as exc:  # an unknown $schema, …
        raise SpecError(field, f"not a usable JSON Schema: {_short(str(exc))}") from exc
    try:
        return jsonschema_rs.validator_for(schema, offline=True)
    except jsonschema_rs.ValidationError as exc:
        message = exc.message
        if "Retrieval is disabled" in message:
            message = message.split(" and retrieving it failed")[0]
            message += "; remote references are never fetched: put that schema under $defs"
        raise SpecError(_where(field, exc.instance_path), _short(message)) from exc
    except (jsonschema_rs.ReferencingError, ValueError) as exc:
        raise SpecError(field, f"not a usable JSON Schema: {_short(str(exc))}") from exc


class SchemaUndecidedError(Exception):
    """Validation could not finish (a pattern hit the regex engine's limit): the check reports
    `error`."""


def first_violation(validator: Validator, instance: Any, *, quote: bool) -> str | None:
    """Why `instance` does not match, as `at $.path: message`; None when it matches. Only the
    first violation is reported; messages quote the instance only when `quote`."""
    if validator.is_valid(instance):
        return None
    error = next(iter(validator.iter_errors(instance)), None)
    if error is None:  # is_valid and iter_errors disagree: refuse to call it a pass
        raise SchemaUndecidedError("the validator rejected the document without saying why")
    if type(error.kind).__name__ in _UNDECIDED_KINDS:
        raise SchemaUndecidedError(f"validation could not finish: {_short(error.message)}")
    if quote:
        message = _short(error.message)
    else:
        message = f"{describe(error.instance, quote=False)} fails '{error.kind.name}'"
    return f"at {_json_path(error.instance_path)}: {message}"


def _short(message: str, limit: int = 160) -> str:
    message = " ".join(message[: limit * 2].split("\n\n")[0].split())
    return message if len(message) <= limit else message[: limit - 1] + "…"
