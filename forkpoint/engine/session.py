"""A session: the proxy's live view of one run being served, and what is left to replay.

A session replays its source run while it is not live: a request is answered with the earliest
unserved recorded exchange that has its fingerprint, else one that differs from it only in
what the client generates (`engine.tiers`). Its mode says when it goes live:

- `record`: from its first step.
- `replay`: never; a request the recording lacks is a divergence (or, by policy, goes live).
- `fork`: at its fork step, or at the first step the parent did not complete.
- `resume`: once the steps the agent had fully received are served; it appends to its own run,
  so served steps are not written again and live ones are numbered after the highest recorded.

Only whole answers are served in a fork or a resume: an exchange that was cut (the agent crashed
mid-stream and its answer was not read to its end, `OnHangup`) goes live again. A resume serves
every whole answer its run holds, across any number of crashes; a fork's prefix ends at its
first cut. A replay serves a cut exchange, cut again, as recorded.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from forkpoint.engine.changes import Change
from forkpoint.engine.config import EngineConfig, OnDivergence
from forkpoint.engine.matching import MatchConfig
from forkpoint.engine.tiers import Asked, Servable, Similar
from forkpoint.errors import ConfigError
from forkpoint.models import Exchange, Kind, Mode, Origin, Run, Snapshot


@dataclass(eq=False)
class Session:
    run: Run
    mode: Mode = Mode.RECORD
    source: list[Exchange] = field(default_factory=list)
    fork_step: int | None = None
    on_divergence: OnDivergence = OnDivergence.FAIL
    change: Change = Change()
    next_step: int = 0
    live: bool = True
    # The step at which a replaying session went live (diverged, forked, or a resume's
    # recording ran out): its recorded steps from there are no longer owed (`replayed`)
    live_from: int | None = None
    # Per adapter, the snapshot an agent that registers gets back (fork and resume).
    restore_points: dict[str, Snapshot] = field(default_factory=dict)
    # The step the agent was restored to, once one adapter took its snapshot.
    restored_step: int | None = None
    # Per step of this run that was served from the source, the source exchange it got.
    served: dict[int, Exchange] = field(default_factory=dict)
    # Per MCP session id a served exchange handed out, the live server's (`engine.mcp_sessions`)
    mcp_sessions: dict[str, str] = field(default_factory=dict)
    _servable: Servable | None = None
    _match: MatchConfig | None = None
    _after_fork: Servable | None = None  # a fork's parent from its fork step, on first need
    # Requests the parent made at or after the fork step that the fork made sooner (side
    # calls): they took step numbers of the prefix, which ends that many steps later
    early: int = 0
    _append: int = 0  # a resume's next step to write
    # What of its change touched a request: "model", "system_prompt", "patch" (`engine.changes`)
    applied: set[str] = field(default_factory=set)
    # `decide` holds it: a session is decided on the loop, and on the threads of clients in the
    # proxy's own process (doors.local)
    deciding: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def record(cls, run: Run, *, next_step: int = 0) -> Session:
        """A run recorded live; `next_step` continues a run recorded before."""
        return cls(run, Mode.RECORD, next_step=next_step)

    @classmethod
    def replay(
        cls,
        run: Run,
        source: Sequence[Exchange],
        config: EngineConfig,
        *,
        on_divergence: OnDivergence = OnDivergence.FAIL,
    ) -> Session:
        session = cls(run, Mode.REPLAY, on_divergence=on_divergence)
        session._load(source, config, served=list(source))
        return session

    @classmethod
    def fork(
        cls,
        run: Run,
        source: Sequence[Exchange],
        config: EngineConfig,
        *,
        at: int,
        change: Change = Change(),
        on_divergence: OnDivergence = OnDivergence.FAIL,
        restore_points: dict[str, Snapshot] | None = None,
    ) -> Session:
        # A mock may serve the parent's answer at any step; the prefix ends at the fork step,
        # or at the first step the agent did not fully receive.
        cut = next((e.step for e in source if not e.complete), at)
        session = cls(
            run, Mode.FORK, fork_step=min(at, cut), on_divergence=on_divergence,
            change=change, restore_points=restore_points or {},
        )  # fmt: skip
        session._load(source, config, served=[e for e in source if _answered(e)])
        return session

    @classmethod
    def resume(
        cls,
        run: Run,
        source: Sequence[Exchange],
        config: EngineConfig,
        *,
        on_divergence: OnDivergence = OnDivergence.FAIL,
        restore_points: dict[str, Snapshot] | None = None,
    ) -> Session:
        session = cls(
            run, Mode.RESUME, on_divergence=on_divergence, restore_points=restore_points or {}
        )
        prefix = _received(source)
        session._load(source, config, served=prefix)
        return session

    @property
    def keeps_served(self) -> bool:
        """Whether served steps are written to the run: not when it already holds them."""
        return self.mode is not Mode.RESUME

    def _load(
        self, source: Sequence[Exchange], config: EngineConfig, *, served: Sequence[Exchange]
    ) -> None:
        """Index what may be served; fingerprints are recomputed under today's config."""
        self.source = list(source)
        self._append = _after(source)
        self.live = self.fork_step == 0 or (self.mode is Mode.RESUME and not served)
        self._servable = Servable(served, config.match)
        self._match = config.match

    def take(self, key: str, *, before: int | None = None) -> Exchange | None:
        """The earliest unserved recorded exchange with this fingerprint (and a step < before)."""
        return None if self._servable is None else self._servable.take(key, before=before)

    def take_similar(self, asked: Asked, *, before: int | None = None) -> Similar | None:
        """The earliest unserved recorded exchange that differs from the request only in what
        its client generates (and a step < before)."""
        if self._servable is None:
            return None
        return self._servable.take_similar(asked, before=before)

    @property
    def exhausted(self) -> bool:
        """Every exchange the session must serve has been served (or skipped); what is left
        is optional (telemetry a resumed agent need not send again)."""
        return self._servable is None or self._servable.left == 0

    def unserved(self) -> list[Exchange]:
        return [] if self._servable is None else self._servable.unserved()

    def left(self) -> list[Exchange]:
        """What is left to serve that the agent must ask for: side calls aside."""
        return [e for e in self.unserved() if not self.optional(e)]

    def replayed(self) -> Replayed:
        """How much of its recording the session served: the model calls it was to serve (a
        replay's whole recording, a fork's steps before its fork step, a resume's received
        prefix; in each, only the steps before the one where it went live) and those never
        asked for, which a replay that ends with them left over did not replay (its agent
        stopped early, or a client bypassed the proxy). Other exchanges are not owed: an
        agent's own side calls come and go from run to run."""
        if self._servable is None:
            return Replayed(0, ())
        end = min((s for s in (self.fork_step, self.live_from) if s is not None), default=None)
        owed = [
            e for e in self._servable.held
            if _model_call(e) and not self.optional(e) and (end is None or e.step < end)
        ]  # fmt: skip
        left = {e.step for e in self.unserved()}
        return Replayed(len(owed), tuple(e.step for e in owed if e.step in left))

    def optional(self, exchange: Exchange) -> bool:
        return self._servable is not None and self._servable.optional(exchange)

    def made_after_fork(self, asked: Asked) -> bool:
        """Whether the parent of a fork made this request at or after the fork step: made
        sooner this time (agents make side calls concurrently), it belongs to the branch."""
        if self.fork_step is None or self._match is None:
            return False
        if self._after_fork is None:  # every step the parent made from there, answered or not
            later = [e for e in self.source if e.step >= self.fork_step]
            self._after_fork = Servable(later, self._match)
        return self._after_fork.holds(asked, from_step=self.fork_step)

    def already_served(self, asked: Asked) -> list[tuple[int, Exchange]]:
        """(this run's step, recorded exchange) of each served exchange the request matches,
        exactly or but for what its client generates: asked again, it has nothing left."""
        servable = self._servable
        if servable is None:
            return []
        similar = None
        found = []
        for step, exchange in sorted(self.served.items()):
            if exchange.fingerprint != asked.key:
                similar = similar or asked.similar_key
                if servable.similar_of(exchange) != similar:
                    continue
            found.append((step, exchange))
        return found

    def skip_to(self, step: int) -> list[Exchange]:
        """The agent goes on from `step` (its state was restored there): the source steps
        before it are no longer served; returns them."""
        self.next_step = self.restored_step = step
        skipped = [e for e in self.source if e.step < step]
        if self._servable is not None:
            self._servable.remove(skipped)
        return skipped

    def go_live(self, step: int) -> None:
        """Serve live from now on; a fork (or a replay that forks itself) records where."""
        self.live = True
        self.live_from = step if self.live_from is None else min(self.live_from, step)
        if self.mode is Mode.RESUME:
            return
        if self.fork_step is None or step < self.fork_step:
            self.fork_step = step
        self.run.fork_step = self.fork_step

    def written_step(self, step: int) -> int:
        """The step a new record of request `step` is written under: its own, except in a
        resume, whose run holds its recorded steps already: it appends after the highest
        (a crash may have left gaps), and nothing recorded is rewritten."""
        if self.mode is not Mode.RESUME:
            return step
        written = self._append
        self._append += 1
        return written


@dataclass(frozen=True, slots=True)
class Replayed:
    """How many recorded exchanges a session was to serve, and the steps it never served."""

    owed: int
    unserved: tuple[int, ...]

    @property
    def served(self) -> int:
        return self.owed - len(self.unserved)


def check_fork_step(parent: str, at: int, steps: int) -> None:
    """A fork of a run of `steps` steps may start at 0 (all live) to `steps` (all replayed)."""
    if not 0 <= at <= steps:
        raise ConfigError(
            f"cannot fork run {parent} at step {at}: it has {steps} steps (fork at 0 … {steps})",
            run_id=parent,
            step=at,
        )


def _received(source: Sequence[Exchange]) -> list[Exchange]:
    """Every answer the run holds whole, in step order: what its agent received before each
    crash, and what an earlier resume appended after the cut it went on from. A cut answer is
    skipped, not a wall: the resumed agent asks it again, live."""
    return [exchange for exchange in source if _answered(exchange)]


def _answered(exchange: Exchange) -> bool:
    """Whether an exchange holds an answer to give again: one that came whole, and not
    forkpoint's own divergence error (a resume or a fork decides afresh)."""
    return exchange.complete and exchange.origin is not Origin.DIVERGED


def _after(source: Sequence[Exchange]) -> int:
    """The first step number after every recorded one: a crash may have left gaps."""
    return max((e.step for e in source), default=-1) + 1


def _model_call(exchange: Exchange) -> bool:
    """Whether a recorded exchange is a model call; one never read (no summary) counts as one."""
    return exchange.summary is None or exchange.summary.kind is Kind.LLM
