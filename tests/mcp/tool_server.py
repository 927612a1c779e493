"""An MCP server built with the official SDK (`MCPServer`, formerly FastMCP), run over stdio or
streamable HTTP by tests/mcp. On start it appends its pid to the file FP_MCP_MARKER names, so a
test can tell whether a replay ever started it."""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("forkpoint-tools")


@server.tool()
def refund_policy(order_id: str) -> str:
    """The refund policy that applies to an order."""
    return f"order {order_id}: refundable within 30 days"


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@server.tool()
def issue_token(user: str) -> dict[str, str]:
    """A credential for a user (a secret in a tool's result)."""
    return {"user": user, "access_token": "sk-proj-" + "T0k3nValue" * 4}


@server.tool()
async def slow_count(n: int, ctx: Context) -> str:
    """Count to n, reporting progress on the way."""
    for i in range(n):
        await ctx.report_progress(i + 1, n)
    return f"counted to {n}"


@server.tool()
def crash() -> str:
    """Exit the server mid-call, as a crashing server does."""
    os._exit(3)


def main() -> None:
    marker = os.environ.get("FP_MCP_MARKER")
    if marker:
        with open(marker, "a") as file:
            file.write(f"{os.getpid()}\n")
    print("tool server starting", file=sys.stderr)
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]), **_http_options())
    else:
        server.run()


def _http_options() -> dict[str, object]:
    return {"json_response": os.environ.get("FP_MCP_JSON") == "1"}


if __name__ == "__main__":
    main()
