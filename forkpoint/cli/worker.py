"""`forkpoint worker`: take jobs from the queue in a PostgreSQL store and run them."""

from __future__ import annotations

import logging
import sys

import click

from forkpoint.api.config import find_project_config
from forkpoint.api.options import store_location
from forkpoint.cassettes.open import is_postgres
from forkpoint.cli.options import cassette_option, reports_errors
from forkpoint.errors import ConfigError


@click.command()
@cassette_option
@click.option(
    "--agent", "agents", multiple=True, metavar="NAME=COMMAND",
    help="An agent this worker runs, as a job names it (repeatable); {run}, {name} and "
    "{label:KEY} as in an experiment's command. Beside [agents] in forkpoint.toml.",
)  # fmt: skip
@click.option("--concurrency", default=1, show_default=True, help="Jobs running at once.")
@click.option(
    "--lease", default=30.0, show_default=True,
    help="Seconds without this worker's heartbeat after which others take its jobs back, s.",
)  # fmt: skip
@click.option(
    "--grace", default=60.0, show_default=True,
    help="On SIGTERM, how long the jobs under way may finish before they are stopped, s.",
)  # fmt: skip
@reports_errors
def worker(
    cassette: str | None, agents: tuple[str, ...], concurrency: int, lease: float, grace: float
) -> None:
    """Take jobs from the queue in a PostgreSQL store and run them: experiment probes sent
    with `forkpoint experiment --on-workers --agent NAME`, for the agents named here.

    A job names an agent, never a command: this worker runs only the agents it is given
    (--agent, or [agents] in forkpoint.toml / [tool.forkpoint.agents]), with its own
    environment, so each agent's keys are this machine's. Jobs for other agents are left for
    other workers. Each fork records into the store as `forkpoint fork` does. SIGTERM stops
    it once the jobs under way end (at most --grace seconds, then they are queued again).

    \b
    Example: forkpoint worker --store postgresql://db/forkpoint \\
      --agent support='python examples/support_agent/agent.py {label:ticket}'
    """
    try:
        from forkpoint.workers import Worker, parse_agents
        from forkpoint.workers.outage import LibraryLines
    except ImportError as missing:
        raise ConfigError(str(missing)) from None
    from forkpoint.runtime import loops

    url = store_location(cassette)
    if not is_postgres(url):
        raise ConfigError("a worker takes jobs from a PostgreSQL store: --store postgresql://…")
    found = parse_agents(agents, find_project_config().agents)
    if not found:
        raise ConfigError(
            "give this worker an agent to run: --agent NAME='COMMAND' "
            "(or [agents] in forkpoint.toml)"
        )
    if concurrency < 1 or lease <= 0 or grace < 0:
        raise ConfigError("--concurrency and --lease must be positive, --grace 0 or more")
    taker = Worker(url, found, concurrency=concurrency, lease=lease, grace=grace)
    _log_to_stderr(LibraryLines(taker.outage))
    loops.run(taker.run())


def _log_to_stderr(library: logging.Filter) -> None:
    """forkpoint's lines on stderr, one per event; the libraries' only when they warn, in
    forkpoint's words (`library`): no traceback, an outage said once."""
    for name, level, words in (
        ("forkpoint", logging.INFO, None),
        ("procrastinate", logging.WARNING, library),
        ("psycopg.pool", logging.WARNING, library),
    ):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        if words is not None:
            handler.addFilter(words)
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.addHandler(handler)
        logger.propagate = False
