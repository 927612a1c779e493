"""`forkpoint resume`: bring a crashed or stopped agent back, and finish its run."""

from __future__ import annotations

import click

from forkpoint import api
from forkpoint.cli.options import (
    cassette_option,
    divergence_option,
    hangup_option,
    intercept_options,
    match_options,
    on_wake_words,
    park_options,
    parse_routes,
    port_option,
    report_run,
    reports_errors,
    snapshot_options,
    unserved_option,
    upstream_options,
)
from forkpoint.engine.config import OnDivergence, OnHangup
from forkpoint.engine.snapshot_policy import SnapshotPolicy
from forkpoint.runtime.intercept import InterceptOptions


@click.command(context_settings={"ignore_unknown_options": True})
@cassette_option
@upstream_options
@click.argument("run")
@divergence_option
@unserved_option
@match_options
@port_option
@hangup_option
@snapshot_options
@intercept_options()
@park_options
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@reports_errors
def resume(
    cassette: str | None, upstream: str | None, routes: tuple[str, ...],
    redact: tuple[str, ...], run: str,
    on_divergence: str | None, allow_unserved: bool,
    ignore: tuple[str, ...], normalize: tuple[str, ...],
    optional: tuple[str, ...], port: int,
    on_hangup: OnHangup, workspace: str | None,
    snapshot_policy: SnapshotPolicy, intercept: InterceptOptions | None,
    park: tuple[str, ...], park_after: str | None, park_timeout: str | None,
    on_wake: str | None, cmd: tuple[str, ...],
) -> None:  # fmt: skip
    """Restart CMD for RUN, a run that crashed or was stopped, and finish it.

    Its latest snapshot is restored (the agent's state through forkpoint.adapters.agent,
    and --workspace), the steps its agent had fully received are served from the cassette
    with no upstream call, then it goes on live, appending to the same run. A request the
    recording lacks before that is a divergence, unless --on-divergence live.

    Example: forkpoint resume ticket-1 -- python examples/support_agent/agent.py
    """
    options = api.Options(
        redact=redact,
        cassette=cassette, upstream=upstream, routes=parse_routes(routes), port=port,
        on_hangup=on_hangup,
        on_divergence=OnDivergence(on_divergence or "fail"), workspace=workspace,
        snapshots=snapshot_policy, intercept=intercept, ignore=ignore, normalize=normalize,
        optional=optional, allow_unserved=allow_unserved,
        park=park, park_after=park_after, park_timeout=park_timeout,
        on_wake=on_wake_words(on_wake),
    )  # fmt: skip
    report_run(api.resume(run, cmd, options), allow_unserved=allow_unserved)
