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
direct: input → input_tokens, cached → cache_read_tokens, cache_write → cache_write_tokens
(Anthropic's cache writes, at their own rate), audio → input_audio_tokens (a transcription's),
output → output_tokens, reasoning → output_reasoning_tokens (a part of output, priced apart only
where the table has a reasoning rate), audio_seconds → audio_seconds (whisper-1, by the hour).

Provider: from the dialect (openai_* → openai, anthropic_messages → anthropic); a model that
provider does not list (a Claude model behind an OpenAI-compatible endpoint) is looked up by its
name. A model found nowhere costs None, never a silent 0; `collect_unpriced` gathers such
models, so the CLI says so once, after its tables. `unpriced_reason` says why a step has no
price; a total keeps the sum of the steps that have one (`priced_usd`), shown as `≥$…`.

Only live exchanges are billed. Replayed ones were served from the cassette, mocked and
diverged ones never reached a provider: they cost 0, and replayed steps are counted apart as the
run's replayed prefix. A failed LLM call that reports no usage costs 0 (providers do not bill
errors); a successful one without usage (a stream without usage, a cut stream) costs None.

Such a stream is not estimated with a tokenizer. tiktoken's encodings are not in its wheel: it
downloads them on first use, which an offline machine (and a read command, which must never
need the network) cannot; it knows OpenAI's vocabularies only, not those of the Claude, Gemini
or local models behind OpenAI-compatible endpoints; and how a chat request's messages and tool
schemas count is not published, so even an OpenAI estimate would be a guess. The step says
why it is unpriced instead, and how to get its usage: `stream_options.include_usage`.
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
    "unpriced_reason",
    "usage_json",
    "usd",
    "usd_total",
]

PRICES = f"genai-prices {version('genai-prices')}"
_PROVIDERS = {
    "openai_chat": "openai",
    "openai_responses": "openai",
    "openai_embeddings": "openai",
    "openai_completions": "openai",
    "openai_audio": "openai",
    "anthropic_messages": "anthropic",
    "gemini": "google",
}
# Dialects whose streams carry their usage only when asked (`stream_options.include_usage`).
_USAGE_ASKED_FOR = frozenset({"openai_chat", "openai_completions"})
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


def unpriced_reason(exchange: Exchange) -> str | None:
    """Why `exchange_cost` is None for this exchange, in a few words; None when it is not."""
    if exchange_cost(exchange) is not None:
        return None
    summary = exchange.summary
    assert summary is not None  # exchange_cost prices any exchange without a summary at 0
    if summary.usage is None:
        if not exchange.complete:
            return "cut before its usage arrived"
        if exchange.streamed and summary.dialect in _USAGE_ASKED_FOR:
            return "a stream without usage: ask for it with stream_options.include_usage"
        return "no usage reported"
    if not summary.model:
        return "no model named"
    if not _lookup(provider_for(summary.dialect), summary.model)[0]:
        return f"{summary.model} is not in {PRICES}"
    return "usage the price table cannot split"


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
    if usage.cache_write:
        counts.cache_write_tokens = usage.cache_write
    if usage.audio:
        counts.input_audio_tokens = usage.audio
    if usage.audio_seconds:
        counts.audio_seconds = Decimal(str(usage.audio_seconds))
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
    when a step could not be priced (`unpriced_steps`); `priced_usd` is the sum of those that
    could, the least the whole cost. `wall_ms` runs from the first request to the end of the
    last response.
    """

    steps: int
    llm_steps: int
    tool_steps: int
    usage: Usage
    cost_usd: Decimal | None
    priced_usd: Decimal
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
            "priced_cost_usd": float(self.priced_usd),
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
    priced = sum((c for _, c in costs if c is not None), Decimal(0))
    return RunTotals(
        steps=len(chosen),
        llm_steps=sum(1 for e in chosen if _kind(e) == Kind.LLM),
        tool_steps=sum(1 for e in chosen if _kind(e) == Kind.TOOL),
        usage=_usage([e for e in own if e.origin == Origin.LIVE]),
        cost_usd=None if unpriced else priced,
        priced_usd=priced,
        unpriced_steps=unpriced,
        llm_ms=sum(e.duration_ms or 0.0 for e in own if _kind(e) == Kind.LLM),
        tool_ms=sum(e.duration_ms or 0.0 for e in own if _kind(e) == Kind.TOOL),
        wall_ms=_wall_ms(chosen),
        replayed_steps=len(replayed),
        replayed_usage=_usage(replayed),
    )


def usage_json(usage: Usage | None) -> dict[str, float] | None:
    if usage is None:
        return None
    return {
        "input": usage.input,
        "output": usage.output,
        "cached": usage.cached,
        "reasoning": usage.reasoning,
        "cache_write": usage.cache_write,
        "audio": usage.audio,
        "audio_seconds": usage.audio_seconds,
    }


def usd(amount: Decimal | None, *, signed: bool = False) -> str:
    """A readable amount: `$0.00342`, `+$0.0012`, `?` when unknown. Six decimals, or two
    significant digits for less (`$0.00000016`: one short call of a cheap model is no `$0`)."""
    if amount is None:
        return "?"
    sign = ("+" if amount > 0 else "-" if amount < 0 else "±") if signed else ""
    magnitude = abs(amount)
    places = 6 if not magnitude or magnitude >= Decimal("0.000001") else 1 - magnitude.adjusted()
    digits = f"{magnitude:.{places}f}".rstrip("0").rstrip(".")
    return f"{sign}${digits}"


def usd_total(totals: RunTotals, *, short: bool = False) -> str:
    """A total's cost; with unpriced steps, the sum of the others as a floor: `≥$0.0034 (2
    unpriced)`, or `≥$0.0034` with `short` (a narrow column)."""
    if totals.cost_usd is not None:
        return usd(totals.cost_usd)
    unpriced = "" if short else f" ({len(totals.unpriced_steps)} unpriced)"
    return f"≥{usd(totals.priced_usd)}{unpriced}"


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
