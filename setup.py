"""Build hook: the browser client (clients/js/src) ships in the wheel as app/static/client.

The JavaScript lives once, in clients/js; the gateway serves it under /static/client. A source
checkout or an editable install serves clients/js/src directly (app/api/routes/system.py), and
this hook copies the same files into a built wheel. Everything else is in pyproject.toml.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CLIENT_SOURCE = Path(__file__).resolve().parent / "clients" / "js" / "src"
CLIENT_TARGET = Path("app") / "static" / "client"


def _client_files() -> list[Path]:
    files = sorted(
        p for p in CLIENT_SOURCE.glob("*") if p.name.endswith((".js", ".d.ts")) and p.is_file()
    )
    if not any(p.name == "agent-reducer.js" for p in files):
        raise SystemExit(f"the browser client is missing: no agent-reducer.js in {CLIENT_SOURCE}")
    return files


class BuildPyWithClient(build_py):
    """build_py, plus clients/js/src/*.js and *.d.ts copied to app/static/client."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install serves clients/js/src in place
            return
        target = Path(self.build_lib) / CLIENT_TARGET
        self.mkpath(str(target))
        for source in _client_files():
            self.copy_file(str(source), str(target / source.name))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs: list[str] = super().get_outputs(include_bytecode)
        if self.editable_mode:
            return outputs
        target = Path(self.build_lib) / CLIENT_TARGET
        return outputs + [str(target / p.name) for p in _client_files()]


setup(cmdclass={"build_py": BuildPyWithClient})
