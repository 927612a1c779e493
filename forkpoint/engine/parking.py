"""Park rules: which requests park their run, after how long, until when, and what a deadline
answers.

A run parks when its agent would only wait: on a person (`--park 'POST /approvals*'`: a
matching request is never sent anywhere, it waits for an answer delivered to forkpoint) or on
a slow upstream (`--park-after 30s`: a request still without an answer after that long parks
its run while the proxy keeps waiting on the upstream). `--park-timeout` gives a park a
deadline, at which it is answered as its upstream's own timeout would be (`timeout_answer`).

A rule is `[METHOD ]GLOB`, as for mocks and optional routes (`engine.mocks.split_route`): the
glob is tried against the request's path and against its upstream's host and path. Sans-io:
plain data in, plain data out.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import orjson

from forkpoint.engine.dialects import dialect_for, is_model_api
from forkpoint.engine.mocks import MockKind, MockRule, split_route
from forkpoint.engine.redaction import Redaction
from forkpoint.errors import ConfigError
from forkpoint.models import Exchange, Headers, Origin

# How a deadline's answer reads: the status an upstream gateway gives when its upstream did
# not answer in time, in the dialect's own error shape.
TIMEOUT_STATUS = 504
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str, *, what: str = "a duration") -> float:
    """`500ms`, `30s`, `5m`, `2h`, `1d` or a plain number of seconds, as seconds (> 0)."""
    found = _DURATION.match(str(text))
    if found is None or float(found[1]) <= 0:
        raise ConfigError(f"{what} {text!r} is not a duration such as 30s, 5m, 2h or 1d")
    return float(found[1]) * _UNITS[found[2]]


@dataclass(frozen=True, slots=True)
class ParkRule:
    """One `[METHOD ]GLOB` rule (`text` as given)."""

    text: str
    rule: MockRule

    @classmethod
    def parse(cls, text: str) -> ParkRule:
        method, pattern = split_route(text)
        if not pattern:
            raise ConfigError(f"--park {text!r}: give a route glob, e.g. 'POST /approvals*'")
        return cls(text.strip(), MockRule(text.strip(), method, pattern, MockKind.STATIC))

    def matches(self, method: str, route: str, upstream_url: str | None) -> bool:
        return self.rule.matches(method, route, upstream_url)


@dataclass(frozen=True, slots=True)
class Parking:
    """How a proxy parks runs: its rules, the wait on an upstream after which a request parks
    its run (seconds, None: never), and the deadline every park gets (seconds, None: none)."""

    rules: tuple[ParkRule, ...] = ()
    after: float | None = None
    timeout: float | None = None

    @classmethod
    def of(
        cls, rules: tuple[str, ...] | list[str] = (), *, after: str | float | None = None,
        timeout: str | float | None = None,
    ) -> Parking:  # fmt: skip
        """From the options' text: `--park` rules, `--park-after` and `--park-timeout`."""
        return cls(
            tuple(ParkRule.parse(text) for text in rules),
            _seconds(after, "--park-after"),
            _seconds(timeout, "--park-timeout"),
        )

    @property
    def on(self) -> bool:
        return bool(self.rules) or self.after is not None

    def rule_for(self, method: str, route: str, upstream_url: str | None) -> ParkRule | None:
        """The first rule that parks this request, else None."""
        if not self.rules:  # most proxies: no park rules
            return None
        return next((r for r in self.rules if r.matches(method, route, upstream_url)), None)

    def deadline(self, parked_at: float) -> float | None:
        return None if self.timeout is None else parked_at + self.timeout

    def to_json(self) -> dict[str, object]:
        """As a run's launch keeps it, so a wake parks as the run did."""
        return {"rules": [r.text for r in self.rules], "after": self.after, "timeout": self.timeout}

    @classmethod
    def from_json(cls, data: object) -> Parking:
        if not isinstance(data, dict):
            return cls()
        rules = data.get("rules") or []
        return cls.of(
            [str(r) for r in rules] if isinstance(rules, list) else [],
            after=data.get("after"), timeout=data.get("timeout"),
        )  # fmt: skip


def _seconds(value: str | float | None, what: str) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        if value <= 0:
            raise ConfigError(f"{what} must be more than 0 seconds, not {value}")
        return float(value)
    return parse_duration(value, what=what)


def waits_on_rule(rule: ParkRule) -> str:
    """What a park by rule waits on, for people (`forkpoint runs --status parked`)."""
    return f"rule {rule.text!r}"


def waits_on_upstream(upstream: str | None, after: float) -> str:
    """What a park on a slow upstream waits on."""
    return f"upstream {upstream or '?'} after {after:g}s"


def timeout_answer(method: str, route: str, waited: float) -> tuple[int, Headers, bytes]:
    """A deadline's answer to a parked request: a model API's own timeout error (504, in the
    shape its SDK raises, which an agent already handles), else a plain JSON error."""
    path = route.partition("?")[0]
    message = f"forkpoint: no answer came within {waited:g} s (the park's deadline)"
    dialect = dialect_for(method, path)
    if is_model_api(dialect):
        headers, body = dialect.error_response(TIMEOUT_STATUS, message, error_type="timeout")
        return TIMEOUT_STATUS, headers, body
    body = orjson.dumps({"error": {"message": message, "type": "timeout"}})
    headers = (("content-type", "application/json"), ("content-length", str(len(body))))
    return TIMEOUT_STATUS, headers, body


def check_status(text: str | int) -> int:
    """An answer's HTTP status: 100-599, else a ConfigError saying so."""
    try:
        status = int(str(text).strip())
    except ValueError:
        status = -1
    if not 100 <= status <= 599:
        raise ConfigError(f"status {text!r} is not an HTTP status (100-599)")
    return status


def answered(
    request: Exchange, status: int, headers: Headers, body: bytes, redaction: Redaction,
    *, now: float,
) -> Exchange:  # fmt: skip
    """The parked step's exchange once answered: the pending request with `status`, `headers`
    and `body`, masked as every recorded answer is (a body holding a secret keeps none), its
    length framed, its origin `answered`. What a wake serves the agent is exactly this."""
    masked = redaction.body(body, headers)
    kept = tuple(
        (k, v)
        for k, v in redaction.headers(headers)
        if k.lower() not in ("content-length", "transfer-encoding", "content-encoding")
    )
    if not any(k.lower() == "content-type" for k, _ in kept):
        kept = (*kept, ("content-type", "application/json"))
    return dataclasses.replace(
        request,
        status=status,
        response_headers=(*kept, ("content-length", str(len(masked)))),
        response_body=masked,
        chunks=None,
        complete=True,
        error=None,
        origin=Origin.ANSWERED,
        summary=None,
        ttfb_ms=round((now - request.started_at) * 1000, 3),
        duration_ms=round((now - request.started_at) * 1000, 3),
    )
