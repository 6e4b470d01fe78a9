"""`mirrorgate evalset`: build evaluation sets from the store, and show their runs over time.

    mirrorgate evalset build --route R --since 7d --size N --output DIR [--rotate F] [--seed S]
    mirrorgate evalset history [--set NAME] [--route R] [--model M] [--limit N]

`build` writes DIR/cases.jsonl (what `replay --eval-set DIR` runs), DIR/held_out.jsonl (what no
candidate run reads) and DIR/manifest.json (version, counts per stratum, references, window,
content hash, lineage); `--rotate F` starts from the set already in DIR. `history` prints every
stored run oldest first: set version, model and role, config fingerprint, pass rate and mean
score overall and per difficulty and task. docs/evaluation.md is the guide.

Exit codes: 0 done, 1 a problem the user can fix (named on stderr), 2 a usage error.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

from proxy.config import ConfigError, MirrorgateConfig, load_config
from proxy.core import parse_since
from proxy.store import EvalRun, EvalStore, Store, StoreError

from .evalbuild import BuildProblem, build_set, read_previous, write_set

MAX_SIZE = 100_000
_SET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class _Usage(Exception):
    pass


def run_evalset(args: argparse.Namespace) -> int:
    """Run `mirrorgate evalset build|history` with parsed `args`; return the exit code."""
    try:
        if args.action == "build":
            return _build(args)
        return _history(args)
    except _Usage as exc:
        print(f"mirrorgate evalset: {exc}", file=sys.stderr)
        return 2
    except (BuildProblem, StoreError) as exc:
        print(f"mirrorgate: {exc}", file=sys.stderr)
        return 1


def _config(args: argparse.Namespace) -> tuple[str, MirrorgateConfig]:
    path = args.config or os.environ.get("MIRRORGATE_CONFIG") or "mirrorgate.yaml"
    try:
        return path, load_config(path, secrets=False)
    except ConfigError as exc:
        lines = [f"{path}: {len(exc.problems)} problem(s)", *(str(p) for p in exc.problems)]
        raise BuildProblem("\n  ".join(lines)) from None


def _build(args: argparse.Namespace) -> int:
    if not args.route or not args.output or args.size is None:
        raise _Usage("build needs --route, --size and --output")
    if not 1 <= args.size <= MAX_SIZE:
        raise _Usage(f"--size must be between 1 and {MAX_SIZE}, not {args.size}")
    if args.rotate is not None and not 0 < args.rotate <= 1:
        raise _Usage(f"--rotate must be more than 0 and at most 1, not {args.rotate}")
    if not 0 <= args.seed < 2**31:
        raise _Usage(f"--seed must be between 0 and {2**31 - 1}, not {args.seed}")
    now = datetime.now(UTC)
    try:
        since = parse_since((args.since or "7d")[:100], now)
    except ValueError as exc:
        raise _Usage(f"--since: {exc}") from None
    output = Path(args.output)
    name = args.name or output.resolve().name
    if not _SET_NAME.match(name):
        raise _Usage(
            f"the set's name {name[:100]!r} must be letters, digits, '.', '_' or '-' "
            "(name the directory so, or give --name)"
        )
    if output.exists() and not output.is_dir():
        raise BuildProblem(f"--output {output} exists and is not a directory")
    path, config = _config(args)
    route = config.routes.get(args.route)
    if route is None:
        known = ", ".join(sorted(config.routes))
        raise BuildProblem(f"route '{args.route[:200]}' is not in {path} (routes: {known})")
    previous = read_previous(output) if output.is_dir() else None
    if previous is not None and args.rotate is None:
        raise BuildProblem(
            f"{output} already holds set {previous.manifest.get('name')} "
            f"v{previous.manifest.get('version')}: give --rotate F to rotate it, or another "
            "--output"
        )
    if previous is None and args.rotate is not None:
        raise BuildProblem(f"--rotate needs the set to rotate in {output}: there is none")
    if previous is not None and previous.manifest.get("route") != args.route:
        raise BuildProblem(
            f"{output} holds a set of route {previous.manifest.get('route')}, not {args.route}"
        )
    if previous is not None:
        name = str(previous.manifest.get("name") or name)
    store = Store(config.store.url)
    try:
        store.migrate()
        built = build_set(
            EvalStore(store),
            name=name,
            route=args.route,
            spec=route.evalset,
            bodies=config.store.bodies,
            since=since,
            until=now,
            size=args.size,
            seed=args.seed,
            previous=previous,
            rotate=args.rotate or 0.0,
        )
    finally:
        store.close()
    if not built.cases:
        raise BuildProblem(f"no usable request of route '{args.route}' in the window")
    try:
        write_set(output, built)
    except OSError as exc:
        raise BuildProblem(f"cannot write {output}: {exc.strerror or exc}") from None
    m = built.manifest
    counts = m["counts"]
    print(
        f"evaluation set {m['name']} v{m['version']}: {m['cases']} cases "
        f"(+{m['held_out']['cases']} held out) from route {args.route} since "
        f"{m['window']['since']}"
    )
    for dimension in ("task", "difficulty", "reference"):
        listed = ", ".join(f"{k} {v}" for k, v in counts[dimension].items())
        print(f"  {dimension}: {listed}")
    last = m["lineage"][-1]
    if last["parent_hash"]:
        print(f"  rotated: kept {last['kept']}, retired {last['retired']}, added {last['added']}")
    print(f"written to {output} ({m['content_hash']})")
    return 0


def _history(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 10_000:
        raise _Usage(f"--limit must be between 1 and 10000, not {args.limit}")
    _, config = _config(args)
    store = Store.existing(config.store.url)
    try:
        runs = EvalStore(store).runs(
            set_name=args.set, model=args.model, route=args.route, limit=args.limit
        )
    finally:
        store.close()
    sys.stdout.write(render_history(runs))
    return 0


def render_history(runs: list[EvalRun]) -> str:
    """Every run oldest first, with its pass rate overall and per stratum."""
    if not runs:
        return "no evaluation runs stored (run `mirrorgate replay --eval-set DIR`)\n"
    strata = sorted({s for r in runs for s in r.strata if s != "all"}, key=_stratum_order)
    header = ["started", "set", "model", "role", "config", "all", "mean", *strata]
    rows = []
    for run in runs:
        overall = run.overall
        rows.append(
            [
                run.started_at.strftime("%Y-%m-%d %H:%M"),
                f"{run.set_name} v{run.set_version}",
                run.model,
                run.role,
                run.config_fingerprint[:8],
                _rate(overall.passed, overall.cases),
                "-" if overall.mean_score is None else f"{overall.mean_score:.2f}",
                *(
                    _rate(run.strata[s].passed, run.strata[s].cases) if s in run.strata else "-"
                    for s in strata
                ),
            ]
        )
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in [header, *rows]]  # fmt: skip
    lines.append("pass rate per stratum (passed/cases); mean: mean score 0..1 over all cases")
    return "\n".join(lines) + "\n"


def _stratum_order(name: str) -> tuple[int, str]:
    return (0 if name.startswith("difficulty=") else 1, name)


def _rate(passed: int, cases: int) -> str:
    return "-" if not cases else f"{passed / cases:.0%} ({passed}/{cases})"
