"""JSON answers serialized with orjson (the hot path of every JSON route)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse

__all__ = ["JSON"]


class JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)
