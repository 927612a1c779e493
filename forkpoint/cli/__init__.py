"""The `forkpoint` command: a click group of thin commands over `forkpoint.api`.

Each command lives in its own module and imports only `forkpoint.cli.options` (and the API);
this module names them, and a command's module is imported only when it runs (or when
`--help` lists them), so `forkpoint runs` never pays for the proxy's imports.
"""

from __future__ import annotations

import importlib

import click

from forkpoint.runtime import collector

__all__ = ["main"]

# command name -> (module under forkpoint.cli, the click command's name in it), in help order
_COMMANDS = {
    "record": ("record", "record"),
    "replay": ("replay", "replay"),
    "fork": ("fork", "fork"),
    "resume": ("resume", "resume"),
    "serve": ("serve", "serve"),
    "answer": ("parking", "answer"),
    "wake": ("parking", "wake"),
    "mcp": ("mcp", "mcp"),
    "ui": ("ui", "ui"),
    "runs": ("inspect", "runs"),
    "show": ("inspect", "show"),
    "snapshots": ("inspect", "snapshots"),
    "diff": ("diff", "diff"),
    "experiment": ("experiment", "experiment"),
    "export": ("transfer", "export_command"),
    "import": ("transfer", "import_command"),
    "copy": ("copy", "copy_command"),
    "worker": ("worker", "worker"),
    "ca": ("ca", "ca"),
}


class _Commands(click.Group):
    """A group whose commands are imported when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in _COMMANDS:
            return None
        module, name = _COMMANDS[cmd_name]
        command = getattr(importlib.import_module(f"forkpoint.cli.{module}"), name)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=_Commands)
@click.version_option(package_name="forkpoint")
def main() -> None:
    """A save button for AI agents: record, replay, fork and diff runs through a proxy."""
    collector.tune()
