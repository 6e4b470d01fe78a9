"""JSON Schemas from check config, validated against their metaschema once, at start.

The dialect is the schema's `$schema` when it names a known draft, else Draft 2020-12. `format`
is an annotation, as 2020-12 says (not asserted; use `pattern`). References resolve only inside
the schema itself (`#/$defs/…`) and to the metaschemas: remote references are never fetched —
an analyzer does no I/O — and a `$ref` to another URL is refused at compile time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from analyzers.errors import SpecError
from analyzers.jsonvalue import describe

_METASCHEMA_HOSTS = ("https://json-schema.org/", "http://json-schema.org/")


def compile_schema(schema: Any, field: str) -> Validator:
    """A validator for `schema`; raise `SpecError` naming the key path inside the schema (e.g.
    `schema.properties.weight.type`) when the schema is not valid for its dialect."""
    if not isinstance(schema, dict):
        raise SpecError(field, f"a JSON Schema must be an object, not {type(schema).__name__}")
    cls = validators.validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = field + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.absolute_path
        )
        raise SpecError(where, f"not a valid JSON Schema: {_short(exc.message)}") from exc
    _check_references(schema, field)
    return cls(schema, registry=Registry())


def _check_references(schema: dict[str, Any], field: str) -> None:
    """Refuse references that would need I/O, and local ones that lead nowhere."""
    walked = list(_walk(schema, field))
    if any(key == "$id" and path != field for key, _value, path in walked):
        return  # relative to a nested $id: too subtle to resolve here; validation reports it
    root_id = schema.get("$id")
    base = root_id.split("#")[0] if isinstance(root_id, str) and root_id else None
    resolver = Registry().resolver_with_root(
        Resource.from_contents(schema, default_specification=DRAFT202012)
    )
    for key, ref, path in walked:
        if key != "$ref" or not isinstance(ref, str) or ref.startswith(_METASCHEMA_HOSTS):
            continue
        if ("://" in ref or ref.startswith("//")) and not (base and ref.startswith(base)):
            raise SpecError(
                f"{path}.$ref",
                f"remote reference {ref!r} is never fetched; put that schema under $defs",
            )
        try:
            resolver.lookup(ref)
        except Unresolvable as exc:
            raise SpecError(f"{path}.$ref", f"reference {ref!r} does not resolve") from exc


def _walk(node: Any, path: str) -> Iterator[tuple[str, Any, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value, path
            yield from _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, f"{path}[{index}]")


def first_violation(validator: Validator, instance: Any, *, quote: bool) -> str | None:
    """Why `instance` does not match, as `at $.path: message`; None when it matches. Only the
    first violation is reported (finding the most relevant one can cost a pass over every
    error of a huge document). Messages quote the instance only when `quote`."""
    try:
        error = next(iter(validator.iter_errors(instance)), None)
    except Unresolvable as exc:
        raise SchemaReferenceError(f"schema reference cannot be resolved: {exc}") from exc
    if error is None:
        return None
    if quote:
        message = _short(error.message)
    else:
        message = f"{describe(error.instance, quote=False)} fails '{error.validator}'"
    return f"at {error.json_path}: {message}"


class SchemaReferenceError(Exception):
    """A `$ref` that could not be resolved while validating (the check reports `error`)."""


def _short(message: str, limit: int = 160) -> str:
    message = " ".join(message[: limit * 2].split())
    return message if len(message) <= limit else message[: limit - 1] + "…"
