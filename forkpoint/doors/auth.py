"""The proxy's token: who may use a proxy that strangers can reach.

Bound beyond loopback, a proxy answers only requests that carry its token (`--token`,
`$FORKPOINT_TOKEN`, else one it makes up and prints: `token_for`); on loopback, only if one
was given. An agent's SDK sends its own `Authorization` to the upstream, so the token travels
where a base-URL change alone can put it:

- in the path, before anything else: `OPENAI_BASE_URL=http://HOST:8765/t/TOKEN/v1` (and
  `/t/TOKEN/r/RUN/v1` for a run);
- in the `X-Forkpoint-Token` header, for clients that can add one;
- through the interceptor, as the proxy password: `HTTPS_PROXY=http://RUN:TOKEN@HOST:PORT`
  (`Proxy-Authorization`), checked there (`forkpoint.doors.interceptor`); the requests it
  hands the gateway carry its secret instead.

`tokens` is the gateway's middleware: it takes the token off the request (path prefix and
header) before anything reads it, so it reaches neither the cassette nor the upstream, and
answers a request without it 401 in its API's shape. Tokens are compared in constant time.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from yarl import URL

from forkpoint.doors.reach import TOKEN_HEADER, TOKEN_PREFIX, same
from forkpoint.engine.config import INTERCEPT_HEADER, ORIGIN_HEADER
from forkpoint.engine.decide import error_reply


def tokens(token: str | None, intercept_secret: str | None) -> list[Middleware]:
    """The gateway's middleware: the token off every request, and required when set."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            presented, request = _taken(request)
        except UnicodeEncodeError:  # aiohttp re-encodes the headers it keeps as UTF-8
            message = (
                "forkpoint: a request with the X-Forkpoint-Token header must send UTF-8 "
                "headers; put the token in the path (/t/TOKEN/) instead"
            )
            return _refused(request, 400, message)
        if token is None or (presented is not None and same(presented, token)):
            return await handler(request)
        if _vouched(request, intercept_secret):  # the interceptor checked its client's token
            return await handler(request)
        message = (
            "forkpoint: this proxy needs its token: put it in the base URL "
            "(http://HOST:PORT/t/TOKEN/v1) or send it as the X-Forkpoint-Token header"
        )
        return _refused(request, 401, message)

    return [check]


def _refused(request: web.Request, status: int, message: str) -> web.Response:
    """forkpoint's own error, in the shape of the API the request was for."""
    route = urlsplit(request.raw_path).path or "/"
    headers, body = error_reply(
        request.method, route, status, message, error_type="forkpoint_token"
    )
    return web.Response(status=status, headers=headers, body=body)


def _vouched(request: web.Request, intercept_secret: str | None) -> bool:
    secret = request.headers.get(INTERCEPT_HEADER)
    if secret is None or intercept_secret is None or ORIGIN_HEADER not in request.headers:
        return False
    return same(secret, intercept_secret)


def _taken(request: web.Request) -> tuple[str | None, web.Request]:
    """The token a request carries (path prefix, else header) and the request without it."""
    presented = None
    target = request.raw_path
    if not target.startswith("/"):  # absolute-form: the gateway reads its path alone
        parts = urlsplit(target)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if target.startswith(TOKEN_PREFIX):
        segment, _, rest = target[len(TOKEN_PREFIX) :].partition("/")
        presented = unquote(segment)
        request = request.clone(rel_url=URL("/" + rest, encoded=True))
    if TOKEN_HEADER in request.headers:
        headers = request.headers.copy()
        presented = presented or headers.get(TOKEN_HEADER)
        del headers[TOKEN_HEADER]
        request = request.clone(headers=headers)
    return presented, request
