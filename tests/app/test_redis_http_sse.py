"""On the Redis backend: test_sse.py (frames, resume, snapshots, fan-out, stalls, shutdown).

The very tests of ``test_sse.py``, collected here with ``start_gateway`` overridden by the
Redis one of :mod:`tests.app.redis_http` (a key prefix per test on the shared Redis).
Not repeated: the byte cap of coalesced sends (a unit test without a gateway).
"""

from __future__ import annotations

from tests.app.redis_http import redis_start_gateway as start_gateway
from tests.app.test_sse import (
    gw,
    test_cursor_from_before_delete_is_unknown,
    test_detach_is_not_abort,
    test_fifty_subscribers_receive_identical_sequences,
    test_frames_headers_heartbeat_and_retry,
    test_post_runs_stream_true,
    test_resume_with_last_event_id_is_exact,
    test_shutdown_delivers_run_cancelled_before_closing,
    test_shutdown_lets_a_run_finish_within_the_grace,
    test_stalled_subscriber_is_dropped_and_does_not_delay_others,
    test_subscribe_before_the_first_run_gets_the_empty_snapshot,
    test_trimmed_cursor_yields_a_snapshot_then_later_events,
    test_unknown_cursor_yields_a_snapshot_first,
    test_until_idle_closes_at_once_when_idle,
)

__all__ = [
    "gw",
    "start_gateway",
    "test_cursor_from_before_delete_is_unknown",
    "test_detach_is_not_abort",
    "test_fifty_subscribers_receive_identical_sequences",
    "test_frames_headers_heartbeat_and_retry",
    "test_post_runs_stream_true",
    "test_resume_with_last_event_id_is_exact",
    "test_shutdown_delivers_run_cancelled_before_closing",
    "test_shutdown_lets_a_run_finish_within_the_grace",
    "test_stalled_subscriber_is_dropped_and_does_not_delay_others",
    "test_subscribe_before_the_first_run_gets_the_empty_snapshot",
    "test_trimmed_cursor_yields_a_snapshot_then_later_events",
    "test_unknown_cursor_yields_a_snapshot_first",
    "test_until_idle_closes_at_once_when_idle",
]
