"""``agent-gateway`` command line.

Each subcommand is one ``add_<name>_command(subparsers)`` function that registers its parser and
sets ``handler`` (``(args) -> exit code``); add yours to ``SUBCOMMANDS``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import Any

import orjson

from core.replay import ReplayResult, ReplayStopped, replay_jsonl

__all__ = ["SUBCOMMANDS", "build_parser", "main"]


def _json_safe(value: Any) -> Any:
    """What ``JSON.stringify`` writes: non-finite numbers become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value


def _dump_json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # an integer beyond 64 bits, a lone surrogate
        return json.dumps(_json_safe(value), separators=(",", ":"), allow_nan=False)


# --- replay --------------------------------------------------------------------------------------


def add_replay_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="reduce a JSON Lines file of AgentEvents and print {state, issues, messages, invalid}",
    )
    parser.add_argument("file", metavar="FILE", help="JSON Lines of AgentEvents, or - for stdin")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="stop with exit 1 at the first protocol issue or invalid line",
    )
    parser.add_argument(
        "--validate",
        action="store_true",
        help='add "validator": the provider contract validator\'s issues, per run',
    )
    parser.set_defaults(handler=run_replay)


def replay_validator_output(args: argparse.Namespace, result: ReplayResult) -> list[Any] | None:
    """Hook for ``--validate`` (providers): return the validator's issues, or None when off."""
    if not getattr(args, "validate", False):
        return None
    from app.cli.providers import replay_validator_issues

    return replay_validator_issues(event for _line, event in result.events)


def _read_input(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def run_replay(args: argparse.Namespace) -> int:
    try:
        text = _read_input(args.file)
    except (OSError, UnicodeDecodeError) as exc:
        print(f"agent-gateway replay: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    try:
        result = replay_jsonl(text, strict=args.strict)
    except ReplayStopped as stop:
        print(f"agent-gateway replay: line {stop.line}: {stop.message}", file=sys.stderr)
        return 1
    output = result.to_dict()
    validator = replay_validator_output(args, result)
    if validator is not None:
        output["validator"] = validator
    sys.stdout.write(_dump_json(output) + "\n")
    return 0


# --- entry point ---------------------------------------------------------------------------------


def add_validate_command(subparsers: Any) -> None:
    from app.cli.providers import add_validate_command as add

    add(subparsers)


def add_gateway_commands(subparsers: Any) -> None:
    from app.cli.gateway import (
        add_check_config_command,
        add_migrate_command,
        add_openapi_command,
        add_serve_command,
    )

    commands = (add_serve_command, add_check_config_command, add_openapi_command)
    for add in (*commands, add_migrate_command):
        add(subparsers)


SUBCOMMANDS: list[Callable[[Any], None]] = [
    add_replay_command,
    add_validate_command,
    add_gateway_commands,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agent-gateway", description="Agent Event Gateway")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add_command in SUBCOMMANDS:
        add_command(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    return handler(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
