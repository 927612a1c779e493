"""The divergence report: why a request the recording lacks matches nothing, and how it differs
from the recorded exchange nearest to it.

Two causes, told apart: the recording has matching exchanges but this run has already been
served every one (the agent asked more often than when recorded, or sent identical requests
in parallel in another order), which the report names by step; or nothing recorded matches,
and the report names the nearest unserved exchange (same method, same path first, then the
smallest body difference) with the differences of the two bodies (`engine.bodydiff`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from forkpoint.engine import bodydiff, generated, matching
from forkpoint.engine.dialects.mcp import described
from forkpoint.engine.matching import MatchConfig
from forkpoint.engine.tiers import Asked
from forkpoint.models import Exchange

# Comparing bodies is quadratic at worst; the nearest candidate is almost always among these.
MAX_CANDIDATES = 50


@dataclass(frozen=True, slots=True)
class Divergence:
    run_id: str
    source_run_id: str
    step: int
    method: str
    route: str
    nearest_step: int | None
    nearest_route: str | None
    diff: tuple[str, ...]
    # (this run's step, the recorded step it was served) for each match already served
    already_served: tuple[tuple[int, int], ...] = ()
    # what the request asks in its API's words, where the route does not say (an MCP tool call)
    asking: str | None = None

    def message(self) -> str:
        asking = f" ({self.asking})" if self.asking else ""
        lines = [
            f"forkpoint divergence: run {self.run_id} replaying {self.source_run_id}, "
            f"step {self.step}: no recorded exchange matches {self.method} {self.route}{asking}."
        ]
        if self.already_served:
            served = ", ".join(f"step {was} (to step {got})" for got, was in self.already_served)
            lines.append(
                f"The recording's exchanges that match it were all served already: {served}. "
                "The agent asked more often than when recorded, or sent identical requests "
                "in parallel in another order."
            )
            return "\n".join(lines)
        if self.nearest_step is None:
            lines.append(f"The recording has no unserved {self.method} request to any route.")
            return "\n".join(lines)
        where = "" if self.nearest_route == self.route else f" ({self.nearest_route})"
        lines.append(
            f"Nearest recorded exchange: step {self.nearest_step}{where}. Body differences "
            "(recorded → this request):"
        )
        lines += [f"  {line}" for line in self.diff] or ["  (bodies equal; the route differs)"]
        return "\n".join(lines)


def find_divergence(
    *, run_id: str, source_run_id: str, step: int, asked: Asked,
    unserved: Sequence[Exchange], already_served: Sequence[tuple[int, Exchange]],
    match: MatchConfig,
) -> Divergence:  # fmt: skip
    """The report for a request nothing unserved matches: the served steps that match it, else
    the nearest unserved exchange and how the bodies differ."""
    base = Divergence(
        run_id=run_id, source_run_id=source_run_id, step=step, method=asked.method,
        route=asked.route, nearest_step=None, nearest_route=None, diff=(),
        asking=described(asked.value),
    )  # fmt: skip
    if already_served:
        served = tuple((got, exchange.step) for got, exchange in already_served)
        return dataclasses.replace(base, already_served=served)
    path = urlsplit(asked.route).path
    same_method = [e for e in unserved if e.method == asked.method]
    same_method.sort(key=lambda e: (urlsplit(e.route).path != path, e.step))
    by_step = {e.step: e for e in same_method}
    # nearest by what differs besides the values clients generate
    masked = generated.masked(asked.route, asked.value)
    bodies = {e.step: matching.comparable_exchange(e, match) for e in same_method[:MAX_CANDIDATES]}
    candidates = [(step, generated.masked(by_step[step].route, v)) for step, v in bodies.items()]
    best = bodydiff.nearest(masked, candidates)
    if best is None:
        return base
    set_aside = set(bodydiff.differing_paths(bodies[best[0]], asked.value))
    set_aside -= set(bodydiff.differing_paths(best[1], masked))
    return dataclasses.replace(
        base,
        nearest_step=best[0],
        nearest_route=by_step[best[0]].route,
        diff=tuple(bodydiff.json_diff(bodies[best[0]], asked.value, set_aside=set_aside)),
    )
