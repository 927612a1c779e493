"""`forkpoint fork`: the CLI face of `forkpoint.api.fork`, with its spec file."""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

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
from forkpoint.engine.changes import Change
from forkpoint.engine.decide import OnDivergence
from forkpoint.engine.pace import Pace
from forkpoint.errors import ConfigError
from forkpoint.runtime.intercept import InterceptOptions
from forkpoint.runtime.snapshots import SnapshotPolicy

SPEC_KEYS = {
    "at",
    "model",
    "upstream",
    "system_prompt",
    "patch",
    "mock",
    "name",
    "route",
    "label",
    "on_divergence",
}


def load_spec(path: str) -> dict[str, Any]:
    """A fork spec (TOML), its `@FILE` references made relative to the spec's folder."""
    try:
        spec = tomllib.loads(Path(path).read_text())
    except OSError as error:
        raise ConfigError(f"cannot read fork spec {path}: {error.strerror}") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"fork spec {path} is not valid TOML: {error}") from error
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise ConfigError(
            f"fork spec {path}: unknown keys {sorted(unknown)}; known: {sorted(SPEC_KEYS)}"
        )
    base = Path(path).parent
    for key in ("system_prompt", "patch"):  # @FILE in a spec is relative to the spec
        if isinstance(spec.get(key), str) and spec[key].startswith("@"):
            spec[key] = f"@{base / spec[key][1:]}"
    spec["mock"] = [_relative_mock(text, base) for text in spec.get("mock", [])]
    return spec


def _relative_mock(text: str, base: Path) -> str:
    route, _, value = text.partition("=")
    value = value.strip()
    return f"{route}=@{base / value[1:]}" if value.startswith("@") else text


def change_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The change a fork applies and how it forks, for fork and experiment: --model,
    --system-prompt, --patch, --mock, --spec, --restore and --on-divergence.

    The command gets `change` (flags over the spec file), `on_divergence`, `restore`, and `spec`:
    the spec file's keys, for the options it reads itself (at, name, route, label).
    """
    options = [
        click.option("--model", help="Rewrite the model of every LLM request from the fork on."),
        click.option("--system-prompt", metavar="TEXT|@FILE", help="Replace the system prompt."),
        click.option(
            "--patch", metavar="JSON|@FILE", help="A JSON patch (RFC 6902) for LLM requests."
        ),
        click.option(
            "--mock",
            "mocks",
            multiple=True,
            metavar="ROUTE=SPEC",
            help="Mock tool calls: ROUTE is '[METHOD ]GLOB'; SPEC is @FILE, "
            "package.module:function, recorded or live. Repeatable.",
        ),
        click.option(
            "--spec",
            "spec_path",
            type=click.Path(dir_okay=False),
            help="A TOML file with any of these options (flags override it).",
        ),
        click.option(
            "--restore/--no-restore",
            default=True,
            show_default=True,
            help="Give the agent its state snapshot nearest before the fork step (else it starts "
            "fresh and its prefix replays).",
        ),
        click.option(
            "--on-divergence",
            type=click.Choice([p.value for p in OnDivergence]),
            help="Before the fork step, a request the parent never made: fail, or fork there.",
        ),
    ]
    for option in reversed(options):  # the first listed comes first in --help
        command = option(command)

    @functools.wraps(command)
    @reports_errors
    def wrapper(
        *args: Any, model: str | None, system_prompt: str | None, patch: str | None,
        mocks: tuple[str, ...], spec_path: str | None, on_divergence: str | None, **kwargs: Any,
    ) -> Any:  # fmt: skip
        spec = load_spec(spec_path) if spec_path else {}
        change = api.make_change(
            model=model or spec.get("model"),
            upstream=spec.get("upstream"),
            system_prompt=system_prompt if system_prompt is not None else spec.get("system_prompt"),
            patch=patch if patch is not None else spec.get("patch"),
            mocks=[*spec.get("mock", []), *mocks],
        )
        divergence = OnDivergence(on_divergence or spec.get("on_divergence", "fail"))
        return command(*args, spec=spec, change=change, on_divergence=divergence, **kwargs)

    return wrapper


@click.command(context_settings={"ignore_unknown_options": True})
@cassette_option
@upstream_options
@click.argument("run")
@click.option("--at", type=int, help="Fork step: steps before it are replayed.")
@change_options
@click.option("--name", help="A name for the child run.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Repeatable.")
@click.option("--pace", default="fast", show_default=True, help="Replayed stream timing.")
@port_option
@snapshot_options
@intercept_options()
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@reports_errors
def fork(
    cassette: str | None,
    upstream: str,
    routes: tuple[str, ...],
    run: str,
    at: int | None,
    spec: dict[str, Any],
    change: Change,
    on_divergence: OnDivergence,
    restore: bool,
    name: str | None,
    labels: tuple[str, ...],
    pace: str,
    port: int,
    workspace: str | None,
    snapshot_policy: SnapshotPolicy,
    intercept: InterceptOptions | None,
    cmd: tuple[str, ...],
) -> None:
    """Run CMD as a fork of RUN at step N: steps < N replayed, then live with the change.

    The child run is recorded with its parent, fork step and change; its id is printed.
    Upstreams (--upstream, --route) are where live traffic goes, as for record.

    Example: forkpoint fork ticket-1 --at 2 --model gpt-4o-mini -- python agent.py
    """
    step = at if at is not None else spec.get("at")
    if step is None:
        raise click.UsageError("give the fork step: --at N (or `at` in --spec)")
    result = api.fork(
        run,
        cmd,
        at=int(step),
        change=change,
        cassette=cassette,
        upstream=upstream,
        routes={**spec.get("route", {}), **parse_pairs(routes, "--route")},
        name=name or spec.get("name"),
        labels={**spec.get("label", {}), **parse_pairs(labels, "--label")},
        on_divergence=on_divergence,
        restore=restore,
        pace=Pace.parse(pace),
        port=port,
        workspace=workspace,
        snapshot_policy=snapshot_policy,
        intercept=intercept,
    )
    _report(result)
