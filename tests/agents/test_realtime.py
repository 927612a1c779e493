"""The OpenAI Realtime API (a websocket) under forkpoint, by its base URL: the openai Python
client talks to aimock's Realtime server through the gateway; the replay answers each of its
events with the recorded ones, offline."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.agents.conftest import forkpoint, place, show

CLIENT = """
import openai
client = openai.OpenAI()
with client.realtime.connect(model="gpt-realtime") as connection:
    connection.session.update(session={"type": "realtime", "output_modalities": ["text"]})
    connection.conversation.item.create(item={
        "type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "What is the secret word?"}],
    })
    connection.response.create()
    text = []
    for event in connection:
        if event.type == "response.output_text.delta":
            text.append(event.delta)
        elif event.type == "response.done":
            break
print("".join(text))
"""
SCRIPT = {
    "fixtures": [
        {"match": {"userMessage": "secret word"}, "response": {"content": "PINEAPPLE, said live."}},
    ]
}
ENV = {"OPENAI_API_KEY": "sk-test"}


def test_a_realtime_session_is_recorded_and_replayed_offline(tmp_path: Path, aimock_for):
    cassette = tmp_path / "runs.db"
    aimock = aimock_for(SCRIPT)
    first = place(tmp_path, "recorded")
    (first.project / "client.py").write_text(CLIENT)
    recorded = forkpoint(
        "record", "--upstream", aimock.url, "--", sys.executable, "client.py",
        cassette=cassette, at=first, env=ENV,
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout == "PINEAPPLE, said live.\n"
    steps = show(recorded.run_id, cassette, first)["exchanges"]
    assert [(e["method"], e["status"]) for e in steps] == [("GET", 101)] + [("WS", 101)] * 3

    aimock.stop()
    again = place(tmp_path, "elsewhere")
    (again.project / "client.py").write_text(CLIENT)
    replayed = forkpoint(
        "replay", recorded.run_id, "--", sys.executable, "client.py",
        cassette=cassette, at=again, env=ENV,
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == "PINEAPPLE, said live.\n"
    assert {e["origin"] for e in show(replayed.run_id, cassette, again)["exchanges"]} == {
        "replayed"
    }
