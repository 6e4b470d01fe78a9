"""The `mirrorgate` command (every subcommand: docs/reference.md).

Exit codes: 0 success, 1 a problem the user can fix (named on stderr in one line; `--debug`
adds the traceback), 2 usage error (a bad flag or value, `--log-level bogus` included), 130
interrupted, 141 output cut short by a closed pipe (`mirrorgate report | head`), quietly.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import sys
import traceback
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from proxy.config import (
    ConfigError,
    MirrorgateConfig,
    config_warnings,
    load_config,
)
from proxy.core import OPERATOR_ACTIONS, Action
from proxy.observability import LEVELS, configure_logging

if TYPE_CHECKING:
    import httpx

ROLLOUT_ACTIONS = ("status", "plan", *(a.value for a in Action if a in OPERATOR_ACTIONS))
ROLLOUT_URL_ENV = "MIRRORGATE_URL"
ROLLOUT_DEFAULT_URL = "http://127.0.0.1:8080"
LOG_FORMATS = ("text", "json")
DEMO_SCENES = ("rollback", "guard", "experiment")
"""`mirrorgate demo --scene`: the default tells a rollback after a rule change."""
BROKEN_PIPE_EXIT = 141
"""128 + SIGPIPE: what a shell reports for a program whose reader went away (`| head`)."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, unless it has none or its help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)


def _version() -> str:
    try:
        return importlib.metadata.version("mirrorgate")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _config_path(value: str | None) -> str:
    return value or os.environ.get("MIRRORGATE_CONFIG") or "mirrorgate.yaml"


def _load(
    path: str, overrides: Mapping[str, Mapping[str, Any]] | None = None
) -> MirrorgateConfig | None:
    try:
        return load_config(path, overrides=overrides)
    except ConfigError as exc:
        (first, *others) = exc.problems
        if not others and not first.path and first.message.startswith(f"{path}: "):
            print(f"mirrorgate: {first.message}", file=sys.stderr)  # the file itself: one line
            return None
        print(f"mirrorgate: {path}: {len(exc.problems)} problem(s)", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None


def cmd_check_config(args: argparse.Namespace) -> int:
    path = args.file or _config_path(args.config)
    cfg = _load(path)
    if cfg is None:
        return 1
    print(
        f"{path}: ok ({len(cfg.models)} models, {len(cfg.routes)} routes, {len(cfg.rules)} rules)"
    )
    for warning in config_warnings(cfg, os.environ):
        print(f"  warning: {warning}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    path = _config_path(args.config)
    # The flags go through the loader with the file, so every check (a listener beyond loopback
    # needs the admin token) holds for the address actually served, not only the file's.
    flags = (("host", args.host), ("port", args.port), ("workers", args.workers))
    server = {k: v for k, v in flags if v is not None}
    cfg = _load(path, {"server": server})
    if cfg is None:
        return 1
    configure_logging(args.log_level, args.log_format or cfg.server.log_format)
    from proxy.app import run_gateway, run_workers

    # A reload (SIGHUP, POST /admin/reload) reads the same file with the same flags.
    run = run_workers if cfg.server.workers > 1 else run_gateway
    return run(cfg, lambda: load_config(path, overrides={"server": server}))


def cmd_mock_upstream(args: argparse.Namespace) -> int:
    from proxy.mock_upstream.behavior import BehaviorError
    from proxy.mock_upstream.server import serve

    try:
        serve(args.host, args.port, args.behavior)
    except BehaviorError as exc:
        print(f"mirrorgate: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    if args.scene == "experiment":
        if args.restore:
            args.parser.error("--restore goes with --scene guard")
        from .demo_experiment import print_experiment_config, run_experiment_demo

        if args.print_config:
            return print_experiment_config(sys.stdout)
        return run_experiment_demo(
            port=args.port, duration_s=args.duration, keep_running=args.keep_running
        )
    if args.scene == "guard":
        from .demo_guard import print_guard_config, run_guard_demo

        if args.print_config:
            return print_guard_config(sys.stdout)
        return run_guard_demo(
            port=args.port,
            duration_s=args.duration,
            keep_running=args.keep_running,
            restore=args.restore,
        )
    if args.restore:
        args.parser.error("--restore goes with --scene guard")
    from .demo import print_config, run_demo

    if args.print_config:
        return print_config(sys.stdout)
    return run_demo(port=args.port, duration_s=args.duration, keep_running=args.keep_running)


def cmd_replay(args: argparse.Namespace) -> int:
    from proxy.replay import run_replay

    return run_replay(args)


def cmd_evalset(args: argparse.Namespace) -> int:
    from proxy.replay import run_evalset

    return run_evalset(args)


def cmd_report(args: argparse.Namespace) -> int:
    from proxy.report import run_report

    return run_report(args)


def _gateway_url(value: str) -> str:
    """An http(s) base URL (a path prefix allowed), without its trailing slash."""
    if not re.match(r"^https?://[^/\s]+(/\S*)?$", value):
        raise argparse.ArgumentTypeError(f"must be an http:// or https:// URL, got {value!r}")
    return value.rstrip("/")


def cmd_rollout(args: argparse.Namespace, transport: httpx.BaseTransport | None = None) -> int:
    """`mirrorgate rollout`: check the arguments, then run it (`transport`: see `run_rollout`)."""
    parser: argparse.ArgumentParser = args.parser
    if args.action != "status" and not args.route:
        parser.error(f"rollout {args.action} needs a ROUTE")
    if args.action in ("status", "plan") and args.reason is not None:
        parser.error(f"--reason goes with an action, not with {args.action}")
    if args.since is not None and args.action != "plan":
        parser.error("--since goes with plan")
    if args.to is not None and args.action != "rollback":
        parser.error("--to goes with rollback only")
    if args.force and args.action != "start":
        parser.error("--force goes with start only")
    if args.force and not (args.reason or "").strip():
        parser.error("--force needs --reason: the override of the offline gate is recorded")
    if not args.timeout > 0:
        parser.error("--timeout must be a positive number of seconds")
    if args.url is None:
        try:
            args.url = _gateway_url(os.environ.get(ROLLOUT_URL_ENV) or ROLLOUT_DEFAULT_URL)
        except argparse.ArgumentTypeError as exc:
            parser.error(f"${ROLLOUT_URL_ENV} {exc}")
    from .rollout import run_rollout

    return run_rollout(args, transport)


def cmd_experiment(args: argparse.Namespace, transport: httpx.BaseTransport | None = None) -> int:
    """`mirrorgate experiment`: check the arguments, then run it."""
    parser: argparse.ArgumentParser = args.parser
    if args.action == "status" and args.reason is not None:
        parser.error("--reason goes with start or stop, not with status")
    if not args.timeout > 0:
        parser.error("--timeout must be a positive number of seconds")
    if args.url is None:
        try:
            args.url = _gateway_url(os.environ.get(ROLLOUT_URL_ENV) or ROLLOUT_DEFAULT_URL)
        except argparse.ArgumentTypeError as exc:
            parser.error(f"${ROLLOUT_URL_ENV} {exc}")
    from .experiment import run_experiment

    return run_experiment(args, transport)


def cmd_rules(args: argparse.Namespace, transport: httpx.BaseTransport | None = None) -> int:
    """`mirrorgate rules`: check the arguments, then run it."""
    parser: argparse.ArgumentParser = args.parser
    if not args.timeout > 0:
        parser.error("--timeout must be a positive number of seconds")
    if args.url is None:
        try:
            args.url = _gateway_url(os.environ.get(ROLLOUT_URL_ENV) or ROLLOUT_DEFAULT_URL)
        except argparse.ArgumentTypeError as exc:
            parser.error(f"${ROLLOUT_URL_ENV} {exc}")
    from .rules import run_rules

    return run_rules(args, transport)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mirrorgate",
        description="Shadow, canary and roll back LLMs, prompts and policies on live traffic.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mirrorgate {_version()}")
    parser.add_argument(
        "--log-level",
        type=str.lower,
        choices=LEVELS,
        default=os.environ.get("MIRRORGATE_LOG_LEVEL", "info").lower(),
        help="log level ($MIRRORGATE_LOG_LEVEL sets the default)",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of a failure, not one line"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gateway", formatter_class=HelpFormatter)
    serve.add_argument(
        "--config", help="config file (default: $MIRRORGATE_CONFIG, ./mirrorgate.yaml)"
    )
    serve.add_argument("--host", help="listen address (default: the config's server.host)")
    serve.add_argument("--port", type=int, help="listen port (default: the config's server.port)")
    serve.add_argument(
        "--workers",
        type=int,
        help="processes serving the port, 1 to 64 (default: the config's server.workers); more "
        "than one needs the store on PostgreSQL",
    )
    serve.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        help="log lines as text or JSON (default: the config's server.log_format)",
    )
    serve.set_defaults(func=cmd_serve)

    check = sub.add_parser(
        "check-config",
        help="validate a config; exit 1 naming every problem",
        formatter_class=HelpFormatter,
    )
    check.add_argument("file", nargs="?", help="config file (or --config)")
    check.add_argument(
        "--config", help="config file (default: $MIRRORGATE_CONFIG, ./mirrorgate.yaml)"
    )
    check.set_defaults(func=cmd_check_config)

    mock = sub.add_parser(
        "mock-upstream",
        help="run the built-in fake OpenAI/Anthropic model server",
        formatter_class=HelpFormatter,
    )
    mock.add_argument("--host", default="127.0.0.1", help="listen address")
    mock.add_argument("--port", type=int, default=9999, help="listen port")
    mock.add_argument("--behavior", help="behaviour file (docs/mock-upstream.md)")
    mock.set_defaults(func=cmd_mock_upstream)

    replay = sub.add_parser(
        "replay",
        help="replay recorded traffic (or an evaluation set) to candidate models offline",
        formatter_class=HelpFormatter,
    )
    replay.add_argument(
        "--config", help="config file (default: $MIRRORGATE_CONFIG, ./mirrorgate.yaml)"
    )
    replay.add_argument(
        "--candidate", action="append", required=True, help="a model name from config (repeatable)"
    )
    replay.add_argument("--route", help="only exchanges of this route")
    replay.add_argument("--since", help="only exchanges since (ISO time, or 30m / 6h / 7d ago)")
    replay.add_argument("--limit", type=int, help="at most N exchanges")
    replay.add_argument("--from-file", help="JSONL of recorded requests instead of the store")
    replay.add_argument("--eval-set", help="JSONL evaluation set: score answers against 'expect'")
    replay.add_argument(
        "--concurrency", type=int, default=8, help="candidate calls in flight at once"
    )
    replay.add_argument("--max-usd", type=float, help="stop a candidate once it has cost this much")
    replay.set_defaults(func=cmd_replay)

    evalset = sub.add_parser(
        "evalset",
        help="build evaluation sets from recorded traffic and corrections; show their runs",
        formatter_class=HelpFormatter,
    )
    evalset.add_argument("action", choices=("build", "history"))
    evalset.add_argument(
        "--config", help="config file (default: $MIRRORGATE_CONFIG, ./mirrorgate.yaml)"
    )
    evalset.add_argument("--route", help="build: the route whose traffic is sampled")
    evalset.add_argument("--since", help="build: the window (ISO time, or 30m / 6h / 7d ago)")
    evalset.add_argument("--size", type=int, help="build: cases in the set")
    evalset.add_argument("--output", help="build: the set's directory")
    evalset.add_argument(
        "--rotate", type=float, help="build: replace this share of the set in --output (0..1]"
    )
    evalset.add_argument("--seed", type=int, default=0, help="build: the sampling seed")
    evalset.add_argument("--name", help="build: the set's name (default: the directory's)")
    evalset.add_argument("--set", help="history: only this set")
    evalset.add_argument("--model", help="history: only this model")
    evalset.add_argument("--limit", type=int, default=200, help="history: the newest N runs")
    evalset.set_defaults(func=cmd_evalset)

    report = sub.add_parser(
        "report",
        help="compare arms: latency, ttft, cost, errors, agreement, checks, corrections",
        formatter_class=HelpFormatter,
    )
    report.add_argument(
        "--config", help="config file (default: $MIRRORGATE_CONFIG, ./mirrorgate.yaml)"
    )
    report.add_argument("--route", help="only this route")
    report.add_argument("--since", help="only since (ISO time, or 30m / 6h / 7d ago)")
    report.add_argument(
        "--format", choices=("md", "html"), default="md", help="Markdown or a standalone HTML page"
    )
    report.add_argument("--output", help="write to FILE instead of stdout")
    report.set_defaults(func=cmd_report)

    rollout = sub.add_parser(
        "rollout",
        help="show or drive canary rollouts through a gateway's admin API",
        formatter_class=HelpFormatter,
        description=(
            "Show or drive the canary rollouts of a running gateway through its admin API "
            "(token: $MIRRORGATE_ADMIN_TOKEN). 'status' without ROUTE lists every route."
        ),
    )
    rollout.add_argument("action", choices=ROLLOUT_ACTIONS)
    rollout.add_argument("route", nargs="?", help="route name (optional for status)")
    rollout.add_argument(
        "--url",
        type=_gateway_url,
        help=f"gateway base URL (default: ${ROLLOUT_URL_ENV}, else {ROLLOUT_DEFAULT_URL})",
    )
    rollout.add_argument("--reason", help="why; kept with the transition (actions only)")
    rollout.add_argument(
        "--to",
        choices=("primary", "fallback"),
        help=(
            "rollback only: 'primary' (canary to 0 %%, the baseline serves) or 'fallback' (the "
            "whole route to its fallback); default: the route's canary.rollback_to"
        ),
    )
    rollout.add_argument(
        "--force",
        action="store_true",
        help="start only: start although the offline gate refuses (needs --reason; recorded)",
    )
    rollout.add_argument("--json", action="store_true", help="print the admin API's JSON")
    rollout.add_argument(
        "--since",
        help="plan: size the rollout on the route's traffic of this last period (default 1h)",
    )
    rollout.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the gateway"
    )
    rollout.set_defaults(func=cmd_rollout, parser=rollout)

    experiment = sub.add_parser(
        "experiment",
        help="start, read or stop a route's A/B experiment through a gateway's admin API",
        formatter_class=HelpFormatter,
        description=(
            "Start, read or stop the online A/B experiment of a route of a running gateway "
            "through its admin API (token: $MIRRORGATE_ADMIN_TOKEN)."
        ),
    )
    experiment.add_argument("action", choices=("start", "status", "stop"))
    experiment.add_argument("route", help="route name")
    experiment.add_argument(
        "--url",
        type=_gateway_url,
        help=f"gateway base URL (default: ${ROLLOUT_URL_ENV}, else {ROLLOUT_DEFAULT_URL})",
    )
    experiment.add_argument("--reason", help="why; kept with the start or stop")
    experiment.add_argument("--json", action="store_true", help="print the admin API's JSON")
    experiment.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the gateway"
    )
    experiment.set_defaults(func=cmd_experiment, parser=experiment)

    rules = sub.add_parser(
        "rules",
        help="list a gateway's rule versions and the templates learned from their prompts",
        formatter_class=HelpFormatter,
        description=(
            "List each rule's versions and the template learned from its system prompts, with "
            "its slots, through a running gateway's admin API (token: $MIRRORGATE_ADMIN_TOKEN)."
        ),
    )
    rules.add_argument("rule", nargs="?", help="only this rule")
    rules.add_argument(
        "--url",
        type=_gateway_url,
        help=f"gateway base URL (default: ${ROLLOUT_URL_ENV}, else {ROLLOUT_DEFAULT_URL})",
    )
    rules.add_argument("--json", action="store_true", help="print the admin API's JSON")
    rules.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the gateway"
    )
    rules.set_defaults(func=cmd_rules, parser=rules)

    demo = sub.add_parser(
        "demo", help="run a complete local scene with no setup", formatter_class=HelpFormatter
    )
    demo.add_argument(
        "--scene",
        choices=DEMO_SCENES,
        default="rollback",
        help="rollback: a canary rolled back after a rule change; guard: rule-flip probes refuse "
        "a canary that memorised a rule, and the guard switches a production model that kept it; "
        "experiment: three arms of an A/B experiment, decided live on business outcomes",
    )
    demo.add_argument("--port", type=int, default=8080, help="gateway port (0: any free port)")
    demo.add_argument(
        "--duration", type=float, default=0.0, help="cut the story short after N seconds"
    )
    demo.add_argument(
        "--keep-running", action="store_true", help="keep the gateway up after the story"
    )
    demo.add_argument(
        "--log-format", choices=LOG_FORMATS, default="text", help="log lines as text or JSON"
    )
    demo.add_argument(
        "--print-config",
        action="store_true",
        help="print the selected scene's configuration (placeholder addresses) as YAML and exit",
    )
    demo.add_argument(
        "--restore",
        action="store_true",
        help="with --scene guard: give returns-bot back to its primary at the end",
    )
    demo.set_defaults(func=cmd_demo, parser=demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return _run(build_parser(), argv)
        except SystemExit:  # --help, --version, a usage error: their output may meet a closed pipe
            sys.stdout.flush()
            raise
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly. Python's own flush of stdout at exit
        # would fail again, so stdout goes to /dev/null from here on.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE_EXIT
    except KeyboardInterrupt:
        return 130


def _run(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    args = parser.parse_args(argv)
    if args.log_level not in LEVELS:  # the variable's value: argparse checks only the flag's
        parser.error(f"$MIRRORGATE_LOG_LEVEL must be one of {', '.join(LEVELS)}")
    configure_logging(args.log_level, getattr(args, "log_format", None) or "text")
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
    except (BrokenPipeError, KeyboardInterrupt):
        raise
    except Exception as exc:
        if args.debug:
            traceback.print_exc()
        else:
            reason = next(iter(str(exc).strip().splitlines()), "")[:300]
            print(
                f"mirrorgate: {args.command} failed: {type(exc).__name__}"
                f"{': ' + reason if reason else ''} (--debug shows the traceback)",
                file=sys.stderr,
            )
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
