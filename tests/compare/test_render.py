"""The JSON form (every documented key, with its type) and the terminal tables."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from rich.console import Console

from forkpoint.compare.diff import RunDiff, diff_stored
from forkpoint.compare.render import SCHEMA, diff_json, diff_renderable, ms
from tests.compare.conftest import FORK_STEP

DOC = Path(__file__).resolve().parents[2] / "docs" / "diff-json.md"


class Nullable:
    def __init__(self, schema: Any):
        self.schema = schema


NUMBER = (int, float)
USAGE = {"input": int, "output": int, "cached": int, "reasoning": int, "cache_write": int,
         "audio": int, "audio_seconds": NUMBER}  # fmt: skip
TOTALS = {
    "steps": int, "llm_steps": int, "tool_steps": int, "tokens": int, "usage": USAGE,
    "cost_usd": Nullable(NUMBER), "priced_cost_usd": NUMBER, "unpriced_steps": [int],
    "llm_ms": NUMBER, "tool_ms": NUMBER,
    "wall_ms": NUMBER, "replayed": {"steps": int, "tokens": int, "cost_usd": NUMBER},
    "prices": str,
}  # fmt: skip
DELTA = {"steps": int, "tokens": int, "cost_usd": Nullable(NUMBER), "llm_ms": NUMBER,
         "tool_ms": NUMBER, "wall_ms": NUMBER}  # fmt: skip
SIDE = {
    "id": str, "name": Nullable(str), "status": str, "mode": str, "parent_id": Nullable(str),
    "fork_step": Nullable(int), "change": Nullable(dict), "answer": Nullable(str),
    "tool_calls": [{"step": int, "name": str, "arguments": str}], "totals": TOTALS,
    "from_fork": Nullable(TOTALS),
}  # fmt: skip
ACTION = {
    "kind": str, "origin": str, "method": str, "route": str, "status": Nullable(int),
    "model": Nullable(str), "tool_calls": [{"name": str, "arguments": str}],
    "usage": Nullable(USAGE), "cost_usd": Nullable(NUMBER), "duration_ms": Nullable(NUMBER),
}  # fmt: skip
DIFF = {
    "schema": str, "prices": str, "relation": str, "fork_step": Nullable(int),
    "identical": bool, "first_difference": Nullable(int), "tool_calls_match": bool,
    "answers_match": bool, "answer_diff": str, "a": SIDE, "b": SIDE,
    "delta": {"whole": DELTA, "from_fork": Nullable(DELTA)},
    "steps": [{"step": int, "matches": bool, "differences": [str], "a": Nullable(ACTION),
               "b": Nullable(ACTION)}],
}  # fmt: skip


def check(value: Any, schema: Any, path: str = "$") -> None:
    if isinstance(schema, Nullable):
        if value is not None:
            check(value, schema.schema, path)
    elif isinstance(schema, dict):
        assert isinstance(value, dict), path
        assert set(value) == set(schema), f"{path}: {sorted(set(value) ^ set(schema))}"
        for key, inner in schema.items():
            check(value[key], inner, f"{path}.{key}")
    elif isinstance(schema, list):
        assert isinstance(value, list), path
        for index, item in enumerate(value):
            check(item, schema[0], f"{path}[{index}]")
    else:
        assert isinstance(value, schema), path
        assert schema is bool or not isinstance(value, bool), f"{path} is a bool"


def keys(schema: Any) -> set[str]:
    if isinstance(schema, Nullable):
        return keys(schema.schema)
    if isinstance(schema, list):
        return keys(schema[0])
    if isinstance(schema, dict):
        return set(schema).union(*(keys(inner) for inner in schema.values()))
    return set()


def forked(shop, store, **options) -> RunDiff:  # type: ignore[no-untyped-def]
    parent = shop.record("parent")
    shop.fork(parent, "child", model="gpt-4o-mini", **options)
    return diff_stored(store, "parent", "child")


def test_the_json_has_every_documented_key_with_its_type(shop, store):
    document = diff_json(forked(shop, store))
    check(document, DIFF)
    assert document["schema"] == SCHEMA == "forkpoint.diff/1"
    assert document["steps"][0]["a"]["usage"] is not None  # the nullable parts are exercised
    assert document["a"]["from_fork"] is not None and document["b"]["change"] == {
        "model": "gpt-4o-mini"
    }
    assert document["b"]["totals"]["replayed"] == {
        "steps": FORK_STEP, "tokens": document["b"]["totals"]["replayed"]["tokens"], "cost_usd": 0.0,
    }  # fmt: skip


def test_the_json_of_unrelated_runs_has_nulls_where_documented(shop, store):
    shop.record("one")
    shop.record("two", model="o4-mini")
    document = diff_json(diff_stored(store, "one", "two"))
    check(document, DIFF)
    assert document["delta"]["from_fork"] is None and document["fork_step"] is None
    assert any(step["b"] is None for step in document["steps"])


def test_every_key_is_documented():
    documented = set(re.findall(r"`([a-z_]+)`", DOC.read_text()))
    assert keys(DIFF) <= documented, keys(DIFF) - documented


def text_of(diff: RunDiff, **options: Any) -> str:
    console = Console(record=True, width=160, file=io.StringIO())
    console.print(diff_renderable(diff, **options))
    return console.export_text()


def test_the_terminal_shows_where_runs_part_and_what_it_cost(shop, store):
    text = text_of(forked(shop, store))
    assert "B is a fork of A at step 2" in text and "change: model=gpt-4o-mini" in text
    assert "first difference: step 2 (model, tool_calls)" in text
    assert "gpt-4o → refund_policy" in text and "gpt-4o-mini → refund_policy" in text
    assert "(replayed)" in text and '{"region":"eu"}' in text
    assert re.search(r"replayed prefix .* 2 steps, \d+ tokens, \$0", text)
    assert "from step 2" in text and "prices: genai-prices" in text
    assert "+[gpt-4o-mini]" in text


def test_matching_steps_are_folded_unless_all_are_asked_for(shop, store):
    parent = shop.record("parent")
    shop.replay(parent, "again")
    diff = diff_stored(store, "parent", "again")
    folded = text_of(diff)
    assert "0-4" in folded and "5 matching steps" in folded and "no difference" in folded
    listed = text_of(diff, all_steps=True)
    assert "matching steps" not in listed and "GET /policy?region=us" in listed


def test_durations_read_well():
    assert (ms(850.4), ms(1250), ms(-0.3, sign=True), ms(120, sign=True)) == (
        "850 ms", "1.25 s", "±0 ms", "+120 ms",
    )  # fmt: skip
