"""A support agent on the OpenAI Agents SDK whose tools come from an MCP server, as the SDK's
docs show: `agents_sdk.py stdio CMD…` starts the server (MCPServerStdio); `agents_sdk.py http
ROUTE` reaches it at $FORKPOINT_URL/ROUTE (MCPServerStreamableHttp). The model is wherever
OPENAI_BASE_URL says. Prints the final output as a JSON line."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from agents import Agent, Runner
from agents.mcp import MCPServer, MCPServerStdio, MCPServerStreamableHttp

# A server's start (an interpreter, its imports) takes seconds on a loaded machine: more than
# the SDK's default of 5 s per request.
TIMEOUT = 60


def server() -> MCPServer:
    transport, *rest = sys.argv[1:]
    if transport == "stdio":
        env = {key: value for key, value in os.environ.items() if key.startswith("FP_MCP_")}
        params = {"command": rest[0], "args": rest[1:], "env": env}
        return MCPServerStdio(params=params, client_session_timeout_seconds=TIMEOUT)  # type: ignore[arg-type]
    url = os.environ["FORKPOINT_URL"] + rest[0]
    return MCPServerStreamableHttp(params={"url": url}, client_session_timeout_seconds=TIMEOUT)


async def main() -> None:
    async with server() as tools:
        agent = Agent(
            name="Support",
            instructions="Answer refund questions with the refund_policy tool.",
            model="gpt-4o",
            mcp_servers=[tools],
        )
        result = await Runner.run(agent, "Can I get a refund for order A1?")
        print(json.dumps({"final": result.final_output}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
