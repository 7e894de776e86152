"""Generated identifiers: session and run ids are prefixed tokens, never a raw key."""

from __future__ import annotations

import secrets

__all__ = ["new_run_id", "new_session_id", "new_token"]


def new_token(nbytes: int = 9) -> str:
    return secrets.token_urlsafe(nbytes).replace("-", "x").replace("_", "y")


def new_session_id() -> str:
    return f"ses_{new_token()}"


def new_run_id() -> str:
    return f"run_{new_token()}"
