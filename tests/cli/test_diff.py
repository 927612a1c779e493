"""`forkpoint diff`, and the totals `forkpoint runs` and `show` now print, through click."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.compare.conftest import FORK_STEP
from tests.runner import Ran, invoke


def forkpoint(cassette: Path, *args: str) -> Ran:
    return invoke(*args, cassette=cassette)


@pytest.fixture
def forked(shop):  # type: ignore[no-untyped-def]
    parent = shop.record("parent")
    shop.fork(parent, "child", model="gpt-4o-mini")


def test_diff_prints_tables(forked, cassette):
    result = forkpoint(cassette, "diff", "parent", "child")
    assert result.exit_code == 0, result.output
    assert "first difference: step 2 (model, tool_calls)" in result.output
    assert "replayed prefix" in result.output and "final answers" in result.output


def test_diff_json_and_html(forked, cassette, tmp_path):
    page = tmp_path / "diff.html"
    result = forkpoint(cassette, "diff", "parent", "child", "--json", "--html", str(page))
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["schema"] == "forkpoint.diff/1" and document["first_difference"] == FORK_STEP
    assert page.read_text().startswith("<!DOCTYPE html>") and "refund_policy" in page.read_text()


def test_diff_of_an_unknown_run_is_a_clear_error(forked, cassette):
    result = forkpoint(cassette, "diff", "parent", "nope")
    assert result.exit_code == 2 and "no run 'nope'" in result.output


def test_runs_and_show_print_tokens_and_cost(forked, cassette):
    listed = [
        json.loads(line) for line in forkpoint(cassette, "runs", "--json").stdout.splitlines()
    ]
    parent, child = listed
    assert {"id", "name", "status", "steps", "fork_step"} <= set(parent)  # kept as they were
    assert parent["totals"]["cost_usd"] > child["totals"]["cost_usd"] > 0
    assert child["totals"]["replayed"]["steps"] == FORK_STEP
    assert parent["totals"]["tokens"] > 0 and parent["totals"]["prices"].startswith("genai-prices")
    table = forkpoint(cassette, "runs").output
    assert "cost" in table.splitlines()[0] and "$0.00" in table

    shown = json.loads(forkpoint(cassette, "show", "child", "--json").stdout)
    costs = [e["cost_usd"] for e in shown["exchanges"]]
    assert costs[:FORK_STEP] == [0.0] * FORK_STEP and costs[FORK_STEP] > 0
    assert shown["totals"]["cost_usd"] == pytest.approx(sum(costs))
    text = forkpoint(cassette, "show", "child").output
    assert "total: " in text and f"{FORK_STEP} replayed at $0" in text and "genai-prices" in text
