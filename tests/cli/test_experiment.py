"""`forkpoint experiment`, `experiment show` and `experiment list` through click."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.api.test_experiments import QUESTIONS, Recorded
from tests.api.test_experiments import recorded as recorded  # the fixture
from tests.compare.test_experiment_html import parse
from tests.runner import Ran, invoke

CHECK = "tests.api.test_experiments:answers_the_question"


def forkpoint(cassette: Path, *args: str) -> Ran:
    return invoke(*args, cassette=cassette)


def agent(recorded: Recorded) -> list[str]:
    live = ["--upstream", recorded.upstream.url, "--route", f"tools={recorded.upstream.url}"]
    return [*live, "--", sys.executable, str(recorded.agent), "{label:q}", "{label:exit}"]


@pytest.fixture(scope="module")
def ran(recorded: Recorded) -> Ran:
    return forkpoint(recorded.path, "experiment", "--select", "label:batch=t", "--at", "first-llm",
                     "--model", "gpt-4o-mini", "--check", CHECK, "--name", "cli", *agent(recorded))  # fmt: skip


def test_an_experiment_prints_its_runs_and_tallies(ran):
    assert ran.exit_code == 0, ran.output
    assert [line.split("] ")[0] for line in ran.stderr.splitlines()[:5]] == [
        f"forkpoint: [{n}/5" for n in range(1, 6)
    ]
    assert "failed: crashed: command exited with 3" in ran.stderr
    out = ran.stdout
    assert out.startswith("cli: 5 runs forked at first-llm with model=gpt-4o-mini, in ")
    assert "4 of 5 runs (1 failed: listed below)" in out
    assert "answers_the_question: passed 4 of 4 (parents 4 of 4)" in out
    assert "2 of 4 changed their tool calls" in out and "forkpoint diff RUN cli/RUN" in out
    assert "forkpoint: experiment cli stored (forkpoint experiment show cli)" in ran.stderr


def test_show_prints_it_again_as_text_json_and_html(ran, recorded, tmp_path):
    shown = forkpoint(recorded.path, "experiment", "show", "cli")
    assert shown.exit_code == 0 and shown.stdout.split("\n", 1)[1] == ran.stdout.split("\n", 1)[1]
    page = tmp_path / "cli.html"
    document = json.loads(
        forkpoint(recorded.path, "experiment", "show", "cli", "--json", "--html", str(page)).stdout
    )
    assert document["schema"] == "forkpoint.experiment/1" and document["name"] == "cli"
    assert [r["source"]["name"] for r in document["runs"]] == QUESTIONS
    assert document["summary"]["forked"] == 4 and document["spec"]["check"] == CHECK
    assert "answers_the_question" in "".join(parse(page.read_text()).text)


def test_list(ran, recorded):
    listed = forkpoint(recorded.path, "experiment", "list")
    line = next(line for line in listed.stdout.splitlines() if line.startswith("cli "))
    assert "5 runs    1 failed  at first-llm  model=gpt-4o-mini" in line
    rows = [
        json.loads(line)
        for line in forkpoint(recorded.path, "experiment", "list", "--json").stdout.splitlines()
    ]
    assert {k: rows[0][k] for k in ("name", "runs", "failed")} == {
        "name": "cli",
        "runs": 5,
        "failed": 1,
    }


def test_runs_given_by_name_and_options_from_a_spec_file(ran, recorded, tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text('at = "last-llm"\nmodel = "gpt-4o-mini"\nname = "from-spec"\n')
    result = forkpoint(recorded.path, "experiment", QUESTIONS[1], QUESTIONS[4], "--spec", str(spec),
                       "--json", *agent(recorded))  # fmt: skip
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["name"] == "from-spec" and document["spec"]["runs"] == [
        QUESTIONS[1],
        QUESTIONS[4],
    ]
    assert [r["at"] for r in document["runs"]] == [2, 2]
    assert all(r["branch"]["name"].startswith("from-spec/") for r in document["runs"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--select", "label:batch=t", "--at", "0", "python"], "put the agent's command after --"),
        (["--select", "label:batch=t", "--", "python"], "give the fork step: --at"),
        (["show", "nope"], "no experiment 'nope'"),
        (["--select", "size:big", "--at", "0", "--", "python"], "--select 'size:big'"),
        (["--select", "label:batch=t", "--at", "0", "--check", "x", "--", "python"], "--check 'x'"),
    ],
)
def test_mistakes_are_one_clear_line(recorded, args, message):
    result = forkpoint(recorded.path, "experiment", *args)
    assert result.exit_code == 2 and message in result.output


def test_help(recorded):
    for args in (["experiment"], ["experiment", "--help"]):
        text = forkpoint(recorded.path, *args).output
        assert (
            "Usage: forkpoint experiment [OPTIONS] (RUN... | --select FILTER...) -- CMD..." in text
        )
        assert "or: forkpoint experiment show NAME" in text and "--model" in text
    import click

    from forkpoint.cli import main

    command = main.get_command(click.Context(main), "experiment")
    assert command is not None and "Example: forkpoint experiment --select" in str(command.help)
    for command in ("show", "list"):
        assert "Example:" in forkpoint(recorded.path, "experiment", command, "--help").output
