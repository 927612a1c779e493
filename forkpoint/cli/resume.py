"""`forkpoint resume` and `forkpoint snapshots`: bringing a stopped agent back."""

from __future__ import annotations

import click
import orjson

from forkpoint import api
from forkpoint.cli.main import (
    _report,
    cassette_option,
    intercept_options,
    parse_pairs,
    port_option,
    reports_errors,
    snapshot_options,
    upstream_options,
)
from forkpoint.runtime.intercept import InterceptOptions
from forkpoint.runtime.snapshots import SnapshotPolicy


@click.command(context_settings={"ignore_unknown_options": True})
@cassette_option
@upstream_options
@click.argument("run")
@port_option
@snapshot_options
@intercept_options()
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@reports_errors
def resume(
    cassette: str | None,
    upstream: str,
    routes: tuple[str, ...],
    run: str,
    port: int,
    workspace: str | None,
    snapshot_policy: SnapshotPolicy,
    intercept: InterceptOptions | None,
    cmd: tuple[str, ...],
) -> None:
    """Restart CMD for RUN, a run that crashed or was stopped, and finish it.

    Its latest snapshot is restored (the agent's state through forkpoint.adapters.agent,
    and --workspace), its recorded steps are served from the cassette with no upstream call,
    then it goes on live, appending to the same run.

    Example: forkpoint resume ticket-1 -- python examples/support_agent/agent.py
    """
    result = api.resume(
        run,
        cmd,
        cassette=cassette,
        upstream=upstream,
        routes=parse_pairs(routes, "--route"),
        port=port,
        workspace=workspace,
        snapshot_policy=snapshot_policy,
        intercept=intercept,
    )
    _report(result)


@click.command()
@cassette_option
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per snapshot.")
@reports_errors
def snapshots(cassette: str | None, run: str, as_json: bool) -> None:
    """List the state snapshots of RUN: step, adapter, size, and failed pulls.

    Example: forkpoint snapshots ticket-1
    """
    found, taken = api.snapshots(run, cassette=cassette)
    if as_json:
        rows = [
            {
                "step": s.step,
                "adapter": s.adapter,
                "content_type": s.content_type,
                "size": s.size,
                "ok": s.ok,
                "error": s.error,
                "taken_at": s.taken_at,
                "duration_ms": s.duration_ms,
            }
            for s in taken
        ]
        click.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2))
        return
    click.echo(f"run {found.id}  {found.status}  {len(taken)} snapshots")
    click.echo(f"{'step':>4}  {'adapter':12}  {'size':>10}  {'ms':>7}  content type / error")
    for s in taken:
        detail = s.content_type if s.ok else f"FAILED: {s.error}"
        click.echo(
            f"{s.step:>4}  {s.adapter:12}  {s.size:>10}  {s.duration_ms or 0:>7.1f}  {detail}"
        )
