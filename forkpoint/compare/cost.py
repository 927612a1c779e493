"""What an exchange cost in USD, and a run's totals: tokens, cost, time, steps.

Prices come from genai-prices' bundled table (offline, versioned), never from a list written
here. Nothing is stored in the cassette: cost is computed on read from the exchange's model,
usage and request time (prices that changed on a date, or by time of day, are taken as they were
when the request was sent). Every total names the table it was priced with (`PRICES`, e.g.
"genai-prices 0.2.3"): an old run recomputes to the same amount under the same genai-prices
version, and a report says which version that was.

Tokens: forkpoint's `Usage.input` is the whole prompt, cached tokens included, for every dialect
(the Anthropic dialect adds its cache reads and writes back in). genai-prices means the same by
`input_tokens`, with `cache_read_tokens` a part of it priced at the cache rate, so the mapping is
direct: input → input_tokens, cached → cache_read_tokens, output → output_tokens, reasoning →
output_reasoning_tokens (a part of output, priced apart only where the table has a reasoning
rate). Anthropic cache writes are not kept apart in `Usage`, so they are priced as plain input.

Provider: from the dialect (openai_* → openai, anthropic_messages → anthropic); a model that
provider does not list (a Claude model behind an OpenAI-compatible endpoint) is looked up by its
name. A model found nowhere costs None, never a silent 0; `collect_unpriced` gathers such
models, so the CLI says so once, after its tables.

Only live exchanges are billed. Replayed ones were served from the cassette, mocked and
diverged ones never reached a provider: they cost 0, and replayed steps are counted apart as the
run's replayed prefix. A failed LLM call that reports no usage costs 0 (providers do not bill
errors); a successful one without usage (a stream without usage, a cut stream) costs None.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from importlib.metadata import version
from typing import Any

from forkpoint.models import Exchange, Kind, Origin, Usage

__all__ = [
    "PRICES",
    "RunTotals",
    "collect_unpriced",
    "exchange_cost",
    "price",
    "provider_for",
    "run_totals",
    "usage_json",
    "usd",
]

PRICES = f"genai-prices {version('genai-prices')}"
_PROVIDERS = {
    "openai_chat": "openai",
    "openai_responses": "openai",
    "openai_embeddings": "openai",
    "openai_completions": "openai",
    "anthropic_messages": "anthropic",
    "gemini": "google",
}
# The models priced as unknown while `collect_unpriced` runs (a command's tables).
_UNPRICED: ContextVar[set[str] | None] = ContextVar("forkpoint_unpriced", default=None)


@contextmanager
def collect_unpriced() -> Iterator[set[str]]:
    """The models whose cost comes out unknown inside the block, to say so once after it."""
    found: set[str] = set()
    token = _UNPRICED.set(found)
    try:
        yield found
    finally:
        _UNPRICED.reset(token)


def _unpriced(model: str) -> None:
    found = _UNPRICED.get()
    if found is not None:
        found.add(model)


def provider_for(dialect: str) -> str | None:
    """The genai-prices provider id an exchange of `dialect` is billed by, if any."""
    return _PROVIDERS.get(dialect)


def price(model: str, usage: Usage, *, provider: str | None, at: float) -> Decimal | None:
    """USD for `usage` of `model` requested at `at` (epoch seconds); None when not priced."""
    found, priced_by = _lookup(provider, model)
    cost = _price(priced_by, model, usage, at) if found else None
    if cost is None:
        _unpriced(model)
    return cost


def exchange_cost(exchange: Exchange) -> Decimal | None:
    """What this exchange cost: 0 unless it reached a provider, None when that is unknown."""
    summary = exchange.summary
    if exchange.origin != Origin.LIVE or summary is None or summary.kind != Kind.LLM:
        return Decimal(0)
    if summary.usage is None:
        failed = exchange.status is None or exchange.status >= 400
        return Decimal(0) if failed else None
    if not summary.model:
        return None
    provider = provider_for(summary.dialect)
    return price(summary.model, summary.usage, provider=provider, at=exchange.started_at)


@functools.cache
def _lookup(provider: str | None, model: str) -> tuple[bool, str | None]:
    """Whether `model` has a price, and the provider id to price it by (None: by its name).

    Cached, so an unknown model is warned about once per process.
    """
    from genai_prices import Usage as PricedUsage  # the table loads on first use (~0.3 s)
    from genai_prices import calc_price

    for candidate in dict.fromkeys((provider, None)):
        try:
            calc_price(PricedUsage(input_tokens=0), model, provider_id=candidate)
        except LookupError:
            continue
        return True, candidate
    return False, None


@functools.lru_cache(maxsize=65536)
def _price(provider: str | None, model: str, usage: Usage, at: float) -> Decimal | None:
    from genai_prices import Usage as PricedUsage
    from genai_prices import calc_price

    counts = PricedUsage(
        input_tokens=usage.input,
        cache_read_tokens=usage.cached,
        output_tokens=usage.output,
        output_reasoning_tokens=usage.reasoning,
    )
    when = datetime.fromtimestamp(at, UTC)
    try:
        return calc_price(
            counts, model, provider_id=provider, genai_request_timestamp=when
        ).total_price
    except ValueError:  # usage the table cannot split, e.g. more cached than input
        return None


@dataclass(frozen=True, slots=True)
class RunTotals:
    """A run's (or a step range's) totals.

    `usage` and `cost_usd` count what reached a provider (live exchanges); `llm_ms` and
    `tool_ms` the time of every exchange not replayed. The replayed prefix (served from the
    parent's recording, at no cost) is `replayed_steps` and `replayed_usage`. `cost_usd` is None
    when a step could not be priced (`unpriced_steps`). `wall_ms` runs from the first request to
    the end of the last response.
    """

    steps: int
    llm_steps: int
    tool_steps: int
    usage: Usage
    cost_usd: Decimal | None
    unpriced_steps: tuple[int, ...]
    llm_ms: float
    tool_ms: float
    wall_ms: float
    replayed_steps: int
    replayed_usage: Usage
    prices: str = PRICES

    @property
    def tokens(self) -> int:
        return self.usage.total

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "llm_steps": self.llm_steps,
            "tool_steps": self.tool_steps,
            "tokens": self.tokens,
            "usage": usage_json(self.usage),
            "cost_usd": None if self.cost_usd is None else float(self.cost_usd),
            "unpriced_steps": list(self.unpriced_steps),
            "llm_ms": round(self.llm_ms, 3),
            "tool_ms": round(self.tool_ms, 3),
            "wall_ms": round(self.wall_ms, 3),
            "replayed": {
                "steps": self.replayed_steps,
                "tokens": self.replayed_usage.total,
                "cost_usd": 0.0,
            },
            "prices": self.prices,
        }


def run_totals(exchanges: Iterable[Exchange], *, from_step: int = 0) -> RunTotals:
    """Totals over a run's exchanges with step >= `from_step`."""
    chosen = [e for e in exchanges if e.step >= from_step]
    own = [e for e in chosen if e.origin != Origin.REPLAYED]
    replayed = [e for e in chosen if e.origin == Origin.REPLAYED]
    costs = [(e.step, exchange_cost(e)) for e in own]
    unpriced = tuple(step for step, cost in costs if cost is None)
    return RunTotals(
        steps=len(chosen),
        llm_steps=sum(1 for e in chosen if _kind(e) == Kind.LLM),
        tool_steps=sum(1 for e in chosen if _kind(e) == Kind.TOOL),
        usage=_usage([e for e in own if e.origin == Origin.LIVE]),
        cost_usd=None if unpriced else sum((c for _, c in costs if c is not None), Decimal(0)),
        unpriced_steps=unpriced,
        llm_ms=sum(e.duration_ms or 0.0 for e in own if _kind(e) == Kind.LLM),
        tool_ms=sum(e.duration_ms or 0.0 for e in own if _kind(e) == Kind.TOOL),
        wall_ms=_wall_ms(chosen),
        replayed_steps=len(replayed),
        replayed_usage=_usage(replayed),
    )


def usage_json(usage: Usage | None) -> dict[str, int] | None:
    if usage is None:
        return None
    return {
        "input": usage.input,
        "output": usage.output,
        "cached": usage.cached,
        "reasoning": usage.reasoning,
    }


def usd(amount: Decimal | None, *, signed: bool = False) -> str:
    """A readable amount: `$0.00342`, `+$0.0012`, `?` when unknown."""
    if amount is None:
        return "?"
    sign = ("+" if amount > 0 else "-" if amount < 0 else "±") if signed else ""
    digits = f"{abs(amount):.6f}".rstrip("0").rstrip(".")
    return f"{sign}${digits}"


def _kind(exchange: Exchange) -> Kind:
    return exchange.summary.kind if exchange.summary else Kind.OTHER


def _usage(exchanges: Sequence[Exchange]) -> Usage:
    return sum(
        (e.summary.usage for e in exchanges if e.summary and e.summary.usage),
        Usage(),
    )


def _wall_ms(exchanges: Sequence[Exchange]) -> float:
    if not exchanges:
        return 0.0
    start = min(e.started_at for e in exchanges)
    end = max(e.started_at + (e.duration_ms or 0.0) / 1000 for e in exchanges)
    return (end - start) * 1000
