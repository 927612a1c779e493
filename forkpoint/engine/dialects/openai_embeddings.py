"""OpenAI Embeddings (`POST …/embeddings`): a model call billed by its input tokens.

Nothing is streamed and nothing is said back but vectors: the summary has the model and the
usage, no text and no tool calls.
"""

from __future__ import annotations

from forkpoint.engine.dialects import _read as r
from forkpoint.engine.dialects._base import LlmDialect
from forkpoint.models import Kind, Summary, Usage


class OpenAIEmbeddings(LlmDialect):
    name = "openai_embeddings"

    def claims(self, method: str, path: str) -> bool:
        return method.upper() == "POST" and path.rstrip("/").endswith("/embeddings")

    def summarize_stream(self, request_json: object | None, body: bytes) -> Summary:
        return self.summarize_answer(request_json, r.loads(body))

    def summarize_answer(self, request_json: object | None, answer: object) -> Summary:
        usage = r.obj(r.dig(answer, "usage"))
        return Summary(
            kind=Kind.LLM,
            dialect=self.name,
            model=r.text(r.dig(answer, "model")) or r.request_model(request_json),
            usage=Usage(input=r.count(usage.get("prompt_tokens"))) if usage else None,
        )
