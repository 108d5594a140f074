"""The Content-Security-Policy every response carries: scripts only from our own static
files (no inline script, no eval), connections to ourselves (the API and the websocket),
no framing, no plugins, forms posting only here.  Styles allow inline because plotly
injects its own stylesheet at run time; nothing a user writes is ever rendered as a style.
The browser tests fail on any violation a page reports (``tests/web/browser.py``)."""
from __future__ import annotations

POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self' ws: wss:",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])


class ContentSecurityPolicy:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", POLICY)
        return response
