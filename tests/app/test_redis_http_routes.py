"""On the Redis backend: test_routes.py (routes and their answers).

The very tests of ``test_routes.py``, collected here with ``start_gateway`` overridden by the
Redis one of :mod:`tests.app.redis_http` (a key prefix per test on the shared Redis).
Not repeated: request validation (422/413/415), which never reaches the backend.
"""

from __future__ import annotations

from tests.app.redis_http import redis_start_gateway as start_gateway
from tests.app.test_routes import (
    gw,
    test_abort_is_idempotent,
    test_bearer_auth_and_principal_isolation,
    test_delete_aborts_the_active_run,
    test_delete_ends_open_streams,
    test_history_reaches_the_provider,
    test_idempotency_key_on_runs,
    test_key_of_128_allowed_characters_is_accepted,
    test_providers_health_and_readiness,
    test_reload_reuses_the_last_input_without_a_user_message,
    test_run_record_wait_and_title,
    test_start_run_answers_202_with_the_documented_fields,
    test_state_delete_and_lifecycle,
    test_unknown_provider_is_404,
    test_upstream_failure_is_an_event_not_an_http_error,
)

__all__ = [
    "gw",
    "start_gateway",
    "test_abort_is_idempotent",
    "test_bearer_auth_and_principal_isolation",
    "test_delete_aborts_the_active_run",
    "test_delete_ends_open_streams",
    "test_history_reaches_the_provider",
    "test_idempotency_key_on_runs",
    "test_key_of_128_allowed_characters_is_accepted",
    "test_providers_health_and_readiness",
    "test_reload_reuses_the_last_input_without_a_user_message",
    "test_run_record_wait_and_title",
    "test_start_run_answers_202_with_the_documented_fields",
    "test_state_delete_and_lifecycle",
    "test_unknown_provider_is_404",
    "test_upstream_failure_is_an_event_not_an_http_error",
]
