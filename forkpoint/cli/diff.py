"""`forkpoint diff`: compare two runs in the terminal, as JSON or as an HTML page."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson

from forkpoint import api
from forkpoint.cli.options import cassette_option, prices, reports_errors


@click.command()
@cassette_option
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True, help="The diff as JSON (docs/diff-json.md).")
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Also write the diff as a self-contained HTML page to FILE.",
)
@click.option("--all-steps", is_flag=True, help="List matching steps too, not folded.")
@prices
@reports_errors
def diff(
    cassette: str | None, a: str, b: str, as_json: bool, html_file: Path | None, all_steps: bool
) -> None:
    """Compare runs A and B (id, id prefix or name) step by step, with cost and answers.

    Shows the first step where they differ, what each did per step, their tool calls, tokens,
    cost and time (whole run and from the fork point on), and a diff of the final answers.

    Example: forkpoint diff ticket-1 ticket-1-mini --html diff.html
    """
    # Imported here: every forkpoint command imports this module, only diff needs rich.
    from rich.console import Console

    from forkpoint.cli.terminal import visible_stream
    from forkpoint.compare.html import diff_html
    from forkpoint.compare.render import diff_json, print_diff

    result = api.diff(a, b, api.Options(cassette=cassette))
    if html_file is not None:
        html_file.write_text(diff_html(result), encoding="utf-8")
    if as_json:
        click.echo(orjson.dumps(diff_json(result), option=orjson.OPT_INDENT_2).decode())
    else:
        console = Console(file=visible_stream(sys.stdout), highlight=False)
        print_diff(result, console, all_steps=all_steps)
