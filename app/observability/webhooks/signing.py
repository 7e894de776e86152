"""The webhook signature: ``X-Gateway-Signature: t=<unix seconds>,v1=<hex>``.

``v1`` is HMAC-SHA256(secret, ``"<t>." + body``); :func:`verify_signature` checks one (with a
tolerance on ``t`` against replays). Every attempt is signed afresh; the body never changes.
"""

from __future__ import annotations

import hashlib
import hmac
import time

__all__ = ["sign_payload", "verify_signature"]


def sign_payload(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-Gateway-Signature`` value for ``body`` sent at ``timestamp`` (unix seconds)."""
    mac = hmac.new(secret.encode(), b"%d." % timestamp + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify_signature(
    secret: str, header: str, body: bytes, *, tolerance: float = 300, now: float | None = None
) -> bool:
    """True when ``header`` signs ``body`` with ``secret`` and its timestamp is recent."""
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    stamp = parts.get("t", "")
    if not stamp.isdigit() or "v1" not in parts:
        return False
    if abs((time.time() if now is None else now) - int(stamp)) > tolerance:
        return False
    expected = sign_payload(secret, int(stamp), body).rsplit("v1=", 1)[1]
    return hmac.compare_digest(expected, parts["v1"])
