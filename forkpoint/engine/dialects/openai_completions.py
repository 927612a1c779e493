"""OpenAI legacy Completions (`POST …/completions`, not `…/chat/completions`), still spoken by
many OpenAI-compatible servers (vLLM, llama.cpp, TGI) and instruct models.

The answer is `choices[0].text`; a stream sends it in pieces, with usage in its last chunk
when asked for (`stream_options.include_usage`).
"""

from __future__ import annotations

from collections.abc import Sequence

from forkpoint.engine.dialects import _read as r
from forkpoint.engine.dialects._base import LlmDialect
from forkpoint.engine.dialects.openai_chat import chat_usage
from forkpoint.models import Kind, Summary


class OpenAICompletions(LlmDialect):
    name = "openai_completions"

    def claims(self, method: str, path: str) -> bool:
        path = path.rstrip("/")
        return (
            method.upper() == "POST"
            and path.endswith("/completions")
            and not path.endswith("/chat/completions")
        )

    def summarize_stream(self, request_json: object | None, body: bytes) -> Summary:
        return _summary(request_json, r.stream_payloads(body))

    def summarize_answer(self, request_json: object | None, answer: object) -> Summary:
        return _summary(request_json, [answer])


def _summary(request_json: object | None, responses: Sequence[object]) -> Summary:
    model, usage, finish = None, None, None
    texts: list[str] = []
    for response in responses:
        model = r.text(r.dig(response, "model")) or model
        usage = chat_usage(r.dig(response, "usage")) or usage
        for choice in r.arr(r.dig(response, "choices")):
            if r.dig(choice, "index") not in (None, 0):
                continue
            finish = r.text(r.dig(choice, "finish_reason")) or finish
            texts.append(r.text(r.dig(choice, "text")) or "")
    return Summary(
        kind=Kind.LLM,
        dialect=OpenAICompletions.name,
        model=model or r.request_model(request_json),
        usage=usage,
        finish_reason=finish,
        text=r.joined(texts),
    )
