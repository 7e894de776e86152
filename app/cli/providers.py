"""Provider-side CLI pieces: ``replay --validate`` and ``validate --kind KIND FILE``.

- ``replay_validator_issues(events)``: the contract validator over a replayed file, run per run
  (a file may hold a whole conversation); each issue carries its ``runId``.
- ``agent-gateway validate --kind KIND FILE``: replays a recorded upstream stream (SSE text, or
  JSON lines for ``.jsonl``) through a provider of ``KIND`` and prints
  ``{"events": N, "issues": [...], "state"}``; exit 1 when there are issues, 2 when the file
  cannot be read or the kind is unknown.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from providers.base import standard_capabilities
from providers.history import replay_events
from providers.recorded_replay import DIALECT_OF_KIND, replay_recording
from providers.registry import UnknownProviderKind, create_provider
from providers.testing import make_options, run_collect
from providers.transports import ReplayTransport
from providers.validator import validate_agent_provider_events

__all__ = ["add_validate_command", "replay_validator_issues", "run_validate"]


def replay_validator_issues(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    by_run: dict[str, list[Mapping[str, Any]]] = {}
    for event in events:
        by_run.setdefault(str(event.get("runId")), []).append(event)
    capabilities = standard_capabilities(["async-iterable"])
    issues: list[dict[str, Any]] = []
    for run_id, run_events in by_run.items():
        for issue in validate_agent_provider_events(capabilities, run_events):
            issues.append({**issue, "runId": run_id})
    return issues


def add_validate_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="replay a recorded upstream stream through a provider kind and validate its events",
    )
    parser.add_argument("--kind", required=True, help="provider kind (e.g. openai-chat)")
    parser.add_argument("file", metavar="FILE", help="recorded upstream stream")
    parser.add_argument("--prompt", default="replay", help="the run's input prompt")
    parser.set_defaults(handler=run_validate)


async def _validate(kind: str, path: Path, prompt: str) -> dict[str, Any]:
    config = {
        "url": "http://replay.invalid/",
        "model": "replay",
        "transport": "sse",
        "path": str(path),
    }
    provider = create_provider("replay", kind, config)
    if kind in DIALECT_OF_KIND:  # model/AG-UI recordings: README loading rules, turns split
        events = await replay_recording(provider, path, kind, {"prompt": prompt})
    else:
        subject = copy.copy(provider)
        subject.transport = ReplayTransport(path, kind=provider.transport.kind)
        events = await run_collect(subject, {"prompt": prompt}, options=make_options(now=None))
    issues = validate_agent_provider_events(provider.capabilities, events)
    return {"events": len(events), "issues": issues, "state": replay_events(events)}


def run_validate(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():
        print(f"agent-gateway validate: cannot read {args.file}", file=sys.stderr)
        return 2
    try:
        result = asyncio.run(_validate(args.kind, path, args.prompt))
    except UnknownProviderKind as exc:
        print(f"agent-gateway validate: {exc}", file=sys.stderr)
        return 2
    except (OSError, UnicodeDecodeError) as exc:
        print(f"agent-gateway validate: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
    return 1 if result["issues"] else 0
