"""Running Node from the app tests: ``npm ci`` of a pinned package on first use, and a command
whose output is returned (and shown when it fails)."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

__all__ = ["ensure_installed", "run_node"]


async def run_node(
    cwd: Path, *command: str, env: dict[str, str] | None = None, within: float
) -> str:
    """Run ``command`` in ``cwd``; its output, asserting it exits 0."""
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), within)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    text = output.decode(errors="replace")
    assert process.returncode == 0, f"{' '.join(command)} failed:\n{text}"
    return text


async def ensure_installed(package_dir: Path, marker: str) -> None:
    """``npm ci`` (lock file, no install scripts) unless ``node_modules/<marker>`` exists."""
    if (package_dir / "node_modules" / marker).exists():
        return
    npm = shutil.which("npm")
    assert npm is not None, "npm is required (Node >= 20)"
    env = {"DO_NOT_TRACK": "1", "SCARF_ANALYTICS": "false"}
    await run_node(
        package_dir, npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", env=env, within=600
    )
