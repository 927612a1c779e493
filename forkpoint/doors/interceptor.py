"""The HTTPS_PROXY front door: a mitmproxy addon that hands every intercepted request to the
gateway.

Agents reach tool endpoints (search, CRM, payments) at hosts they do not let you configure;
run with `HTTPS_PROXY` pointed here, mitmproxy terminates their TLS and this addon sends each
request on to the proxy's own gateway, over loopback, marked with a per-proxy secret, its run
and its origin (`https://host[:port]`). The gateway then does for it exactly what it does for
a base-URL request (record, replay, fork, mock, pace, cut), and the addon streams its answer
back: one door holds every rule, so both ways in behave alike.

Routes. An intercepted request's route is `/{host[:port]}{path}`, e.g.
`/api.search.example/v1/query?q=x`, and its upstream is its own origin. So `forkpoint show`
names the host, fingerprints tell hosts apart (replay serves each host its own answers,
offline), mocks match a host by glob (`api.search.example/*` against the upstream, `*/v1/query`
against either), and dialects still find `/v1/chat/completions` at the end of the path. The
scheme is not in the route: http and https requests to one host are the same endpoint.

WebSockets go the same way: the upgrade request is handed to the gateway, which serves the
socket (`forkpoint.doors.sockets`), and mitmproxy carries its messages between the agent and
the gateway; so the Responses API over a websocket (Codex's default transport) and the
Realtime API are recorded and replayed message by message.
"""

from __future__ import annotations

import base64
import binascii
import logging
from urllib.parse import urlsplit
from weakref import WeakKeyDictionary, WeakSet

from mitmproxy import connection, http, tcp, tls

from forkpoint.doors.reach import same
from forkpoint.engine.config import INTERCEPT_HEADER, ORIGIN_HEADER, RUN_HEADER
from forkpoint.engine.pieces import REQUEST_HOLD

log = logging.getLogger(__name__)


class Interceptor:
    """The addon: each HTTP flow is redirected to the gateway at `gateway` (host, port)."""

    def __init__(self, gateway: tuple[str, int], secret: str, token: str | None = None):
        self._gateway = gateway
        self._secret = secret
        # With a token (forkpoint.doors.auth), a client gives it as its proxy password; a
        # tunnel it opened with it is its own.
        self._token = token
        self._admitted: WeakSet[connection.Client] = WeakSet()
        # The run named by a CONNECT's proxy credentials holds for its whole tunnel.
        self._runs: WeakKeyDictionary[connection.Client, str] = WeakKeyDictionary()

    def http_connect(self, flow: http.HTTPFlow) -> None:
        if not self._admit(flow):
            return
        run_id = proxy_user(flow.request.headers)
        if run_id is not None:
            self._runs[flow.client_conn] = run_id

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """Each request is sent on to the gateway as soon as its head is read: a large body
        (or one of unknown length) goes as it arrives, as the gateway reads it, never whole
        in mitmproxy's memory."""
        if not self._admit(flow):
            return
        request = flow.request
        length = request.headers.get("content-length")
        if (length is not None and length.isdigit() and int(length) > REQUEST_HOLD) or (
            length is None and "chunked" in request.headers.get("transfer-encoding", "").lower()
        ):
            request.stream = True
        headers = request.headers
        run_id = headers.get(RUN_HEADER) or proxy_user(headers) or self._runs.get(flow.client_conn)
        for name in (RUN_HEADER, "proxy-authorization", INTERCEPT_HEADER, ORIGIN_HEADER):
            headers.pop(name, None)
        parts = urlsplit(request.url)
        headers[ORIGIN_HEADER] = f"{parts.scheme}://{parts.netloc}"
        headers[INTERCEPT_HEADER] = self._secret
        if run_id is not None:
            headers[RUN_HEADER] = run_id
        host_header = headers.get("host")
        request.scheme, request.host, request.port = "http", *self._gateway
        if host_header is not None:  # the gateway drops it; it is kept for the record's sake
            headers["host"] = host_header

    def _admit(self, flow: http.HTTPFlow) -> bool:
        """Whether the flow's client gave the token (if one is needed); else it is answered
        407 here, and goes nowhere."""
        if self._token is None or flow.client_conn in self._admitted:
            return True
        if same(proxy_password(flow.request.headers) or "", self._token):
            self._admitted.add(flow.client_conn)
            return True
        flow.response = http.Response.make(
            407,
            b"forkpoint: this proxy needs its token as the proxy password: "
            b"HTTPS_PROXY=http://RUN:TOKEN@HOST:PORT\n",
            {"Proxy-Authenticate": 'Basic realm="forkpoint"', "Content-Type": "text/plain"},
        )
        return False

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None:
            flow.response.stream = True  # chunk by chunk, as the gateway paces them

    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        address = flow.server_conn.address
        target = f"{address[0]}:{address[1]}" if address else "an unknown host"
        log.warning("forkpoint: non-HTTP traffic to %s passes through unrecorded", target)

    def tls_failed_client(self, data: tls.TlsData) -> None:
        log.warning(
            "forkpoint: a client refused the interceptor's certificate for %s: it does not "
            "trust forkpoint's CA (run `forkpoint ca` to see it); nothing was recorded",
            data.conn.sni or "a host",
        )


def proxy_user(headers: http.Headers) -> str | None:
    """The user name of Basic proxy credentials (`HTTPS_PROXY=http://RUN@host:port`)."""
    return _basic(headers)[0] or None


def proxy_password(headers: http.Headers) -> str | None:
    """The password of Basic proxy credentials (`HTTPS_PROXY=http://RUN:TOKEN@host:port`)."""
    return _basic(headers)[1]


def _basic(headers: http.Headers) -> tuple[str | None, str | None]:
    scheme, _, token = headers.get("proxy-authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None, None
    try:
        user, colon, password = base64.b64decode(token, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None, None
    return user, (password if colon else None)
