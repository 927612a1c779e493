"""A multi-turn assistant on the OpenAI Agents SDK whose conversation is a forkpoint session.

Each turn is one `Runner.run` with the session; the turns done so far are counted in the same
state, so after a crash `forkpoint resume` brings the agent back at the turn it was in (the
SDK may already have stored that turn's question: it is taken back with `pop_item` and asked
again). With CRASH_AFTER=k it kills itself right after turn k. Prints every assistant answer
in the session as a JSON list.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from agents import Agent, Runner

from forkpoint.adapters.openai_agents import ForkpointSession

TURNS = ["Where is order A1001?", "Can I return it?", "Thanks, please refund it."]
assistant = Agent(name="Assistant", instructions="Answer briefly.", model="gpt-4o")


async def main() -> list[str]:
    session = ForkpointSession()
    state = session.state
    state.setdefault("turns_done", 0)
    crash_after = int(os.environ.get("CRASH_AFTER", "0"))
    print(
        f"restored_step={session.restored_step} turns_done={state['turns_done']}", file=sys.stderr
    )
    while state["turns_done"] < len(TURNS):
        question = TURNS[state["turns_done"]]
        last = (await session.get_items(limit=1)) or [{}]
        if last[0].get("role") == "user" and last[0].get("content") == question:
            await session.pop_item()  # stored before the crash: ask it again
        await Runner.run(assistant, question, session=session)
        state["turns_done"] += 1
        if state["turns_done"] == crash_after:
            os.kill(os.getpid(), signal.SIGKILL)
    items = await session.get_items()
    return [
        part["text"]
        for item in items
        if item.get("role") == "assistant"
        for part in item.get("content", [])
        if part.get("type") == "output_text"
    ]


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
