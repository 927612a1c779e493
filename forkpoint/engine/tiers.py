"""What a replaying session may still serve, found in tiers.

First the exact tier: the earliest unserved recorded exchange with the request's fingerprint,
looked up in a dict, so parallel requests replay correctly and identical requests replay in
recorded order. Then, only when that finds nothing, the similar tier: the earliest unserved
exchange of the same route whose request differs only in what the client generates (ids,
times, directories: `engine.generated`), served with a note naming the fields set aside. The
recorded side of the similar tier is computed once per exchange, on the first miss at its
route, so an exact replay never pays for it.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from forkpoint.engine import bodydiff, generated, matching
from forkpoint.engine.matching import MatchConfig
from forkpoint.engine.optional import is_optional
from forkpoint.models import Exchange

NOTE_PATHS = 10  # fields a note names before "and N more"


@dataclass(frozen=True, slots=True)
class Asked:
    """A request as matching reads it: its exact fingerprint and its comparable body."""

    method: str
    route: str
    key: str
    value: Any

    @property
    def similar_key(self) -> str:
        return matching.similar_fingerprint(self.method, self.route, self.value)


@dataclass(frozen=True, slots=True)
class Similar:
    """A recorded exchange found by the similar tier, and the note the served one carries."""

    exchange: Exchange
    note: str


class Servable:
    """The recorded exchanges a session may serve, until each is served or skipped."""

    def __init__(self, exchanges: Sequence[Exchange], match: MatchConfig):
        self._match = match
        self._exact: dict[str, deque[Exchange]] = {}
        self._held = list(exchanges)
        # built on the first miss: by method and route with its ids set aside
        self._routes: dict[tuple[str, str], list[Exchange]] | None = None
        self._similar: dict[int, str] = {}  # step → similar fingerprint, once computed
        self._gone: set[int] = set()
        routes = match.optional_routes
        self._optional = {e.step for e in exchanges if is_optional(e.method, e.route, routes)}
        self.left = len(self._held) - len(self._optional)  # a resume goes live at 0
        for exchange in self._held:
            exchange.fingerprint = matching.fingerprint_exchange(exchange, match)
            self._exact.setdefault(exchange.fingerprint, deque()).append(exchange)

    @property
    def held(self) -> tuple[Exchange, ...]:
        """Every exchange there was to serve, served or not."""
        return tuple(self._held)

    def optional(self, exchange: Exchange) -> bool:
        """Whether a recorded exchange is a side call (`engine.optional`)."""
        return exchange.step in self._optional

    def take(self, key: str, *, before: int | None = None) -> Exchange | None:
        """The earliest unserved exchange with this exact fingerprint (and a step < before)."""
        queue = self._exact.get(key)
        while queue and queue[0].step in self._gone:
            queue.popleft()
        if not queue or (before is not None and queue[0].step >= before):
            return None
        return self._taken(queue.popleft())

    def take_similar(self, asked: Asked, *, before: int | None = None) -> Similar | None:
        """The earliest unserved exchange of the request's route that differs from it only in
        what a client generates, and the note saying what was set aside."""
        wanted = asked.similar_key
        for exchange in self._same_route(asked):
            if exchange.step in self._gone:
                continue
            if before is not None and exchange.step >= before:
                return None
            if self.similar_of(exchange) == wanted:
                return Similar(self._taken(exchange), self._note(exchange, asked))
        return None

    def holds(self, asked: Asked, *, from_step: int) -> bool:
        """Whether an unserved exchange at `from_step` or later matches the request, exactly
        or but for what its client generates (nothing is taken)."""
        exact = self._exact.get(asked.key, ())
        if any(e.step >= from_step and e.step not in self._gone for e in exact):
            return True
        later = [
            e for e in self._same_route(asked) if e.step >= from_step and e.step not in self._gone
        ]
        return bool(later) and any(self.similar_of(e) == asked.similar_key for e in later)

    def _same_route(self, asked: Asked) -> list[Exchange]:
        """The exchanges of the request's method and route, the ids in routes set aside."""
        if self._routes is None:
            self._routes = {}
            for exchange in self._held:
                key = (exchange.method.upper(), generated.masked_route(exchange.route))
                self._routes.setdefault(key, []).append(exchange)
        return self._routes.get((asked.method.upper(), generated.masked_route(asked.route)), [])

    def similar_of(self, exchange: Exchange) -> str:
        """The similar fingerprint of a recorded exchange, computed once."""
        key = self._similar.get(exchange.step)
        if key is None:
            value = matching.comparable_exchange(exchange, self._match)
            key = self._similar[exchange.step] = matching.similar_fingerprint(
                exchange.method, exchange.route, value
            )
        return key

    def remove(self, exchanges: Iterable[Exchange]) -> None:
        """These are no longer served (the agent's state was restored past them)."""
        held = {e.step for e in self._held}
        for exchange in exchanges:
            if exchange.step in held and exchange.step not in self._gone:
                self._taken(exchange)

    def unserved(self) -> list[Exchange]:
        every = (e for queue in self._exact.values() for e in queue if e.step not in self._gone)
        return sorted(every, key=lambda e: e.step)

    def _taken(self, exchange: Exchange) -> Exchange:
        self._gone.add(exchange.step)
        self.left -= exchange.step not in self._optional
        return exchange

    def _note(self, recorded: Exchange, asked: Asked) -> str:
        was = matching.comparable_exchange(recorded, self._match)
        paths = _collapsed(bodydiff.differing_paths(was, asked.value), asked.route)
        if matching.normalized_route(recorded.route) != matching.normalized_route(asked.route):
            paths.insert(0, "the route")
        shown = ", ".join(paths[:NOTE_PATHS])
        more = f" and {len(paths) - NOTE_PATHS} more" if len(paths) > NOTE_PATHS else ""
        return (
            f"served step {recorded.step} of {recorded.run_id}, setting aside values the client "
            f"generates: {shown}{more}"
        )


def _collapsed(paths: list[str], route: str) -> list[str]:
    """The differing paths, those under a field the API's clients fill wholly (Codex's
    `client_metadata`) named once by that field."""
    wholes = [
        (_path_pattern(field), _shown_path(field)) for field in generated.dialect_fields(route)
    ]
    named: dict[str, None] = {}
    for path in paths:
        whole = next((shown for pattern, shown in wholes if pattern.match(path)), path)
        named[whole] = None
    return list(named)


def _path_pattern(field: str) -> re.Pattern[str]:
    steps = "".join(
        r"\[\d+\]" if step == "*" else re.escape(f".{step}") for step in field.split(".")
    )
    return re.compile(rf"^\${steps}(?=$|[.\[(])")


def _shown_path(field: str) -> str:
    return "$" + "".join("[*]" if step == "*" else f".{step}" for step in field.split("."))
