"""The shared upstream client keeps no cookies.

One client serves every user's runs of a provider, so a cookie jar would send a cookie an
upstream set in one user's run (a runtime's session, a load balancer's stickiness) with the
next user's requests. Dropped on arrival, they never go out; and no response is parsed for
them: httpx's ``Cookies.extract_cookies`` builds an ``email.message`` of the response's
headers and a ``urllib`` request of its URL before it asks the jar, a cost per response
(BENCHMARKS.md, "Costs behind the code's shortcuts").
"""

from __future__ import annotations

from http.cookiejar import Cookie, CookieJar
from typing import Any

import httpx

__all__ = ["CookielessClient", "NoCookies"]


class NoCookies(CookieJar):
    """A cookie jar that stays empty."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None

    def set_cookie(self, cookie: Cookie) -> None:
        return None


class _DroppedCookies(httpx.Cookies):
    """httpx's cookies of a :class:`NoCookies` jar, which never look at a response."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class CookielessClient(httpx.AsyncClient):
    """An ``httpx.AsyncClient`` that neither keeps nor reads cookies (a cookie passed for one
    request still goes out with it)."""

    _dropped = _DroppedCookies(NoCookies())

    @property
    def cookies(self) -> httpx.Cookies:
        return self._dropped

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        return None  # kept by nobody, like the cookies an upstream sets
