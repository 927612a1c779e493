"""OpenAI audio transcriptions: the model from the upload's form, usage by tokens or seconds."""

from __future__ import annotations

import orjson

from forkpoint.engine.dialects import OpenAIAudio, summarize_exchange
from forkpoint.models import Kind, Summary, Usage
from tests.builders import exchange

AUDIO = OpenAIAudio()
FORM = {"model": "gpt-4o-transcribe", "response_format": "json"}
TOKENS = {"type": "tokens", "input_tokens": 14, "output_tokens": 45, "total_tokens": 59,
          "input_token_details": {"text_tokens": 0, "audio_tokens": 14}}  # fmt: skip


def sse(*events: dict[str, object]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)


def test_a_streamed_transcription_keeps_its_text_and_the_usage_of_its_last_event() -> None:
    body = sse(
        {"type": "transcript.text.delta", "delta": "Refund "},
        {"type": "transcript.text.delta", "delta": "A1001."},
        {"type": "transcript.text.done", "text": "Refund A1001.", "usage": TOKENS},
    )
    summary = AUDIO.summarize(FORM, body, streamed=True, status=200)
    assert summary == Summary(
        Kind.LLM, "openai_audio", "gpt-4o-transcribe", Usage(14, 45, audio=14), text="Refund A1001."
    )
    cut = AUDIO.summarize(FORM, body[: body.index(b"transcript.text.done") - 8], streamed=True,
                          status=200)  # fmt: skip
    assert (cut.text, cut.usage) == ("Refund A1001.", None)


def test_plain_text_formats_and_garbage_carry_no_usage() -> None:
    for body in (b"1\n00:00:00,000 --> 00:00:02,000\nRefund A1001.\n", b"{not json", b""):
        summary = AUDIO.summarize({"model": "whisper-1"}, body, streamed=False, status=200)
        assert (summary.kind, summary.model, summary.usage) == (Kind.LLM, "whisper-1", None)
    odd = {"text": "x", "usage": {"type": "duration", "seconds": True}}
    assert AUDIO.summarize(FORM, orjson.dumps(odd), streamed=False, status=200).usage is None


def test_the_model_is_read_from_the_upload_s_form_and_the_file_left_out() -> None:
    boundary = "b0undary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
            f"Content-Type: audio/wav\r\n\r\n"
        ).encode()
        + bytes(range(256))
        + f"\r\n--{boundary}--\r\n".encode()
    )
    recorded = exchange(
        route="/v1/audio/transcriptions", request_body=body,
        request_headers=(("content-type", f"multipart/form-data; boundary={boundary}"),),
        response_body=b'{"text": "hi", "usage": {"type": "duration", "seconds": 3}}',
    )  # fmt: skip
    summary = summarize_exchange(recorded)
    assert (summary.dialect, summary.model, summary.usage) == (
        "openai_audio",
        "whisper-1",
        Usage(audio_seconds=3.0),
    )
