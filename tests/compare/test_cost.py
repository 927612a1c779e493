"""Cost per exchange and run totals, checked against prices computed by hand.

Rates per million tokens, from genai-prices 0.2.3's table (genai_prices/data.py):
    openai gpt-4o            input $2.50, cached input $1.25, output $10
    openai gpt-4o-mini       input $0.15, cached input $0.075, output $0.60
    anthropic claude-sonnet-4  input $3, cache write $3.75, cache read $0.30, output $15
    openai gpt-4o-transcribe audio input $6, output $10; whisper-1 $0.36 an hour of audio
"""

from __future__ import annotations

import dataclasses
import time
from decimal import Decimal

import pytest
from aiohttp import web

from forkpoint.compare.cost import (
    PRICES,
    collect_unpriced,
    exchange_cost,
    price,
    provider_for,
    run_totals,
    unpriced_reason,
    usd,
    usd_total,
)
from forkpoint.models import Exchange, Kind, Origin, Usage
from forkpoint.testing.upstream import Reply, ScriptedUpstream
from tests import builders
from tests.compare.conftest import FORK_STEP

M = Decimal(1_000_000)
GPT_4O_USAGE = Usage(1000, 200, 400)


def llm(
    step: int = 0,
    *,
    model: str | None = "gpt-4o",
    usage: Usage | None = GPT_4O_USAGE,
    dialect: str = "openai_chat",
    origin: Origin = Origin.LIVE,
    status: int = 200,
    duration_ms: float = 100.0,
    started_at: float = 1_780_000_000.0,
) -> Exchange:
    return builders.llm(
        step, model=model, usage=usage, dialect=dialect, origin=origin, status=status,
        duration_ms=duration_ms, started_at=started_at, fingerprint=f"fp{step}",
    )  # fmt: skip


def tool(step: int, *, duration_ms: float = 20.0, started_at: float = 1_780_000_000.5) -> Exchange:
    return builders.tool(
        step, route=f"/orders/{step}", fingerprint=f"tool{step}", started_at=started_at,
        duration_ms=duration_ms,
    )  # fmt: skip


def test_gpt_4o_with_cached_input_is_priced_by_hand():
    # 1000 input of which 400 cached, 200 output:
    # 600 * 2.50 + 400 * 1.25 + 200 * 10 = 1500 + 500 + 2000 = 4000 per M
    assert exchange_cost(llm()) == Decimal(4000) / M


def test_anthropic_counts_cache_reads_as_part_of_the_whole_prompt():
    # forkpoint's input is the whole prompt: 2000 with 1500 read from the cache, 100 output:
    # 500 * 3 + 1500 * 0.30 + 100 * 15 = 1500 + 450 + 1500 = 3450 per M
    exchange = llm(
        model="claude-sonnet-4", usage=Usage(2000, 100, 1500), dialect="anthropic_messages"
    )
    assert exchange_cost(exchange) == Decimal(3450) / M


def test_dated_model_names_and_reasoning_tokens_are_priced():
    # o4-mini: input $1.10, output $4.40 (reasoning is output, at the output rate)
    usage = Usage(input=1000, output=500, reasoning=300)
    cost = price("o4-mini-2025-04-16", usage, provider="openai", at=time.time())
    assert cost == (1000 * Decimal("1.10") + 500 * Decimal("4.40")) / M


def test_a_claude_model_behind_an_openai_endpoint_is_found_by_name():
    assert exchange_cost(llm(model="claude-sonnet-4", usage=Usage(1000, 0))) == Decimal(3000) / M


def test_providers_come_from_the_dialect():
    assert provider_for("openai_chat") == provider_for("openai_responses") == "openai"
    assert provider_for("anthropic_messages") == "anthropic"
    assert provider_for("generic") is None


def test_an_unknown_model_costs_none_and_is_named_once_after_the_output():
    with collect_unpriced() as models:
        costs = [exchange_cost(llm(step, model="house-model-warned")) for step in range(3)]
        exchange_cost(llm(model="gpt-4o"))
    assert costs == [None, None, None] and models == {"house-model-warned"}


def test_a_command_names_its_unpriced_models_once_on_stderr_not_in_its_table(tmp_path):
    from forkpoint.cassettes.sqlite import SqliteStore
    from forkpoint.models import Run
    from tests.runner import invoke

    store = SqliteStore(tmp_path / "c.db")
    store.create_run(Run("r1", name="house"))
    store.add_exchanges(
        [
            dataclasses.replace(llm(step, model="house-model-table"), run_id="r1")
            for step in range(3)
        ]
    )
    store.close()
    shown = invoke("show", "house", cassette=tmp_path / "c.db")
    assert shown.stderr.count("house-model-table") == 1 and PRICES in shown.stderr
    assert "no price" not in shown.stdout and "unknown" in shown.stderr


def test_only_live_calls_cost_something():
    assert exchange_cost(llm(origin=Origin.REPLAYED)) == 0
    assert exchange_cost(llm(origin=Origin.DIVERGED)) == 0
    assert exchange_cost(tool(1)) == 0


def test_a_failed_call_without_usage_is_free_and_a_successful_one_is_unknown():
    assert exchange_cost(llm(usage=None, status=429)) == 0
    assert exchange_cost(llm(usage=None, status=200)) is None


def test_totals_count_tokens_cost_time_and_steps():
    exchanges = [llm(0), tool(1), llm(2, usage=Usage(1200, 50), started_at=1_780_000_001.0)]
    totals = run_totals(exchanges)
    assert (totals.steps, totals.llm_steps, totals.tool_steps) == (3, 2, 1)
    assert totals.usage == Usage(2200, 250, 400) and totals.tokens == 2450
    # step 2: 1200 * 2.50 + 50 * 10 = 3500 per M
    assert totals.cost_usd == Decimal(4000 + 3500) / M
    assert (totals.llm_ms, totals.tool_ms) == (200.0, 20.0)
    assert totals.wall_ms == pytest.approx(1100.0)  # 0 s → the last call ends at 1.0 s + 100 ms
    assert totals.prices == PRICES and PRICES.startswith("genai-prices ")


def test_one_unpriced_step_makes_the_total_unknown_not_smaller():
    totals = run_totals([llm(0), llm(1, model="house-model-7b")])
    assert totals.cost_usd is None and totals.unpriced_steps == (1,)
    assert totals.to_json()["cost_usd"] is None


def test_a_replayed_prefix_is_free_and_counted_apart():
    exchanges = [llm(0, origin=Origin.REPLAYED), tool(1), llm(2)]
    totals = run_totals(exchanges)
    assert totals.cost_usd == Decimal(4000) / M
    assert (totals.replayed_steps, totals.replayed_usage) == (1, Usage(1000, 200, 400))
    assert totals.usage == Usage(1000, 200, 400)  # the live step only
    later = run_totals(exchanges, from_step=1)
    assert (later.steps, later.replayed_steps, later.cost_usd) == (2, 0, Decimal(4000) / M)


def test_usd_reads_well():
    assert usd(Decimal("0.00342")) == "$0.00342"
    assert usd(Decimal("-0.0012"), signed=True) == "-$0.0012"
    assert usd(Decimal(0), signed=True) == "±$0"
    assert usd(None) == "?"


def test_streamed_usage_is_priced_from_its_last_events(shop, store):
    run = shop.record("streamed", stream=True)
    exchanges = store.exchanges(run.id)
    llm_steps = [e for e in exchanges if e.summary and e.summary.kind == Kind.LLM]
    assert len(llm_steps) == 3 and all(e.streamed for e in llm_steps)
    final = llm_steps[-1]
    usage = final.summary.usage if final.summary else None
    assert usage is not None and usage.input > 0 and usage.output > 0 and usage.cached == 8
    expected = (
        (usage.input - usage.cached) * Decimal("2.50") + usage.cached * Decimal("1.25")
        + usage.output * 10
    ) / M  # fmt: skip
    assert exchange_cost(final) == expected
    assert run_totals(exchanges).cost_usd == sum(
        (exchange_cost(e) or Decimal(0) for e in llm_steps), Decimal(0)
    )


def test_a_fork_pays_only_for_its_live_steps_at_its_model(shop, store):
    parent = shop.record("parent")
    child = shop.fork(parent, "child", model="gpt-4o-mini")
    exchanges = store.exchanges(child.id)
    assert [e.origin for e in exchanges[:FORK_STEP]] == [Origin.REPLAYED] * FORK_STEP
    totals = run_totals(exchanges)
    assert totals.replayed_steps == FORK_STEP
    live = [e.summary.usage for e in exchanges[FORK_STEP:] if e.summary and e.summary.usage]
    expected = sum(
        (
            (u.input - u.cached) * Decimal("0.15")
            + u.cached * Decimal("0.075")
            + u.output * Decimal("0.60")
        )
        / M
        for u in live
    )
    assert totals.cost_usd == expected and totals.usage == sum(live, Usage())


# Found by users (issue 27): what a total hides, what prints as $0, what goes unpriced.


def test_one_unpriced_step_keeps_the_known_part_of_the_total():
    totals = run_totals([llm(0), tool(1), llm(2, model="house-model-7b")])
    assert totals.cost_usd is None and totals.unpriced_steps == (2,)
    assert totals.priced_usd == Decimal(4000) / M
    assert totals.to_json()["priced_cost_usd"] == pytest.approx(0.004)
    assert (
        usd_total(totals) == "≥$0.004 (1 unpriced)" and usd_total(totals, short=True) == "≥$0.004"
    )
    assert usd_total(run_totals([llm(0)])) == "$0.004"


def test_runs_and_show_print_the_known_part_and_why_a_step_is_unpriced(tmp_path):
    from forkpoint.cassettes.sqlite import SqliteStore
    from forkpoint.models import Run
    from tests.runner import invoke

    store = SqliteStore(tmp_path / "c.db")
    store.create_run(Run("r1", name="mixed"))
    store.add_exchanges([dataclasses.replace(e, run_id="r1") for e in (
        llm(0), llm(1, model="house-model-show"), llm(2, usage=None),
    )])  # fmt: skip
    store.close()
    listed = invoke("runs", cassette=tmp_path / "c.db").stdout
    assert "≥$0.004" in listed.splitlines()[1] and "?" not in listed
    shown = invoke("show", "mixed", cassette=tmp_path / "c.db").stdout.splitlines()
    assert f"[unpriced: house-model-show is not in {PRICES}]" in shown[3]
    assert "[unpriced: no usage reported]" in shown[4]
    assert shown[5].startswith("total: 2400 tokens, ≥$0.004 (steps 1, 2 unpriced)")


def test_an_amount_below_a_millionth_of_a_dollar_is_not_printed_as_zero():
    # one input token of gpt-4o-mini: $0.15 per M
    cheap = exchange_cost(llm(model="gpt-4o-mini", usage=Usage(1, 0)))
    assert cheap == Decimal("0.15") / M and usd(cheap) == "$0.00000015"
    assert (
        usd(Decimal("1.6e-7")) == "$0.00000016"
        and usd(-Decimal("1.6e-7"), signed=True) == "-$0.00000016"
    )
    assert usd(Decimal("0.000001")) == "$0.000001" and usd(Decimal("12.3456789")) == "$12.345679"


def test_a_stream_without_usage_says_why_it_is_unpriced(shop, store, start_proxy):
    """Not estimated with a tokenizer (see forkpoint.compare.cost): it says how to get usage."""
    import openai

    thread = start_proxy(shop.url)
    run = thread.record(name="no-usage").run
    with openai.OpenAI(base_url=f"{thread.proxy.url}/v1", api_key="sk-x", max_retries=0) as client:
        chunks = list(client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True,
        ))  # fmt: skip
    thread.close()
    assert chunks and all(chunk.usage is None for chunk in chunks)
    [step] = store.exchanges(run.id)
    assert step.streamed and step.summary is not None and step.summary.usage is None
    assert exchange_cost(step) is None
    assert unpriced_reason(step) == (
        "a stream without usage: ask for it with stream_options.include_usage"
    )
    cut = dataclasses.replace(step, complete=False)
    assert unpriced_reason(cut) == "cut before its usage arrived"
    assert unpriced_reason(llm()) is None


def test_anthropic_cache_writes_are_priced_at_their_own_rate():
    # claude-sonnet-4: input $3, cache write $3.75, cache read $0.30, output $15. A prompt of
    # 2000: 500 plain, 1000 written to the cache, 500 read from it; 100 output:
    # 500 * 3 + 1000 * 3.75 + 500 * 0.30 + 100 * 15 = 1500 + 3750 + 150 + 1500 = 6900 per M
    usage = Usage(2000, 100, cached=500, cache_write=1000)
    exchange = llm(model="claude-sonnet-4", usage=usage, dialect="anthropic_messages")
    assert exchange_cost(exchange) == Decimal(6900) / M


async def _transcriptions(request: web.Request) -> web.Response:
    """OpenAI's transcription endpoint, as its API reference shows its answers."""
    body = await request.read()  # read already by the upstream's log, so not as a form
    if b'name="model"\r\n\r\nwhisper-1\r\n' in body:
        return web.json_response(
            {"text": "Refund order A1001.", "usage": {"type": "duration", "seconds": 9}}
        )
    usage = {"type": "tokens", "input_tokens": 14, "input_token_details": {"text_tokens": 0, "audio_tokens": 14},
             "output_tokens": 45, "total_tokens": 59}  # fmt: skip
    return web.json_response({"text": "Refund order A1001.", "usage": usage})


def test_an_audio_transcription_is_a_priced_model_call(
    start_upstream, start_proxy, store, tmp_path
):
    import openai

    upstream = ScriptedUpstream(lambda prompt: Reply(text="unused"))
    upstream.app.router.add_post("/v1/audio/transcriptions", _transcriptions)
    url = start_upstream(upstream).url
    audio = tmp_path / "ticket.wav"
    audio.write_bytes(b"RIFF" + bytes(range(256)) * 64)
    thread = start_proxy(url)
    run = thread.record(name="heard").run
    with openai.OpenAI(base_url=f"{thread.proxy.url}/v1", api_key="sk-x", max_retries=0) as client:
        for model in ("gpt-4o-transcribe", "whisper-1"):
            with audio.open("rb") as file:
                heard = client.audio.transcriptions.create(model=model, file=file)
            assert heard.text == "Refund order A1001."
    thread.close()
    tokens, minutes = store.exchanges(run.id)
    for step, model in ((tokens, "gpt-4o-transcribe"), (minutes, "whisper-1")):
        assert step.summary is not None and step.summary.kind == Kind.LLM
        assert (step.summary.dialect, step.summary.model) == ("openai_audio", model)
        assert step.summary.text == "Refund order A1001."
    assert tokens.summary and tokens.summary.usage == Usage(14, 45, audio=14)
    assert minutes.summary and minutes.summary.usage == Usage(audio_seconds=9.0)
    # gpt-4o-transcribe: audio input $6, output $10 per M: 14 * 6 + 45 * 10 = 534 per M
    assert exchange_cost(tokens) == Decimal(534) / M
    # whisper-1: $0.36 an hour of audio: 9 s = $0.0009
    assert exchange_cost(minutes) == Decimal("0.0009")
    assert run_totals([tokens, minutes]).cost_usd == Decimal(534) / M + Decimal("0.0009")
