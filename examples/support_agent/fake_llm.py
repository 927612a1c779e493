"""An offline stand-in for the OpenAI API that plays the support agent's model.

It serves forkpoint's wire-faithful scripted upstream with `support_script`, streaming word by
word, so the agent runs unchanged and needs no API key or network:

    python -m examples.support_agent.fake_llm --port 8791
    export OPENAI_BASE_URL=http://127.0.0.1:8791/v1 OPENAI_API_KEY=unused
    python examples/support_agent/agent.py
"""

from __future__ import annotations

import argparse
import asyncio

from examples.support_agent.script import support_script
from forkpoint.runtime.loop_thread import until_stopped
from forkpoint.testing.upstream import ScriptedUpstream


async def serve(port: int, host: str = "127.0.0.1") -> None:
    """Serve until SIGINT or SIGTERM; print the URL first, so scripts can read the free port."""
    upstream = ScriptedUpstream(support_script, chunk_delay=0.01)
    url = await upstream.start(host, port)
    print(f"fake LLM serving on {url}  (OPENAI_BASE_URL={url}/v1)", flush=True)
    try:
        await until_stopped()
    finally:
        await upstream.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8791, help="0 picks a free one")
    asyncio.run(serve(parser.parse_args(argv).port))


if __name__ == "__main__":
    main()
