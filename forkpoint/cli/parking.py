"""`forkpoint answer` and `forkpoint wake`: answer a parked run, and wake it.

A run parked under `record -- CMD` wakes here: `answer` claims its wake and resumes it in the
foreground, the agent's output on this terminal, and exits as the woken command does. A run
whose launch wakes elsewhere (`serve`, an `--on-wake` hook) is only answered here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from forkpoint import api
from forkpoint.api.parking import awake_here, check_wake
from forkpoint.cli.options import Command, cassette_option, report_run, reports_errors
from forkpoint.cli.terminal import echo
from forkpoint.errors import ConfigError
from forkpoint.models import Park, Waker


def _body(given: str | None) -> bytes:
    """`@FILE`, `-` (stdin) or the text itself."""
    if given is None:
        return b""
    if given == "-":
        return sys.stdin.buffer.read()
    if given.startswith("@"):
        try:
            return Path(given[1:]).read_bytes()
        except OSError as error:
            raise ConfigError(f"--body {given}: {error.strerror}") from None
    return given.encode()


def _headers(given: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for line in given:
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise ConfigError(f"--header {line!r} is not NAME:VALUE")
        pairs.append((name.strip(), value.strip()))
    return tuple(pairs)


def answer_options(command: Command) -> Command:
    for option in reversed((
        click.option("--status", default=None, metavar="N",
                     help="The answer's HTTP status [default: 200]."),
        click.option("--header", "headers", multiple=True, metavar="NAME:VALUE",
                     help="A header of the answer (repeatable) [default: JSON]."),
        click.option("--body", default=None, metavar="@FILE|-|TEXT",
                     help="The answer's body: a file, stdin, or the text itself."),
        click.option("--max-body", default=256, show_default=True,
                     help="Largest answer accepted, MiB."),
    )):  # fmt: skip
        command = option(command)
    return command


def _answer(
    run: str, cassette: str | None, status: str | None, headers: tuple[str, ...],
    body: str | None, max_body: int,
) -> Park:  # fmt: skip
    options = api.Options(cassette=cassette, max_body=max_body * 2**20)
    park = api.answer(
        run, _body(body), status=status or "200", headers=_headers(headers), options=options
    )
    echo(f"forkpoint: run {park.run_id} step {park.step} answered", err=True)
    return park


@click.command(context_settings={"ignore_unknown_options": True})
@cassette_option
@click.argument("run")
@answer_options
@click.option("--no-wake", is_flag=True, help="Only answer: wake it later (forkpoint wake RUN).")
@reports_errors
def answer(
    cassette: str | None, run: str, status: str | None, headers: tuple[str, ...],
    body: str | None, max_body: int, no_wake: bool,
) -> None:  # fmt: skip
    """Answer parked RUN's pending request, and wake it here if it parked under record.

    The answer is recorded as the pending step's exchange, once: a second answer is refused,
    naming who answered when. A run that parked under `record -- CMD` is then resumed here
    in the foreground (the secrets it needs come from this environment); one that `serve` or
    an --on-wake hook wakes is woken there.

    Example: forkpoint answer 01JX... --body @approval.json
    """
    if body is None:
        raise ConfigError("give the answer's body: --body @FILE, --body - (stdin) or --body TEXT")
    if not no_wake:  # a secret the wake needs, missing here: said before anything is stored
        check_wake(run, options=api.Options(cassette=cassette))
    park = _answer(run, cassette, status, headers, body, max_body)
    if not no_wake:
        _wake(park.run_id, cassette)


@click.command(context_settings={"ignore_unknown_options": True})
@cassette_option
@click.argument("run")
@answer_options
@reports_errors
def wake(
    cassette: str | None, run: str, status: str | None, headers: tuple[str, ...],
    body: str | None, max_body: int,
) -> None:  # fmt: skip
    """Wake parked RUN here, in the foreground; answer it first with --status/--body (a park
    with no deadline whose upstream answer will never come).

    Example: forkpoint wake 01JX... --status 200 --body '{"approved": true}'
    """
    if body is not None or status is not None:
        run = _answer(run, cassette, status, headers, body, max_body).run_id
    result = api.wake(run, options=api.Options(cassette=cassette))
    report_run(result)


def _wake(run_id: str, cassette: str | None) -> None:
    result = awake_here(run_id, options=api.Options(cassette=cassette))
    if result is None:
        echo(f"forkpoint: run {run_id} wakes where its launch says (serve)", err=True)
    elif result is Waker.WORKERS:
        echo(f"forkpoint: run {run_id} queued for the workers (a wake job)", err=True)
    elif isinstance(result, Waker):
        echo(f"forkpoint: run {run_id} handed to its --on-wake hook", err=True)
    else:
        report_run(result)
