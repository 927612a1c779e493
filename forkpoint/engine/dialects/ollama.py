"""Ollama's own API: chat (`POST …/api/chat`) and generate (`POST …/api/generate`), as the
ollama client libraries and the Ollama server speak them. (Its OpenAI-compatible `/v1/…` routes
are read by the OpenAI dialects.)

Ollama streams unless a request says `"stream": false`, and a stream is newline-delimited JSON
(`application/x-ndjson`): one object a line, the last with `done: true`, why it stopped
(`done_reason`) and the counts, `prompt_eval_count` for the prompt and `eval_count` for the
answer. A whole answer is one such object. Tool calls come whole, in one line's message, their
arguments an object (compacted here, as the other dialects do). An error is `{"error": "…"}`,
as the answer or as a line of a stream, which the ollama client raises as `ResponseError`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

import orjson

from forkpoint.engine.dialects import _read as r
from forkpoint.engine.dialects._base import LlmDialect
from forkpoint.models import Headers, Kind, Summary, ToolCall, Usage

_ERROR_HEADERS = (("content-type", "application/json; charset=utf-8"), ("x-should-retry", "false"))


def lines(body: bytes) -> list[dict[str, object]]:
    """The JSON objects of an NDJSON body, one a line; a line cut short or not JSON is passed
    over. A whole answer (one object, however it is laid out) is one line."""
    whole = r.loads(body)
    if isinstance(whole, dict):
        return [whole]
    found = (r.loads(line) for line in body.splitlines() if line.strip())
    return [line for line in found if isinstance(line, dict)]


def ollama_error(message: str) -> tuple[Headers, bytes]:
    return _ERROR_HEADERS, orjson.dumps({"error": message})


class _Ollama(LlmDialect):
    """What chat and generate share: NDJSON lines, counts, the error shape."""

    path: str

    def claims(self, method: str, path: str) -> bool:
        return method.upper() == "POST" and path.rstrip("/").endswith(self.path)

    def summarize(
        self, request_json: object | None, response_body: bytes, *, streamed: bool,
        status: int | None,
    ) -> Summary:  # fmt: skip
        return self.summarize_stream(request_json, response_body)

    def summarize_stream(self, request_json: object | None, body: bytes) -> Summary:
        return self.summary(request_json, lines(body))

    def summarize_answer(self, request_json: object | None, answer: object) -> Summary:
        return self.summary(request_json, [r.obj(answer)])

    def summary(self, request_json: object | None, parts: Sequence[dict[str, object]]) -> Summary:
        model, usage, finish = None, None, None
        texts: list[str] = []
        calls: list[ToolCall] = []
        for part in parts:
            model = r.text(part.get("model")) or model
            if part.get("done") is True:
                finish = r.text(part.get("done_reason")) or finish
                usage = Usage(
                    input=r.count(part.get("prompt_eval_count")),
                    output=r.count(part.get("eval_count")),
                )
            texts.append(self.text(part))
            calls += self.tool_calls(part)
        return Summary(
            kind=Kind.LLM,
            dialect=self.name,
            model=model or r.request_model(request_json),
            usage=usage,
            tool_calls=tuple(calls),
            finish_reason=finish,
            text=r.joined(texts),
        )

    @abstractmethod
    def text(self, part: dict[str, object]) -> str:
        """The text one part of the answer adds (chat: its message's; generate: its own)."""

    def tool_calls(self, part: dict[str, object]) -> list[ToolCall]:
        return []

    def error_response(
        self, status: int, message: str, *, error_type: str
    ) -> tuple[Headers, bytes]:
        return ollama_error(message)


class OllamaChat(_Ollama):
    name = "ollama_chat"
    path = "/api/chat"

    def text(self, part: dict[str, object]) -> str:
        return r.text(r.dig(part, "message", "content")) or ""

    def tool_calls(self, part: dict[str, object]) -> list[ToolCall]:
        calls = []
        for raw in r.arr(r.dig(part, "message", "tool_calls")):
            function = r.obj(r.dig(raw, "function"))
            arguments = function.get("arguments")
            calls.append(
                ToolCall(
                    r.text(function.get("name")) or "",
                    orjson.dumps(arguments).decode() if arguments is not None else "",
                    r.text(r.dig(raw, "id")),
                )
            )
        return calls


class OllamaGenerate(_Ollama):
    name = "ollama_generate"
    path = "/api/generate"

    def text(self, part: dict[str, object]) -> str:
        return r.text(part.get("response")) or ""
