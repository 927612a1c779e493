"""`Options`: how every verb runs, in one frozen object instead of a keyword list per verb.

    from forkpoint import Options, fork
    fork("ticket-1", ["python", "agent.py"], at=2, options=Options(cassette="runs.db"))

Fields a verb has no use for are ignored by it (`pace` means nothing to `record`). Where live
traffic goes is decided here, once, for every verb and the pytest plugin alike:
`engine_config`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from forkpoint.api.config import ProjectConfig, find_project_config, normalizer
from forkpoint.cassettes.sqlite import DEFAULT_PATH
from forkpoint.engine.config import (
    DEFAULT_CLIENT_TIMEOUT,
    DEFAULT_MAX_BODY,
    DEFAULT_UPSTREAM,
    EngineConfig,
    OnDivergence,
    Routes,
)
from forkpoint.engine.matching import DEFAULT_VOLATILE, MatchConfig, Normalizer
from forkpoint.engine.optional import DEFAULT_OPTIONAL
from forkpoint.engine.pace import Pace
from forkpoint.engine.redaction import Redaction
from forkpoint.engine.snapshot_policy import SnapshotPolicy
from forkpoint.models import Exchange
from forkpoint.runtime.intercept import InterceptOptions

__all__ = ["Options", "engine_config", "match_config", "store_location"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """How a verb runs.

    cassette: where the cassette lives: an SQLite file, or a PostgreSQL database by its
        `postgresql://` URL [default: $FORKPOINT_STORE, else $FORKPOINT_CASSETTE, else
        .forkpoint/forkpoint.db].
    upstream, routes: where live requests go (`routes` maps a path prefix to a base URL, beside
        the built-in `anthropic`). Unset, a recording goes to api.openai.com and a fork or a
        resume to the upstreams its run was recorded against.
    name, labels: the new run's.
    host, port: where the proxy listens (port 0: a free one).
    read_timeout: how long an upstream may stall (s); max_body: the largest request (bytes).
    max_record_body: a cap on what of a response body is recorded (bytes; None, the default:
        every byte, in pieces past 4 MiB); the agent gets it all, the cassette what was kept,
        marked incomplete.
    client_timeout: how long an agent may take sending a request head, stall in its body, or
        keep an idle connection (s).
    pace: how replayed streams are timed. on_divergence: a request the recording lacks.
    restore: give a fork's agent its state snapshot (else it starts fresh).
    workspace: a directory snapshotted with the run and restored on fork and resume.
    snapshots: when agent state is pulled. intercept: also serve as an HTTPS proxy.
    redact: more names of headers, query parameters and JSON fields to mask as secrets.
    ignore: JSON paths matching drops (`metadata.request_id`, `$.input[*].id`).
    normalize: regexes whose matches in request bodies are replaced, or normalizer functions
        (`pkg.mod:fn` or a callable taking method, route and the parsed body).
    optional: `[METHOD ]GLOB` routes of side calls (telemetry) answered with an empty success
        when the recording lacks them, beside the built-in ones.
    project_config: also read these three from the project's forkpoint.toml or
        `[tool.forkpoint]` (`forkpoint.api.config`), before the ones given here.
    env: the command's environment [default: this process's].
    adapter_hosts: hosts beside loopback whose adapter URLs the proxy may fetch.
    token: what every request must carry (`forkpoint.doors.auth`); unset, a proxy bound
        beyond loopback makes one up.
    """

    cassette: str | os.PathLike[str] | None = None
    upstream: str | None = None
    routes: Mapping[str, str] = field(default_factory=dict)
    name: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 0
    read_timeout: float = 600.0
    client_timeout: float = DEFAULT_CLIENT_TIMEOUT
    max_body: int = DEFAULT_MAX_BODY
    max_record_body: int | None = None
    pace: Pace = Pace()
    on_divergence: OnDivergence = OnDivergence.FAIL
    restore: bool = True
    workspace: str | os.PathLike[str] | None = None
    snapshots: SnapshotPolicy = SnapshotPolicy()
    intercept: InterceptOptions | None = None
    redact: Sequence[str] = ()
    ignore: Sequence[str] = ()
    normalize: Sequence[str | Normalizer] = ()
    optional: Sequence[str] = ()
    project_config: bool = True
    env: Mapping[str, str] | None = None
    adapter_hosts: Sequence[str] = ()
    token: str | None = None


def store_location(given: str | os.PathLike[str] | None = None) -> str:
    """Where the cassette is: `given`, else $FORKPOINT_STORE, else $FORKPOINT_CASSETTE, else
    the default file."""
    env = os.environ.get("FORKPOINT_STORE") or os.environ.get("FORKPOINT_CASSETTE")
    return os.fspath(given or env or DEFAULT_PATH)


def engine_config(
    options: Options, *, live: bool, recorded: Sequence[Exchange] = ()
) -> EngineConfig:
    """The engine's config for a verb: `live` says whether any request may go upstream (an
    offline replay has no upstream at all); `recorded`, the run a fork or a resume continues,
    whose upstreams serve whatever the options do not name."""
    match, limit = match_config(options), options.max_record_body
    if not live:
        return EngineConfig(routes=Routes(), match=match, max_record_body=limit)
    given = Routes(options.upstream, dict(options.routes))
    routes = given.over(Routes.recorded(recorded)).over(Routes.of(DEFAULT_UPSTREAM))
    return EngineConfig(routes=routes, match=match, max_record_body=limit)


def match_config(options: Options) -> MatchConfig:
    """How requests match: the built-in settings, the project file's, then the options'."""
    project = find_project_config() if options.project_config else ProjectConfig()
    return MatchConfig(
        volatile_fields=(*DEFAULT_VOLATILE, *project.ignore, *options.ignore),
        normalizers=tuple(normalizer(n) for n in (*project.normalize, *options.normalize)),
        optional_routes=(*DEFAULT_OPTIONAL, *project.optional, *options.optional),
        redaction=Redaction(names=frozenset(options.redact)),
    )
