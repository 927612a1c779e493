"""The `forkpoint` command: parses flags, calls `forkpoint.api`, prints."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import click
import orjson

from forkpoint import api
from forkpoint.compare.cost import exchange_cost, run_totals, usd
from forkpoint.engine.decide import OnDivergence
from forkpoint.engine.pace import Pace
from forkpoint.errors import ForkpointError
from forkpoint.models import Exchange, Run
from forkpoint.runtime.intercept import InterceptOptions
from forkpoint.runtime.snapshots import SnapshotPolicy


def cassette_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--cassette",
        envvar="FORKPOINT_CASSETTE",
        type=click.Path(dir_okay=False),
        default=None,
        help="Cassette file [default: .forkpoint/forkpoint.db; env FORKPOINT_CASSETTE].",
    )(command)


def port_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """The port of the proxy a command starts for its CMD."""
    return click.option("--port", default=0, help="Port for the proxy [default: a free one].")(
        command
    )


def upstream_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option(
        "--route",
        "routes",
        multiple=True,
        metavar="NAME=URL",
        help="Serve URL under /NAME/ (repeatable). Built in: anthropic=https://api.anthropic.com.",
    )(command)
    return click.option(
        "--upstream",
        default=api.DEFAULT_UPSTREAM,
        show_default=True,
        help="Where requests outside any --route go.",
    )(command)


def snapshot_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--workspace and --snapshot-every, turned into `workspace=` and `snapshot_policy=`."""
    command = click.option(
        "--snapshot-every", "snapshot_every", default="llm", show_default=True,
        metavar="llm|N|Ts|off",
        help="When to pull agent state: at each LLM request, every N exchanges, every T s.",
    )(command)  # fmt: skip
    command = click.option(
        "--workspace", type=click.Path(file_okay=False),
        help="A directory the agent works in: snapshotted, and restored on fork/resume.",
    )(command)  # fmt: skip

    @functools.wraps(command)
    def wrapper(*args: Any, snapshot_every: str, **kwargs: Any) -> Any:
        return command(*args, snapshot_policy=SnapshotPolicy.parse(snapshot_every), **kwargs)

    return wrapper


def intercept_options(port: int = 0) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--intercept and its settings, turned into `intercept=` (InterceptOptions or None)."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.option(
            "--upstream-ca", type=click.Path(exists=True, dir_okay=False),
            help="With --intercept: also trust this PEM file's CAs for upstreams.",
        )(command)  # fmt: skip
        command = click.option(
            "--insecure-upstream", is_flag=True,
            help="With --intercept: do not verify upstream certificates.",
        )(command)  # fmt: skip
        command = click.option(
            "--intercept-port", default=port, show_default=bool(port),
            help="Port for the interceptor" + ("." if port else " [default: a free one]."),
        )(command)  # fmt: skip
        command = click.option(
            "--intercept", is_flag=True,
            help="Also record every HTTP(S) call to any host, through an HTTPS proxy "
            "(HTTPS_PROXY, forkpoint's CA: see `forkpoint ca`).",
        )(command)  # fmt: skip

        @functools.wraps(command)
        def wrapper(
            *args: Any, intercept: bool, intercept_port: int, insecure_upstream: bool,
            upstream_ca: str | None, **kwargs: Any,
        ) -> Any:  # fmt: skip
            options = InterceptOptions(
                port=intercept_port, insecure_upstream=insecure_upstream, upstream_ca=upstream_ca
            )
            return command(*args, intercept=options if intercept else None, **kwargs)

        return wrapper

    return decorate


def reports_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """A ForkpointError becomes one line on stderr and exit code 2, not a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except ForkpointError as error:
            click.echo(f"forkpoint: {error}", err=True)
            sys.exit(2)

    return wrapper


def parse_pairs(pairs: tuple[str, ...], what: str) -> dict[str, str]:
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint=what)
        parsed[key] = value
    return parsed


@click.group()
@click.version_option(package_name="forkpoint")
def main() -> None:
    """A save button for AI agents: record, replay, fork and diff runs through a proxy."""


@main.command(context_settings={"ignore_unknown_options": True})
@cassette_option
@upstream_options
@click.option("--name", help="A name to find the run by later.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Repeatable.")
@port_option
@click.option("--read-timeout", default=600.0, show_default=True, help="Upstream stall limit, s.")
@click.option(
    "--max-body",
    default=api.DEFAULT_MAX_BODY // 2**20,
    show_default=True,
    help="Largest request body accepted, MiB.",
)
@snapshot_options
@intercept_options()
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@reports_errors
def record(
    cassette: str | None,
    upstream: str,
    routes: tuple[str, ...],
    name: str | None,
    labels: tuple[str, ...],
    port: int,
    read_timeout: float,
    max_body: int,
    workspace: str | None,
    snapshot_policy: SnapshotPolicy,
    intercept: InterceptOptions | None,
    cmd: tuple[str, ...],
) -> None:
    """Run CMD with its API traffic recorded as a new run; print the run id.

    CMD's clients are pointed at the proxy through OPENAI_BASE_URL, ANTHROPIC_BASE_URL,
    FORKPOINT_URL and FORKPOINT_RUN; with --intercept also HTTPS_PROXY and a CA bundle, so
    calls to any host are recorded. Exits with CMD's exit code.

    Example: forkpoint record --name ticket-1 -- python examples/support_agent/agent.py
    """
    result = api.record(
        cmd,
        cassette=cassette,
        upstream=upstream,
        routes=parse_pairs(routes, "--route"),
        name=name,
        labels=parse_pairs(labels, "--label"),
        port=port,
        read_timeout=read_timeout,
        max_body=max_body * 2**20,
        workspace=workspace,
        snapshot_policy=snapshot_policy,
        intercept=intercept,
    )
    _report(result)


@main.command(context_settings={"ignore_unknown_options": True})
@cassette_option
@click.argument("run")
@click.option(
    "--pace",
    default="fast",
    show_default=True,
    help="Stream timing: fast, recorded, or xN (N times faster than recorded).",
)
@click.option("--name", help="A name for the replay run.")
@click.option(
    "--on-divergence",
    type=click.Choice(["fail", "live"]),
    default="fail",
    show_default=True,
    help="A request the recording lacks: fail, or fork there and go on live.",
)
@upstream_options
@port_option
@intercept_options()
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@reports_errors
def replay(
    cassette: str | None, run: str, pace: str, name: str | None, on_divergence: str,
    upstream: str, routes: tuple[str, ...], port: int, intercept: InterceptOptions | None,
    cmd: tuple[str, ...],
) -> None:  # fmt: skip
    """Run CMD against recorded RUN, offline: no request reaches the network.

    A request the recording does not have is a divergence: the agent gets an error naming the
    nearest recorded exchange, and the replay run ends `diverged`. With --on-divergence live
    the replay forks there instead and goes on live (to --upstream / --route).

    Example: forkpoint replay ticket-1 -- python examples/support_agent/agent.py
    """
    result = api.replay(
        run, cmd, cassette=cassette, pace=Pace.parse(pace), name=name, port=port,
        on_divergence=OnDivergence(on_divergence), upstream=upstream,
        routes=parse_pairs(routes, "--route"), intercept=intercept,
    )  # fmt: skip
    _report(result)


def _report(result: api.Result) -> None:
    click.echo(f"forkpoint: run {result.run_id} {result.status}, {result.steps} steps", err=True)
    click.echo(result.run_id)
    # a command killed by signal N exits 128 + N, as a shell reports it
    sys.exit(result.exit_code if result.exit_code >= 0 else 128 - result.exit_code)


@main.command()
@cassette_option
@upstream_options
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8765, show_default=True)
@click.option("--replay", "replay_run", metavar="RUN", help="Replay RUN instead of recording.")
@click.option("--pace", default="fast", show_default=True, help="Replay stream timing.")
@intercept_options(port=8766)
@reports_errors
def serve(
    cassette: str | None,
    upstream: str,
    routes: tuple[str, ...],
    host: str,
    port: int,
    replay_run: str | None,
    pace: str,
    intercept: InterceptOptions | None,
) -> None:
    """Serve the proxy until interrupted, recording every run that comes through.

    Pick a run per request with a /r/RUN/ path prefix or an X-Forkpoint-Run header; through
    --intercept, with HTTPS_PROXY=http://RUN:@127.0.0.1:8766 or that header.

    Example: forkpoint serve --port 8765  then  OPENAI_BASE_URL=http://127.0.0.1:8765/v1
    """
    api.serve(
        cassette=cassette,
        host=host,
        port=port,
        upstream=upstream,
        routes=parse_pairs(routes, "--route"),
        replay_run=replay_run,
        pace=Pace.parse(pace),
        intercept=intercept,
    )


@main.command()
@cassette_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run.")
@reports_errors
def runs(cassette: str | None, as_json: bool) -> None:
    """List the runs in the cassette, oldest first.

    Example: forkpoint runs --json
    """
    found = api.runs(cassette=cassette)
    if as_json:
        click.echo(orjson.dumps([_run_json(r, e) for r, e in found], option=orjson.OPT_INDENT_2))
        return
    click.echo(
        f"{'id':30}  {'status':9}  {'steps':>5}  {'tokens':>7}  {'cost':>10}  {'mode':6}  "
        "name / change"
    )
    for depth, (run, exchanges) in tree_order(found):
        totals = run_totals(exchanges)
        indent = "  " * (depth - 1) + "└─ " if depth else ""
        click.echo(
            f"{indent + run.id:30}  {run.status:9}  {len(exchanges):>5}  {totals.tokens:>7}  "
            f"{usd(totals.cost_usd):>10}  {run.mode:6}  {run.name or ''}{describe_branch(run)}"
        )


def tree_order(
    found: list[tuple[Run, list[Exchange]]],
) -> list[tuple[int, tuple[Run, list[Exchange]]]]:
    """Runs depth-first: each parent followed by its children (forks, replays), oldest first."""
    children: dict[str | None, list[tuple[Run, list[Exchange]]]] = {}
    ids = {run.id for run, _ in found}
    for item in found:
        parent = item[0].parent_id if item[0].parent_id in ids else None
        children.setdefault(parent, []).append(item)
    ordered: list[tuple[int, tuple[Run, list[Exchange]]]] = []

    def visit(parent: str | None, depth: int) -> None:
        for item in children.get(parent, []):
            ordered.append((depth, item))
            visit(item[0].id, depth + 1)

    visit(None, 0)
    return ordered


def describe_branch(run: Run) -> str:
    if run.parent_id is None:
        return ""
    at = f" @ step {run.fork_step}" if run.fork_step is not None else ""
    change = ", ".join(f"{k}={v}" for k, v in (run.change or {}).items())
    return f"  [{run.mode}{at}{': ' + change if change else ''}]"


@main.command()
@cassette_option
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="The run and its exchanges as JSON.")
@reports_errors
def show(cassette: str | None, run: str, as_json: bool) -> None:
    """Show RUN (id, id prefix or name) one line per step.

    Example: forkpoint show ticket-1
    """
    found, exchanges = api.show(run, cassette=cassette)
    if as_json:
        document = {
            **_run_json(found, exchanges),
            "exchanges": [_exchange_json(e) for e in exchanges],
        }
        click.echo(orjson.dumps(document, option=orjson.OPT_INDENT_2))
        return
    click.echo(f"run {found.id}  {found.status}  {found.name or ''}")
    click.echo(
        f"{'step':>4}  {'kind':5}  {'origin':8}  {'status':>6}  {'model':22}  "
        f"{'in':>6}  {'out':>6}  {'cost':>10}  {'ms':>8}  route / tool calls"
    )
    for e in exchanges:
        s = e.summary
        usage = s.usage if s else None
        calls = ", ".join(c.name for c in s.tool_calls) if s and s.tool_calls else ""
        flag = "" if e.complete else "  [incomplete]"
        click.echo(
            f"{e.step:>4}  {s.kind if s else '':5}  {e.origin:8}  {e.status or '-':>6}  "
            f"{(s.model if s else None) or '-':22}  {usage.input if usage else '-':>6}  "
            f"{usage.output if usage else '-':>6}  {usd(exchange_cost(e)):>10}  "
            f"{e.duration_ms or 0:>8.1f}  {e.method} {e.route}{'  → ' + calls if calls else ''}"
            f"{flag}"
        )
    totals = run_totals(exchanges)
    replayed = f", {totals.replayed_steps} replayed at $0" if totals.replayed_steps else ""
    click.echo(
        f"total: {totals.tokens} tokens, {usd(totals.cost_usd)} ({totals.prices}), "
        f"LLM {totals.llm_ms:.0f} ms, tools {totals.tool_ms:.0f} ms, "
        f"wall {totals.wall_ms:.0f} ms{replayed}"
    )


def _run_json(run: Run, exchanges: list[Exchange]) -> dict[str, Any]:
    return {
        "id": run.id,
        "name": run.name,
        "labels": run.labels,
        "status": run.status,
        "mode": run.mode,
        "parent_id": run.parent_id,
        "fork_step": run.fork_step,
        "created_at": run.created_at,
        "ended_at": run.ended_at,
        "error": run.error,
        "steps": len(exchanges),
        "totals": run_totals(exchanges).to_json(),
    }


def _exchange_json(e: Exchange) -> dict[str, Any]:
    s = e.summary
    usage = s.usage if s else None
    return {
        "step": e.step,
        "kind": s.kind if s else None,
        "dialect": s.dialect if s else None,
        "model": s.model if s else None,
        "method": e.method,
        "route": e.route,
        "status": e.status,
        "origin": e.origin,
        "streamed": e.streamed,
        "complete": e.complete,
        "error": e.error,
        "usage": None
        if usage is None
        else {
            "input": usage.input,
            "output": usage.output,
            "cached": usage.cached,
            "reasoning": usage.reasoning,
        },
        "tool_calls": [
            {"name": c.name, "arguments": c.arguments, "id": c.id}
            for c in (s.tool_calls if s else ())
        ],
        "finish_reason": s.finish_reason if s else None,
        "ttfb_ms": e.ttfb_ms,
        "duration_ms": e.duration_ms,
        "cost_usd": None if (cost := exchange_cost(e)) is None else float(cost),
    }


def _register_commands() -> None:
    from forkpoint.cli.fork import fork
    from forkpoint.cli.resume import resume, snapshots

    main.add_command(fork)
    main.add_command(resume)
    main.add_command(snapshots)
    from forkpoint.cli.diff import diff
    from forkpoint.cli.experiment import experiment

    main.add_command(diff)
    main.add_command(experiment)
    from forkpoint.cli.ca import ca
    from forkpoint.cli.transfer import export_command, import_command

    main.add_command(export_command)
    main.add_command(import_command)
    main.add_command(ca)


_register_commands()
