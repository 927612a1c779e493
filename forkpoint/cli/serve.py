"""`forkpoint serve`: the proxy as a long-lived server."""

from __future__ import annotations

from functools import partial
from urllib.parse import quote

import click

from forkpoint import api
from forkpoint.cassettes.store import WAKE_LEASE
from forkpoint.cli.options import (
    cassette_option,
    hangup_option,
    intercept_options,
    limit_options,
    mib,
    on_wake_words,
    pace_option,
    park_options,
    parse_routes,
    reports_errors,
    upstream_options,
)
from forkpoint.doors.reach import is_loopback
from forkpoint.engine.config import OnHangup
from forkpoint.engine.pace import Pace
from forkpoint.engine.parking import parse_duration
from forkpoint.errors import ConfigError
from forkpoint.runtime.intercept import InterceptOptions
from forkpoint.ui.mount import MOUNT, WebView


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
@hangup_option
@intercept_options(port=8766)
@park_options
@click.option(
    "--wake-agent", default=None, metavar="NAME",
    help="Wake parked runs on `forkpoint worker`s that have agent NAME (a wake job on the "
    "queue in the PostgreSQL store), instead of a local process.",
)  # fmt: skip
@click.option(
    "--wake-lease", default=None, metavar="DURATION",
    help="How long a wake claimed by a waker stays its own (default 60s): past it, a run "
    "answered but never woken (its waker died mid-wake) is woken by another. An --on-wake "
    "hook must return within it.",
)  # fmt: skip
@reports_errors
def serve(
    cassette: str | None, upstream: str | None, routes: tuple[str, ...],
    redact: tuple[str, ...], host: str, port: int, on_hangup: OnHangup,
    replay_run: str | None, pace: str, read_timeout: float, client_timeout: float,
    max_body: int, max_record_body: int | None,
    intercept: InterceptOptions | None, adapter_hosts: tuple[str, ...], token: str | None,
    park: tuple[str, ...], park_after: str | None, park_timeout: str | None,
    on_wake: str | None, wake_agent: str | None, wake_lease: str | None,
) -> None:  # fmt: skip
    """Serve the proxy until interrupted, recording every run that comes through.

    Pick a run per request with a /r/RUN/ path prefix or an X-Forkpoint-Run header; through
    --intercept, with HTTPS_PROXY=http://RUN:@127.0.0.1:8766 or that header.

    Beyond loopback (--host 0.0.0.0) every request needs the token (--token, else one made
    up and printed on stderr): OPENAI_BASE_URL=http://HOST:8765/t/TOKEN/v1, the
    X-Forkpoint-Token header, or HTTPS_PROXY=http://RUN:TOKEN@HOST:8766.

    With --park, a run parks at a matching request (its agent ended when it told this proxy
    how it started: POST /_forkpoint/runs/RUN/launch); POST /_forkpoint/runs/RUN/answer
    answers it, and this proxy wakes it (a local process, --on-wake's hook, or with
    --wake-agent NAME a wake job that a `forkpoint worker` with agent NAME takes).

    Example: forkpoint serve --port 8765  then  OPENAI_BASE_URL=http://127.0.0.1:8765/v1
    """
    options = api.Options(
        redact=redact,
        cassette=cassette, host=host, port=port, on_hangup=on_hangup, upstream=upstream,
        routes=parse_routes(routes), pace=Pace.parse(pace), read_timeout=read_timeout,
        client_timeout=client_timeout, max_body=max_body * 2**20,
        max_record_body=mib(max_record_body),
        intercept=intercept, adapter_hosts=adapter_hosts,
        token=token, park=park, park_after=park_after, park_timeout=park_timeout,
        on_wake=on_wake_words(on_wake), wake_agent=_wake_agent(wake_agent, cassette),
        wake_lease=WAKE_LEASE if wake_lease is None else parse_duration(
            wake_lease, what="--wake-lease"),
    )  # fmt: skip
    pages = {MOUNT: WebView(options, loopback=is_loopback(host))}  # made on first use
    api.serve(options, replay=replay_run, ready=partial(_announce, pages=pages), pages=pages)


def _announce(serving: api.Serving, *, pages: dict[str, WebView]) -> None:
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
    for path in pages:
        where = f"{serving.url}/t/TOKEN{path}/" if serving.token else f"{serving.url}{path}/"
        click.echo(f"forkpoint web view on {where}")


def _wake_agent(name: str | None, cassette: str | None) -> str | None:
    """--wake-agent's NAME, checked: an agent's name, and a store the workers share."""
    if name is None:
        return None
    from forkpoint.api.options import store_location
    from forkpoint.cassettes.open import is_postgres
    from forkpoint.jobs.kinds import check_agent_name

    if not is_postgres(store_location(cassette)):
        raise ConfigError("--wake-agent wakes on workers, which share a PostgreSQL store: "
                          "--store postgresql://…")  # fmt: skip
    return check_agent_name(name)
