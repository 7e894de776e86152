"""The shared upstream client keeps no cookies.

One client serves every user's runs of a provider, so a cookie jar would send a cookie an
upstream set in one user's run (a runtime's session, a load balancer's stickiness) with the
next user's requests. Dropped on arrival, they never go out; and the jar is never asked to
parse a response's headers (httpx's ``extract_cookies`` built an ``email.message`` from
them on every response: ~2 % of a run start's CPU, py-spy).
"""

from __future__ import annotations

from http.cookiejar import Cookie, CookieJar
from typing import Any

__all__ = ["NoCookies"]


class NoCookies(CookieJar):
    """A cookie jar that stays empty."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None

    def set_cookie(self, cookie: Cookie) -> None:
        return None
