"""OpenAI audio transcriptions and translations (`POST …/audio/transcriptions`, `…/translations`):
a model call billed by what it heard.

The request is a multipart form (the file, `model`, `response_format`…), read as its text fields.
The answer is JSON (`text`, `usage`) or, with `stream=true`, SSE (`transcript.text.delta` events,
then `transcript.text.done` with the usage). A token-billed model (gpt-4o-transcribe) reports
`usage.type: "tokens"`, its audio tokens a part of its input; whisper-1 reports `"duration"`,
the seconds it heard. A plain-text answer (`response_format` text, srt or vtt) carries no usage,
so it cannot be priced.
"""

from __future__ import annotations

from forkpoint.engine.dialects import _read as r
from forkpoint.engine.dialects._base import LlmDialect
from forkpoint.models import Kind, Summary, Usage


class OpenAIAudio(LlmDialect):
    name = "openai_audio"

    def claims(self, method: str, path: str) -> bool:
        route = path.rstrip("/")
        return method.upper() == "POST" and route.endswith(
            ("/audio/transcriptions", "/audio/translations")
        )

    def summarize_stream(self, request_json: object | None, body: bytes) -> Summary:
        deltas, done, usage = [], None, None
        for payload in r.stream_payloads(body):
            kind = payload.get("type")
            if kind == "transcript.text.delta":
                deltas.append(r.text(payload.get("delta")) or "")
            elif kind == "transcript.text.done":
                done = r.text(payload.get("text"))
            usage = _usage(payload.get("usage")) or usage
        return self._summary(request_json, done or r.joined(deltas), usage)

    def summarize_answer(self, request_json: object | None, answer: object) -> Summary:
        return self._summary(
            request_json, r.text(r.dig(answer, "text")), _usage(r.dig(answer, "usage"))
        )

    def _summary(
        self, request_json: object | None, text: str | None, usage: Usage | None
    ) -> Summary:
        return Summary(
            kind=Kind.LLM,
            dialect=self.name,
            model=r.request_model(request_json),
            usage=usage,
            text=text,
        )


def _usage(usage: object) -> Usage | None:
    match r.dig(usage, "type"):
        case "tokens":
            return Usage(
                input=r.count(r.dig(usage, "input_tokens")),
                output=r.count(r.dig(usage, "output_tokens")),
                audio=r.count(r.dig(usage, "input_token_details", "audio_tokens")),
            )
        case "duration":
            seconds = r.dig(usage, "seconds")
            if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds >= 0:
                return Usage(audio_seconds=float(seconds))
    return None
