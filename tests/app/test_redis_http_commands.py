"""On the Redis backend: test_commands.py (approvals, tool results and their refusals).

The very tests of ``test_commands.py``, collected here with ``start_gateway`` overridden by the
Redis one of :mod:`tests.app.redis_http` (a key prefix per test on the shared Redis).
"""

from __future__ import annotations

from tests.app.redis_http import redis_start_gateway as start_gateway
from tests.app.test_commands import (
    gw,
    test_approval_flow_and_refusals,
    test_expired_approval_is_410,
    test_modified_on_an_editable_approval,
    test_second_resolution_is_already_resolved,
    test_tool_not_awaiting_result_while_run_is_running,
    test_tool_result_flow,
)

__all__ = [
    "gw",
    "start_gateway",
    "test_approval_flow_and_refusals",
    "test_expired_approval_is_410",
    "test_modified_on_an_editable_approval",
    "test_second_resolution_is_already_resolved",
    "test_tool_not_awaiting_result_while_run_is_running",
    "test_tool_result_flow",
]
