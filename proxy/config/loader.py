"""Loading a configuration: YAML in, frozen specs out, or every problem named by its key path.

Loading runs in passes, each collecting problems instead of stopping at the first:

1. parse the YAML (duplicate keys are an error, not a silent overwrite; a document that expands
   past `MAX_NODES` nodes, an alias bomb, is refused);
2. check the raw document's references and key variables (`checks.DOCUMENT_CHECKS`), before
   validation, so that every undefined name is reported even when a section is invalid;
3. interpolate `${VAR}` / `${VAR:-default}` in every string, naming the key of a missing variable,
   then lay the caller's overrides over it (`serve --host/--port`), so that what runs is what is
   validated;
4. validate into the frozen specs of `specs.py`, then run one check per config section
   (`checks.SPEC_CHECKS`).

`load_config` and `parse_config` raise `ConfigError` carrying every `ConfigProblem`; nothing
half-loads.

Commands that only read the store or call a few models (`report`, `replay`) load with
`secrets=False`: the checks of the gateway's own secrets (`checks.SECRET_CHECKS`: the models' key
variables, the admin and feedback tokens) are not run, and an unset `${VAR}` is a problem only in
the `store` section (the one thing such a command needs); elsewhere it stays as written, and if
the key is then invalid (a URL, a number), its problem says which variable is unset. A command
that calls a model then checks that model's key itself (`checks.model_key_problems`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .checks import DOCUMENT_CHECKS, SECRET_CHECKS, SPEC_CHECKS
from .errors import ConfigError, ConfigProblem
from .specs import MirrorgateConfig

MAX_CONFIG_BYTES = 4 * 1024 * 1024
"""A configuration file larger than this is refused before it is read."""
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


MAX_NODES = 200_000
"""A document that would expand past this many YAML nodes (an alias bomb) is refused."""


def _scan(node: yaml.Node, problems: list[ConfigProblem]) -> int:
    """Report duplicate keys by path; return how many nodes the document expands to."""
    sizes: dict[int, int] = {}

    def walk(node: yaml.Node, path: tuple[str | int, ...]) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known  # an alias: counted again, but scanned once
        size = 1
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, value_node in node.value:
                key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
                if key in seen:
                    problems.append(
                        ConfigProblem(
                            _join(path),
                            f"duplicate key '{key}' (line {key_node.start_mark.line + 1})",
                        )
                    )
                seen.add(key)
                size += walk(value_node, (*path, key))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                size += walk(item, (*path, i))
        sizes[id(node)] = size
        return size

    return walk(node, ())


def _join(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_READ_ONLY_SECTIONS = ("store",)
"""Under `secrets=False`, the sections whose unset variables are still problems."""


def _interpolate(
    node: Any,
    env: Mapping[str, str],
    path: tuple[str | int, ...],
    problems: list[ConfigProblem],
    secrets: bool = True,
    unresolved: dict[str, str] | None = None,
) -> Any:
    if isinstance(node, dict):
        return {
            k: _interpolate(v, env, (*path, str(k)), problems, secrets, unresolved)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [
            _interpolate(v, env, (*path, i), problems, secrets, unresolved)
            for i, v in enumerate(node)
        ]
    if isinstance(node, str) and "${" in node:
        needed = secrets or (bool(path) and path[0] in _READ_ONLY_SECTIONS)

        def replace(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            if not needed:
                if unresolved is not None:
                    unresolved.setdefault(_join(path), name)
                return match.group(0)  # a read-only command does not use it
            problems.append(ConfigProblem(_join(path), f"environment variable {name} is not set"))
            return ""

        return _ENV_REF.sub(replace, node)
    return node


def _under(path: str, parent: str) -> bool:
    """`path` is `parent` or a key inside it."""
    return path == parent or path.startswith((parent + ".", parent + "["))


Overrides = Mapping[str, Mapping[str, Any]]
"""Keys that replace the file's, by section: `{"server": {"host": "0.0.0.0"}}`."""


def parse_config(
    text: str,
    env: Mapping[str, str] | None = None,
    overrides: Overrides | None = None,
    *,
    secrets: bool = True,
) -> MirrorgateConfig:
    """Validate configuration text with `overrides` laid over it; raise `ConfigError` naming
    every problem of the result. `secrets=False`: for a command that does not serve (see the
    module docstring)."""
    env = os.environ if env is None else env
    problems: list[ConfigProblem] = []
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # refuses a NUL or another control character at once
        node = loader.get_single_node()
        if node is not None and _scan(node, problems) > MAX_NODES:
            raise ConfigError(
                [ConfigProblem("", f"the document expands to more than {MAX_NODES} nodes")]
            )
        raw = loader.construct_document(node) if node is not None else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(
            [ConfigProblem("", f"not valid YAML: {where}{getattr(exc, 'problem', exc)}")]
        ) from exc
    except RecursionError as exc:
        raise ConfigError([ConfigProblem("", "the document is nested too deeply")]) from exc
    finally:
        if loader is not None:
            loader.dispose()
    return parse_document(
        {} if raw is None else raw, env, overrides, secrets=secrets, problems=problems
    )


def parse_document(
    raw: Any,
    env: Mapping[str, str] | None = None,
    overrides: Overrides | None = None,
    *,
    secrets: bool = True,
    problems: list[ConfigProblem] | None = None,
) -> MirrorgateConfig:
    """`parse_config` of a document already read from YAML (a mapping of sections): passes 2 to
    4, the same problems for the same document. `problems`: those reading it found (duplicate
    keys), reported with the rest."""
    env = os.environ if env is None else env
    problems = [] if problems is None else problems
    if not isinstance(raw, dict):
        raise ConfigError([ConfigProblem("", "the configuration must be a mapping of sections")])
    for document_check in DOCUMENT_CHECKS:
        if secrets or document_check not in SECRET_CHECKS:
            problems += document_check(raw, env)
    unresolved: dict[str, str] = {}
    raw = _interpolate(raw, env, (), problems, secrets, unresolved)
    for section, values in (overrides or {}).items():
        given = raw.get(section)
        raw[section] = {**(given if isinstance(given, dict) else {}), **values}
    try:
        cfg = MirrorgateConfig.model_validate(raw)
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(str(p) if not isinstance(p, int) else p for p in err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "unknown key"
            elif err["type"] == "missing":
                message = "required key is missing"
            where = _join(loc)
            var = next((v for p, v in unresolved.items() if _under(where, p)), None)
            if var is not None:  # only left as written because the command does not use it
                message += (
                    f" (environment variable {var} is not set: this command does not use the "
                    "key, but the file must still be valid; set it, or give a default "
                    f"${{{var}:-...}})"
                )
            problems.append(ConfigProblem(where, message))
        raise ConfigError(problems) from exc
    for spec_check in SPEC_CHECKS:
        if secrets or spec_check not in SECRET_CHECKS:
            problems += spec_check(cfg, env)
    if problems:
        raise ConfigError(problems)
    return cfg


def load_config(
    path: str | Path,
    env: Mapping[str, str] | None = None,
    overrides: Overrides | None = None,
    *,
    secrets: bool = True,
) -> MirrorgateConfig:
    """Read and validate a configuration file with `overrides` laid over it (`parse_config`);
    raise `ConfigError` naming every problem. `secrets=False` for the read-only commands."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError([ConfigProblem("", f"{file}: larger than {MAX_CONFIG_BYTES} bytes")])
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError([ConfigProblem("", f"{file}: no such file")]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([ConfigProblem("", f"{file}: not UTF-8 text")]) from exc
    except OSError as exc:
        raise ConfigError([ConfigProblem("", f"{file}: cannot read ({exc.strerror})")]) from exc
    return parse_config(text, env, overrides, secrets=secrets)
