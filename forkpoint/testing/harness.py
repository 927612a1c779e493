"""One test's proxy: its text cassette loaded into memory, the gateway on a free port, the
recorded run written back when the test passes.

The pytest plugin is a thin layer over `CassetteProxy`; everything here is per instance (no
module state), so xdist workers and parallel tests each get their own proxy.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from forkpoint import api
from forkpoint.cassettes.formats import text
from forkpoint.cassettes.memory import MemoryStore
from forkpoint.engine.changes import Change
from forkpoint.engine.decide import OnDivergence
from forkpoint.engine.pace import Pace
from forkpoint.errors import ConfigError
from forkpoint.models import Exchange, Mode, Origin, RunStatus, ToolCall
from forkpoint.runtime.proxy import ProxyThread
from forkpoint.runtime.upstream import AiohttpSender
from forkpoint.testing.episodes import EpisodeSender
from forkpoint.testing.record_mode import RecordMode

# What `@pytest.mark.forkpoint(...)` takes. Fork options (fork_at, model, mocks) go here once
# sessions can start forks from a test's cassette.
MARKER_OPTIONS = (
    "cassette", "upstream", "routes", "volatile_fields", "pace",
    "fork_at", "model", "system_prompt", "mocks", "on_divergence",
)  # fmt: skip
SETTLE_TIMEOUT = 10.0  # s to wait for requests still in flight when a test reads its run


class Served(StrEnum):
    """How a test's traffic is served, from its record mode and whether its cassette exists."""

    REPLAY = "replay"
    RECORD = "record"
    NEW_EPISODES = "new_episodes"


@dataclass(frozen=True, slots=True)
class Options:
    cassette: Path
    record: RecordMode = RecordMode.NONE
    upstream: str | None = api.DEFAULT_UPSTREAM
    routes: Mapping[str, str] = field(default_factory=dict)
    volatile_fields: tuple[str, ...] = ()
    pace: Pace = Pace()
    name: str | None = None
    # A fork of the cassette's run: its steps < fork_at replayed, then live with the change.
    fork_at: int | None = None
    change: Change = Change()
    on_divergence: OnDivergence = OnDivergence.FAIL


def default_cassette(test_file: Path, test_name: str, class_name: str | None = None) -> Path:
    """`<test dir>/cassettes/<module>/<Class.>test_name.yaml`, as pytest-recording lays them."""
    name = re.sub(r"[^\w.\[\]-]+", "-", f"{class_name}.{test_name}" if class_name else test_name)
    return test_file.parent / "cassettes" / test_file.stem / f"{name}.yaml"


def options_for(
    marker_args: Sequence[Any],
    marker_kwargs: Mapping[str, Any],
    *,
    default: Path,
    record: str,
    upstream: str | None,
    name: str,
) -> Options:
    """Options from a test's marker and the command line; the marker wins.

    A relative `cassette` is taken from the test module's cassette folder, so two tests can
    share `cassette="shared.yaml"`. `upstream` (marker, else --forkpoint-upstream, else
    FORKPOINT_UPSTREAM) serves every route, Anthropic's included, unless `routes` say otherwise.
    """
    unknown = sorted(set(marker_kwargs) - set(MARKER_OPTIONS))
    if unknown or len(marker_args) > 1:
        what = ", ".join(unknown) if unknown else "more than one positional argument"
        raise ConfigError(
            f"forkpoint marker: unknown option {what}; it takes {', '.join(MARKER_OPTIONS)}"
        )
    cassette = marker_kwargs.get("cassette", marker_args[0] if marker_args else None)
    path = default if cassette is None else default.parent / Path(cassette)
    chosen = marker_kwargs.get("upstream", upstream or os.environ.get("FORKPOINT_UPSTREAM"))
    routes = {"anthropic": chosen} if chosen else {}
    return Options(
        cassette=path,
        record=RecordMode.parse(record),
        upstream=chosen or api.DEFAULT_UPSTREAM,
        routes={**routes, **dict(marker_kwargs.get("routes") or {})},
        volatile_fields=tuple(marker_kwargs.get("volatile_fields", ())),
        pace=Pace.parse(str(marker_kwargs.get("pace", "fast"))),
        name=name,
        fork_at=marker_kwargs.get("fork_at"),
        change=api.make_change(
            model=marker_kwargs.get("model"),
            system_prompt=marker_kwargs.get("system_prompt"),
            mocks=tuple(marker_kwargs.get("mocks", ())),
            base_dir=path.parent,
        ),
        on_divergence=OnDivergence(marker_kwargs.get("on_divergence", "fail")),
    )


@dataclass(frozen=True, slots=True)
class RunView:
    """The run a test made, to assert on: `forkpoint.run.steps`, `forkpoint.run.tool_calls`."""

    id: str
    name: str | None
    status: RunStatus
    mode: Mode
    steps: list[Exchange]

    @property
    def tool_calls(self) -> list[ToolCall]:
        """Every tool call the model asked for, in step order."""
        return [call for e in self.steps if e.summary for call in e.summary.tool_calls]


class CassetteProxy:
    """What the `forkpoint` fixture gives a test: the proxy's URLs, its run and its exchanges."""

    def __init__(self, options: Options):
        self.options = options
        self.cassette = options.cassette
        self.served = _served(options.record, options.cassette)
        self.store = MemoryStore(label=str(options.cassette))
        self.url = ""
        self._thread: ProxyThread | None = None
        self._episodes: EpisodeSender | None = None
        self._run_id = ""

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"{self.url}/anthropic"

    def start(self) -> dict[str, str]:
        """Load the cassette, start the proxy; returns the environment variables to set."""
        options, source = self.options, None
        if self.served is not Served.RECORD:
            routes = {**api.DEFAULT_ROUTES, **options.routes}
            run, exchanges = text.read(options.cassette, routes=routes)
            self.store.create_run(run)
            self.store.add_exchanges(exchanges)
            source = run
        replaying = self.served is Served.REPLAY
        forking = replaying and options.fork_at is not None
        offline = replaying and not forking
        config = api.engine_config(
            None if offline else options.upstream,
            None if offline else options.routes,
            volatile_fields=options.volatile_fields,
        )
        if self.served is Served.NEW_EPISODES:
            assert source is not None
            self._episodes = EpisodeSender(self.store.exchanges(source.id), config, AiohttpSender())
        self._thread = ProxyThread(self.store, config, sender=self._episodes, pace=options.pace)
        try:
            proxy = self._thread.__enter__()
            if source is not None and forking:
                assert options.fork_at is not None
                session = proxy.sessions.start_fork(
                    source.id, at=options.fork_at, change=options.change,
                    on_divergence=options.on_divergence, name=options.name,
                )  # fmt: skip
            elif source is not None and replaying:
                session = proxy.sessions.start_replay(source.id, name=options.name)
            else:
                session = proxy.sessions.start_record(name=options.name)
        except BaseException:
            self.stop(save=False)
            raise
        self.url, self._run_id = proxy.url, session.run.id
        # replay and fork: a placeholder key for SDKs that insist (a real one is kept)
        mode = Mode.REPLAY if replaying else Mode.RECORD
        env = api.agent_env(self.url, self._run_id, mode=mode)
        return {k: v for k, v in env.items() if os.environ.get(k) != v}

    @property
    def run(self) -> RunView:
        """The test's run as it stands: every request the proxy has taken, once recorded."""
        self._settle()
        run = self.store.get_run(self._run_id)
        steps = self.store.exchanges(run.id)
        return RunView(id=run.id, name=run.name, status=run.status, mode=run.mode, steps=steps)

    def _settle(self, timeout: float = SETTLE_TIMEOUT) -> None:
        # The gateway records an exchange just after its last byte reaches the client, so a
        # test asserting right after a call would race it: wait for every step taken so far.
        if self._thread is None:
            return
        proxy = self._thread.proxy
        taken = proxy.sessions.get(self._run_id).next_step
        deadline = time.monotonic() + timeout
        while self.store.step_count(self._run_id) < taken and time.monotonic() < deadline:
            proxy.recorder.flush(timeout)
            time.sleep(0.001)

    @property
    def exchanges(self) -> list[Exchange]:
        return self.run.steps

    @property
    def unplayed(self) -> list[Exchange]:
        """Recorded exchanges the test has not asked for (replay only)."""
        if self.served is not Served.REPLAY or self._thread is None:
            return []
        return self._thread.proxy.sessions.get(self._run_id).unserved()

    def divergences(self) -> list[str]:
        """The divergence report of each request the cassette did not have."""
        return [e.error or "" for e in self.run.steps if e.origin is Origin.DIVERGED]

    def stop(self, *, save: bool) -> None:
        """Stop the proxy; with `save`, write a run that was recorded back to the cassette."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        try:
            if self._episodes is not None:
                thread.call(self._episodes.close())
        finally:
            thread.close()
        if not save or self.served is Served.REPLAY or not self._run_id:
            return
        run = self.store.get_run(self._run_id)
        exchanges = self.store.exchanges(run.id)
        if self._episodes is not None:
            exchanges = self._episodes.merge(run.id, exchanges)
        text.write(self.cassette, run, exchanges)


def _served(record: RecordMode, cassette: Path) -> Served:
    exists = cassette.exists()
    match record:
        case RecordMode.NONE if not exists:
            raise ConfigError(f"no cassette at {cassette}: record it with --forkpoint-record=once")
        case RecordMode.NONE | RecordMode.ONCE if exists:
            return Served.REPLAY
        case RecordMode.NEW_EPISODES if exists:
            return Served.NEW_EPISODES
        case _:
            return Served.RECORD
