"""`forkpoint replay`: run a command against a recorded run, offline."""

from __future__ import annotations

import click

from forkpoint import api
from forkpoint.cli.options import (
    cassette_option,
    divergence_option,
    intercept_options,
    match_options,
    pace_option,
    parse_routes,
    port_option,
    report_run,
    reports_errors,
    unserved_option,
    upstream_options,
)
from forkpoint.engine.config import OnDivergence
from forkpoint.engine.pace import Pace
from forkpoint.runtime.intercept import InterceptOptions


@click.command(context_settings={"ignore_unknown_options": True})
@cassette_option
@click.argument("run")
@pace_option
@click.option("--name", help="A name for the replay run.")
@divergence_option
@unserved_option
@match_options
@upstream_options
@port_option
@intercept_options()
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@reports_errors
def replay(
    cassette: str | None, run: str, pace: str, name: str | None, on_divergence: str | None,
    allow_unserved: bool,
    ignore: tuple[str, ...], normalize: tuple[str, ...], optional: tuple[str, ...],
    upstream: str | None, routes: tuple[str, ...], redact: tuple[str, ...], port: int,
    intercept: InterceptOptions | None, cmd: tuple[str, ...],
) -> None:  # fmt: skip
    """Run CMD against recorded RUN, offline: no request reaches the network.

    A request matches a recorded one exactly, or but for values its client generates (ids,
    times, directories), noted on the exchange. A request the recording does not have is a
    divergence: the agent gets an error naming the nearest recorded exchange, and the replay
    run ends `diverged` (exit 3 if CMD exits 0). A replay whose agent never asked for some
    recorded exchanges (a client that bypassed the proxy, an agent that stopped early) says
    which, and exits 4 if CMD exits 0, unless --allow-unserved.
    With --on-divergence live the replay forks there instead and goes on live (to --upstream
    and --route, else where RUN's requests went).

    Example: forkpoint replay ticket-1 -- python examples/support_agent/agent.py
    """
    options = api.Options(
        redact=redact,
        cassette=cassette, pace=Pace.parse(pace), name=name, port=port,
        on_divergence=OnDivergence(on_divergence or "fail"), upstream=upstream,
        routes=parse_routes(routes), intercept=intercept, ignore=ignore, normalize=normalize,
        optional=optional, allow_unserved=allow_unserved,
    )  # fmt: skip
    report_run(api.replay(run, cmd, options), allow_unserved=allow_unserved)
