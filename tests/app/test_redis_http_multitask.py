"""On the Redis backend: test_multitask.py (reject, interrupt, enqueue, queued-run aborts).

The very tests of ``test_multitask.py``, collected here with ``start_gateway`` overridden by the
Redis one of :mod:`tests.app.redis_http` (a key prefix per test on the shared Redis).
"""

from __future__ import annotations

from tests.app.redis_http import redis_start_gateway as start_gateway
from tests.app.test_multitask import (
    gw,
    test_abort_of_a_queued_run_cancels_it,
    test_enqueue_runs_in_order_and_is_bounded,
    test_interrupt_cancels_the_active_run_then_starts,
    test_refused_requests_leave_no_bookkeeping,
    test_reject_is_409_run_in_progress,
)

__all__ = [
    "gw",
    "start_gateway",
    "test_abort_of_a_queued_run_cancels_it",
    "test_enqueue_runs_in_order_and_is_bounded",
    "test_interrupt_cancels_the_active_run_then_starts",
    "test_refused_requests_leave_no_bookkeeping",
    "test_reject_is_409_run_in_progress",
]
