"""One test's proxy: its text cassette loaded into memory, the gateway on a free port, the
recorded run written back when the test passes.

The pytest plugin is a thin layer over `CassetteProxy`; everything here is per instance (no
module state), so xdist workers and parallel tests each get their own proxy. Where live
traffic goes is the API's one policy (`forkpoint.api.engine_config`): a replay is offline, a
fork and `new_episodes` go where the test says, else where the cassette's requests went.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from forkpoint.api import Options, engine_config, make_change
from forkpoint.api.env import agent_env
from forkpoint.cassettes.formats import text
from forkpoint.cassettes.memory import MemoryStore
from forkpoint.cassettes.transfer import joined
from forkpoint.doors.local import LocalDoor
from forkpoint.engine.changes import Change
from forkpoint.engine.config import DEFAULT_ROUTES, OnDivergence, OnHangup
from forkpoint.engine.pace import Pace
from forkpoint.engine.session import Session
from forkpoint.errors import ConfigError
from forkpoint.models import Exchange, Mode, Origin, Run, RunStatus, ToolCall
from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.runtime.proxy import ProxyThread
from forkpoint.testing.record_mode import RecordMode

# What `@pytest.mark.forkpoint(...)` takes.
MARKER_OPTIONS = (
    "cassette", "upstream", "routes", "ignore", "normalize", "optional", "pace",
    "fork_at", "model", "system_prompt", "mocks", "on_divergence",
)  # fmt: skip
SETTLE_TIMEOUT = 10.0  # s to wait for requests still in flight when a test reads its run


class Served(StrEnum):
    """How a test's traffic is served, from its record mode and whether its cassette exists."""

    REPLAY = "replay"
    RECORD = "record"
    NEW_EPISODES = "new_episodes"


@dataclass(frozen=True, slots=True)
class CassetteOptions:
    """A test's cassette, how to serve it, and the `Options` its proxy runs with."""

    cassette: Path
    record: RecordMode = RecordMode.NONE
    options: Options = Options()
    # A fork of the cassette's run: its steps < fork_at replayed, then live with the change.
    fork_at: int | None = None
    change: Change = field(default_factory=Change)


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
) -> CassetteOptions:
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
    return CassetteOptions(
        cassette=path,
        record=RecordMode.parse(record),
        options=Options(
            upstream=chosen,
            routes={**routes, **dict(marker_kwargs.get("routes") or {})},
            ignore=tuple(marker_kwargs.get("ignore", ())),
            normalize=tuple(marker_kwargs.get("normalize", ())),
            optional=tuple(marker_kwargs.get("optional", ())),
            pace=Pace.parse(str(marker_kwargs.get("pace", "fast"))),
            name=name,
            on_divergence=OnDivergence(marker_kwargs.get("on_divergence", "fail")),
        ),
        fork_at=marker_kwargs.get("fork_at"),
        change=make_change(
            model=marker_kwargs.get("model"),
            system_prompt=marker_kwargs.get("system_prompt"),
            mocks=tuple(marker_kwargs.get("mocks", ())),
            base_dir=path.parent,
        ),
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

    def __init__(self, options: CassetteOptions, *, loop: LoopThread | None = None):
        """`loop`: the loop thread to run the proxy on (kept when it stops), else its own."""
        self.options = options
        self._loop = loop
        self.cassette = options.cassette
        self.served = _served(options.record, options.cassette)
        self.store = MemoryStore(label=str(options.cassette))
        self.url = ""
        self.door: LocalDoor | None = None  # the in-process door, while the proxy runs
        self._thread: ProxyThread | None = None
        self._session: Session | None = None

    @property
    def origin(self) -> tuple[str, int]:
        """The proxy's host and port."""
        parts = urlsplit(self.url)
        return parts.hostname or "", parts.port or 80

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"{self.url}/anthropic"

    def start(self) -> dict[str, str]:
        """Load the cassette, start the proxy; returns the environment variables to set."""
        setup, options = self.options, self.options.options
        source: Run | None = None
        recorded: list[Exchange] = []
        if self.served is not Served.RECORD:
            source, recorded = text.read(
                setup.cassette, routes={**DEFAULT_ROUTES, **options.routes}
            )
            self.store.create_run(source)
            self.store.add_exchanges(recorded)
        forking = self.served is Served.REPLAY and setup.fork_at is not None
        offline = self.served is Served.REPLAY and not forking
        config = engine_config(options, live=not offline, recorded=recorded, env=os.environ)
        # a test that stops reading an answer ends with it: its teardown waits on no stream
        config = dataclasses.replace(config, on_hangup=OnHangup.CANCEL)
        self._thread = ProxyThread(self.store, config, loop=self._loop, pace=options.pace)
        try:
            self._thread.__enter__()
            self._session = self._open(source)
        except BaseException:
            self.stop(save=False)
            raise
        self.url = self._thread.proxy.url
        self.door = self._thread.local_door()
        env = agent_env(self.url, self._session.run.id, offline=self.served is Served.REPLAY)
        return {k: v for k, v in env.items() if os.environ.get(k) != v}

    def _open(self, source: Run | None) -> Session:
        assert self._thread is not None
        setup, name = self.options, self.options.options.name
        if source is None:
            return self._thread.record(name=name)
        if self.served is Served.NEW_EPISODES:
            return self._thread.replay(
                source.id, name=name, on_divergence=OnDivergence.NEW_EPISODES
            )
        if setup.fork_at is not None:
            return self._thread.fork(
                source.id, at=setup.fork_at, change=setup.change,
                on_divergence=setup.options.on_divergence, name=name,
            )  # fmt: skip
        return self._thread.replay(source.id, name=name)

    @property
    def run(self) -> RunView:
        """The test's run as it stands: every request the proxy has taken, once recorded."""
        self._settle()
        assert self._session is not None
        run = self.store.get_run(self._session.run.id)
        steps = self.store.exchanges(run.id)
        return RunView(id=run.id, name=run.name, status=run.status, mode=run.mode, steps=steps)

    def _settle(self, timeout: float = SETTLE_TIMEOUT) -> None:
        # The gateway records an exchange just after its last byte reaches the client, so a
        # test asserting right after a call would race it: wait for every step taken so far.
        if self._thread is None or self._session is None:
            return
        proxy, run_id = self._thread.proxy, self._session.run.id
        taken = self._session.next_step
        deadline = time.monotonic() + timeout
        while self.store.step_count(run_id) < taken and time.monotonic() < deadline:
            proxy.recorder.flush(timeout)
            time.sleep(0.001)

    @property
    def exchanges(self) -> list[Exchange]:
        return self.run.steps

    @property
    def unplayed(self) -> list[Exchange]:
        """Recorded exchanges the test has not asked for (replay only)."""
        if self.served is not Served.REPLAY or self._session is None:
            return []
        return self._session.unserved()

    def divergences(self) -> list[str]:
        """The divergence report of each request the cassette did not have."""
        return [e.error or "" for e in self.run.steps if e.origin is Origin.DIVERGED]

    def stop(self, *, save: bool) -> None:
        """Stop the proxy; with `save`, write a run that was recorded back to the cassette."""
        thread, self._thread = self._thread, None
        if self.door is not None:
            self.door.close()
        self.door = None
        if thread is None:
            return
        thread.close()
        session = self._session
        if not save or self.served is Served.REPLAY or session is None:
            return
        run = self.store.get_run(session.run.id)
        exchanges = self.store.exchanges(run.id)
        if self.served is Served.NEW_EPISODES:  # what the cassette held, and what is new
            assert run.parent_id is not None
            run = self.store.get_run(run.parent_id)
            held = self.store.exchanges(run.id)
            new = _new_episodes(run.id, held, exchanges)
            if not new:  # nothing to add: the cassette stays as it was, byte for byte
                return
            exchanges = [*held, *new]
        text.write(self.cassette, run, joined(self.store, exchanges))


def _new_episodes(
    run_id: str, held: list[Exchange], exchanges: list[Exchange]
) -> list[Exchange]:
    """`new_episodes`: what this run got live (not what the cassette served, nor forkpoint's
    own empty answer to a side call), as the cassette's run's steps after those it holds, in
    this run's order; so a cassette only grows by its new episodes, the rest as it was."""
    after = max((e.step for e in held), default=-1) + 1
    live = [e for e in exchanges if e.origin is Origin.LIVE]
    return [
        dataclasses.replace(e, run_id=run_id, step=step)
        for step, e in enumerate(live, start=after)
    ]


def _served(record: RecordMode, cassette: Path) -> Served:
    exists = cassette.exists()
    match record:
        case RecordMode.NONE if not exists:
            raise ConfigError(
                f"no cassette at {cassette}: record it with pytest --record-mode=once"
            )
        case RecordMode.NONE | RecordMode.ONCE if exists:
            return Served.REPLAY
        case RecordMode.NEW_EPISODES if exists:
            return Served.NEW_EPISODES
        case _:
            return Served.RECORD
