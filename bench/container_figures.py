"""The container figures of BENCHMARKS.md: image size, ``run`` to a ready ``/readyz``, idle RSS.

Builds (or reuses) the image with ``scripts/image.sh``, then runs it ``--rounds`` times as ops
would (read-only root, /tmp tmpfs, memory backend), each time measuring the seconds from the
engine's ``run`` to the first 200 from ``/readyz`` on the published port, and the gateway
process's VmRSS after it has been idle for ``--idle`` seconds. Prints one line per round and
the medians.

Usage: ``.venv/bin/python bench/container_figures.py [--rounds 5] [--idle 5]``
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def engine() -> tuple[str, dict[str, str]]:
    script = "source scripts/container-engine.sh && container_engine && env -0"
    out = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, check=True)
    env = dict(item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item)
    return env["ENGINE"], {**os.environ, **env}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as res:
            return bool(res.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--idle", type=float, default=5.0)
    args = parser.parse_args()
    name, env = engine()
    build = subprocess.run(
        [str(ROOT / "scripts" / "image.sh")], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert build.returncode == 0, build.stderr[-3000:]
    image = build.stdout.strip().splitlines()[-1]
    inspect = [name, "image", "inspect", "--format", "{{.Size}}", image]
    size = int(subprocess.run(inspect, env=env, capture_output=True, check=True).stdout)
    print(f"engine {name}, image {image}: {size / 1e6:.0f} MB")
    readies, rsses = [], []
    for _ in range(args.rounds):
        port, container = free_port(), f"agw-bench-{uuid.uuid4().hex[:8]}"
        cmd = [
            name, "run", "-d", "--name", container, "-p", f"127.0.0.1:{port}:8000",
            "--read-only", "--tmpfs", "/tmp", "-e", "AGENT_GATEWAY_GATEWAY__BACKEND=memory", image,
        ]  # fmt: skip
        start = time.monotonic()
        try:
            subprocess.run(cmd, env=env, capture_output=True, check=True)
            while not ready(f"http://127.0.0.1:{port}/readyz"):
                assert time.monotonic() - start < 120, "not ready in 120 s"
                time.sleep(0.02)
            readies.append(time.monotonic() - start)
            time.sleep(args.idle)
            status = subprocess.run(
                [name, "exec", container, "cat", "/proc/1/status"],
                env=env, capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            rss_kb = next(int(line.split()[1]) for line in status.splitlines() if "VmRSS" in line)
            rsses.append(rss_kb / 1024)
            print(f"run -> ready {readies[-1]:.2f} s, idle RSS {rsses[-1]:.1f} MiB")
        finally:
            subprocess.run([name, "rm", "-f", "-t", "0", container], env=env, capture_output=True)
    print(
        f"median over {args.rounds}: image {size / 1e6:.0f} MB, run -> ready "
        f"{statistics.median(readies):.2f} s, idle RSS {statistics.median(rsses):.1f} MiB"
    )


if __name__ == "__main__":
    main()
