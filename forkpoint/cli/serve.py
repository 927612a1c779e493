"""`forkpoint serve`: the proxy as a long-lived server."""

from __future__ import annotations

from urllib.parse import quote

import click

from forkpoint import api
from forkpoint.cli.options import (
    cassette_option,
    intercept_options,
    limit_options,
    mib,
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
@click.option(
    "--token",
    envvar="FORKPOINT_TOKEN",
    default=None,
    metavar="TOKEN",
    help="Answer only requests that carry TOKEN (/t/TOKEN/ path prefix, X-Forkpoint-Token "
    "header, or the proxy password) [env FORKPOINT_TOKEN; beyond loopback, one is made up].",
)
@click.option(
    "--adapter-host", "adapter_hosts", multiple=True, metavar="HOST",
    help="Also fetch agent adapters registered at HOST (repeatable) [default: loopback only].",
)  # fmt: skip
@pace_option
@limit_options
@intercept_options(port=8766)
@reports_errors
def serve(
    cassette: str | None, upstream: str | None, routes: tuple[str, ...],
    redact: tuple[str, ...], host: str, port: int,
    replay_run: str | None, pace: str, read_timeout: float, client_timeout: float,
    max_body: int, max_record_body: int | None,
    intercept: InterceptOptions | None, adapter_hosts: tuple[str, ...], token: str | None,
) -> None:  # fmt: skip
    """Serve the proxy until interrupted, recording every run that comes through.

    Pick a run per request with a /r/RUN/ path prefix or an X-Forkpoint-Run header; through
    --intercept, with HTTPS_PROXY=http://RUN:@127.0.0.1:8766 or that header.

    Beyond loopback (--host 0.0.0.0) every request needs the token (--token, else one made
    up and printed on stderr): OPENAI_BASE_URL=http://HOST:8765/t/TOKEN/v1, the
    X-Forkpoint-Token header, or HTTPS_PROXY=http://RUN:TOKEN@HOST:8766.

    Example: forkpoint serve --port 8765  then  OPENAI_BASE_URL=http://127.0.0.1:8765/v1
    """
    options = api.Options(
        redact=redact,
        cassette=cassette, host=host, port=port, upstream=upstream,
        routes=parse_routes(routes), pace=Pace.parse(pace), read_timeout=read_timeout,
        client_timeout=client_timeout, max_body=max_body * 2**20,
        max_record_body=mib(max_record_body),
        intercept=intercept, adapter_hosts=adapter_hosts,
        token=token,
    )  # fmt: skip
    api.serve(options, replay=replay_run, ready=_announce)


def _announce(serving: api.Serving) -> None:
    base = f"{serving.url}/t/TOKEN" if serving.token else serving.url
    click.echo(f"forkpoint serving on {serving.url}  (OPENAI_BASE_URL={base}/v1)")
    if serving.token_made:  # the one place it is shown: stderr, never stdout or the cassette
        click.echo(
            f"forkpoint: made up a token for this proxy (give --token or FORKPOINT_TOKEN to "
            f"keep one): OPENAI_BASE_URL={serving.url}/t/{serving.token}/v1, or the "
            "X-Forkpoint-Token header",
            err=True,
        )
    if serving.intercept_url and serving.intercept_env:
        env = serving.intercept_env
        proxy_url = env["HTTPS_PROXY"]
        if serving.token:  # shown as a placeholder: stdout is kept in logs
            proxy_url = proxy_url.replace(quote(serving.token, safe=""), "TOKEN")
        click.echo(
            f"forkpoint intercepting on {serving.intercept_url}  (HTTPS_PROXY="
            f"{proxy_url}, SSL_CERT_FILE={env['SSL_CERT_FILE']})"
        )
