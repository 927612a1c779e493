"""What the commands share: option bundles as decorators, the fork change options and spec
file, error reporting, and how a command that ran CMD reports and exits.

Each bundle turns its flags into the values the API takes (`SnapshotPolicy`,
`InterceptOptions`, a `Change`), so a command's body only assembles `Options` and calls.
"""

from __future__ import annotations

import functools
import shlex
import sys
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import click
import orjson

from forkpoint.api import RunResult, make_change
from forkpoint.api.results import unserved_error
from forkpoint.cli.terminal import echo
from forkpoint.engine.config import (
    DEFAULT_CLIENT_TIMEOUT,
    DEFAULT_MAX_BODY,
    DEFAULT_UPSTREAM,
    FINISH_FOR,
    OnDivergence,
    OnHangup,
)
from forkpoint.engine.snapshot_policy import SnapshotPolicy
from forkpoint.errors import ConfigError, ForkpointError
from forkpoint.models import RunStatus
from forkpoint.runtime.intercept import InterceptOptions

Command = Callable[..., Any]
# The exit code of a command whose run diverged from its recording, when CMD itself exited 0
# (its agent swallowed the divergence error); see the README.
EXIT_DIVERGED = 3
# The exit code of a replay that left recorded exchanges unserved, when CMD itself exited 0.
EXIT_UNSERVED = 4
EXIT_USAGE = 2
# The exit code of a command whose run parked (EX_TEMPFAIL): it goes on once answered.
EXIT_PARKED = 75
# How the CLI names the parts of a change (`Change.rewritten`).
CHANGE_FLAGS = {"model": "--model", "system_prompt": "--system-prompt", "patch": "--patch"}


def cassette_option(command: Command) -> Command:
    """--cassette FILE and --store PATH|URL, one of them, as `cassette=` (None: the API reads
    $FORKPOINT_STORE, then $FORKPOINT_CASSETTE, then the default file)."""
    command = click.option(
        "--store", metavar="PATH|URL", default=None,
        help="Where the cassette lives: an SQLite file, or postgresql://… [env FORKPOINT_STORE].",
    )(command)  # fmt: skip
    command = click.option(
        "--cassette", type=click.Path(dir_okay=False), default=None,
        help="Cassette file [default: .forkpoint/forkpoint.db; env FORKPOINT_CASSETTE].",
    )(command)  # fmt: skip

    @functools.wraps(command)
    def wrapper(*args: Any, cassette: str | None, store: str | None, **kwargs: Any) -> Any:
        if cassette and store:
            raise click.UsageError("give --cassette or --store, not both")
        return command(*args, cassette=store or cassette, **kwargs)

    return wrapper


def port_option(command: Command) -> Command:
    """The port of the proxy a command starts for its CMD."""
    return click.option("--port", default=0, help="Port for the proxy [default: a free one].")(
        command
    )


def upstream_options(command: Command) -> Command:
    """--upstream, --route, and --redact (what else is secret, wherever it is sent)."""
    command = click.option(
        "--redact",
        multiple=True,
        metavar="NAME",
        help="Also mask this header, query parameter or JSON field as a secret (repeatable). "
        "Credential-looking names are masked already.",
    )(command)
    command = click.option(
        "--route",
        "routes",
        multiple=True,
        metavar="NAME=URL",
        help="Serve URL under /NAME/ (repeatable). Built in: anthropic, gemini, ollama, cohere, "
        "groq, cerebras (their providers), azure (your AZURE_OPENAI_ENDPOINT).",
    )(command)
    return click.option(
        "--upstream",
        default=None,
        help=f"Where requests outside any --route go [default: {DEFAULT_UPSTREAM}; for a fork, "
        "resume or live replay, where the run's went].",
    )(command)


def limit_options(command: Command) -> Command:
    command = click.option(
        "--max-body", default=DEFAULT_MAX_BODY // 2**20, show_default=True,
        help="Largest request body accepted, MiB.",
    )(command)  # fmt: skip
    command = click.option(
        "--client-timeout", default=DEFAULT_CLIENT_TIMEOUT, show_default=True,
        help="How long an agent may take to send a request (its head, then its body, "
        "however often a byte comes), and how long an idle connection is kept, s.",
    )(command)  # fmt: skip
    command = click.option(
        "--max-record-body", default=None, type=click.IntRange(min=0),
        help="A cap on what of a response body is recorded, MiB (default: every byte, in "
        "pieces past 4 MiB; past a cap the agent still gets it all and the cassette marks "
        "the rest not kept).",
    )(command)  # fmt: skip
    return click.option(
        "--read-timeout", default=600.0, show_default=True,
        help="How long an upstream may stall before its first byte or between two, s "
        "(minutes: models pause long between stream events).",
    )(command)  # fmt: skip


def mib(value: int | None) -> int | None:
    """A size given in MiB, in bytes (None stays None: no cap)."""
    return None if value is None else value * 2**20


def snapshot_options(command: Command) -> Command:
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


def intercept_options(port: int = 0) -> Callable[[Command], Command]:
    """--intercept and its settings, turned into `intercept=` (InterceptOptions or None)."""

    def decorate(command: Command) -> Command:
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


def park_options(command: Command) -> Command:
    """--park, --park-after, --park-timeout and --on-wake: when a run parks (its agent ended,
    nothing held while it waits) and who starts it again once answered."""
    command = click.option(
        "--on-wake", "on_wake", default=None, metavar="CMD",
        help="Wake a parked run by running CMD (a shell line; given the run id and the resume "
        "command line as arguments and as FORKPOINT_RUN and FORKPOINT_RESUME) instead of "
        "starting the agent here.",
    )(command)  # fmt: skip
    command = click.option(
        "--park-timeout", default=None, metavar="DURATION",
        help="A park's deadline (30s, 5m, 2h): then it is answered as its upstream's timeout "
        "would be (a 504 in the API's shape), and woken.",
    )(command)  # fmt: skip
    command = click.option(
        "--park-after", default=None, metavar="DURATION",
        help="Park a run whose request has no answer from its upstream after DURATION; the "
        "proxy keeps waiting on it, and its answer wakes the run.",
    )(command)  # fmt: skip
    command = click.option(
        "--park", "park", multiple=True, metavar="[METHOD ]GLOB",
        help="Park the run at a request to this route (sent nowhere: it waits for "
        "`forkpoint answer RUN`); repeatable.",
    )(command)  # fmt: skip
    return command


def on_wake_words(line: str | None) -> tuple[str, ...]:
    """--on-wake's shell line as its words."""
    if not line:
        return ()
    try:
        return tuple(shlex.split(line))
    except ValueError as error:
        raise click.BadParameter(f"{line!r}: {error}", param_hint="--on-wake") from None


def match_options(command: Command) -> Command:
    """--ignore, --normalize and --optional: how a replay matches requests to its recording,
    beside the project's forkpoint.toml or [tool.forkpoint] (they add to it)."""
    command = click.option(
        "--optional", multiple=True, metavar="[METHOD ]GLOB",
        help="A side call (telemetry) answered with an empty success when the recording "
        "lacks it, never a divergence (repeatable; well-known ones are built in).",
    )(command)  # fmt: skip
    command = click.option(
        "--normalize", multiple=True, metavar="REGEX|pkg.mod:fn",
        help="Replace the regex's matches in request bodies before matching, or apply a "
        "function (method, route, body) -> body (repeatable).",
    )(command)  # fmt: skip
    return click.option(
        "--ignore", multiple=True, metavar="PATH",
        help="A JSON path matching drops from request bodies, e.g. metadata.request_id or "
        "'$.input[*].id' (repeatable).",
    )(command)  # fmt: skip


def pace_option(command: Command) -> Command:
    return click.option(
        "--pace", default="fast", show_default=True,
        help="Replayed stream timing: fast, recorded, or xN (N times faster than recorded).",
    )(command)  # fmt: skip


def hangup_option(command: Command) -> Command:
    """--on-hangup: what becomes of a live answer its agent leaves (`OnHangup`)."""
    command = click.option(
        "--on-hangup", type=click.Choice([h.value for h in OnHangup]),
        default=OnHangup.FINISH.value, show_default=True,
        help="A live answer under way when its agent hangs up (it crashed, or was killed): "
        f"finish reads it to its end (at most {FINISH_FOR:g} s) and keeps it whole, so a "
        "resume serves it at no cost; cancel records it cut where the agent left.",
    )(command)  # fmt: skip

    @functools.wraps(command)
    def wrapper(*args: Any, on_hangup: str, **kwargs: Any) -> Any:
        return command(*args, on_hangup=OnHangup(on_hangup), **kwargs)

    return wrapper

def unserved_option(command: Command) -> Command:
    return click.option(
        "--allow-unserved", is_flag=True,
        help="Exit as CMD does even when recorded exchanges were never asked for (else 4).",
    )(command)  # fmt: skip


def divergence_option(command: Command) -> Command:
    return click.option(
        "--on-divergence",
        type=click.Choice([OnDivergence.FAIL.value, OnDivergence.LIVE.value]),
        default=None,
        help="A request the recording lacks: fail (the default), or fork there and go on live.",
    )(command)


SPEC_KEYS = {
    "at", "model", "upstream", "system_prompt", "patch", "mock", "name", "route", "label",
    "on_divergence",
}  # fmt: skip


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


def change_options(command: Command) -> Command:
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
            type=click.Choice([OnDivergence.FAIL.value, OnDivergence.LIVE.value]),
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
        change = make_change(
            model=model or spec.get("model"),
            upstream=spec.get("upstream"),
            system_prompt=system_prompt if system_prompt is not None else spec.get("system_prompt"),
            patch=patch if patch is not None else spec.get("patch"),
            mocks=[*spec.get("mock", []), *mocks],
        )
        divergence = OnDivergence(on_divergence or spec.get("on_divergence", "fail"))
        return command(*args, spec=spec, change=change, on_divergence=divergence, **kwargs)

    return wrapper


def reports_errors(command: Command) -> Command:
    """A ForkpointError becomes one line on stderr and exit code 2, not a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except ForkpointError as error:
            echo(f"forkpoint: {error}", err=True)
            sys.exit(EXIT_USAGE)

    return wrapper


def json_lines(documents: Iterable[dict[str, Any]]) -> None:
    """Each document on a line of its own (JSON lines): a reader takes one run at a time, and a
    store of thousands is never one array to parse whole."""
    for document in documents:
        click.echo(orjson.dumps(document).decode())


def parse_pairs(pairs: tuple[str, ...], what: str, *, shape: str = "KEY=VALUE") -> dict[str, str]:
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not {shape}", param_hint=what)
        parsed[key] = value
    return parsed


def parse_routes(routes: tuple[str, ...]) -> dict[str, str]:
    """`--route NAME=URL`, repeated."""
    return parse_pairs(routes, "--route", shape="NAME=URL")


def prices(command: Command) -> Command:
    """A command that shows costs: once, after its output (never inside a table), it names
    the models whose cost is unknown."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from forkpoint.compare.cost import PRICES, collect_unpriced

        with collect_unpriced() as models:
            result = command(*args, **kwargs)
        if models:
            named = ", ".join(repr(m) for m in sorted(models))
            echo(f"forkpoint: no price in {PRICES} for {named}: shown as unknown", err=True)
        return result

    return wrapper


def report_parked(result: RunResult) -> None:
    """A run that parked: one line saying so and how to answer, then exit EXIT_PARKED."""
    park = result.parked
    assert park is not None
    if park.answered_by == "upstream":
        how = f"its upstream has answered: wake it with forkpoint wake {result.run_id}"
    else:
        how = f"answer it with: forkpoint answer {result.run_id} --body @FILE"
    echo(
        f"forkpoint: run {result.run_id} parked at step {park.step}, waiting on "
        f"{park.waits_on}; its agent was ended; {how}",
        err=True,
    )
    sys.exit(EXIT_PARKED)


def report_run(result: RunResult, *, allow_unserved: bool = False) -> None:
    """Say how the run ended, on stderr (stdout is CMD's alone), and exit as CMD did: 128 + N
    for a command killed by signal N, as a shell reports it; EXIT_DIVERGED for a command that
    exited 0 although its run diverged; EXIT_UNSERVED for one that left recorded exchanges
    unserved (unless `allow_unserved`)."""
    if result.parked is not None:
        report_parked(result)
    served = f", {result.served} of {result.recorded} recorded served" if result.recorded else ""
    echo(f"forkpoint: run {result.run_id} {result.status}, {result.steps} steps{served}", err=True)
    for part in result.unapplied:
        echo(
            f"forkpoint: {CHANGE_FLAGS.get(part, part)} changed no request: none that went live "
            "was a model call whose API forkpoint reads (see: forkpoint show "
            f"{result.run_id})",
            err=True,
        )
    code = result.exit_code if result.exit_code >= 0 else 128 - result.exit_code
    if code == 0 and result.status is RunStatus.DIVERGED:
        echo(
            f"forkpoint: the run diverged from its recording (exit {EXIT_DIVERGED}); "
            f"see: forkpoint show {result.run_id}",
            err=True,
        )
        code = EXIT_DIVERGED
    elif code == 0 and result.unserved and not allow_unserved:
        echo(
            f"forkpoint: {unserved_error(result.recorded, result.unserved)} "
            f"(exit {EXIT_UNSERVED}; --allow-unserved accepts it)",
            err=True,
        )
        code = EXIT_UNSERVED
    sys.exit(code)
