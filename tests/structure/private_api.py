"""Find uses of another package's private API in our source, by reading it (AST), not running it.

Four kinds of use are found (issue 50, item 1):

- ``import``: an import of another distribution's ``_``-module (``import httpx._client``,
  ``from httpcore._async import x``) or of a ``_``-name from one (``from redis.client import _x``);
- ``getattr``: ``getattr``/``hasattr``/``setattr``/``delattr`` with a ``"_…"`` string literal;
- ``override``: a class whose base is another package's class defines a ``_method`` that exists on
  that base (looked up at run time, the base imported);
- ``attribute``: ``x._name`` where ``x`` is a name bound to an import of another package, a
  parameter or variable annotated with (or assigned a call of) another package's class, an
  attribute of ``self`` so annotated or assigned, or ``self`` in a subclass of another package's
  class reading a ``_``-attribute of that base.

Dunder names (``__x__``) are public protocol and never count. "Another package" is any top-level
module that is not one of ours (``core``, ``providers``, ``app``): a third-party distribution
(named with :func:`importlib.metadata.packages_distributions`) or the standard library.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata
import inspect
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

OWN_PACKAGES = frozenset({"core", "providers", "app"})
# Annotations that name no class of their own (``x: Any`` says nothing about whose object x is).
TYPING_MODULES = frozenset({"typing", "typing_extensions", "collections", "types"})
ATTR_FUNCS = frozenset({"getattr", "hasattr", "setattr", "delattr"})


@dataclass(frozen=True, order=True)
class Use:
    """One use of a private name: where, which name, which kind, and whose."""

    path: str
    line: int
    kind: str
    name: str
    owner: str

    def key(self) -> tuple[str, str]:
        return (self.path, self.name)


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def distribution_of(top: str) -> str:
    """The distribution that provides a top-level module, or the module's name (stdlib, unknown)."""
    dists = _distributions().get(top)
    return dists[0] if dists else top


def is_foreign(module: str) -> bool:
    top = module.split(".")[0]
    return bool(top) and top not in OWN_PACKAGES


@functools.cache
def _resolve_object(dotted: str) -> object | None:
    """Import ``a.b.C`` (module ``a.b``, attribute ``C``) or ``a.b``; None when that fails."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # any import failure means "unknown"
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def _foreign_classes(cls: type) -> Iterator[type]:
    for klass in cls.__mro__:
        if klass is object:
            continue
        if is_foreign(klass.__module__):
            yield klass


_SELF_ASSIGN = re.compile(r"self\.(_[A-Za-z0-9_]+)\s*(?::[^=\n]*)?=")


@functools.cache
def _self_assigned(file: str) -> frozenset[str]:
    try:
        return frozenset(_SELF_ASSIGN.findall(Path(file).read_text(encoding="utf-8")))
    except OSError:
        return frozenset()


@functools.cache
def foreign_private_names(dotted: str) -> frozenset[str] | None:
    """The ``_``-names another package's class (or its foreign bases) define, or None if unknown.

    Names come from the classes' namespaces and from ``self._x = …`` in their modules' source
    (instance attributes a class sets in ``__init__`` are not in its namespace; the whole module
    is read, which may add a name of a sibling class: a wider net, never a missed use).
    """
    obj = _resolve_object(dotted)
    if not isinstance(obj, type):
        return None
    names: set[str] = set()
    for klass in _foreign_classes(obj):
        names.update(n for n in vars(klass) if is_private(n))
        slots = getattr(klass, "__slots__", ())
        names.update((slots,) if isinstance(slots, str) else slots)
        try:
            file = inspect.getsourcefile(klass)
        except TypeError:
            file = None
        if file:
            names.update(_self_assigned(file))
    return frozenset(n for n in names if is_private(n))


class _Scanner(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.uses: list[Use] = []
        # local name -> dotted path of the foreign module or object it is bound to
        self.imports: dict[str, str] = {}
        # per scope: local name -> dotted path of the foreign class its value is an instance of
        self.typed: list[dict[str, str]] = [{}]
        # per class being visited: self-attribute -> foreign class; and the class's foreign bases
        self.self_attrs: list[dict[str, str]] = []
        self.bases: list[list[str]] = []

    def add(self, node: ast.AST, kind: str, name: str, owner: str) -> None:
        owner_dist = distribution_of(owner.split(".")[0])
        self.uses.append(Use(self.path, getattr(node, "lineno", 0), kind, name, owner_dist))

    # -- imports -----------------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not is_foreign(alias.name):
                continue
            private = [p for p in alias.name.split(".") if is_private(p)]
            if private:
                self.add(node, "import", alias.name, alias.name)
            if alias.asname:
                self.imports[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                self.imports[top] = top

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module or not is_foreign(node.module):
            return
        module_private = any(is_private(p) for p in node.module.split("."))
        for alias in node.names:
            dotted = f"{node.module}.{alias.name}"
            if module_private:
                self.add(node, "import", node.module, node.module)
            elif is_private(alias.name):
                self.add(node, "import", dotted, node.module)
            self.imports[alias.asname or alias.name] = dotted

    # -- what a name or expression refers to -------------------------------------------------

    def dotted(self, node: ast.expr) -> str | None:
        """The foreign dotted path an expression names (``httpx.Client`` -> "httpx.Client")."""
        if isinstance(node, ast.Name):
            return self.imports.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def annotation_class(self, node: ast.expr | None) -> str | None:
        """The foreign class an annotation names: ``C``, ``m.C``, ``C | None``, ``Optional[C]``."""
        if node is None:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.annotation_class(node.left) or self.annotation_class(node.right)
        if isinstance(node, ast.Subscript):
            outer = node.value
            name = outer.attr if isinstance(outer, ast.Attribute) else getattr(outer, "id", "")
            if name == "Optional":
                return self.annotation_class(node.slice)
            return None
        target = self.dotted(node)
        if target is None or target.split(".")[0] in TYPING_MODULES:
            return None
        return target

    def value_owner(self, node: ast.expr | None) -> str | None:
        """Whose object a value is: a foreign class's instance, or an attribute of a foreign object
        (``bound = response.stream`` with ``response: httpx.Response`` is httpx's)."""
        if node is None:
            return None
        cls = self.value_class(node)
        if cls:
            return cls
        if isinstance(node, ast.Await):
            node = node.value
        if isinstance(node, ast.Attribute):
            return self.object_of(node.value)
        if isinstance(node, ast.Name):
            return self.object_of(node)
        return None

    def value_class(self, node: ast.expr | None) -> str | None:
        """The foreign class of a value built by ``C(...)`` (or ``await C(...)``)."""
        if isinstance(node, ast.Await):
            node = node.value
        if isinstance(node, ast.Call):
            target = self.dotted(node.func)
            if target is not None and isinstance(_resolve_object(target), type):
                return target
        return None

    def object_of(self, node: ast.expr) -> str | None:
        """The foreign module, class or instance-class an expression refers to."""
        if isinstance(node, ast.Name):
            if node.id in self.imports:
                return self.imports[node.id]
            for scope in reversed(self.typed):
                if node.id in scope:
                    return scope[node.id]
            return None
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self" and self.self_attrs:
                return self.self_attrs[-1].get(node.attr)
            return self.dotted(node)
        return None

    # -- scopes ------------------------------------------------------------------------------

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        bases = [b for b in (self.dotted(base) for base in node.bases) if b]
        attrs: dict[str, str] = {}
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                cls = self.annotation_class(stmt.annotation) or self.value_class(stmt.value)
                if cls:
                    attrs[stmt.target.id] = cls
        for sub in ast.walk(node):
            if isinstance(sub, ast.AnnAssign):
                cls = self.annotation_class(sub.annotation) or self.value_class(sub.value)
                name = _self_attr(sub.target)
                if cls and name:
                    attrs[name] = cls
            elif isinstance(sub, ast.Assign):
                cls = self.value_class(sub.value)
                for target in sub.targets:
                    name = _self_attr(target)
                    if cls and name:
                        attrs.setdefault(name, cls)
        for stmt in node.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and is_private(stmt.name):
                for base in bases:
                    names = foreign_private_names(base)
                    if names is None or stmt.name in names:
                        self.add(stmt, "override", stmt.name, base)
                        break
        self.self_attrs.append(attrs)
        self.bases.append(bases)
        self.generic_visit(node)
        self.bases.pop()
        self.self_attrs.pop()

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        scope: dict[str, str] = {}
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is None:
                continue
            cls = self.annotation_class(arg.annotation)
            if cls:
                scope[arg.arg] = cls
        self.typed.append(scope)
        self.generic_visit(node)
        self.typed.pop()

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        cls = self.annotation_class(node.annotation) or self.value_owner(node.value)
        if cls and isinstance(node.target, ast.Name):
            self.typed[-1][node.target.id] = cls
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        cls = self.value_owner(node.value)
        if cls:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.typed[-1][target.id] = cls
        self.generic_visit(node)

    # -- uses --------------------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            isinstance(func, ast.Name)
            and func.id in ATTR_FUNCS
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and is_private(node.args[1].value)
        ):
            owner = self.object_of(node.args[0]) or "?"
            self.add(node, "getattr", node.args[1].value, owner)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if is_private(node.attr):
            owner = self.object_of(node.value)
            if owner is not None:
                self.add(node, "attribute", node.attr, owner)
            elif (
                isinstance(node.value, ast.Name)
                and node.value.id == "self"
                and self.bases
                and self.bases[-1]
            ):
                for base in self.bases[-1]:
                    names = foreign_private_names(base)
                    if names is not None and node.attr in names:
                        self.add(node, "attribute", node.attr, base)
                        break
        self.generic_visit(node)


def _self_attr(target: ast.expr) -> str | None:
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
        if target.value.id == "self":
            return target.attr
    return None


def scan_source(source: str, path: str = "<snippet>") -> list[Use]:
    """Every use of another package's private API in one module's source."""
    scanner = _Scanner(path)
    scanner.visit(ast.parse(source, filename=path))
    return sorted(set(scanner.uses))


def scan_tree(root: Path, packages: Iterable[str], excluded: Iterable[str]) -> list[Use]:
    """Every use in the ``.py`` files under ``root/<package>``, but those under ``excluded``."""
    skip = tuple(excluded)
    uses: list[Use] = []
    for package in packages:
        for file in sorted((root / package).rglob("*.py")):
            rel = file.relative_to(root).as_posix()
            if rel.startswith(skip):
                continue
            uses.extend(scan_source(file.read_text(encoding="utf-8"), rel))
    return uses
