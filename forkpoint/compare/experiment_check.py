"""An experiment's check: a user function that judges one run, with what it is given.

`--check package.module:function` names a function that takes a `CheckRun` and returns a bool
(passed or not) or a number (a score). It is called for each branch run, with the run it was
forked from as `parent`, and for each parent too (with `parent` None), so a report can say
whether a check that held before the change still holds after it. A check that raises, or
returns anything else, is reported for that run; the experiment goes on.

The module is imported as `python -m` would import it (`forkpoint.importing`), so
`examples.support_agent.checks:refund_follows_policy` works from a checkout.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from forkpoint.engine.encoding import UndecodableBody, decode_body, header
from forkpoint.importing import load_function
from forkpoint.models import Exchange, Kind, Run, ToolCall

__all__ = ["Check", "CheckResult", "CheckRun", "load_check"]


@dataclass(frozen=True, slots=True)
class CheckRun:
    """One run as a check sees it: the run, its exchanges (bodies loaded), and for a branch
    the run it was forked from. Replayed steps are among `exchanges`: a branch holds the whole
    conversation, its prefix served from the parent's recording."""

    run: Run
    exchanges: Sequence[Exchange]
    parent: CheckRun | None = None

    @property
    def answer(self) -> str | None:
        """The text of the last model response: the agent's final answer, as a rule."""
        llm = [e for e in self.exchanges if e.summary and e.summary.kind == Kind.LLM]
        return llm[-1].summary.text if llm and llm[-1].summary else None

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls the model asked for, in order (name, JSON arguments)."""
        return [call for e in self.exchanges if e.summary for call in e.summary.tool_calls]

    def responses(self, route: str, method: str | None = None) -> list[Any]:
        """The response bodies (JSON decoded, else text) of HTTP calls whose route matches
        `route` (a glob: `*/orders/*`) and, if given, `method`, in step order."""
        return [
            _decoded(e)
            for e in self.exchanges
            if fnmatch.fnmatchcase(e.route, route) and (method is None or e.method == method)
        ]


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What a check said of one run: `passed` for a bool, `score` for a number, or an error."""

    passed: bool | None = None
    score: float | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "score": self.score, "error": self.error}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> CheckResult | None:
        return None if data is None else cls(data["passed"], data["score"], data["error"])


@dataclass(frozen=True, slots=True)
class Check:
    """A loaded check function and the `package.module:function` it was named by."""

    ref: str
    function: Callable[[CheckRun], object]

    def __call__(self, run: CheckRun) -> CheckResult:
        try:
            value = self.function(run)
        except Exception as error:  # the user's code: report it on this run, go on
            return CheckResult(error=f"{self.ref} raised {type(error).__name__}: {error}")
        if isinstance(value, bool):
            return CheckResult(passed=value)
        if isinstance(value, int | float):
            return CheckResult(score=float(value))
        return CheckResult(error=f"{self.ref} returned {value!r}: return a bool or a number")


def load_check(ref: str) -> Check:
    """The function `package.module:function` names; a bad name is a ConfigError."""
    return Check(ref, load_function(ref, what=f"--check {ref!r}"))


def _decoded(exchange: Exchange) -> Any:
    try:
        raw = decode_body(
            exchange.response_body, header(exchange.response_headers, "content-encoding")
        )
    except UndecodableBody:
        raw = exchange.response_body
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode(errors="replace")
