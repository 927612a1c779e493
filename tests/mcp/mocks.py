"""Mock callables the MCP tests name on the command line (`--mock 'mcp:TOOL=tests.mcp.mocks:…'`)."""

from __future__ import annotations

from forkpoint.engine.mocks import MockRequest


def wrong_sum(request: MockRequest) -> str:
    """A sum tool that concatenates: its answer, as text, from the call's arguments."""
    a, b = request.arguments["a"], request.arguments["b"]
    return f"{a} + {b} = {a}{b}"
