"""growth.py's upstream: forkpoint's scripted OpenAI stand-in, answering with the headers
api.openai.com sends (Cloudflare's and OpenAI's, values that change on every answer
included), in a process of its own. Prints its base URL, then serves until killed.

    python benchmarks/_openai_upstream.py
"""

from __future__ import annotations

import asyncio
import itertools
import random
import string
import time
from email.utils import formatdate

from aiohttp import web

from forkpoint.testing.upstream import Prompt, Reply, ScriptedUpstream

_HEX = string.hexdigits[:16]
_COOKIE = "; path=/; expires={}; domain=.api.openai.com; HttpOnly; Secure; SameSite=None"


def answer(prompt: Prompt) -> Reply:
    turn = prompt.turn
    return Reply(text=f"Answer {turn}: order A{turn:05d} ships today. " + "We are sorry. " * 30)


def openai_headers() -> web.middleware:  # type: ignore[valid-type]
    """A middleware setting the headers api.openai.com answers a chat completion with."""
    served = itertools.count()
    rng = random.Random(7)

    def token(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n))

    @web.middleware
    async def middleware(request: web.Request, handler):  # type: ignore[no-untyped-def]
        count = next(served)
        response = await handler(request)
        took = rng.randint(300, 900)
        headers = response.headers
        headers["Date"] = formatdate(time.time(), usegmt=True)
        headers["Access-Control-Expose-Headers"] = "X-Request-ID"
        headers["openai-organization"] = "user-x8rkpqg1v0wzt5bcn2hjdmla"
        headers["openai-processing-ms"] = str(took)
        headers["openai-project"] = "proj_Vb3kQ9sLm2XcR7tYw1NzA8pE"
        headers["openai-version"] = "2020-10-01"
        headers["x-envoy-upstream-service-time"] = str(took + rng.randint(2, 9))
        headers["x-ratelimit-limit-requests"] = "10000"
        headers["x-ratelimit-limit-tokens"] = "30000000"
        headers["x-ratelimit-remaining-requests"] = "9999"
        headers["x-ratelimit-remaining-tokens"] = str(30000000 - rng.randint(500, 40000))
        headers["x-ratelimit-reset-requests"] = "6ms"
        headers["x-ratelimit-reset-tokens"] = f"{rng.randint(0, 80)}ms"
        headers["x-request-id"] = "req_" + token(32, _HEX)
        headers["strict-transport-security"] = "max-age=31536000; includeSubDomains; preload"
        headers["cf-cache-status"] = "DYNAMIC"
        if count == 0:  # Cloudflare's cookies, which the client sends back from then on
            expires = formatdate(time.time() + 1800, usegmt=True)
            headers.add("Set-Cookie", "__cf_bm=" + token(43) + "-1750000000-1.0.1.1-"
                        + token(86) + _COOKIE.format(expires))  # fmt: skip
            headers.add("Set-Cookie", "_cfuvid=" + token(43) + "-1750000000000-0.0.1.1-"
                        "604800000; path=/; domain=.api.openai.com; HttpOnly; Secure; "
                        "SameSite=None")  # fmt: skip
        headers["X-Content-Type-Options"] = "nosniff"
        headers["Server"] = "cloudflare"
        headers["CF-RAY"] = token(16, _HEX) + "-AMS"
        headers["alt-svc"] = 'h3=":443"; ma=86400'
        return response

    return middleware


async def main() -> None:
    upstream = ScriptedUpstream(answer)
    upstream.app.middlewares.append(openai_headers())
    print(await upstream.start(), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
