"""The `forkpoint` command: a click group of thin commands over `forkpoint.api`.

Each command lives in its own module and imports only `forkpoint.cli.options` (and the API);
this module builds the group from them.
"""

from __future__ import annotations

import click

from forkpoint.cli.ca import ca
from forkpoint.cli.copy import copy_command
from forkpoint.cli.diff import diff
from forkpoint.cli.experiment import experiment
from forkpoint.cli.fork import fork
from forkpoint.cli.inspect import runs, show, snapshots
from forkpoint.cli.record import record
from forkpoint.cli.replay import replay
from forkpoint.cli.resume import resume
from forkpoint.cli.serve import serve
from forkpoint.cli.transfer import export_command, import_command

__all__ = ["main"]


@click.group()
@click.version_option(package_name="forkpoint")
def main() -> None:
    """A save button for AI agents: record, replay, fork and diff runs through a proxy."""


for command in (
    record, replay, fork, resume, serve, runs, show, snapshots, diff, experiment,
    export_command, import_command, copy_command, ca,
):  # fmt: skip
    main.add_command(command)
