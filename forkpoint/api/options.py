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
from forkpoint.api.env import client_routes
from forkpoint.cassettes.sqlite import DEFAULT_PATH
from forkpoint.cassettes.store import WAKE_LEASE
from forkpoint.engine.config import (
    DEFAULT_CLIENT_TIMEOUT,
    DEFAULT_MAX_BODY,
    DEFAULT_UPSTREAM,
    EngineConfig,
    OnDivergence,
    OnHangup,
    Routes,
)
from forkpoint.engine.matching import DEFAULT_VOLATILE, MatchConfig, Normalizer
from forkpoint.engine.optional import DEFAULT_OPTIONAL
from forkpoint.engine.pace import Pace
from forkpoint.engine.parking import Parking
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
        the built-in `anthropic`, `gemini`…). Unset, a recording goes where the command's own
        base-URL variables pointed (`OLLAMA_HOST`…: `api.env.CLIENTS`), else to the provider
        (api.openai.com for the default route), and a fork or a resume to the upstreams its
        run was recorded against.
    name, labels: the new run's.
    host, port: where the proxy listens (port 0: a free one).
    read_timeout: how long an upstream may stall (s); max_body: the largest request (bytes).
    max_record_body: a cap on what of a response body is recorded (bytes; None, the default:
        every byte, in pieces past 4 MiB); the agent gets it all, the cassette what was kept,
        marked incomplete.
    client_timeout: how long an agent may take sending a request (its head, then its body,
        however often a byte comes), or keep an idle connection (s).
    pace: how replayed streams are timed. on_divergence: a request the recording lacks.
    on_hangup: a live answer under way when its agent hangs up: read to its end and kept
        whole (`finish`, the default: a resume serves it at no cost), or recorded cut.
    allow_unserved: a replay (or a fork's or a resume's replayed steps) may leave recorded
        exchanges unserved; else its run's error names them (and the CLI exits 4).
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
    park: `[METHOD ]GLOB` routes whose requests park their run (sent nowhere: they wait for
        an answer, `forkpoint answer`); park_after: a request still without an answer from
        its upstream after this long (`30s`, `5m`) parks its run while the proxy keeps
        waiting; park_timeout: a park's deadline, answered as the upstream's timeout would be.
    on_wake: a command that starts a woken agent elsewhere (run with the run id and the
        resume command line), instead of a local process. wake_agent: a parked run wakes on a
        `forkpoint worker` that has this agent (a `wake` job; PostgreSQL stores).
        wake_lease: how long a wake claimed by a waker stays its own (s): past it, a wake
        whose run recorded nothing since is claimed again (its waker died mid-wake).
        cwd: where the command runs [default: here].
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
    on_hangup: OnHangup = OnHangup.FINISH
    allow_unserved: bool = False
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
    park: Sequence[str] = ()
    park_after: str | float | None = None
    park_timeout: str | float | None = None
    on_wake: Sequence[str] = ()
    wake_agent: str | None = None
    wake_lease: float = WAKE_LEASE
    cwd: str | os.PathLike[str] | None = None


def store_location(given: str | os.PathLike[str] | None = None) -> str:
    """Where the cassette is: `given`, else $FORKPOINT_STORE, else $FORKPOINT_CASSETTE, else
    the default file."""
    env = os.environ.get("FORKPOINT_STORE") or os.environ.get("FORKPOINT_CASSETTE")
    return os.fspath(given or env or DEFAULT_PATH)


def engine_config(
    options: Options,
    *,
    live: bool,
    recorded: Sequence[Exchange] = (),
    env: Mapping[str, str] | None = None,
) -> EngineConfig:
    """The engine's config for a verb: `live` says whether any request may go upstream (an
    offline replay has no upstream at all); `recorded`, the run a fork or a resume continues,
    whose upstreams serve whatever the options do not name; `env`, the environment of the
    command the proxy runs (none for `serve`), whose own base-URL variables name upstreams
    below those (a value naming the proxy's own port is not followed)."""
    match, limit = match_config(options), options.max_record_body
    if not live:
        return EngineConfig(routes=Routes(), match=match, max_record_body=limit)
    parking = Parking.of(
        tuple(options.park), after=options.park_after, timeout=options.park_timeout
    )
    given = Routes(options.upstream, dict(options.routes))
    named = client_routes(env or {}, proxy=(options.host, options.port))
    routes = given.over(Routes.recorded(recorded)).over(named).over(Routes.of(DEFAULT_UPSTREAM))
    return EngineConfig(
        routes=routes, match=match, max_record_body=limit, on_hangup=options.on_hangup,
        parking=parking,
    )  # fmt: skip


def match_config(options: Options) -> MatchConfig:
    """How requests match: the built-in settings, the project file's, then the options'."""
    project = find_project_config() if options.project_config else ProjectConfig()
    return MatchConfig(
        volatile_fields=(*DEFAULT_VOLATILE, *project.ignore, *options.ignore),
        normalizers=tuple(normalizer(n) for n in (*project.normalize, *options.normalize)),
        optional_routes=(*DEFAULT_OPTIONAL, *project.optional, *options.optional),
        redaction=Redaction(names=frozenset(options.redact)),
    )
