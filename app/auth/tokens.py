"""Bearer tokens -> principals (http-api.md "Auth"), compared in constant time.

Tokens come from ``[auth] tokens`` and/or ``tokens_file`` (a TOML file of ``"token" =
"principal"`` pairs, optionally under a ``[tokens]`` table). A lookup hashes the candidate and
compares its digest with every known digest without stopping early, so neither the position of
a matching token nor a common prefix is observable through timing.
"""

from __future__ import annotations

import hashlib
import hmac
import tomllib
from collections.abc import Mapping
from pathlib import Path

__all__ = ["TokenTable", "bearer_token", "load_tokens_file"]


def load_tokens_file(path: str) -> dict[str, str]:
    """Read a tokens file: ``token = "principal"`` pairs (top level or under ``[tokens]``)."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read tokens file {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"tokens file {path}: invalid TOML: {exc}") from exc
    table = data.get("tokens", data)
    if not isinstance(table, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) and v for k, v in table.items()
    ):
        raise ValueError(f'tokens file {path}: expected token = "principal" string pairs')
    return dict(table)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class TokenTable:
    """Known tokens by digest; :meth:`lookup` takes the same time whichever token matches."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._entries = [(_digest(token), principal) for token, principal in tokens.items()]

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, token: str | None) -> str | None:
        """The principal of ``token``, or None (unknown, empty or missing)."""
        if not token:
            return None
        candidate = _digest(token)
        found: str | None = None
        for digest, principal in self._entries:  # no early exit: constant time in the match
            if hmac.compare_digest(digest, candidate):
                found = principal
        return found


def bearer_token(authorization: str, access_token: str | None) -> str | None:
    """The token of an ``Authorization: Bearer …`` header, else of ``?access_token=``."""
    token = None
    if authorization[:7].lower() == "bearer ":
        token = authorization[7:].strip()
    return token or access_token or None
