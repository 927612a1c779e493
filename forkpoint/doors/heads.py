"""How large a message head forkpoint takes, either way: the agents' requests (the gateway's
aiohttp server) and the upstreams' answers (the sender's aiohttp client).

aiohttp's own limits (a line or a header field of 8,190 bytes, 128 fields) are tighter than
the HTTP clients an agent would use without forkpoint, so a long `Set-Cookie`, `Link` or CSP
header an agent takes directly broke its connection through forkpoint ("Got more than 8190
bytes"), and a long `Cookie` an upstream takes was a 400. What the clients take (checked
2026-12):

| client | a header line | a whole head |
| --- | --- | --- |
| curl 7.88 | 100 KiB (`CURL_MAX_HTTP_HEADER`) | 300 KiB (`MAX_HTTP_RESP_HEADER_SIZE`) |
| Chrome | | 256 KiB (`kMaxHeaderBufSize`) |
| Python `http.client` (requests, urllib3) | 64 KiB (`_MAXLINE`), 100 fields | |
| h11 (httpx, the openai and anthropic SDKs) | | 16 KiB (`max_incomplete_event_size`) |
| Node (`http`, fetch) | | 16 KiB (`http.maxHeaderSize`) |

So a line (request or status line, or one header field) may be up to 128 KiB, past every
client's line, and a head up to 256 fields, past any of their counts. aiohttp has no bound on
a whole head but these two, so a head holds at most 256 x 128 KiB while it is parsed, however
few clients would take one that large.
"""

from __future__ import annotations

__all__ = ["FIELDS_MAX", "HEAD_LIMITS", "LINE_MAX"]

LINE_MAX = 128 * 1024
FIELDS_MAX = 256

# As aiohttp's server (`web.AppRunner`) and client (`ClientSession`) take them.
HEAD_LIMITS = {"max_line_size": LINE_MAX, "max_field_size": LINE_MAX, "max_headers": FIELDS_MAX}
