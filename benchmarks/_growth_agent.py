"""growth.py's agent: a support chat of N turns through the real openai SDK, as an agent
sends it (turn k resends the system prompt and the k-1 turns before, then asks one more
question). It reads OPENAI_BASE_URL and OPENAI_API_KEY, which `forkpoint record` sets.

    python benchmarks/_growth_agent.py TURNS
"""

from __future__ import annotations

import sys

from openai import OpenAI

SYSTEM = "You are a support agent for an online shop. Be brief and exact. " * 8


def main() -> None:
    turns = int(sys.argv[1])
    client = OpenAI()
    messages: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]
    for turn in range(turns):
        question = f"Question {turn}: where is order A{turn:05d}? " + "It has not arrived. " * 18
        messages.append({"role": "user", "content": question})
        answer = client.chat.completions.create(model="gpt-4o", messages=messages)  # type: ignore[arg-type]
        messages.append({"role": "assistant", "content": answer.choices[0].message.content or ""})


if __name__ == "__main__":
    main()
