"""``python -m tests.app.archive.redis_serve --config FILE --prefix P --port N``: the gateway of
``FILE`` (``backend = "redis"``, archive on) with its Redis keys under the test's own prefix on
the shared Redis, so the instances one test starts form a cluster of their own."""

from __future__ import annotations

import argparse
import os


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args()

    from app.backends.redis import RedisBackend, redis_client
    from app.config import load_settings
    from app.factory import create_app
    from app.server import serve

    settings = load_settings(args.config)
    gateway = settings.gateway
    backend = RedisBackend(
        redis_client(gateway.redis_url),
        event_log_max_len=gateway.event_log_max_len,
        snapshot_every=gateway.snapshot_every,
        lease_ttl_seconds=gateway.lease_ttl_seconds,
        key_prefix=args.prefix,
        conversation_ttl_seconds=gateway.conversation_ttl_seconds,
        instance_id=f"gw-{os.getpid()}",
    )
    app = create_app(settings, backend=backend)
    serve(app, "127.0.0.1", args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
