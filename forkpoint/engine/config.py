"""What the engine is told once per proxy: where routes go, how requests match, what is secret."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from forkpoint.engine.matching import MatchConfig
from forkpoint.engine.parking import Parking
from forkpoint.engine.redaction import Redaction
from forkpoint.models import Exchange

RUN_HEADER = "x-forkpoint-run"
# What the interceptor adds to each request it hands the gateway: its secret, and where the
# request was going (`https://host[:port]`). Only a request with the secret may name an
# origin, so no stranger can make the proxy fetch a URL of their choice.
INTERCEPT_HEADER = "x-forkpoint-intercept"
ORIGIN_HEADER = "x-forkpoint-origin"
# Headers the gateway owns: never forwarded upstream.
GATEWAY_HEADERS = frozenset({RUN_HEADER, INTERCEPT_HEADER, ORIGIN_HEADER, "host", "content-length"})
DIVERGENCE_STATUS = 400
# The largest request body a front door accepts (it reads a request whole, to match it).
DEFAULT_MAX_BODY = 256 * 1024 * 1024
# How much of a response body a tee holds in memory (bytes); past it the body is recorded in
# pieces of PIECE_SIZE, each stored as a blob as it fills, so memory stays flat however large
# the body (issue 14.6). The held part is what summaries and diffs read whole: 4 MiB holds any
# model's answer; a body past it (a file, a large embeddings batch) is summarized from it.
DEFAULT_HOLD_BODY = 4 * 1024 * 1024
PIECE_SIZE = 4 * 1024 * 1024

# How long an agent may take to send a request's head or stall in its body, and how long its
# idle connection is kept (s): a client that sends slowly cannot hold a connection forever.
DEFAULT_CLIENT_TIMEOUT = 60.0
# Where a recording sends requests when told nothing else: the default route goes to OpenAI,
# `/anthropic/...` to Anthropic, and so on: the base URLs `forkpoint record` gives a command
# (`api.env.CLIENTS`).
DEFAULT_UPSTREAM = "https://api.openai.com"
DEFAULT_ROUTES = {
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
    "ollama": "http://127.0.0.1:11434",
    "cohere": "https://api.cohere.com",
    "groq": "https://api.groq.com",
    "cerebras": "https://api.cerebras.ai",
}
# Routes of clients whose upstream only the user knows (an Azure OpenAI resource): served when
# their variable or a --route names it, never sent to the default upstream with their key.
OWN_ROUTES = frozenset({"azure"})


@dataclass(frozen=True, slots=True)
class Routes:
    """Where requests go: by first path segment (`/anthropic/...`), else to `default`."""

    default: str | None = None
    prefixes: dict[str, str] = field(default_factory=dict)

    def resolve(self, route: str, *, default: str | None = None) -> str | None:
        """The upstream URL for a route, or None when no upstream serves it. `default`
        overrides every upstream (a fork's `--upstream` for its LLM requests)."""
        segment, _, rest = route.lstrip("/").partition("/")
        if segment in self.prefixes:
            return _join(default or self.prefixes[segment], "/" + rest)
        if segment in OWN_ROUTES:
            return None if default is None else _join(default, "/" + rest)
        base = default or self.default
        return None if base is None else _join(base, route)

    @classmethod
    def of(cls, upstream: str | None, routes: Mapping[str, str] | None = None) -> Routes:
        """`upstream` for the default route, `routes` beside the built-in prefixes."""
        return cls(default=upstream, prefixes={**DEFAULT_ROUTES, **(routes or {})})

    @classmethod
    def recorded(cls, exchanges: Iterable[Exchange]) -> Routes:
        """The routes a recorded run's live requests went by: each exchange's upstream URL
        gives the base of its route, so a fork or a resume sends its live steps where the
        run's went, never to a default host the run did not use."""
        default: str | None = None
        prefixes: dict[str, str] = {}
        for exchange in exchanges:
            upstream, route = exchange.upstream, exchange.route
            if not upstream:
                continue
            segment, _, rest = route.lstrip("/").partition("/")
            if upstream.endswith(route):
                default = upstream[: len(upstream) - len(route)]
            elif segment and upstream.endswith("/" + rest):
                prefixes[segment] = upstream[: len(upstream) - len(rest) - 1]
        return cls(default=default, prefixes=prefixes)

    def over(self, other: Routes) -> Routes:
        """These routes, with `other`'s for what these do not name."""
        return Routes(self.default or other.default, {**other.prefixes, **self.prefixes})


def _join(base: str, route: str) -> str:
    return base.rstrip("/") + (route if route.startswith("/") else "/" + route)


class OnHangup(StrEnum):
    """What becomes of a live answer under way when its agent hangs up.

    `finish` (the default): the proxy reads it to its end, for at most `FINISH_FOR` seconds
    and `FINISH_BYTES` more bytes, and records it whole, so that a resume serves it from the
    cassette instead of paying for it again. An agent that hangs up mid-answer has crashed or
    been killed far more often than it has changed its mind, and nobody waits on the rest: the
    agent is gone, so reading on costs it no time, and the upstream has been asked already.
    `cancel`: the answer is given up where the agent left it and recorded cut, as forkpoint
    did before (the upstream sees the hang-up at once, as it would without forkpoint).
    An answer whose head had not come yet is given up either way: nothing was under way.
    """

    FINISH = "finish"
    CANCEL = "cancel"


# The bounds on reading an answer on after its agent hung up (`OnHangup.FINISH`).
FINISH_FOR = 300.0
FINISH_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class EngineConfig:
    routes: Routes = Routes()
    match: MatchConfig = MatchConfig()
    # A cap on the bytes of a response body recorded (None: every byte, in pieces past
    # DEFAULT_HOLD_BODY); past it the exchange is recorded as what was kept, incomplete.
    max_record_body: int | None = None
    on_hangup: OnHangup = OnHangup.FINISH
    # which requests park their run (`--park`, `--park-after`, `--park-timeout`)
    parking: Parking = Parking()

    @property
    def redaction(self) -> Redaction:
        """What is secret: matching masks it too, so it lives with the match settings."""
        return self.match.redaction


class OnDivergence(StrEnum):
    """What a replaying session does with a request its recording lacks.

    `fail`: answer with the divergence report. `live`: fork there, and serve everything live
    from then on. `new_episodes`: send that one request live and go on replaying (the pytest
    plugin's record mode of that name).
    """

    FAIL = "fail"
    LIVE = "live"
    NEW_EPISODES = "new_episodes"
