"""`forkpoint copy`: runs from one store to another (an SQLite file, PostgreSQL)."""

from __future__ import annotations

import click

from forkpoint import api
from forkpoint.cli.options import reports_errors
from forkpoint.cli.terminal import echo
from forkpoint.models import Run


@click.command("copy")
@click.argument("source", metavar="SRC")
@click.argument("target", metavar="DST")
@click.argument("runs", nargs=-1, metavar="[RUN]...")
@reports_errors
def copy_command(source: str, target: str, runs: tuple[str, ...]) -> None:
    """Copy runs from store SRC to store DST, as they are: ids, steps, bytes, snapshots.

    SRC and DST are SQLite files or postgresql:// URLs. RUN (id, id prefix or name; every
    run if none) comes with the runs it was forked from; a run DST holds already is left
    as it is. Replay from DST serves the same bytes.

    Example: forkpoint copy .forkpoint/forkpoint.db postgresql://db/forkpoint ticket-1
    """

    def said(run: Run, steps: int | None) -> None:
        what = "already there" if steps is None else f"{steps} steps"
        echo(f"forkpoint: {run.id} ({run.name or '-'}): {what}", err=True)

    done = api.copy(source, target, runs, on_run=said)
    echo(
        f"forkpoint: copied {len(done.copied)} runs ({sum(s for _, s in done.copied)} steps), "
        f"{len(done.skipped)} already there",
        err=True,
    )
