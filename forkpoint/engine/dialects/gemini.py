"""Google Gemini (`POST …/models/{model}:generateContent`, `…:streamGenerateContent`), as the
google-genai SDK and Vertex AI speak it.

The model is in the path, not the body: a fork's `--model` rewrites the path (`with_model`).
A stream is SSE with `?alt=sse`, else a JSON array of the same response objects. Usage:
`promptTokenCount` is the whole prompt (cached included, as forkpoint counts it); thoughts are
billed as output, so `output` is candidates + thoughts and `reasoning` the thoughts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import orjson

from forkpoint.engine.dialects import _read as r
from forkpoint.engine.dialects._base import LlmDialect
from forkpoint.models import Kind, Summary, ToolCall, Usage

_PATH = re.compile(r"^(?P<head>.*/models/)(?P<model>[^/:]+):(?:stream)?[gG]enerateContent$")


class Gemini(LlmDialect):
    name = "gemini"

    def claims(self, method: str, path: str) -> bool:
        return method.upper() == "POST" and _PATH.match(path) is not None

    def with_model(self, route: str, model: str) -> str:
        path, sep, query = route.partition("?")
        found = _PATH.match(path)
        if found is None:
            return route
        verb = path[found.end("model") :]
        return f"{found['head']}{model}{verb}{sep}{query}"

    def model_in_route(self, route: str) -> str | None:
        found = _PATH.match(route.partition("?")[0])
        return None if found is None else found["model"]

    def summarize(
        self, request_json: object | None, response_body: bytes, *, streamed: bool,
        status: int | None,
    ) -> Summary:  # fmt: skip
        body = response_body.lstrip()
        if body.startswith(b"["):  # a stream without alt=sse: a JSON array, maybe cut short
            parsed = r.loads(body)
            return _summary(request_json, r.arr(parsed) if parsed is not None else [])
        return super().summarize(request_json, response_body, streamed=streamed, status=status)

    def summarize_stream(self, request_json: object | None, body: bytes) -> Summary:
        return _summary(request_json, r.stream_payloads(body))

    def summarize_answer(self, request_json: object | None, answer: object) -> Summary:
        return _summary(request_json, [answer])


def _usage(metadata: object) -> Usage | None:
    if not isinstance(metadata, dict):
        return None
    thoughts = r.count(metadata.get("thoughtsTokenCount"))
    return Usage(
        input=r.count(metadata.get("promptTokenCount")),
        output=r.count(metadata.get("candidatesTokenCount")) + thoughts,
        cached=r.count(metadata.get("cachedContentTokenCount")),
        reasoning=thoughts,
    )


def _summary(request_json: object | None, responses: Sequence[object]) -> Summary:
    model, usage, finish = None, None, None
    texts: list[str] = []
    calls: list[ToolCall] = []
    for response in responses:
        model = r.text(r.dig(response, "modelVersion")) or model
        usage = _usage(r.dig(response, "usageMetadata")) or usage  # the last one is the total
        candidates = r.arr(r.dig(response, "candidates"))
        first = next((c for c in candidates if r.dig(c, "index") in (None, 0)), None)
        if first is None:
            continue
        finish = r.text(r.dig(first, "finishReason")) or finish
        for part in r.arr(r.dig(first, "content", "parts")):
            call = r.obj(r.dig(part, "functionCall"))
            if call:
                arguments = orjson.dumps(call.get("args") or {}).decode()
                calls.append(
                    ToolCall(r.text(call.get("name")) or "", arguments, r.text(call.get("id")))
                )
            elif not r.dig(part, "thought") and r.text(r.dig(part, "text")) is not None:
                texts.append(r.text(r.dig(part, "text")) or "")
    return Summary(
        kind=Kind.LLM,
        dialect=Gemini.name,
        model=model or r.request_model(request_json),
        usage=usage,
        tool_calls=tuple(calls),
        finish_reason=finish,
        text=r.joined(texts),
    )
