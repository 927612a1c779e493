"""The divergence report, with plain data: long values show their differing part, JSON inside
strings is compared field by field, non-JSON bodies read as text, multipart bodies match part
by part, and an agent that asks more often than recorded is told so (issues 17 and 13)."""

from __future__ import annotations

import json

import orjson

from forkpoint.engine.decide import Fail, Request, Serve, decide
from forkpoint.engine.session import Session
from forkpoint.models import Exchange, Origin
from tests.engine.test_decide import CONFIG, chat, post, recorded_run, replay_session


def report(session: Session, request: Request) -> str:
    action = decide(session, request, CONFIG)
    assert isinstance(action, Fail), "expected a divergence"
    assert action.record.origin is Origin.DIVERGED
    return orjson.loads(action.body)["error"]["message"]  # type: ignore[no-any-return]


def test_a_long_value_shows_the_part_that_differs_with_context():
    prompt = "You are a helpful agent. " * 20 + "Today is Monday. " + "Be brief. " * 20
    session = replay_session(recorded_run(chat(prompt)))
    message = report(session, post("/v1/chat/completions", chat(prompt.replace("Monday", "Friday"))))
    line = next(line for line in message.splitlines() if "messages[0].content" in line)
    assert "Today is Monday." in line and "Today is Friday." in line
    assert line.count("…") == 4  # context either side, on both sides of the arrow


def test_a_prompt_changed_in_two_places_shows_both():
    lines = [f"line {n}: nothing to see here, just a system prompt line" for n in range(40)]
    changed = [*lines]
    changed[3], changed[30] = "line 3: the date is 2026-12-02", "line 30: cwd is /srv/other"
    session = replay_session(recorded_run(chat("\n".join(lines))))
    message = report(session, post("/v1/chat/completions", chat("\n".join(changed))))
    assert "(line 4)" in message and "(line 31)" in message
    assert "the date is 2026-12-02" in message and "cwd is /srv/other" in message


def test_json_inside_a_string_is_compared_field_by_field():
    def with_user(plan: str) -> bytes:
        inner = {"device_id": "d" * 8, "plan": plan, "padding": "x" * 200}
        return chat("hi", user=json.dumps(inner))

    session = replay_session(recorded_run(with_user("pro")))
    message = report(session, post("/v1/chat/completions", with_user("free")))
    assert '$.user(json).plan: "pro" → "free"' in message


def test_differences_in_generated_values_do_not_hide_the_one_that_matters():
    def ask(session_id: str, n: int, text: str) -> bytes:
        return chat(text, metadata={f"trace_{i}": f"{session_id}-{i}" for i in range(n)})

    recorded = ask("0b9c7a7e-8e0a-4f39-9a3b-1d2f3e4a5b6c", 30, "refund order A1")
    session = replay_session(recorded_run(recorded))
    got = ask("6f1d2c3b-4a59-4e8f-8d7c-6b5a49382716", 30, "refund order B2")
    message = report(session, post("/v1/chat/completions", got))
    assert '$.messages[0].content: "refund order A1" → "refund order B2"' in message
    assert "besides values the client generates" in message


def test_a_text_body_is_shown_as_text_not_hex():
    recorded = recorded_run(b"query=refund&order=A1001", route="/tools/search")
    message = report(replay_session(recorded), post("/tools/search", b"query=refund&order=A1002"))
    assert "order=A1001" in message and "order=A1002" in message


def multipart(boundary: str, audio: bytes, model: str = "whisper-1") -> Request:
    body = (
        f"--{boundary}\r\n"
        'Content-Disposition: form-data; name="model"\r\n\r\n'
        f"{model}\r\n"
        f"--{boundary}\r\n"
        'Content-Disposition: form-data; name="file"; filename="speech.mp3"\r\n'
        "Content-Type: audio/mpeg\r\n\r\n"
    ).encode() + audio + f"\r\n--{boundary}--\r\n".encode()
    content_type = f"multipart/form-data; boundary={boundary}"
    return Request("POST", "/v1/audio/transcriptions", (("content-type", content_type),), body)


def recorded_upload(request: Request) -> list[Exchange]:
    exchange = Exchange(
        run_id="rec", step=0, method=request.method, route=request.route,
        request_headers=request.headers, request_body=request.body, fingerprint="",
        status=200, response_body=b'{"text": "hello"}',
    )  # fmt: skip
    return [exchange]


def test_multipart_uploads_match_part_by_part_whatever_their_boundary():
    audio = bytes(range(256)) * 4
    session = replay_session(recorded_upload(multipart("----a1b2c3", audio)))
    action = decide(session, multipart("----z9y8x7", audio), CONFIG)
    assert isinstance(action, Serve) and action.record.origin is Origin.REPLAYED


def test_a_multipart_upload_of_other_data_diverges_and_says_which_part():
    audio = bytes(range(256)) * 4
    session = replay_session(recorded_upload(multipart("----a1b2c3", audio)))
    message = report(session, multipart("----z9y8x7", audio, model="gpt-4o-transcribe"))
    assert '"whisper-1" → "gpt-4o-transcribe"' in message
    session = replay_session(recorded_upload(multipart("----a1b2c3", audio)))
    message = report(session, multipart("----z9y8x7", audio[::-1]))
    assert "data (binary)" in message and "sha256" in message


def test_asked_more_often_than_recorded_names_the_steps_already_served():
    session = replay_session(recorded_run(chat("ping"), chat("other"), chat("ping")))
    for _ in range(2):
        assert isinstance(decide(session, post("/v1/chat/completions", chat("ping")), CONFIG), Serve)
    message = report(session, post("/v1/chat/completions", chat("ping")))
    assert "were all served already: step 0 (to step 0), step 2 (to step 1)" in message
    assert "Nearest" not in message  # not the unrelated step 1


def test_already_served_also_counts_matches_but_for_generated_values():
    def ping(session_id: str) -> bytes:
        return chat("ping", user=f"session {session_id}")

    session = replay_session(recorded_run(ping("0b9c7a7e-8e0a-4f39-9a3b-1d2f3e4a5b6c"), chat("other")))
    fresh = ping("6f1d2c3b-4a59-4e8f-8d7c-6b5a49382716")
    assert isinstance(decide(session, post("/v1/chat/completions", fresh), CONFIG), Serve)
    message = report(session, post("/v1/chat/completions", fresh))
    assert "were all served already: step 0 (to step 0)" in message
