"""`forkpoint export` and `forkpoint import`: runs to and from vcrpy YAML, JSON lines and HAR."""

from __future__ import annotations

from pathlib import Path

import click

from forkpoint import api
from forkpoint.cassettes.transfer import FORMATS
from forkpoint.cli.options import cassette_option, parse_routes, reports_errors
from forkpoint.cli.terminal import echo


@click.command("export")
@cassette_option
@click.argument("run")
@click.option(
    "--format", "fmt", type=click.Choice(list(FORMATS)), default="vcr", show_default=True,
    help="vcr: YAML that vcrpy plays and reviewers read; jsonl: byte-exact; har: HAR 1.2.",
)  # fmt: skip
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), help="File to write [default: stdout]."
)
@reports_errors
def export_command(cassette: str | None, run: str, fmt: str, output: str | None) -> None:
    """Write RUN (id, id prefix or name) to a file: a test cassette, JSON lines or a HAR.

    The vcr format is the pytest plugin's cassette: `--forkpoint-record=none` replays it.

    Example: forkpoint export ticket-1 -o tests/cassettes/test_agent/test_ticket.yaml
    """
    content = api.export_run(run, fmt=fmt, options=api.Options(cassette=cassette))
    if output is None:
        click.echo(content, nl=False)
        return
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(content, encoding="utf-8")
    echo(f"forkpoint: wrote {output}", err=True)


@click.command("import")
@cassette_option
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--name", help="A name for the imported run [default: the file's].")
@click.option(
    "--format", "fmt", type=click.Choice(["auto", *FORMATS]), default="auto", show_default=True,
    help="auto: by extension (.yaml, .jsonl, .har), else by content.",
)  # fmt: skip
@click.option(
    "--route", "routes", multiple=True, metavar="NAME=URL",
    help="Requests to URL replay under /NAME/ (repeatable). Built in: "
    "anthropic=https://api.anthropic.com.",
)  # fmt: skip
@reports_errors
def import_command(
    cassette: str | None, file: str, name: str | None, fmt: str, routes: tuple[str, ...]
) -> None:
    """Add the run in FILE to the cassette as a new run, and print its id.

    FILE is a forkpoint or vcrpy YAML cassette, a forkpoint JSON lines file or a HAR.
    Credentials in it are redacted on the way in.

    Example: forkpoint import tests/cassettes/test_agent/test_ticket.yaml --name ticket-1
    """
    imported = api.import_run(
        file,
        fmt=None if fmt == "auto" else fmt,
        name=name,
        routes=parse_routes(routes),
        options=api.Options(cassette=cassette),
    )
    run = imported.run
    echo(f"forkpoint: imported run {run.id} ({run.name}), {imported.steps} steps", err=True)
    click.echo(run.id)
