"""The browser client ships once: clients/js/src in a checkout, app/static/client in a wheel."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from app.api.routes.system import CLIENT_DIR, client_dir
from tests.clients.js.support import CLIENT, ROOT

SOURCES = CLIENT / "src"
BUILD_INPUTS = ["pyproject.toml", "setup.py", "MANIFEST.in", "README.md"]
PACKAGES = ["core", "providers", "app"]


def test_a_checkout_serves_clients_js_src_itself() -> None:
    assert CLIENT_DIR == SOURCES
    assert not (ROOT / "app" / "static" / "client").exists()  # no second copy in the tree


def test_an_installed_layout_serves_its_packaged_copy(tmp_path: Path) -> None:
    static = tmp_path / "site-packages" / "app" / "static"
    (static / "client").mkdir(parents=True)
    assert client_dir(static) == static / "client"


def test_the_wheel_carries_the_client_under_app_static_client(tmp_path: Path) -> None:
    # Build from a copy holding only what the Dockerfile copies: the wheel needs nothing else.
    src = tmp_path / "src"
    src.mkdir()
    for name in BUILD_INPUTS:
        shutil.copy2(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    shutil.copytree(SOURCES, src / "clients" / "js" / "src")
    dist = tmp_path / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "-w", str(dist), "--no-deps", "-q"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        shipped = {
            name.removeprefix("app/static/client/"): archive.read(name)
            for name in names
            if name.startswith("app/static/client/")
        }
    expected = {
        p.name: p.read_bytes() for p in SOURCES.iterdir() if p.name.endswith((".js", ".d.ts"))
    }
    assert {"agent-reducer.js", "gateway-client.js"} <= set(expected)
    assert shipped == expected  # byte for byte the package's files
    assert {"app/static/index.html", "app/static/demo.js", "app/static/demo.css"} <= names
