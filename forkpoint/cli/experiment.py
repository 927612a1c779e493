"""`forkpoint experiment`: fork many runs with one change, then `show` or `list` the results."""

from __future__ import annotations

import datetime
import sys
import time
from pathlib import Path
from typing import Any

import click
import orjson

from forkpoint import api
from forkpoint.cassettes.store import StoredBranch
from forkpoint.cli.options import (
    cassette_option,
    change_options,
    json_lines,
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
        if "--on-workers" in head and "--" in args:
            raise click.UsageError(
                "--on-workers runs the workers' --agent NAME, not a command", ctx
            )
        if "--" not in args and "--on-workers" not in head:
            raise click.UsageError("put the agent's command after --, e.g. -- python agent.py", ctx)
        split = args.index("--") if "--" in args else len(args)
        ctx.allow_interspersed_args = True  # a group stops at its first argument; RUNs may lead
        ctx.meta["experiment.command"] = tuple(args[split + 1 :])
        ctx.meta["experiment.runs"] = tuple(click.Command.parse_args(self, ctx, args[:split]))
        ctx.args = []
        return []

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "[OPTIONS] (RUN... | --select FILTER...) -- CMD...")
        formatter.write_usage(
            ctx.command_path, "[OPTIONS] (RUN... | --select FILTER...) --on-workers --agent NAME",
            prefix="   or: ",
        )  # fmt: skip
        formatter.write_usage(
            ctx.command_path, "show NAME [--follow] [--json] [--html FILE]", prefix="   or: "
        )
        formatter.write_usage(ctx.command_path, "cancel NAME", prefix="   or: ")
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
@click.option(
    "--on-workers",
    is_flag=True,
    help="Queue the forks for `forkpoint worker`s sharing the PostgreSQL --store, each running "
    "its own --agent NAME; follow them here (Ctrl-C detaches, the workers go on).",
)
@click.option("--agent", metavar="NAME", help="With --on-workers: the agent the workers run.")
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
    check: str | None, concurrency: int, on_workers: bool, agent: str | None,
    name: str | None, labels: tuple[str, ...],
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

    With --on-workers --agent NAME in place of CMD, the forks are queued in the PostgreSQL
    store for `forkpoint worker`s (on any machine) that have agent NAME; a progress line
    follows them, Ctrl-C detaches without cancelling (`experiment cancel NAME` cancels), and
    the results are the same rows and reports as a local experiment's.

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
    if on_workers != (agent is not None):
        raise click.UsageError("--on-workers and --agent NAME go together", ctx)
    experiment_spec = api.ExperimentSpec(
        command=ctx.meta["experiment.command"],
        agent=agent,
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
    if on_workers:
        name = api.submit_experiment(experiment_spec, options)
        echo(
            f"forkpoint: experiment {name} queued for the workers with agent {agent} "
            f"(cancel: forkpoint experiment cancel {name})",
            err=True,
        )
        if _follow(name, cassette):
            _report(api.experiment_results(name, api.Options(cassette=cassette)), as_json,
                    html_file)  # fmt: skip
        return
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
@click.option("--follow", is_flag=True, help="Wait for an experiment on workers to end first.")
def show(
    cassette: str | None, name: str, as_json: bool, html_file: Path | None, follow: bool
) -> None:
    """Print experiment NAME again: each run's branch, the tallies, the cost. An experiment
    still running on workers shows the branches stored so far (--follow waits for the rest).

    Example: forkpoint experiment show mini --html mini.html
    """
    if follow and not _follow(name, cassette):
        return
    results = api.experiment_results(name, api.Options(cassette=cassette))
    _report(results, as_json, html_file)
    if results.ended_at is None and "probes" in results.spec:
        echo(
            f"forkpoint: experiment {name} is running: {len(results.branches)} of "
            f"{results.spec['probes']} stored (--follow waits for the rest)",
            err=True,
        )


@experiment.command()
@cassette_option
@click.argument("name")
@reports_errors
def cancel(cassette: str | None, name: str) -> None:
    """Cancel experiment NAME on workers: its queued probes are dropped, its running ones
    stopped (their agents ended, nothing stored); the branches stored stay.

    Example: forkpoint experiment cancel exp-20261201-101500
    """
    stood = api.cancel_experiment(name, api.Options(cassette=cassette))
    echo(
        f"forkpoint: experiment {name} cancelled: {stood.queued} queued probes dropped, "
        f"{stood.running} running stopped, {stood.done} of {stood.total} stored",
        err=True,
    )


def _follow(name: str, cassette: str | None) -> bool:
    """Show where experiment `name` stands on stderr until it ends; False when Ctrl-C
    detached first (the workers go on)."""
    line = _ProgressLine(sys.stderr.isatty())
    try:
        for progress in api.watch_experiment(name, api.Options(cassette=cassette)):
            line.show(progress)
    except KeyboardInterrupt:
        line.end()
        echo(
            f"forkpoint: detached; the workers go on (forkpoint experiment show {name} "
            f"--follow; cancel: forkpoint experiment cancel {name})",
            err=True,
        )
        return False
    line.end()
    return True


class _ProgressLine:
    """done, failed, running, queued and an ETA from the pace seen since following began:
    rewritten in place on a terminal, a new line at each change elsewhere (a log)."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self.last = ""
        self.start: tuple[float, int] | None = None

    def show(self, progress: api.Progress) -> None:
        now = time.monotonic()
        if self.start is None:
            self.start = (now, progress.done)
        since, done_then = self.start
        left = progress.total - progress.done
        rate = (progress.done - done_then) / (now - since) if now > since else 0.0
        eta = "-" if not left else (_clock(left / rate) if rate > 0 else "?")
        text = (
            f"forkpoint: {progress.name}: {progress.done}/{progress.total} done "
            f"({progress.failed} failed), {progress.running} running, {progress.queued} "
            f"queued, ETA {eta}"
        )
        if text == self.last:
            return
        self.last = text
        if self.tty:
            sys.stderr.write(f"\r\x1b[2K{text}")
            sys.stderr.flush()
        else:
            echo(text, err=True)

    def end(self) -> None:
        if self.tty and self.last:
            sys.stderr.write("\n")


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@experiment.command("list")
@cassette_option
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object per experiment, one per line."
)
@reports_errors
def list_command(cassette: str | None, as_json: bool) -> None:
    """List the experiments in the cassette, oldest first.

    Example: forkpoint experiment list
    """
    found = api.experiment_list(api.Options(cassette=cassette))
    if as_json:
        json_lines(
            {
                "name": e.name, "created_at": e.created_at, "ended_at": e.ended_at,
                "runs": runs, "failed": failed, "spec": e.spec,
            }
            for e, runs, failed in found
        )  # fmt: skip
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
