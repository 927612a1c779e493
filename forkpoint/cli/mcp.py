"""`forkpoint mcp -- CMD`: an MCP stdio server, recorded and replayed with the agent's run."""

from __future__ import annotations

import sys

import click

from forkpoint import api
from forkpoint.cli.options import reports_errors


@click.command(context_settings={"ignore_unknown_options": True})
@click.option(
    "--name", default=None, metavar="NAME",
    help="The server's name in the run (its route /mcp-stdio/NAME) [default: from CMD].",
)  # fmt: skip
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@reports_errors
def mcp(name: str | None, cmd: tuple[str, ...]) -> None:
    """Run the MCP stdio server CMD behind forkpoint: put it in front of the server's command
    in the agent's MCP configuration, and the server's calls are steps of the agent's run.

    Under `forkpoint record` it starts CMD and records each JSON-RPC exchange; under replay
    (and a fork's replayed steps) it answers from the cassette without starting CMD; a fork's
    live steps start CMD when the first one comes. Started by no forkpoint, it is CMD.

    \b
    Example: an agent's MCP configuration names it before the server
      {"command": "forkpoint", "args": ["mcp", "--", "python", "server.py"]}
    """
    sys.exit(api.serve_stdio(cmd, name=name))
