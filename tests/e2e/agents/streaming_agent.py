"""An agent that streams every answer, and with CRASH_MID_STREAM=k kills itself (SIGKILL)
while turn k's stream is arriving, after its first chunk. It keeps no state of its own: a
resumed run asks from the first turn again. It prints its answers, one per line."""

import os
import signal

import openai

TURNS = int(os.environ.get("TURNS", "3"))
CRASH = int(os.environ.get("CRASH_MID_STREAM", "-1"))

client = openai.OpenAI(max_retries=0)
for turn in range(TURNS):
    stream = client.chat.completions.create(
        model="gpt-4o", stream=True, messages=[{"role": "user", "content": f"question {turn}"}]
    )
    parts = []
    for chunk in stream:
        if turn == CRASH:
            os.kill(os.getpid(), signal.SIGKILL)
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    print("".join(parts), flush=True)
