"""`forkpoint record`: run a command with its API traffic recorded as a new run."""

from __future__ import annotations

import click

from forkpoint import api
from forkpoint.cli.options import (
    cassette_option,
    hangup_option,
    intercept_options,
    limit_options,
    mib,
    on_wake_words,
    park_options,
    parse_pairs,
    parse_routes,
    port_option,
    report_run,
    reports_errors,
    snapshot_options,
    upstream_options,
)
from forkpoint.engine.config import OnHangup
from forkpoint.engine.snapshot_policy import SnapshotPolicy
from forkpoint.runtime.intercept import InterceptOptions


@click.command(context_settings={"ignore_unknown_options": True})
@cassette_option
@upstream_options
@click.option("--name", help="A name to find the run by later.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Repeatable.")
@port_option
@hangup_option
@limit_options
@snapshot_options
@intercept_options()
@park_options
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@reports_errors
def record(
    cassette: str | None, upstream: str | None, routes: tuple[str, ...],
    redact: tuple[str, ...], name: str | None,
    labels: tuple[str, ...], port: int,
    on_hangup: OnHangup, read_timeout: float, client_timeout: float,
    max_body: int, max_record_body: int | None, workspace: str | None,
    snapshot_policy: SnapshotPolicy, intercept: InterceptOptions | None,
    park: tuple[str, ...], park_after: str | None, park_timeout: str | None,
    on_wake: str | None, cmd: tuple[str, ...],
) -> None:  # fmt: skip
    """Run CMD with its API traffic recorded as a new run.

    CMD's clients are pointed at the proxy through OPENAI_BASE_URL, ANTHROPIC_BASE_URL,
    FORKPOINT_URL and FORKPOINT_RUN; with --intercept also HTTPS_PROXY and a CA bundle, so
    calls to any host are recorded. The run id goes to stderr; exits with CMD's exit code.

    Example: forkpoint record --name ticket-1 -- python examples/support_agent/agent.py
    """
    options = api.Options(
        redact=redact,
        cassette=cassette, upstream=upstream, routes=parse_routes(routes), name=name,
        labels=parse_pairs(labels, "--label"), port=port,
        on_hangup=on_hangup, read_timeout=read_timeout,
        client_timeout=client_timeout, max_body=max_body * 2**20,
        max_record_body=mib(max_record_body), workspace=workspace,
        snapshots=snapshot_policy, intercept=intercept,
        park=park, park_after=park_after, park_timeout=park_timeout,
        on_wake=on_wake_words(on_wake),
    )  # fmt: skip
    report_run(api.record(cmd, options))
