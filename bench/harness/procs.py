"""Server processes for the benches: start on a free loopback port, read CPU time and RSS.

CPU time and RSS come from ``/proc/<pid>`` (Linux), so each server is measured on its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import redis

if TYPE_CHECKING:
    from bench.harness.redis_cluster import RedisCluster

__all__ = [
    "ROOT",
    "VARIANTS",
    "Fleet",
    "Server",
    "die_with_parent",
    "fleet",
    "free_port",
    "gateway_config",
    "persistent",
    "redis_process",
    "redis_server",
    "start_process",
    "start_server",
]

ROOT = Path(__file__).resolve().parents[2]
SERVE = Path(__file__).resolve().parent / "serve.py"
_TICKS = os.sysconf("SC_CLK_TCK")
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Child side of ``Popen``: get SIGTERM when the bench process dies, never outlive it."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """A running server process."""

    def __init__(self, name: str, process: subprocess.Popen[bytes], port: int) -> None:
        self.name = name
        self.process = process
        self.port = port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process so far."""
        return pid_cpu_seconds(self.pid)

    def rss_bytes(self) -> int:
        return _status_kb(self.pid, "VmRSS") * 1024

    def peak_rss_bytes(self) -> int:
        return _status_kb(self.pid, "VmHWM") * 1024

    def reset_peak_rss(self) -> None:
        """Reset VmHWM to the current RSS (Linux ≥ 4.0: write 5 to clear_refs)."""
        with contextlib.suppress(OSError):
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def start_server(
    kind: str,
    *,
    config: str | None = None,
    env: Mapping[str, str] | None = None,
    health: str = "/healthz",
    timeout: float = 30.0,
) -> Server:
    """Start ``serve.py KIND`` on a free port and wait until ``health`` answers."""
    port = free_port()
    args = [sys.executable, str(SERVE), kind, "--port", str(port)]
    if config is not None:
        args += ["--config", config]
    return start_process(kind, args, port, env=env, health=health, timeout=timeout)


def start_process(
    name: str,
    args: list[str],
    port: int,
    *,
    env: Mapping[str, str] | None = None,
    health: str = "/healthz",
    timeout: float = 30.0,
    cwd: Path = ROOT,
) -> Server:
    """Start ``args`` (a server that will listen on ``port``) and wait until ``health`` answers."""
    kind = name
    full_env = {**os.environ, **(env or {})}
    process = subprocess.Popen(args, env=full_env, cwd=str(cwd), preexec_fn=die_with_parent)
    server = Server(kind, process, port)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{kind} server exited with {process.returncode}")
        try:
            if httpx.get(server.url + health, timeout=1.0).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"{kind} server did not become ready")


def start_tree_gateway(tree: Path, config: str) -> Server:
    """A gateway process importing the app from source tree ``tree`` (its own
    ``bench/harness/serve.py``, run in it): a before/after comparison on one machine."""
    port = free_port()
    serve = tree / "bench" / "harness" / "serve.py"
    args = [sys.executable, str(serve), "gateway", "--port", str(port), "--config", config]
    return start_process(f"gateway {tree}", args, port, cwd=tree)


@contextlib.contextmanager
def servers(*items: Server) -> Iterator[None]:
    try:
        yield
    finally:
        for item in items:
            item.stop()


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(type(value))


def gateway_config(
    upstream: str,
    *,
    backend: str = "memory",
    redis_url: str | None = None,
    gateway: Mapping[str, Any] | None = None,
) -> str:
    """Write a TOML config with providers ``bench`` (openai-chat) and ``bench-agui`` (ag-ui)
    pointed at the mock upstream; limits raised for the fan-out and memory benches."""
    sections: dict[str, dict[str, Any]] = {
        "gateway": {
            "backend": backend,
            "default_provider": "bench",
            "demo_page": False,
            "log_format": "json",
            "heartbeat_seconds": 15,
            **(gateway or {}),
        },
        "limits": {
            "max_subscribers_per_conversation": 2000,
            "max_subscribers_per_principal": 5000,
            "runs_per_minute_per_principal": 1000000,
            "max_conversations_per_principal": 1000000,
        },
        "providers.bench": {
            "kind": "openai-chat",
            "url": upstream + "/v1/chat/completions",
            "model": "bench",
            "timeout_seconds": 300,
            "idle_timeout_seconds": 60,
        },
        "providers.bench-agui": {
            "kind": "ag-ui",
            "url": upstream + "/agui",
            "timeout_seconds": 300,
            "idle_timeout_seconds": 60,
        },
    }
    if redis_url is not None:
        sections["gateway"]["redis_url"] = redis_url
    lines: list[str] = []
    for name, values in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items() if v is not None]
        lines.append("")
    handle, path = tempfile.mkstemp(prefix="bench-gateway-", suffix=".toml")
    with os.fdopen(handle, "w") as file:
        file.write("\n".join(lines))
    return path


def pid_user_system_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / _TICKS, int(fields[12]) / _TICKS


def pid_cpu_seconds(pid: int) -> float:
    """CPU time of process ``pid`` so far: the scheduler's on-CPU time of each of its live
    threads (``/proc/<pid>/task/*/schedstat``, in ns), else user + system time.

    ``/proc/<pid>/stat`` counts in clock ticks (10 ms): a 20,000-event run at ~10 µs per event
    is ~20 ticks, so one tick more or less moved a per-event figure by 0.5 µs (5 %) and a
    ratio of two such figures by up to 10 %. The scheduler counts in ns. A thread that ended
    takes its count with it: the servers' threads (the loop's, the default executor's) live as
    long as the process.
    """
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):  # a thread that just ended
                total += int((task / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return sum(pid_user_system_seconds(pid))
    return total / 1e9 if total else sum(pid_user_system_seconds(pid))


class RedisProcess:
    """A private ``redis-server``: its URL and its CPU time (benches count it with the gateway)."""

    def __init__(self, url: str, pid: int) -> None:
        self.url = url
        self.pid = pid

    def cpu_seconds(self) -> float:
        return pid_cpu_seconds(self.pid)


#: How ``docker-compose.yml`` deploys Redis: an append-only file, fsynced every second.
PERSISTENCE = ("--appendonly", "yes", "--appendfsync", "everysec")


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A private ``redis-server`` on a free port, persisting as deployed; yields its URL."""
    with redis_process() as server:
        yield server.url


@contextlib.contextmanager
def redis_process(*extra: str, persistence: bool = True) -> Iterator[RedisProcess]:
    """A private ``redis-server`` on a free port, in a directory of its own, with the deployed
    append-only file (``persistence=False``: none, for a bench about persistence off); ``extra``
    arguments last."""
    port = free_port()
    directory = tempfile.mkdtemp(prefix="bench-redis-")
    process = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            directory,
            "--save",
            "",
            *(PERSISTENCE if persistence else ("--appendonly", "no")),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        yield RedisProcess(f"redis://127.0.0.1:{port}/0", process.pid)
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def persistent(url: str, within: float = 60.0) -> Iterator[None]:
    """A Redis found already running at ``url``, persisting as deployed for the block
    (``CONFIG SET appendonly yes``, ``appendfsync everysec``), then set back as it was. Waits
    for the append-only file's first rewrite (a fork) to end before the block measures."""
    client = redis.Redis.from_url(url)
    try:
        before = {
            name: str(client.config_get(name)[name]) for name in ("appendonly", "appendfsync")
        }
        client.config_set("appendfsync", "everysec")
        client.config_set("appendonly", "yes")
        deadline = time.monotonic() + within
        while True:
            info = client.info("persistence")
            if info["aof_enabled"] and not info["aof_rewrite_in_progress"]:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url}: the append-only file was not written in {within} s")
            time.sleep(0.05)
        try:
            yield
        finally:
            client.config_set("appendonly", before["appendonly"])
            client.config_set("appendfsync", before["appendfsync"])
    finally:
        client.close()


#: How long :func:`fleet` waits for a gateway to answer: longer than :func:`start_server`'s
#: default, which a loaded shared machine has exceeded (a gateway and a cluster starting).
READY_WITHIN = 120.0

#: The gateways a side-by-side bench can start, by name: (``[gateway] backend``, the Redis it
#: reads, more ``[gateway]`` settings). ``"standalone"`` is the private ``redis-server``;
#: ``"cluster"`` a private Redis Cluster (``bench/harness/redis_cluster.py``: three masters,
#: three replicas), seeded by its first node. ``"redis-public"``: the standalone through every
#: public path (no fast path, as the cluster client always is).
VARIANTS: dict[str, tuple[str, str | None, dict[str, Any]]] = {
    "memory": ("memory", None, {}),
    "redis": ("redis", "standalone", {}),
    "redis-public": ("redis", "standalone", {"fast_paths": False}),
    "cluster": ("redis", "cluster", {"redis_cluster": True}),
    "cluster-wait": ("redis", "cluster", {"redis_cluster": True, "redis_wait_replicas": 1}),
}


@dataclass
class Fleet:
    """What :func:`fleet` started: the Redis servers (``cluster`` only when a variant reads
    it) and one gateway per variant."""

    redis: RedisProcess
    cluster: RedisCluster | None
    gateways: dict[str, Server]

    def redis_cpu_seconds(self, variant: str) -> float:
        """CPU time so far of every Redis process the gateway ``variant`` reads (the cluster:
        masters and replicas); 0 for the memory backend."""
        reads = VARIANTS[variant][1]
        if reads == "standalone":
            return self.redis.cpu_seconds()
        if reads == "cluster" and self.cluster is not None:
            return self.cluster.cpu_seconds()
        return 0.0


@contextlib.contextmanager
def fleet(variants: tuple[str, ...], *, baseline: bool = False) -> Iterator[Fleet]:
    """The mock upstream, a private ``redis-server`` (and a private Redis Cluster when a
    variant reads one) and one gateway per variant of :data:`VARIANTS` (all reading that
    upstream), stopped on exit. With ``baseline``, the baselines' server (same upstream) is in
    the gateways too, under ``"baseline"``."""
    from bench.harness.redis_cluster import redis_cluster

    unknown = [name for name in variants if name not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown gateway variants {unknown}; known: {sorted(VARIANTS)}")
    with contextlib.ExitStack() as exits:
        upstream = start_server("upstream")
        exits.callback(upstream.stop)
        redis = exits.enter_context(redis_process())
        cluster = None
        if any(VARIANTS[name][1] == "cluster" for name in variants):
            cluster = exits.enter_context(redis_cluster())
        gateways: dict[str, Server] = {}
        for name in variants:
            backend, reads, settings = VARIANTS[name]
            url = cluster.url if reads == "cluster" and cluster is not None else redis.url
            config = gateway_config(upstream.url, backend=backend, redis_url=url, gateway=settings)
            gateways[name] = start_server("gateway", config=config, timeout=READY_WITHIN)
            exits.callback(gateways[name].stop)
        if baseline:
            gateways["baseline"] = start_server("baseline", env={"BENCH_UPSTREAM": upstream.url})
            exits.callback(gateways["baseline"].stop)
        yield Fleet(redis, cluster, gateways)


@contextlib.contextmanager
def gateways_per_backend(
    backends: tuple[str, ...], *, baseline: bool = False
) -> Iterator[tuple[RedisProcess, dict[str, Server]]]:
    """:func:`fleet` as a side-by-side memory vs Redis bench takes it: the private
    ``redis-server`` and the gateways by name (``backends``: names of :data:`VARIANTS`)."""
    with fleet(backends, baseline=baseline) as started:
        yield started.redis, started.gateways
