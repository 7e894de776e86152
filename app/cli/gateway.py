"""``agent-gateway serve | check-config | openapi``: the gateway's own subcommands."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from app.config import ConfigError, Settings, load_settings

__all__ = [
    "OPENAPI_PATH",
    "add_check_config_command",
    "add_migrate_command",
    "add_openapi_command",
    "add_serve_command",
    "openapi_document",
]

OPENAPI_PATH = Path(__file__).resolve().parent.parent.parent / "openapi" / "openapi.json"


def add_serve_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve the gateway with uvicorn (one process; scale out with the redis backend)",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--config", default=None, help="TOML file (default: $AGENT_GATEWAY_CONFIG, else none)"
    )
    parser.add_argument("--log-level", default="info")
    parser.set_defaults(handler=run_serve)


def _load(path: str | None, command: str) -> Settings | None:
    try:
        return load_settings(path)
    except ConfigError as exc:
        print(f"agent-gateway {command}: invalid configuration: {exc}", file=sys.stderr)
        return None


def run_serve(args: argparse.Namespace) -> int:
    settings = _load(args.config, "serve")
    if settings is None:
        return 2
    from app.factory import create_app
    from app.server import serve

    serve(create_app(settings), args.host, args.port, log_level=args.log_level)
    return 0


def add_check_config_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check-config", help="validate a TOML config file (and env overrides); exit 1 if invalid"
    )
    parser.add_argument("file", metavar="FILE")
    parser.add_argument(
        "--probe-tools",
        action="store_true",
        help="connect to each [mcp.servers] entry and list its tools; exit 1 if one is down",
    )
    parser.set_defaults(handler=run_check_config)


def run_check_config(args: argparse.Namespace) -> int:
    settings = _load(args.file, "check-config")
    if settings is None:
        return 1
    from app.mcp_config import mcp_settings
    from providers.registry import create_provider

    for name, provider in settings.providers.items():
        try:
            config = provider.to_provider_config()
            config["mcp"] = mcp_settings(settings.mcp, provider.mcp_servers)
            create_provider(name, provider.kind, config)
        except Exception as exc:
            print(
                f"agent-gateway check-config: invalid configuration: providers.{name}: {exc}",
                file=sys.stderr,
            )
            return 1
    names = ", ".join(sorted(settings.providers))
    print(f"ok: backend={settings.gateway.backend} providers={names}")
    if getattr(args, "probe_tools", False):
        from app.cli.probe_tools import probe_tools

        return probe_tools(settings)
    return 0


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of the app with the default settings (providers do not matter)."""
    from app.factory import create_app

    document: dict[str, Any] = create_app(Settings()).openapi()
    return document


def render_openapi() -> str:
    return json.dumps(openapi_document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def add_openapi_command(subparsers: Any) -> None:
    parser = subparsers.add_parser("openapi", help="write the OpenAPI document")
    parser.add_argument("--output", default=str(OPENAPI_PATH), help="file, or - for stdout")
    parser.set_defaults(handler=run_openapi)


def run_openapi(args: argparse.Namespace) -> int:
    text = render_openapi()
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
    return 0


def add_migrate_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate", help="create or upgrade the [archive] database schema, then exit"
    )
    parser.add_argument(
        "--config", default=None, help="TOML file (default: $AGENT_GATEWAY_CONFIG, else none)"
    )
    parser.add_argument("--revision", default="head", help="target revision (default: newest)")
    parser.set_defaults(handler=run_migrate)


def run_migrate(args: argparse.Namespace) -> int:
    settings = _load(args.config, "migrate")
    if settings is None:
        return 2
    if not settings.archive.url:
        print("agent-gateway migrate: [archive] url is not set", file=sys.stderr)
        return 2
    import asyncio

    from app.archive.engine import create_engine
    from app.archive.migrate import current_revision, migrate
    from app.archive.url import database_url, safe_url
    from app.archive.writer import describe_error

    url = database_url(settings.archive.url)

    async def upgrade() -> str | None:
        engine = create_engine(url)
        try:
            await migrate(engine, args.revision)
            return await current_revision(engine)
        finally:
            await engine.dispose()

    try:
        revision = asyncio.run(upgrade())
    except Exception as exc:
        print(f"agent-gateway migrate: {safe_url(url)}: {describe_error(exc)}", file=sys.stderr)
        return 1
    print(f"{safe_url(url)}: at revision {revision}")
    return 0
