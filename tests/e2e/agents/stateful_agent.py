"""A small agent that keeps its progress in forkpoint's agent helper.

It asks TURNS questions, one model call each, remembering the answers in its state. With
CRASH_AFTER=k it kills itself (SIGKILL: no clean-up) right after turn k. It prints its final
state as JSON. WORKSPACE, if set, is a directory it writes one file per turn into.
"""

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import openai

from forkpoint.adapters.agent import attach

TURNS = int(os.environ.get("TURNS", "6"))
CRASH_AFTER = int(os.environ.get("CRASH_AFTER", "-1"))
STATE_KB = int(os.environ.get("STATE_KB", "0"))


def main() -> dict:
    state = attach(default={"turn": 0, "answers": [], "ballast": "x" * (STATE_KB * 1024)})
    print(f"restored_step={state.restored_step} turn={state['turn']}", file=sys.stderr)
    client = openai.OpenAI(max_retries=0)
    while state["turn"] < TURNS:
        answer = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": f"question {state['turn']}"}]
        )
        note(state, answer.choices[0].message.content or "")
    return state


async def main_async() -> dict:
    """The same agent on asyncio: attach is called from inside the running loop."""
    state = attach(default={"turn": 0, "answers": [], "ballast": "x" * (STATE_KB * 1024)})
    print(f"restored_step={state.restored_step} turn={state['turn']}", file=sys.stderr)
    async with openai.AsyncOpenAI(max_retries=0) as client:
        while state["turn"] < TURNS:
            answer = await client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": f"question {state['turn']}"}]
            )
            note(state, answer.choices[0].message.content or "")
    return state


def note(state: dict, answer: str) -> None:
    turn = state["turn"]
    state["answers"].append(answer)
    state["turn"] = turn + 1
    if WORKSPACE is not None:
        (WORKSPACE / f"turn-{turn}.txt").write_text(answer)
    if state["turn"] == CRASH_AFTER:
        os.kill(os.getpid(), signal.SIGKILL)


WORKSPACE = Path(os.environ["WORKSPACE"]) if os.environ.get("WORKSPACE") else None
final = asyncio.run(main_async()) if os.environ.get("ASYNC") else main()
print(json.dumps({"turn": final["turn"], "answers": final["answers"]}))
