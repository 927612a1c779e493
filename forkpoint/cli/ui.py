"""`forkpoint ui`: the web view of a cassette's runs, in a browser."""

from __future__ import annotations

import click

from forkpoint import api
from forkpoint.cli.options import cassette_option, reports_errors


@click.command()
@cassette_option
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8767, show_default=True, help="Port [0: a free one].")
@click.option(
    "--token",
    envvar="FORKPOINT_TOKEN",
    default=None,
    metavar="TOKEN",
    help="Answer only requests under /t/TOKEN/ [env FORKPOINT_TOKEN; beyond loopback, one is "
    "made up].",
)
@reports_errors
def ui(cassette: str | None, host: str, port: int, token: str | None) -> None:
    """Browse the cassette's runs in a web browser: the runs as a tree, each run's timeline
    and steps (request, response, stream events, cost), diffs and experiments, and a run
    being recorded as it grows. It only reads the cassette.

    `forkpoint serve` shows the same pages under /_forkpoint/ui/.

    Example: forkpoint ui --cassette .forkpoint/demo.db  then open http://127.0.0.1:8767/
    """
    from forkpoint.ui.server import UiServing, serve_ui

    def announce(serving: UiServing) -> None:
        click.echo(f"forkpoint ui on {serving.url}")
        if serving.token_made:  # shown once, on stderr: stdout may be kept in logs
            click.echo(
                f"forkpoint: made up a token for this web view (give --token or "
                f"FORKPOINT_TOKEN to keep one): open {serving.url}t/{serving.token}/",
                err=True,
            )

    serve_ui(api.Options(cassette=cassette), host=host, port=port, token=token, ready=announce)
