"""On the Redis backend: test_ws.py (ops, resume, auth, shutdown, stalled sockets).

The very tests of ``test_ws.py``, collected here with ``start_gateway`` overridden by the
Redis one of :mod:`tests.app.redis_http` (a key prefix per test on the shared Redis).
"""

from __future__ import annotations

from tests.app.redis_http import redis_start_gateway as start_gateway
from tests.app.test_ws import (
    gw,
    test_abort_and_resume_ops,
    test_bad_key_and_bad_token,
    test_malformed_frames_get_error_frames_and_socket_survives,
    test_shutdown_delivers_run_cancelled_then_closes_1001,
    test_since_query_resumes,
    test_snapshot_request_ack_events,
    test_stalled_websocket_is_dropped,
)

__all__ = [
    "gw",
    "start_gateway",
    "test_abort_and_resume_ops",
    "test_bad_key_and_bad_token",
    "test_malformed_frames_get_error_frames_and_socket_survives",
    "test_shutdown_delivers_run_cancelled_then_closes_1001",
    "test_since_query_resumes",
    "test_snapshot_request_ack_events",
    "test_stalled_websocket_is_dropped",
]
