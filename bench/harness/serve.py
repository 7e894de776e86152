"""Entry point of the bench's server processes: ``serve.py KIND --port P [--config TOML]``.

KIND is ``upstream`` (the mock), ``baseline`` (relay + normalizer) or ``gateway``
(``create_app`` from a TOML config, served by ``GatewayServer``). Always uvicorn with uvloop
and httptools, no access log.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import uvicorn


def build(kind: str, config: str | None) -> Any:
    if kind == "upstream":
        from bench.harness import mock_upstream

        return mock_upstream.app
    if kind == "baseline":
        from bench.harness import baselines

        return baselines.app
    from app.config import load_settings
    from app.factory import create_app

    return create_app(load_settings(config))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["upstream", "baseline", "gateway"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--config", default=None)
    args = parser.parse_args()
    app = build(args.kind, args.config)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    if args.kind == "gateway":
        from app.server import GatewayServer

        GatewayServer(config).run()
    else:
        uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
