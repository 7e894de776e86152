"""Shared pieces of the benchmarks: mock upstreams, baselines, process control, a fast client.

Every server runs in its own process (uvicorn with uvloop + httptools) so that its CPU time
and RSS can be read from ``/proc``; the bench script itself is the client.
"""

from __future__ import annotations

__all__ = ["client", "mock_upstream", "procs", "stats"]
