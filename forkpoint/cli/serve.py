"""`forkpoint serve`: the proxy as a long-lived server."""

from __future__ import annotations

import click

from forkpoint import api
from forkpoint.cli.options import (
    cassette_option,
    intercept_options,
    limit_options,
    pace_option,
    parse_routes,
    reports_errors,
    upstream_options,
)
from forkpoint.engine.pace import Pace
from forkpoint.runtime.intercept import InterceptOptions


@click.command()
@cassette_option
@upstream_options
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8765, show_default=True)
@click.option("--replay", "replay_run", metavar="RUN", help="Replay RUN instead of recording.")
@pace_option
@limit_options
@intercept_options(port=8766)
@reports_errors
def serve(
    cassette: str | None, upstream: str | None, routes: tuple[str, ...],
    redact: tuple[str, ...], host: str, port: int,
    replay_run: str | None, pace: str, read_timeout: float, client_timeout: float,
    max_body: int, intercept: InterceptOptions | None,
) -> None:  # fmt: skip
    """Serve the proxy until interrupted, recording every run that comes through.

    Pick a run per request with a /r/RUN/ path prefix or an X-Forkpoint-Run header; through
    --intercept, with HTTPS_PROXY=http://RUN:@127.0.0.1:8766 or that header.

    Example: forkpoint serve --port 8765  then  OPENAI_BASE_URL=http://127.0.0.1:8765/v1
    """
    options = api.Options(
        redact=redact,
        cassette=cassette, host=host, port=port, upstream=upstream,
        routes=parse_routes(routes), pace=Pace.parse(pace), read_timeout=read_timeout,
        client_timeout=client_timeout, max_body=max_body * 2**20, intercept=intercept,
    )  # fmt: skip
    api.serve(options, replay=replay_run, ready=_announce)


def _announce(serving: api.Serving) -> None:
    click.echo(f"forkpoint serving on {serving.url}  (OPENAI_BASE_URL={serving.url}/v1)")
    if serving.intercept_url and serving.intercept_env:
        env = serving.intercept_env
        click.echo(
            f"forkpoint intercepting on {serving.intercept_url}  (HTTPS_PROXY="
            f"{env['HTTPS_PROXY']}, SSL_CERT_FILE={env['SSL_CERT_FILE']})"
        )
