"""The streaming agent without an SDK: standard library only, so it starts in milliseconds and
its first request reaches the proxy before the proxy has loaded its run. With
CRASH_MID_STREAM=k it kills itself (SIGKILL) while turn k's stream arrives, after its first
event. It prints its answers, one per line."""

import http.client
import json
import os
import signal
from urllib.parse import urlsplit

TURNS = int(os.environ.get("TURNS", "3"))
CRASH = int(os.environ.get("CRASH_MID_STREAM", "-1"))
base = urlsplit(os.environ["OPENAI_BASE_URL"])


def ask(turn: int) -> str:
    connection = http.client.HTTPConnection(base.hostname, base.port, timeout=30)
    body = {"model": "gpt-4o", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": f"question {turn}"}]}
    connection.request("POST", f"{base.path}/chat/completions", json.dumps(body),
                       {"content-type": "application/json",
                        "authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"})
    response = connection.getresponse()
    assert response.status == 200, response.read()
    parts = []
    for line in response:
        if turn == CRASH:
            os.kill(os.getpid(), signal.SIGKILL)
        data = line.decode().removeprefix("data: ").strip()
        if not data or data == "[DONE]":
            continue
        for choice in json.loads(data).get("choices", []):
            parts.append(choice.get("delta", {}).get("content") or "")
    connection.close()
    return "".join(parts)


for turn in range(TURNS):
    print(ask(turn), flush=True)
