"""Check a tool's arguments against its JSON Schema (``inputSchema``): the list of errors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["schema_errors"]

MAX_ERRORS = 20


def schema_errors(schema: Mapping[str, Any] | None, value: Any) -> list[dict[str, str]]:
    """``[{"path", "message"}]`` for each way ``value`` breaks ``schema`` (none: valid).
    An object is required whatever the schema says: MCP tool arguments are an object."""
    if not isinstance(value, dict):
        return [{"path": "", "message": "The arguments must be a JSON object."}]
    if not schema:
        return []
    from jsonschema import Draft202012Validator  # on first use: a large import
    from jsonschema.exceptions import SchemaError

    try:
        validator = Draft202012Validator(dict(schema))
        found = sorted(validator.iter_errors(value), key=lambda error: list(error.path))
    except SchemaError:
        return []  # the server's schema is broken: the server itself will judge the call
    return [
        {"path": "/".join(str(part) for part in error.path), "message": error.message}
        for error in found[:MAX_ERRORS]
    ]
