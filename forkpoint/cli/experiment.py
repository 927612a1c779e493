"""`forkpoint experiment`: fork many runs with one change, then `show` or `list` the results."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Any

import click
import orjson

from forkpoint import api
from forkpoint.cassettes.store import StoredBranch
from forkpoint.cli.options import (
    cassette_option,
    change_options,
    pace_option,
    parse_pairs,
    parse_routes,
    prices,
    reports_errors,
    upstream_options,
)
from forkpoint.cli.terminal import echo
from forkpoint.compare.experiment_results import Experiment
from forkpoint.engine.changes import Change
from forkpoint.engine.config import OnDivergence
from forkpoint.engine.pace import Pace
from forkpoint.models import Run


class _ExperimentGroup(click.Group):
    """A group whose own callback runs an experiment: `experiment [OPTIONS] [RUN]... -- CMD...`.

    RUN... and CMD... are both open-ended, which click cannot split, so the command after the
    first `--` is taken off before parsing; `show` and `list` are ordinary subcommands.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        head = args[: args.index("--")] if "--" in args else args
        if not args or args[0] in self.commands or "--help" in head:
            return super().parse_args(ctx, args)
        if "--" not in args:
            raise click.UsageError("put the agent's command after --, e.g. -- python agent.py", ctx)
        split = args.index("--")
        ctx.allow_interspersed_args = True  # a group stops at its first argument; RUNs may lead
        ctx.meta["experiment.command"] = tuple(args[split + 1 :])
        ctx.meta["experiment.runs"] = tuple(click.Command.parse_args(self, ctx, args[:split]))
        ctx.args = []
        return []

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "[OPTIONS] (RUN... | --select FILTER...) -- CMD...")
        formatter.write_usage(
            ctx.command_path, "show NAME [--json] [--html FILE]", prefix="   or: "
        )
        formatter.write_usage(ctx.command_path, "list [--json]", prefix="   or: ")


def _change_text(change: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in change.items()) or "no change"


def _json(document: Any) -> None:
    click.echo(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode())


def _report(experiment: Experiment, as_json: bool, html_file: Path | None) -> None:
    # Imported here: every forkpoint command imports this module, only these need rich.
    from rich.console import Console

    from forkpoint.cli.terminal import visible_stream
    from forkpoint.compare.experiment_html import experiment_html
    from forkpoint.compare.experiment_render import experiment_json, print_experiment

    if html_file is not None:
        html_file.write_text(experiment_html(experiment), encoding="utf-8")
    if as_json:
        _json(experiment_json(experiment))
    else:
        print_experiment(experiment, Console(file=visible_stream(sys.stdout), highlight=False))


json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print the results as JSON (docs/experiment-json.md)."
)
html_option = click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Also write a self-contained HTML page to FILE.",
)


@click.group(
    "experiment",
    cls=_ExperimentGroup,
    invoke_without_command=True,
    no_args_is_help=True,
)
@cassette_option
@click.option(
    "--select",
    "filters",
    multiple=True,
    metavar="FILTER",
    help="Choose runs: label:K=V, name:GLOB, status:S, since:DATE, until:DATE, parent:RUN, "
    "mode:M. Repeatable; all must hold. Only recorded runs unless mode: or parent: is given.",
)
@click.option(
    "--at",
    metavar="STEP|first-llm|last-llm",
    help="Fork step, per run: a number, or the step of its first or last model call.",
)
@change_options
@click.option(
    "--check",
    metavar="MODULE:FUNCTION",
    help="Judge each branch and its parent: the function gets a CheckRun "
    "(forkpoint.compare.experiment_check) and returns a bool or a score.",
)
@click.option("--concurrency", default=4, show_default=True, help="Forks running at once.")
@click.option("--name", help="A name for the experiment [default: exp-DATE-TIME].")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Put on each branch.")
@upstream_options
@pace_option
@json_option
@html_option
@click.pass_context
@prices
@reports_errors
def experiment(
    ctx: click.Context, cassette: str | None, filters: tuple[str, ...], at: str | None,
    spec: dict[str, Any], change: Change, on_divergence: OnDivergence, restore: bool,
    check: str | None, concurrency: int, name: str | None, labels: tuple[str, ...],
    upstream: str | None, routes: tuple[str, ...],
    redact: tuple[str, ...], pace: str, as_json: bool,
    html_file: Path | None,
) -> None:  # fmt: skip
    """Fork each selected run with one change, then tally what changed and what it cost.

    Every run given (RUN: id, id prefix or name) or chosen by --select is forked at --at with
    the change (--model, --system-prompt, --patch, --mock, as for fork), up to --concurrency at
    a time, each fork running CMD against its own proxy. In CMD, {run}, {name} and {label:KEY}
    become each selected run's id, name and label, so each agent gets its own input again.
    A fork that fails (the command fails, the run diverges) is reported, not fatal.

    Reported: how many runs changed their tool calls or their final answer, whether --check
    passed (on the branch and on its parent), and the cost and tokens of each branch against
    its parent from the fork step on (total and median). The experiment is stored in the
    cassette: `forkpoint experiment show NAME` prints it again; `list` lists them.

    \b
    Example: forkpoint experiment --select label:batch=demo --at first-llm \\
      --model gpt-4o-mini --check examples.support_agent.checks:refund_follows_policy \\
      -- python examples/support_agent/agent.py "{label:ticket}"
    """
    if ctx.invoked_subcommand is not None:
        return
    step = at if at is not None else spec.get("at")
    if step is None:
        raise click.UsageError("give the fork step: --at STEP|first-llm|last-llm", ctx)
    experiment_spec = api.ExperimentSpec(
        command=ctx.meta["experiment.command"],
        at=str(step),
        runs=ctx.meta["experiment.runs"],
        select=filters,
        change=change,
        check=check,
        concurrency=concurrency,
        name=name or spec.get("name"),
    )
    options = api.Options(
        redact=redact,
        cassette=cassette,
        on_divergence=on_divergence,
        restore=restore,
        upstream=upstream,
        routes={**spec.get("route", {}), **parse_routes(routes)},
        labels={**spec.get("label", {}), **parse_pairs(labels, "--label")},
        pace=Pace.parse(pace),
    )
    done: list[StoredBranch] = []

    def progress(branch: StoredBranch, source: Run, total: int) -> None:
        done.append(branch)
        outcome = "failed: " + branch.error.splitlines()[0] if branch.error else "finished"
        label = source.name or source.id
        echo(
            f"forkpoint: [{len(done)}/{total}] {label} → {branch.branch_id or '-'} {outcome}",
            err=True,
        )

    results = api.experiment(experiment_spec, options, on_branch=progress)
    _report(results, as_json, html_file)
    echo(
        f"forkpoint: experiment {results.name} stored (forkpoint experiment show {results.name})",
        err=True,
    )


@experiment.command()
@cassette_option
@click.argument("name")
@json_option
@html_option
@prices
@reports_errors
def show(cassette: str | None, name: str, as_json: bool, html_file: Path | None) -> None:
    """Print experiment NAME again: each run's branch, the tallies, the cost.

    Example: forkpoint experiment show mini --html mini.html
    """
    _report(api.experiment_results(name, api.Options(cassette=cassette)), as_json, html_file)


@experiment.command("list")
@cassette_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per experiment.")
@reports_errors
def list_command(cassette: str | None, as_json: bool) -> None:
    """List the experiments in the cassette, oldest first.

    Example: forkpoint experiment list
    """
    found = api.experiment_list(api.Options(cassette=cassette))
    if as_json:
        _json([
            {
                "name": e.name, "created_at": e.created_at, "ended_at": e.ended_at,
                "runs": runs, "failed": failed, "spec": e.spec,
            }
            for e, runs, failed in found
        ])  # fmt: skip
        return
    for e, runs, failed in found:
        when = datetime.datetime.fromtimestamp(e.created_at).strftime("%Y-%m-%d %H:%M")
        state = "" if e.ended_at is not None else "  (interrupted)"
        echo(
            f"{e.name:28}  {when}  {runs:>4} runs  {failed:>3} failed  "
            f"at {e.spec['at']}  {_change_text(e.spec['change'])}{state}"
        )
    if not found:
        echo("forkpoint: no experiment in this cassette yet", err=True)
