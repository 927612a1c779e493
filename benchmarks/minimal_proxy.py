"""The floor for a Python proxy: what any aiohttp pass-through must do, and nothing more.

One pooled keep-alive `ClientSession` (no decompression), bodies streamed chunk by chunk with
`StreamResponse.write`, nothing recorded. The benchmark sets forkpoint's targets against it.
Prints its base URL on the first line of stdout and serves until killed.

    python benchmarks/minimal_proxy.py --upstream http://127.0.0.1:8000 [--uvloop]
"""

from __future__ import annotations

import argparse
import asyncio

from aiohttp import ClientSession, DummyCookieJar, TCPConnector, web

# Hop-by-hop headers, plus the ones aiohttp sets itself for the next hop.
_SKIP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host",
         "proxy-connection", "content-length"}  # fmt: skip
_SKIP_BACK = _SKIP - {"content-length"}  # the reply keeps its length: no chunked re-framing


async def serve(upstream: str, port: int) -> None:
    client = ClientSession(
        connector=TCPConnector(limit=0), auto_decompress=False, cookie_jar=DummyCookieJar(),
        skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
    )  # fmt: skip

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _SKIP]
        async with client.request(request.method, upstream + request.raw_path, headers=headers,
                                  data=body or None, allow_redirects=False) as reply:  # fmt: skip
            back = [(k, v) for k, v in reply.headers.items() if k.lower() not in _SKIP_BACK]
            response = web.StreamResponse(status=reply.status, headers=back)
            await response.prepare(request)
            async for data in reply.content.iter_any():
                await response.write(data)
            await response.write_eof()
            return response

    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print(f"http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="base URL to forward every path to")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free)")
    parser.add_argument("--uvloop", action="store_true", help="on uvloop (pip install uvloop)")
    args = parser.parse_args()
    if args.uvloop:
        import uvloop

        uvloop.run(serve(args.upstream.rstrip("/"), args.port))
    else:
        asyncio.run(serve(args.upstream.rstrip("/"), args.port))
