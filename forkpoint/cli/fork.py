"""`forkpoint fork`: run a command as a fork of a recorded run, with a change."""

from __future__ import annotations

from typing import Any

import click

from forkpoint import api
from forkpoint.cli.options import (
    cassette_option,
    change_options,
    hangup_option,
    intercept_options,
    match_options,
    pace_option,
    parse_pairs,
    parse_routes,
    port_option,
    report_run,
    reports_errors,
    snapshot_options,
    unserved_option,
    upstream_options,
)
from forkpoint.engine.changes import Change
from forkpoint.engine.config import OnDivergence, OnHangup
from forkpoint.engine.pace import Pace
from forkpoint.engine.snapshot_policy import SnapshotPolicy
from forkpoint.runtime.intercept import InterceptOptions


@click.command(context_settings={"ignore_unknown_options": True})
@cassette_option
@upstream_options
@click.argument("run")
@click.option("--at", type=int, help="Fork step: steps before it are replayed.")
@change_options
@unserved_option
@match_options
@click.option("--name", help="A name for the child run.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Repeatable.")
@pace_option
@port_option
@hangup_option
@snapshot_options
@intercept_options()
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@reports_errors
def fork(
    cassette: str | None, upstream: str | None, routes: tuple[str, ...],
    redact: tuple[str, ...], run: str,
    at: int | None, spec: dict[str, Any], change: Change, on_divergence: OnDivergence,
    restore: bool, allow_unserved: bool, ignore: tuple[str, ...], normalize: tuple[str, ...],
    optional: tuple[str, ...], name: str | None, labels: tuple[str, ...], pace: str, port: int,
    on_hangup: OnHangup,
    workspace: str | None, snapshot_policy: SnapshotPolicy, intercept: InterceptOptions | None,
    cmd: tuple[str, ...],
) -> None:  # fmt: skip
    """Run CMD as a fork of RUN at step N: steps < N replayed, then live with the change.

    The child run is recorded with its parent, fork step and change; its id goes to stderr.
    Live traffic goes where RUN's went, unless --upstream or --route say otherwise.

    Example: forkpoint fork ticket-1 --at 2 --model gpt-4o-mini -- python agent.py
    """
    step = at if at is not None else spec.get("at")
    if step is None:
        raise click.UsageError("give the fork step: --at N (or `at` in --spec)")
    options = api.Options(
        redact=redact,
        cassette=cassette, upstream=upstream,
        routes={**spec.get("route", {}), **parse_routes(routes)},
        name=name or spec.get("name"),
        labels={**spec.get("label", {}), **parse_pairs(labels, "--label")},
        on_divergence=on_divergence, restore=restore, pace=Pace.parse(pace), port=port,
        on_hangup=on_hangup,
        workspace=workspace, snapshots=snapshot_policy, intercept=intercept, ignore=ignore,
        normalize=normalize, optional=optional, allow_unserved=allow_unserved,
    )  # fmt: skip
    result = api.fork(run, cmd, at=int(step), change=change, options=options)
    report_run(result, allow_unserved=allow_unserved)
