"""An experiment's JSON (the documented schema, docs/experiment-json.md) and terminal tables.

`build` writes an experiment straight into a cassette, without running anything: three recorded
runs (gpt-4o: llm → lookup, the tool call, llm answer) forked with gpt-4o-mini — one answers
differently, one skips the tool (and fails the check), one crashes — and a fourth run that was
never forked.
"""

from __future__ import annotations

import dataclasses
import io
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
from rich.console import Console

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.cassettes.store import StoredBranch, StoredExperiment
from forkpoint.compare.cost import PRICES, exchange_cost, usd
from forkpoint.compare.experiment_html import experiment_html
from forkpoint.compare.experiment_render import (
    SCHEMA,
    experiment_json,
    fit_labels,
    print_experiment,
)
from forkpoint.compare.experiment_results import Experiment, load_experiment
from forkpoint.models import (
    Exchange,
    Mode,
    Run,
    RunStatus,
    ToolCall,
    Usage,
)
from tests import builders

START = 1_780_000_000.0
PASS, FAIL = (
    {"passed": True, "score": None, "error": None},
    {"passed": False, "score": None, "error": None},
)


def llm(run: str, step: int, model: str, *, calls: tuple[ToolCall, ...] = (), text: str | None = None,
        output: int = 100) -> Exchange:  # fmt: skip
    return builders.llm(step, model=model, usage=Usage(1000, output), calls=calls, text=text,
                        run_id=run, fingerprint=f"llm-{step}", started_at=START + step,
                        duration_ms=500.0)  # fmt: skip


def tool(run: str, step: int, q: str) -> Exchange:
    return builders.tool(step, route=f"/tools/lookup?q={q}", run_id=run, fingerprint=f"tool-{q}",
                         response_body=orjson.dumps({"q": q}), started_at=START + step,
                         duration_ms=20.0)  # fmt: skip


def lookup(q: str) -> tuple[ToolCall, ...]:
    return (ToolCall("lookup", orjson.dumps({"q": q}).decode(), f"call-{q}"),)


def build(path: Path) -> Experiment:
    store = SqliteStore(path)
    for i in (1, 2, 3, 4):
        store.create_run(Run(f"p{i}", name=f"t-{i}", labels={"q": str(i)}, status=RunStatus.FINISHED,
                             created_at=START))  # fmt: skip
        store.add_exchanges([llm(f"p{i}", 0, "gpt-4o", calls=lookup(str(i))), tool(f"p{i}", 1, str(i)),
                             llm(f"p{i}", 2, "gpt-4o", text=f"gpt-4o says {i}")])  # fmt: skip
    branches = {
        "b1": [llm("b1", 0, "gpt-4o-mini", calls=lookup("1"), output=50), tool("b1", 1, "1"),
               llm("b1", 2, "gpt-4o-mini", text="mini says 1", output=50)],
        "b2": [llm("b2", 0, "gpt-4o-mini", text="mini says 2", output=50)],
        "b3": [llm("b3", 0, "gpt-4o-mini", calls=lookup("3"), output=50)],
    }  # fmt: skip
    for i, (branch, exchanges) in enumerate(branches.items(), start=1):
        status = RunStatus.CRASHED if branch == "b3" else RunStatus.FINISHED
        store.create_run(Run(branch, name=f"mini/t-{i}", labels={"q": str(i), "experiment": "mini"},
                             status=status, mode=Mode.FORK, parent_id=f"p{i}", fork_step=0,
                             change={"model": "gpt-4o-mini"}, created_at=START + 60))  # fmt: skip
        store.add_exchanges(exchanges)
    spec = {"runs": [], "select": ["label:q"], "at": "first-llm", "change": {"model": "gpt-4o-mini"},
            "check": "checks:good", "command": ["agent", "{label:q}"], "concurrency": 4,
            "on_divergence": "fail", "restore": True, "upstream": None, "routes": {}, "labels": {}}  # fmt: skip
    store.create_experiment(StoredExperiment("mini", START + 60, START + 64.5, spec))
    for row in [
        StoredBranch(0, "p1", "b1", None, {"at": 0, "exit_code": 0, "check": PASS, "parent_check": PASS}),
        StoredBranch(1, "p2", "b2", None, {"at": 0, "exit_code": 0, "check": FAIL, "parent_check": PASS}),
        StoredBranch(2, "p3", "b3", "crashed: command exited with 1\n  | boom",
                     {"at": 0, "exit_code": 1, "parent_check": PASS}),
        StoredBranch(3, "p4", None, "run p4 has no label 'ticket' for {label:ticket}", {"at": 0}),
    ]:  # fmt: skip
        store.add_experiment_branch("mini", row)
    try:
        return load_experiment(store, "mini")
    finally:
        store.close()


@pytest.fixture
def experiment(tmp_path: Path) -> Experiment:
    return build(tmp_path / "cassette.db")


def cost(model: str, output: int) -> Decimal:
    found = exchange_cost(llm("x", 0, model, output=output))
    assert found is not None
    return found


def test_the_json_schema(experiment):
    document = orjson.loads(orjson.dumps(experiment_json(experiment)))  # JSON data all through
    assert set(document) == {"schema", "prices", "name", "created_at", "ended_at", "complete",
                             "spec", "summary", "runs"}  # fmt: skip
    assert (document["schema"], document["prices"], document["name"]) == (SCHEMA, PRICES, "mini")
    assert document["complete"] is True and document["spec"]["at"] == "first-llm"
    summary = document["summary"]
    assert {k: summary[k] for k in ("runs", "forked", "failed", "behaviour_changed", "answer_changed")} == {
        "runs": 4, "forked": 2, "failed": 2, "behaviour_changed": 1, "answer_changed": 2,
    }  # fmt: skip
    tally = {
        "passed": 1,
        "failed": 1,
        "errors": 0,
        "scored": 0,
        "median_score": None,
        "mean_score": None,
    }
    assert summary["check"] == {
        "function": "checks:good", "branches": tally, "regressed": 1, "fixed": 0,
        "parents": {**tally, "passed": 2, "failed": 0},
    }  # fmt: skip
    parents = 2 * (2 * cost("gpt-4o", 100))  # two model calls each, from step 0 on
    branches = 3 * cost("gpt-4o-mini", 50)
    assert summary["cost_usd"] == pytest.approx({
        "parents": float(parents), "branches": float(branches), "delta": float(branches - parents),
        "delta_median": float((branches - parents) / 2), "unpriced": 0,
    })  # fmt: skip
    assert summary["tokens"] == {
        "parents": 4400,
        "branches": 3150,
        "delta": -1250,
        "delta_median": -625,
    }

    first, second, crashed, unforked = document["runs"]
    assert set(first) == {"seq", "source", "at", "branch", "ok", "error", "behaviour_changed",
                          "answer_changed", "tool_calls", "answers", "check", "parent_check",
                          "from_fork"}  # fmt: skip
    assert first["source"] == {
        "id": "p1",
        "name": "t-1",
        "labels": {"q": "1"},
        "status": "finished",
    }
    assert first["branch"] == {"id": "b1", "name": "mini/t-1", "status": "finished", "exit_code": 0}
    assert (first["ok"], first["behaviour_changed"], first["answer_changed"]) == (True, False, True)
    assert first["answers"] == {"parent": "gpt-4o says 1", "branch": "mini says 1"}
    assert first["tool_calls"]["branch"] == [
        {"step": 0, "name": "lookup", "arguments": '{"q":"1"}'}
    ]
    assert first["check"] == PASS and first["parent_check"] == PASS
    assert set(first["from_fork"]) == {"parent", "branch", "delta"}
    assert first["from_fork"]["delta"]["tokens"] == -100
    assert first["from_fork"]["parent"]["steps"] == 3 and "cost_usd" in first["from_fork"]["branch"]
    assert (second["behaviour_changed"], second["tool_calls"]["branch"]) == (True, [])
    assert crashed["ok"] is False and crashed["error"].startswith("crashed: command exited with 1")
    assert crashed["branch"]["status"] == "crashed" and crashed["check"] is None
    assert unforked == {
        "seq": 3, "source": {"id": "p4", "name": "t-4", "labels": {"q": "4"}, "status": "finished"},
        "at": 0, "branch": None, "ok": False, "error": "run p4 has no label 'ticket' for {label:ticket}",
        "behaviour_changed": None, "answer_changed": None, "tool_calls": None, "answers": None,
        "check": None, "parent_check": None, "from_fork": None,
    }  # fmt: skip


def test_an_interrupted_experiment_says_so(tmp_path):
    experiment = build(tmp_path / "c.db")
    store = SqliteStore(tmp_path / "c.db")
    store.create_experiment(StoredExperiment("cut", START, None, experiment.spec))
    cut = load_experiment(store, "cut")
    store.close()
    document = experiment_json(cut)
    assert document["complete"] is False and document["runs"] == []
    assert document["summary"]["cost_usd"]["delta_median"] is None


def test_the_terminal_report(experiment):
    out = io.StringIO()
    print_experiment(experiment, Console(file=out, width=160, highlight=False))
    text = out.getvalue()
    assert text.startswith("mini: 4 runs forked at first-llm with model=gpt-4o-mini, in 4.50 s")
    assert "2 of 4 runs (2 failed: listed below)" in text
    assert "1 of 2 changed their tool calls" in text and "2 of 2 changed their final answer" in text
    assert "good: passed 1 of 2 (parents 2 of 2); 1 regressed, 0 fixed" in text
    assert "pass → FAIL" in text
    assert row(text, 3).split()[:4] == ["3", "t-3", "0", "crashed"]
    assert row(text, 4).split()[:5] == ["4", "t-4", "0", "not", "forked"]
    assert "3  t-3 (p3): crashed: command exited with 1\n  | boom" in text
    assert "4  t-4 (p4): run p4 has no label 'ticket'" in text
    assert f"prices: {PRICES}" in text


def test_at_80_columns_each_run_keeps_one_line_and_a_name_of_its_own(tmp_path):
    experiment = build(tmp_path / "c.db")
    long = [
        dataclasses.replace(b, source=dataclasses.replace(
            b.source, name=f"support-ticket-refund-request-nightly-batch-A100{i}"))
        for i, b in enumerate(experiment.branches, start=1)
    ]  # fmt: skip
    out = io.StringIO()
    print_experiment(dataclasses.replace(experiment, branches=tuple(long)),
                     Console(file=out, width=80, highlight=False))  # fmt: skip
    lines = out.getvalue().splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("───"))
    rows = lines[rule + 1 : rule + 5]
    assert lines[rule + 5].startswith("forked")  # one line per run, no more
    for i, row in enumerate(rows, start=1):
        assert row.startswith(f"{i} ") and f"A100{i}" in row and len(row) <= 80
    assert "Δ tokens" in lines[rule - 1]  # every column is there


def row(text: str, seq: int) -> str:
    """The runs table's row for run `seq`."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("───"))
    return next(line for line in lines[rule + 1 :] if line.startswith(f"{seq} "))


def test_a_fork_that_did_not_finish_is_compared_with_nothing(experiment, tmp_path):
    """Its tool calls, answer, cost and tokens stopped short: as deltas they would read as
    changes the branch made (found by a user: `≠`, `pass → -` and negative deltas)."""
    out = io.StringIO()
    print_experiment(experiment, Console(file=out, width=160, highlight=False))
    crashed = row(out.getvalue(), 3)
    cells = crashed.split()
    assert cells[:4] == ["3", "t-3", "0", "crashed"]
    assert not {"=", "≠", "→", "-", "pass"} & set(cells) and not any(c[0] in "+-" for c in cells)
    parent, branch = cost("gpt-4o", 100) * 2, cost("gpt-4o-mini", 50)
    assert cells[4:] == [usd(parent), usd(branch)]  # what each spent, not set against each other

    document = orjson.loads(orjson.dumps(experiment_json(experiment)))["runs"][2]
    assert (document["behaviour_changed"], document["answer_changed"]) == (None, None)
    assert document["from_fork"]["delta"] is None
    assert document["from_fork"]["branch"]["cost_usd"] == pytest.approx(float(branch))

    page = experiment_html(experiment)
    cells_html = page.split("<td class=num>3</td>")[1].split("</tr>")[0]
    assert "<td colspan=3 class=bad>crashed</td>" in cells_html
    assert "same" not in cells_html and "changed" not in cells_html and "→" not in cells_html
    assert "<pre class=bad>crashed: command exited with 1\n  | boom</pre>" in cells_html


def test_at_80_columns_the_demo_s_runs_keep_names_of_their_own_and_how_they_ended(tmp_path):
    """The demo names its runs ticket-A1001 … ticket-A1005: cut at the end they all read
    `ticket-A1…`, and a row's `crashed` was cut with them."""
    experiment = build(tmp_path / "c.db")
    named = [
        dataclasses.replace(b, source=dataclasses.replace(b.source, name=f"ticket-A100{i}"))
        for i, b in enumerate(experiment.branches, start=1)
    ]
    out = io.StringIO()
    print_experiment(dataclasses.replace(experiment, branches=tuple(named)),
                     Console(file=out, width=80, highlight=False))  # fmt: skip
    rows = [row(out.getvalue(), i) for i in (1, 2, 3, 4)]
    names = [r.split()[1] for r in rows]
    assert len(set(names)) == 4 and all(n.endswith(f"A100{i}") for i, n in enumerate(names, 1))
    assert rows[2].split()[3] == "crashed" and rows[3].split()[3:5] == ["not", "forked"]
    assert all(len(r) <= 80 for r in rows)


def test_fit_labels_keeps_what_tells_them_apart():
    tickets = [f"ticket-A100{i}" for i in range(1, 6)]
    assert fit_labels(tickets, 20) == tickets
    assert fit_labels(tickets, 8) == [f"…t-A100{i}" for i in range(1, 6)]
    assert fit_labels(["a-1-long-suffix", "a-2-long-suffix"], 8) == ["…1-long…", "…2-long…"]
    assert fit_labels(["one-very-long-name"], 8) == ["one-ver…"]


def test_a_failed_fork_s_output_is_never_wrapped_mid_token(tmp_path):
    """A traceback's lines are printed whole (a terminal folds what is wider than itself):
    a path or a name cut across two lines cannot be searched or copied."""
    experiment = build(tmp_path / "c.db")
    path = "/home/someone/projects/support-agent/.venv/lib/python3.12/site-packages/openai/_base_client.py"
    error = f'crashed: command exited with 1\n  |   File "{path}", line 1047, in request\n  | openai.APIConnectionError: Connection error.'
    failed = dataclasses.replace(experiment.branches[2], error=error)
    branches = (*experiment.branches[:2], failed, experiment.branches[3])
    out = io.StringIO()
    print_experiment(dataclasses.replace(experiment, branches=branches),
                     Console(file=out, width=80, highlight=False))  # fmt: skip
    lines = out.getvalue().splitlines()
    assert "3  t-3 (p3): crashed: command exited with 1" in lines
    assert f'  |   File "{path}", line 1047, in request' in lines
    assert "  | openai.APIConnectionError: Connection error." in lines
