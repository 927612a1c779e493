"""The divergence report: which recorded exchange a stray request is nearest to, and how."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from forkpoint.engine import matching
from forkpoint.engine.matching import MatchConfig
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

    def message(self) -> str:
        lines = [
            f"forkpoint divergence: run {self.run_id} replaying {self.source_run_id}, "
            f"step {self.step}: no recorded exchange matches {self.method} {self.route}."
        ]
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
    *, run_id: str, source_run_id: str, step: int, method: str, route: str, body: bytes,
    content_encoding: str | None, unserved: Sequence[Exchange], match: MatchConfig,
) -> Divergence:  # fmt: skip
    """Name the unserved recorded exchange nearest to the request: same method, same path
    first, then the smallest body difference, then the earliest step."""
    got = matching.comparable(method, route, body, content_encoding, match)
    path = urlsplit(route).path
    same_method = [e for e in unserved if e.method == method]
    same_method.sort(key=lambda e: (urlsplit(e.route).path != path, e.step))
    by_step = {e.step: e for e in same_method}
    candidates = [
        (e.step, matching.comparable(e.method, e.route, e.request_body, e.content_encoding, match))
        for e in same_method[:MAX_CANDIDATES]
    ]
    best = matching.nearest(got, candidates)
    return Divergence(
        run_id=run_id,
        source_run_id=source_run_id,
        step=step,
        method=method,
        route=route,
        nearest_step=None if best is None else best[0],
        nearest_route=None if best is None else by_step[best[0]].route,
        diff=() if best is None else tuple(matching.json_diff(best[1], got)),
    )
