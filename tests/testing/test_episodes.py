"""new_episodes' sender: recorded answers where they match, the live sender for the rest."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from forkpoint.api import engine_config
from forkpoint.engine import matching
from forkpoint.models import Chunk, Exchange
from forkpoint.runtime.upstream import MockSender
from forkpoint.testing.episodes import REPLAYED_HEADER, EpisodeSender


def recorded(step: int, question: str, *, chunks: list[Chunk] | None = None) -> Exchange:
    body = f'{{"q": "{question}"}}'.encode()
    return Exchange(
        run_id="old", step=step, method="POST", route="/v1/chat/completions",
        request_headers=(("authorization", "[redacted]"),), request_body=body,
        fingerprint=matching.fingerprint("POST", "/v1/chat/completions", body), status=201,
        response_headers=(("set-cookie", "[redacted]"), ("x-n", str(step))),
        response_body=b"".join(c.data for c in chunks) if chunks else b"old",
        chunks=chunks,
    )  # fmt: skip


async def live_answer(method, url, headers, body):  # type: ignore[no-untyped-def]
    return 200, (("x-live", "1"),), [b"live"]


def test_matches_are_answered_from_the_cassette_and_the_rest_sent_live():
    old = [
        recorded(0, "a", chunks=[Chunk(1.0, b"da"), Chunk(2.0, b"ta")]),
        recorded(1, "a"),
        recorded(2, "b"),
    ]
    live = MockSender(live_answer)
    sender = EpisodeSender(old, engine_config("http://up"), live)

    async def send(question: str) -> tuple[int, dict[str, str], bytes]:
        response = await sender.send(
            "POST", "http://up/v1/chat/completions", (), f'{{"q": "{question}"}}'.encode()
        )
        return (
            response.status,
            dict(response.headers),
            b"".join([c async for c in response.chunks()]),
        )

    async def main() -> list[tuple[int, dict[str, str], bytes]]:
        answers = [await send(q) for q in ("a", "c", "a", "a")]
        await sender.close()
        return answers

    first, new, second, third = asyncio.run(main())
    assert first == (201, {"x-n": "0", REPLAYED_HEADER: "0"}, b"data")  # redacted headers dropped
    assert second[1][REPLAYED_HEADER] == "1" and second[2] == b"old"
    assert new[2] == third[2] == b"live" and len(live.sent) == 2

    tagged = [(REPLAYED_HEADER, "0")], [], [(REPLAYED_HEADER, "1")], []
    this_run = [
        replace(
            recorded(0, q), run_id="new", step=i, response_headers=tuple(h), response_body=b"new"
        )
        for i, (q, h) in enumerate(zip("acaa", tagged, strict=True))
    ]
    merged = sender.merge("new", this_run)
    assert [(e.run_id, e.step) for e in merged] == [("new", i) for i in range(5)]
    assert [e.response_body for e in merged] == [b"data", b"new", b"old", b"new", b"old"]
    assert merged[0].chunks == old[0].chunks and b'"b"' in merged[4].request_body
