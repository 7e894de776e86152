"""clients/js's TypeScript declarations type-check (strict) against x-sdk 2.9's own types."""

from __future__ import annotations

import subprocess

from tests.clients.js.support import CLIENT, ensure_node_modules, node


def test_the_declarations_and_an_app_using_them_type_check() -> None:
    # tsconfig.json: src/*.d.ts and test/types/usage.ts (useXChat with the provider, the
    # package's exports by name), strict, library declarations checked too.
    ensure_node_modules(CLIENT)
    tsc = CLIENT / "node_modules" / "typescript" / "bin" / "tsc"
    proc = subprocess.run(
        [node(), str(tsc), "-p", "tsconfig.json"],
        cwd=CLIENT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
