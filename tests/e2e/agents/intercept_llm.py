"""An agent whose model API base URL is fixed in its code (no OPENAI_BASE_URL): only
HTTPS_PROXY brings its calls to forkpoint. Prints the answers, plain then streamed.

    python intercept_llm.py https://127.0.0.2:PORT/v1
"""

from __future__ import annotations

import sys

import openai


def main(base_url: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key="sk-test-secret", max_retries=0)
    messages = [{"role": "user", "content": "Where is order A1?"}]
    answer = client.chat.completions.create(model="gpt-4o", messages=messages)  # type: ignore[arg-type]
    print(answer.choices[0].message.content)
    stream = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=messages,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    print("".join(c.choices[0].delta.content or "" for c in stream if c.choices))


if __name__ == "__main__":
    main(sys.argv[1])
