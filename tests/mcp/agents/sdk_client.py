"""An agent that uses the official MCP Python SDK's client: it lists the tools, calls some and
prints what it got as JSON lines. `sdk_client.py MODE stdio CMD…` starts the server CMD;
`sdk_client.py MODE http URL` connects to one, at $FORKPOINT_URL/URL when URL is a route,
with FP_MCP_AUTH (env) as its bearer token.
MODE: `legacy` (the initialize handshake, revision 2025-11-25) or `auto` (revision 2026-07-28
with a server that speaks it). TOOLS (env) lists the calls, `name:json-arguments;…`."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

DEFAULT_CALLS = 'refund_policy:{"order_id": "A1"};slow_count:{"n": 3};add:{"a": 2, "b": 3}'


def server() -> object:
    transport, *rest = sys.argv[2:]
    if transport == "stdio":
        # the server's own configuration: what an agent's MCP settings name for it
        env = {key: value for key, value in os.environ.items() if key.startswith("FP_MCP_")}
        return StdioServerParameters(command=rest[0], args=rest[1:], env=env)
    url = rest[0] if rest[0].startswith("http") else os.environ["FORKPOINT_URL"] + rest[0]
    token = os.environ.get("FP_MCP_AUTH")  # a credential for the server, as a bearer token
    if token is None:
        return url
    headers = {"Authorization": f"Bearer {token}"}
    return streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))


async def main() -> None:
    mode = sys.argv[1]
    calls = [item.split(":", 1) for item in os.environ.get("TOOLS", DEFAULT_CALLS).split(";")]
    async with Client(server(), mode=mode) as client:  # type: ignore[arg-type]
        tools = await client.list_tools()
        print(json.dumps({"tools": sorted(tool.name for tool in tools.tools)}), flush=True)
        for name, arguments in calls:
            progress: list[float] = []

            async def heard(done: float, total: float | None, message: str | None) -> None:
                progress.append(done)  # noqa: B023 (each call's own list, awaited in its turn)

            result = await client.call_tool(name, json.loads(arguments), progress_callback=heard)
            texts = [item.text for item in result.content if item.type == "text"]
            line = {"tool": name, "text": texts, "error": result.is_error}
            if progress:
                line["progress"] = progress
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
