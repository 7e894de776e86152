"""In-process hot path of one stream: CPU per event of each layer, without sockets.

The ``openai-chat`` provider reads a prebuilt Chat Completions stream (``--chunks`` deltas,
``--burst`` SSE events per read) from an in-memory httpx transport, so the figures are the
gateway's own Python work, free of the mock, the client and the kernel:

- ``runner``: ``run_agent_provider`` with a consumer that does nothing (SSE parse, chunk decode,
  event creation, the runner's checks);
- ``execute_run``: the same run through ``execute_run`` on the gateway's instrumented memory
  backend with its metrics (the runner plus cap, tracker, pipe, append, reduce, log, notify,
  the run's end), no subscriber. With ``--backend redis`` the backend is Redis (a private
  ``redis-server``; its own CPU is not counted here, see ``redis_ratio_bench.py``).

CPU time (``time.process_time``) per event, best of ``--rounds``; the collector is tuned as in
a serving process (``app.gc_policy``). Usage: ``.venv/bin/python bench/hotpath_bench.py
[--chunks 20000] [--burst 16] [--rounds 7] [--backend memory|redis]``
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop

from app.backends import ConversationMeta, ConversationRef
from app.config import Settings
from app.gateway import Gateway
from app.gc_policy import tune_for_serving
from app.runs.execute import ActiveRun, RunRequest, execute_run
from bench.harness import procs
from providers.contract import AgentEvent, RunOptions
from providers.openai_chat import OpenAIChatProvider
from providers.runner import run_agent_provider
from providers.signal import AbortSignal
from providers.testing import sse_reads_transport

HEAD = b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","model":"bench",'


def upstream_reads(chunks: int, burst: int) -> list[bytes]:
    """The upstream's bytes, ``burst`` SSE events per read (as the mock writes them)."""
    frames = [HEAD + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n']
    frames += [
        HEAD + b'"choices":[{"index":0,"delta":{"content":"t=%.6f;"}}]}\n\n' % (1.7e9 + i)
        for i in range(chunks)
    ]
    frames.append(
        HEAD + b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}\n\n'
        b"data: [DONE]\n\n" % (chunks, chunks + 5)
    )
    return [b"".join(frames[i : i + burst]) for i in range(0, len(frames), burst)]


def provider_for(reads: list[bytes]) -> OpenAIChatProvider:
    transport = sse_reads_transport(reads)
    return OpenAIChatProvider("bench", url="http://upstream/v1", model="bench", transport=transport)


async def runner_only(provider: OpenAIChatProvider) -> int:
    count = 0

    async def on_event(event: AgentEvent) -> None:
        nonlocal count
        count += 1

    options = RunOptions(session_id="s", run_id="r", signal=AbortSignal(), start_session=True)
    await run_agent_provider(provider, {"prompt": "bench"}, options, on_event)
    return count


async def full_run(gateway: Gateway, number: int) -> tuple[float, int]:
    """CPU seconds of one run through ``execute_run`` and the number of events it logged."""
    ref = ConversationRef("bench", f"c{number}")
    now = time.time() * 1000
    await gateway.backend.create_conversation(ref, ConversationMeta(f"s{number}", now, now))
    request = RunRequest(f"r{number}", {"prompt": "bench"}, "bench")
    active = ActiveRun(request.run_id)
    start = time.process_time()
    # As the run manager does: the run slot is claimed (on Redis, the owner's live state and
    # fenced writer then take the appends), the run executed, the slot released.
    if not await gateway.backend.claim_run(ref, active):  # not an assert: python -O skips those
        raise RuntimeError(f"the run slot of {ref} was not granted")
    try:
        await execute_run(
            gateway.backend,
            gateway.catalog,
            gateway.settings,
            ref,
            request,
            active,
            gateway.metrics,
        )
    finally:
        await gateway.backend.release_run(ref, request.run_id)
    cpu = time.process_time() - start
    snapshot = await gateway.backend.snapshot(ref)
    assert snapshot is not None
    assert snapshot.state["runs"][request.run_id]["status"] == "completed"
    await gateway.backend.delete(ref)
    return cpu, int(snapshot.state["lastSequenceByRun"][request.run_id]) + 1


async def measure(
    chunks: int, burst: int, rounds: int, redis_url: str | None = None
) -> dict[str, float]:
    reads = upstream_reads(chunks, burst)
    provider = provider_for(reads)
    gateway_section: dict[str, Any] = {"default_provider": "bench"}
    if redis_url is not None:
        gateway_section |= {"backend": "redis", "redis_url": redis_url}
    settings = Settings.model_validate(
        {
            "gateway": gateway_section,
            "providers": {"bench": {"kind": "openai-chat", "url": "http://upstream/v1"}},
        }
    )
    gateway = Gateway(settings, providers={"bench": provider})
    await gateway.start()
    tune_for_serving()
    best: dict[str, float] = {}
    try:
        for number in range(rounds):
            start = time.process_time()
            events = await runner_only(provider)
            timings = {"runner": (time.process_time() - start, events)}
            timings["execute_run"] = await full_run(gateway, number)
            for name, (cpu, events) in timings.items():
                per_event = cpu / events * 1e6
                best[name] = min(best.get(name, per_event), per_event)
    finally:
        await gateway.close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=20000)
    parser.add_argument("--burst", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--backend", choices=["memory", "redis"], default="memory")
    args = parser.parse_args()
    with contextlib.ExitStack() as exits:
        redis_url = None
        if args.backend == "redis":
            redis_url = exits.enter_context(procs.redis_server())
        best: dict[str, Any] = uvloop.run(measure(args.chunks, args.burst, args.rounds, redis_url))
    print(
        f"{args.chunks} chunks, {args.burst} per read, {args.backend} backend, best of "
        f"{args.rounds} (CPU µs/event):"
    )
    for name, value in best.items():
        print(f"{name:>12}  {value:6.2f}")
    app_side = best["execute_run"] - best["runner"]
    print(
        f"SUMMARY hotpath runner {best['runner']:.2f} µs/event, execute_run "
        f"{best['execute_run']:.2f} µs/event (the app's share {app_side:.2f})"
    )


if __name__ == "__main__":
    main()
