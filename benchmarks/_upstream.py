"""The benchmark's upstream: a tiny, fixed-answer Chat Completions server in its own process.

Its replies are built once at start, so it spends as little CPU per request as an aiohttp
server can and every proxy is measured against the same cheap upstream. It prints its base URL
on the first line of stdout and serves until killed.

    python benchmarks/_upstream.py [--chunks 64] [--chunk-delay 0.02]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re

from aiohttp import web

_STREAM = re.compile(rb'"stream"\s*:\s*true')
_HEAD = {"id": "chatcmpl-BENCH0000000000000000000000", "created": 1750000000, "model": "gpt-4o"}
_WORDS = "The tests pass now: the fix keeps the retry budget per connection instead of global. "


def completion(words: int = 40) -> bytes:
    """A ~1 KB non-streaming chat.completion, shaped as api.openai.com sends it."""
    text = (_WORDS * 4)[: words * 8]
    body = {
        **_HEAD, "object": "chat.completion",
        "choices": [{
            "index": 0, "message": {"role": "assistant", "content": text, "refusal": None,
                                    "annotations": []},
            "logprobs": None, "finish_reason": "stop",
        }],
        "usage": {
            "prompt_tokens": 512, "completion_tokens": words, "total_tokens": 512 + words,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0,
                                          "rejected_prediction_tokens": 0},
        },
        "service_tier": "default", "system_fingerprint": "fp_bench0000",
    }  # fmt: skip
    return json.dumps(body).encode()


def events(count: int) -> list[bytes]:
    """`count` SSE frames of chat.completion.chunk: role, words, finish, then [DONE]."""
    words = _WORDS.split()
    frames = []
    for index in range(count - 1):
        if index == 0:
            delta: dict[str, str] = {"role": "assistant", "content": ""}
        elif index == count - 2:
            delta = {}
        else:
            delta = {"content": words[index % len(words)] + " "}
        finish = "stop" if index == count - 2 else None
        chunk = {**_HEAD, "object": "chat.completion.chunk", "service_tier": "default",
                 "system_fingerprint": "fp_bench0000",
                 "choices": [{"index": 0, "delta": delta, "logprobs": None,
                              "finish_reason": finish}]}  # fmt: skip
        frames.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    return [*frames, b"data: [DONE]\n\n"]


def app(chunks: int, chunk_delay: float) -> web.Application:
    reply, frames = completion(), events(chunks)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if not _STREAM.search(body):
            return web.Response(body=reply, content_type="application/json")
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
            }
        )
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        started = loop.time()
        for index, frame in enumerate(frames):
            # Against the clock, not after the last write: a busy moment must not add up.
            await asyncio.sleep(started + index * chunk_delay - loop.time())
            await response.write(frame)
        await response.write_eof()
        return response

    application = web.Application()
    application.router.add_post("/v1/chat/completions", chat)
    return application


async def serve(chunks: int, chunk_delay: float) -> None:
    runner = web.AppRunner(app(chunks, chunk_delay), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    print(f"http://{host}:{port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=64, help="SSE events per stream")
    parser.add_argument("--chunk-delay", type=float, default=0.02, help="seconds between events")
    args = parser.parse_args()
    asyncio.run(serve(args.chunks, args.chunk_delay))


if __name__ == "__main__":
    main()
