"""A small RFC 6902 JSON Patch applier for AG-UI ``STATE_DELTA`` / ``ACTIVITY_DELTA``.

Pure and copy-on-write: the document given is never mutated. Errors raise ``JsonPatchError``
with the failing operation's index, so the provider can fail the run with a precise message.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["JsonPatchError", "apply_patch"]

_OPS = frozenset({"add", "remove", "replace", "move", "copy", "test"})


class JsonPatchError(ValueError):
    def __init__(self, index: int, message: str) -> None:
        super().__init__(f"operation {index}: {message}")
        self.index = index


def _tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"invalid JSON pointer {pointer!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if token == "-" and for_add:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise ValueError(f"{token!r} is not a valid array index")
    index = int(token)
    limit = len(container) if for_add else len(container) - 1
    if index > limit:
        raise ValueError(f"index {index} is out of range for an array of length {len(container)}")
    return index


def _child(node: Any, token: str) -> Any:
    if isinstance(node, dict):
        if token not in node:
            raise ValueError(f"member {token!r} does not exist")
        return node[token]
    if isinstance(node, list):
        return node[_index(node, token, for_add=False)]
    raise ValueError(f"cannot descend into a scalar at {token!r}")


def _get(doc: Any, pointer: str) -> Any:
    node = doc
    for token in _tokens(pointer):
        node = _child(node, token)
    return node


def _parent(doc: Any, pointer: str) -> tuple[Any, str]:
    tokens = _tokens(pointer)
    if not tokens:
        raise ValueError("the root has no parent")
    node = doc
    for token in tokens[:-1]:
        node = _child(node, token)
    return node, tokens[-1]


def _add(doc: Any, pointer: str, value: Any) -> Any:
    if pointer == "":
        return value
    parent, token = _parent(doc, pointer)
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, token, for_add=True), value)
    else:
        raise ValueError(f"cannot add to a scalar at {pointer!r}")
    return doc


def _remove(doc: Any, pointer: str) -> tuple[Any, Any]:
    parent, token = _parent(doc, pointer)
    if isinstance(parent, dict):
        if token not in parent:
            raise ValueError(f"member {token!r} does not exist")
        return doc, parent.pop(token)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, token, for_add=False))
    raise ValueError(f"cannot remove from a scalar at {pointer!r}")


def _apply_one(doc: Any, op: Mapping[str, Any]) -> Any:
    kind = op.get("op")
    path = op.get("path")
    if kind not in _OPS:
        raise ValueError(f"invalid op {kind!r}")
    if not isinstance(path, str):
        raise ValueError("missing 'path'")
    if kind in ("add", "replace", "test") and "value" not in op:
        raise ValueError("missing 'value'")
    if kind == "add":
        return _add(doc, path, copy.deepcopy(op["value"]))
    if kind == "remove":
        return _remove(doc, path)[0]
    if kind == "replace":
        if path == "":
            return copy.deepcopy(op["value"])
        _get(doc, path)
        doc, _ = _remove(doc, path)
        return _add(doc, path, copy.deepcopy(op["value"]))
    if kind == "test":
        if _get(doc, path) != op["value"]:
            raise ValueError(f"test failed at {path!r}")
        return doc
    source = op.get("from")
    if not isinstance(source, str):
        raise ValueError("missing 'from'")
    if kind == "copy":
        return _add(doc, path, copy.deepcopy(_get(doc, source)))
    if path.startswith(source + "/"):
        raise ValueError("cannot move a value into one of its children")
    if source == path:
        return doc
    doc, value = _remove(doc, source)
    return _add(doc, path, value)


def apply_patch(document: Any, patch: Sequence[Any]) -> Any:
    """Apply ``patch`` atomically: the result, or ``JsonPatchError`` and nothing changed."""
    if not isinstance(patch, Sequence) or isinstance(patch, str | bytes):
        raise JsonPatchError(0, "a patch document must be an array")
    doc = copy.deepcopy(document)
    for index, op in enumerate(patch):
        if not isinstance(op, Mapping):
            raise JsonPatchError(index, "not an object")
        try:
            doc = _apply_one(doc, op)
        except ValueError as exc:
            raise JsonPatchError(index, str(exc)) from None
    return doc
