"""No use of another package's private API outside the compat modules (issue 50, item 1).

The scanner is :mod:`tests.structure.private_api`. ``KNOWN`` lists, one line each, the uses that
the helpers of issue 50 are removing right now (file, name, who removes it). The test fails on any
use not listed (a new one) and on a listed one that is gone, so the list stays exact and only
shrinks; when it is empty, nothing outside ``app/compat/`` and ``providers/compat/`` touches another
package's internals.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.structure.private_api import Use, scan_source, scan_tree

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "providers", "app")
COMPAT = ("app/compat/", "providers/compat/")


# (file, private name, what is still to be done about it): empty since issue 50's helpers
# moved every use into the compat modules; a use found outside them fails the test.
KNOWN: frozenset[tuple[str, str, str]] = frozenset()


def compare(uses: list[Use], known: frozenset[tuple[str, str, str]]) -> tuple[list[str], list[str]]:
    """(uses not in ``known``, entries of ``known`` no longer used), each as readable lines."""
    found = {u.key() for u in uses}
    listed = {(path, name) for path, name, _helper in known}
    new = [
        f"{u.path}:{u.line}: {u.kind} {u.name} ({u.owner})" for u in uses if u.key() not in listed
    ]
    gone = [f"{p}: {n} ({h})" for p, n, h in sorted(known) if (p, n) not in found]
    return new, gone


def test_no_new_private_api_use_and_the_known_list_is_exact() -> None:
    new, gone = compare(scan_tree(ROOT, PACKAGES, COMPAT), KNOWN)
    header = "another package's private API used outside the compat modules:\n"
    assert not new, header + "\n".join(new)
    assert not gone, "listed in KNOWN but no longer used (remove the line):\n" + "\n".join(gone)


def kinds(source: str) -> set[tuple[str, str]]:
    return {(u.kind, u.name) for u in scan_source(textwrap.dedent(source))}


def test_an_import_of_another_distributions_private_module_is_found() -> None:
    assert kinds("import httpx._client\n") == {("import", "httpx._client")}
    assert kinds("from httpcore._async.http11 import AsyncHTTP11Connection\n") == {
        ("import", "httpcore._async.http11")
    }
    assert kinds("from httpx import _client\n") == {("import", "httpx._client")}
    assert kinds("import httpx\nfrom httpx import AsyncClient\n") == set()


def test_imports_of_our_own_private_modules_do_not_count() -> None:
    source = "from app.backends.redis import _x\nimport core._y\nfrom ._z import w\n"
    assert kinds(source) == set()


def test_a_getattr_with_a_private_literal_is_found() -> None:
    assert kinds("getattr(obj, '_reader', None)\n") == {("getattr", "_reader")}
    source = "hasattr(obj, '_x')\nsetattr(obj, '_y', 1)\n"
    assert kinds(source) == {("getattr", "_x"), ("getattr", "_y")}
    assert kinds("getattr(obj, '__name__')\ngetattr(obj, 'reader')\n") == set()


def test_an_override_of_a_base_private_method_is_found() -> None:
    source = """
        from sse_starlette import EventSourceResponse

        class Fast(EventSourceResponse):
            async def _ping(self, send): ...
            async def _not_on_the_base(self): ...
            async def __call__(self, scope, receive, send): ...
    """
    assert kinds(source) == {("override", "_ping")}


def test_an_override_through_a_module_alias_is_found() -> None:
    source = """
        import httpcore

        class Pool(httpcore.AsyncConnectionPool):
            def _assign_requests_to_connections(self): ...
    """
    assert kinds(source) == {("override", "_assign_requests_to_connections")}


def test_a_private_attribute_of_an_imported_module_is_found() -> None:
    assert kinds("import redis\nredis._x\n") == {("attribute", "_x")}
    assert kinds("import redis.asyncio as r\nr.client._y\n") == {("attribute", "_y")}


def test_a_private_attribute_of_an_annotated_parameter_is_found() -> None:
    source = """
        from redis.asyncio import ConnectionPool
        import redis.asyncio.connection

        def f(pool: ConnectionPool, conn: "redis.asyncio.connection.Connection | None") -> None:
            pool._available_connections.clear()
            conn._writer
            pool.max_connections
    """
    assert kinds(source) == {("attribute", "_available_connections"), ("attribute", "_writer")}


def test_a_private_attribute_of_a_constructed_instance_is_found() -> None:
    source = """
        import httpx

        client = httpx.AsyncClient()
        client._transport
        async def f() -> None:
            c: httpx.AsyncClient = httpx.AsyncClient()
            c._mounts
    """
    assert kinds(source) == {("attribute", "_transport"), ("attribute", "_mounts")}


def test_a_private_attribute_reached_through_a_foreign_object_is_found() -> None:
    source = """
        from typing import Any
        import httpx

        def f(response: httpx.Response) -> None:
            bound: Any = response.stream
            inner = bound._stream
            inner._closed
    """
    assert kinds(source) == {("attribute", "_stream"), ("attribute", "_closed")}


def test_a_private_attribute_of_a_self_attribute_of_a_foreign_class_is_found() -> None:
    source = """
        from redis.asyncio import ConnectionPool

        class Lean:
            pool: ConnectionPool

            def __init__(self) -> None:
                self.other = ConnectionPool()

            def take(self) -> None:
                self.pool._in_use_connections
                self.other._available_connections
                self._own_state
    """
    expected = {("attribute", "_in_use_connections"), ("attribute", "_available_connections")}
    assert kinds(source) == expected


def test_a_subclass_reading_its_foreign_bases_private_state_is_found() -> None:
    source = """
        from sse_starlette import EventSourceResponse

        class Fast(EventSourceResponse):
            def __init__(self) -> None:
                self._mine = 1

            def peek(self) -> None:
                self._send_lock
                self._mine
    """
    assert kinds(source) == {("attribute", "_send_lock")}


def test_our_own_private_attributes_do_not_count() -> None:
    source = """
        from app.backends.redis.backend import RedisBackend

        class Mine:
            def __init__(self, backend: RedisBackend) -> None:
                self._backend = backend
                backend._redis
                self._backend._x
    """
    assert kinds(source) == set()


def test_compare_reports_a_new_use_and_a_gone_entry() -> None:
    uses = [Use("app/x.py", 3, "import", "httpx._client", "httpx")]
    known = frozenset({("app/y.py", "_gone", "someone")})
    new, gone = compare(uses, known)
    assert new == ["app/x.py:3: import httpx._client (httpx)"]
    assert gone == ["app/y.py: _gone (someone)"]
    assert compare(uses, frozenset({("app/x.py", "httpx._client", "someone")})) == ([], [])


def test_a_deliberately_added_offender_in_the_tree_fails_the_check(tmp_path: Path) -> None:
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "app" / "ok.py").write_text("import httpx\n")
    (tmp_path / "app" / "compat").mkdir()
    (tmp_path / "app" / "compat" / "fast.py").write_text("import httpx._client\n")
    assert scan_tree(tmp_path, PACKAGES, COMPAT) == []
    (tmp_path / "core" / "bad.py").write_text("import httpx._client\n")
    new, _gone = compare(scan_tree(tmp_path, PACKAGES, COMPAT), frozenset())
    assert new == ["core/bad.py:1: import httpx._client (httpx)"]
