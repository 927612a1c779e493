"""Experiments end to end in process: real forks (proxy + agent process) of recorded runs.

The agent is a few lines of stdlib Python (it starts in milliseconds): it asks the model a
question, runs the `lookup` tool over HTTP when asked, prints the answer and exits with its
second argument. The scripted model looks the question up (step 0 llm → lookup, step 1 the
tool call, step 2 llm answer) and names itself in the answer; as gpt-4o-mini it answers
questions that contain "easy" without the tool, so those branches change their tool calls.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from forkpoint import api
from forkpoint.api.experiments import ExperimentSpec, fork_step, substitute
from forkpoint.compare.experiment_check import CheckRun
from forkpoint.compare.experiment_results import Experiment
from forkpoint.engine.changes import Change
from forkpoint.errors import ConfigError
from forkpoint.models import Origin, RunStatus
from forkpoint.testing.upstream import Prompt, Reply, ScriptedUpstream, ToolCallSpec
from tests.conftest import RunningUpstream

AGENT = r"""
import json, os, sys, urllib.parse, urllib.request
question = sys.argv[1]
messages = [{"role": "user", "content": question}]
tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
def ask():
    body = json.dumps({"model": "gpt-4o", "messages": messages, "tools": tools}).encode()
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", body,
                                     {"content-type": "application/json"})
    with urllib.request.urlopen(request) as response:
        return json.load(response)["choices"][0]["message"]
message = ask()
while message.get("tool_calls"):
    messages.append({"role": "assistant", "content": None, "tool_calls": message["tool_calls"]})
    for call in message["tool_calls"]:
        q = json.loads(call["function"]["arguments"])["q"]
        url = os.environ["FORKPOINT_URL"] + "/tools/lookup?q=" + urllib.parse.quote(q)
        with urllib.request.urlopen(url) as response:
            result = response.read().decode()
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    message = ask()
print(message["content"])
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
"""
QUESTIONS = ["easy: what is 2+2", "how tall is K2", "easy: the capital of France",
             "who wrote Dune", "how far is the Moon"]  # fmt: skip
FAILING = QUESTIONS[3]


def script(prompt: Prompt) -> Reply:
    question = prompt.last_user_text
    if not prompt.tool_results and not (prompt.model == "gpt-4o-mini" and "easy" in question):
        return Reply(tool_calls=(ToolCallSpec("lookup", {"q": question}),))
    facts = " / ".join(prompt.tool_results) or "from memory"
    return Reply(text=f"[{prompt.model}] {question}: {facts}")


async def lookup(request: web.Request) -> web.Response:
    return web.json_response({"q": request.query["q"], "fact": len(request.query["q"])})


# checks, loaded by name as --check loads them


def answers_the_question(run: CheckRun) -> bool:
    assert run.parent is None or run.parent.run.id == run.run.parent_id
    return run.run.labels["q"] in (run.answer or "")


def answer_length(run: CheckRun) -> float:
    return len(run.answer or "")


def broken(run: CheckRun) -> bool:
    raise RuntimeError("no verdict")


class Recorded:
    """A cassette with QUESTIONS recorded (label batch=t) and one run outside the batch.

    Each run's label `exit` is what its fork's command exits with: 3 for FAILING, so that fork
    fails (the recording itself exits 0).
    """

    def __init__(self, path: Path, upstream: RunningUpstream, agent: Path):
        self.path, self.upstream, self.agent = path, upstream, agent
        for question in QUESTIONS:
            code = "3" if question == FAILING else "0"
            self.record(question, labels={"batch": "t", "q": question, "exit": code})
        self.record("who painted the Mona Lisa", labels={"batch": "other", "q": "x", "exit": "0"})

    def record(self, question: str, *, labels: dict[str, str]) -> str:
        options = api.Options(cassette=self.path, labels=labels, name=question, **self.upstreams)
        result = api.record([sys.executable, str(self.agent), question], options)
        assert result.exit_code == 0
        return result.run_id

    @property
    def upstreams(self) -> dict[str, object]:
        return {"upstream": self.upstream.url, "routes": {"tools": self.upstream.url}}

    def spec(self, **options) -> ExperimentSpec:  # type: ignore[no-untyped-def]
        options.setdefault("select", ("label:batch=t",))
        return ExperimentSpec(
            command=(sys.executable, str(self.agent), "{label:q}", "{label:exit}"),
            at=options.pop("at", "first-llm"),
            **options,
        )

    def run(self, **options) -> Experiment:  # type: ignore[no-untyped-def]
        return self.experiment(self.spec(**options))

    def experiment(self, spec: ExperimentSpec) -> Experiment:
        return api.experiment(spec, api.Options(cassette=self.path, **self.upstreams))

    def load(self, name: str) -> Experiment:
        return api.experiment_results(name, api.Options(cassette=self.path))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    upstream = ScriptedUpstream(script)
    upstream.app.router.add_get("/lookup", lookup)
    running = RunningUpstream(upstream)
    work = tmp_path_factory.mktemp("experiment")
    agent = work / "agent.py"
    agent.write_text(AGENT)
    yield Recorded(work / "cassette.db", running, agent)
    running.stop()


@pytest.fixture(scope="module")
def mini(recorded: Recorded) -> Experiment:
    """gpt-4o-mini from each run's first model call on; FAILING's fork fails."""
    return recorded.run(
        name="mini", change=Change(model="gpt-4o-mini"), concurrency=3,
        check="tests.api.test_experiments:answers_the_question",
    )  # fmt: skip


def test_every_selected_run_is_forked_and_a_failed_fork_is_reported(mini: Experiment):
    assert [b.source.name for b in mini.branches] == QUESTIONS  # the batch, in recorded order
    failed = [b for b in mini.branches if not b.ok]
    assert [b.source.name for b in failed] == [FAILING]
    assert failed[0].run is not None and failed[0].run.status is RunStatus.CRASHED
    assert failed[0].error is not None and "command exited with 3" in failed[0].error
    assert f"[gpt-4o-mini] {FAILING}" in failed[0].error  # the last lines of its output
    assert failed[0].check is None  # a failed fork is not judged
    summary = mini.summary
    assert (summary.runs, summary.forked, summary.failed) == (5, 4, 1)


def test_branches_are_forks_with_the_change_at_each_runs_first_model_call(mini: Experiment):
    for branch in mini.branches:
        assert branch.at == 0 and branch.run is not None
        assert branch.run.parent_id == branch.source.id and branch.run.fork_step == 0
        assert branch.run.change == {"model": "gpt-4o-mini"}
        assert branch.run.name == f"mini/{branch.source.name}"
        assert branch.run.labels == {**branch.source.labels, "experiment": "mini"}


def test_behaviour_answers_check_and_cost_are_tallied(mini: Experiment):
    ok = {b.source.name: b for b in mini.branches if b.ok}
    # gpt-4o-mini answers the "easy" questions without the tool: other tool calls
    assert {name for name, b in ok.items() if b.behaviour_changed} == {QUESTIONS[0], QUESTIONS[2]}
    assert all(b.answer_changed for b in ok.values())  # every answer names its model
    assert all(b.check and b.check.passed for b in ok.values())
    assert all(b.parent_check and b.parent_check.passed for b in mini.branches)
    s = mini.summary
    assert (s.behaviour_changed, s.answer_changed, s.regressed, s.fixed) == (2, 4, 0, 0)
    assert s.branch_check is not None and s.parent_check is not None
    assert (s.branch_check.passed, s.parent_check.passed, s.branch_check.errors) == (4, 4, 0)
    assert s.unpriced == 0 and 0 < s.branch_cost < s.parent_cost  # gpt-4o-mini is cheaper
    parents = [b.parent_totals for b in ok.values()]
    assert s.parent_cost == sum(t.cost_usd for t in parents if t and t.cost_usd)
    assert s.cost_delta_median is not None and s.cost_delta_median < 0
    assert s.token_delta < 0  # fewer model calls for the easy questions


def test_the_experiment_is_stored_and_reads_back_the_same(recorded: Recorded, mini: Experiment):
    again = recorded.load("mini")
    assert again == mini
    assert again.ended_at is not None and again.spec["check"].endswith(":answers_the_question")
    assert again.spec["select"] == ["label:batch=t"] and again.spec["at"] == "first-llm"


def test_last_llm_replays_up_to_each_runs_last_model_call(recorded: Recorded):
    experiment = recorded.run(name="last", at="last-llm", change=Change(model="gpt-4o-mini"),
                              select=("label:batch=t", "name:how*"))  # fmt: skip
    assert [b.source.name for b in experiment.branches] == [QUESTIONS[1], QUESTIONS[4]]
    for branch in experiment.branches:
        assert branch.ok and branch.at == 2
        assert branch.diff is not None
        steps = branch.diff.steps
        assert [s.b.origin if s.b else None for s in steps] == [Origin.REPLAYED] * 2 + [Origin.LIVE]
        assert branch.branch_totals and branch.branch_totals.replayed_steps == 0  # from step 2
        assert not branch.behaviour_changed and branch.answer_changed


def test_a_fork_that_diverges_is_reported_and_the_rest_go_on(recorded: Recorded):
    # recorded asking one thing, forked asking another: its replayed prefix cannot match
    recorded.record(
        "what is the speed of light", labels={"batch": "drift", "q": "changed", "exit": "0"}
    )
    recorded.record(
        "how deep is the sea", labels={"batch": "drift", "q": "how deep is the sea", "exit": "0"}
    )
    experiment = recorded.run(name="drift", at="last-llm", select=("label:batch=drift",))
    drifted, steady = experiment.branches
    assert not drifted.ok and drifted.run and drifted.run.status is RunStatus.DIVERGED
    assert drifted.error and drifted.error.startswith("diverged") and "divergence" in drifted.error
    assert steady.ok and experiment.summary.forked == 1


def test_a_check_that_raises_or_scores(recorded: Recorded):
    broken_run = recorded.run(name="broken", select=("name:how tall*",),
                              check="tests.api.test_experiments:broken")  # fmt: skip
    (branch,) = broken_run.branches
    assert branch.ok and branch.check is not None
    assert (
        branch.check.error == "tests.api.test_experiments:broken raised RuntimeError: no verdict"
    )
    assert broken_run.summary.branch_check and broken_run.summary.branch_check.errors == 1
    scored = recorded.run(name="scored", select=("label:batch=t", "name:how*"), change=Change(model="gpt-4o-mini"),
                          check="tests.api.test_experiments:answer_length")  # fmt: skip
    lengths = [len(b.diff.b.answer or "") for b in scored.branches if b.diff]
    tally = scored.summary.branch_check
    assert tally is not None and (tally.passed, tally.failed, tally.errors) == (0, 0, 0)
    assert sorted(tally.scores) == sorted(lengths) and tally.median_score == statistics.median(
        lengths
    )


def test_nothing_is_forked_when_the_experiment_cannot_start(recorded: Recorded, mini: Experiment):
    with pytest.raises(ConfigError, match=r"no run in .* matches label:batch=none"):
        recorded.run(select=("label:batch=none",))
    with pytest.raises(ConfigError, match="cannot load it"):
        recorded.run(check="tests.compare.nope:check")
    with pytest.raises(ConfigError, match="already has an experiment 'mini'"):
        recorded.run(name="mini")
    with pytest.raises(ConfigError, match="give a step number, first-llm or last-llm"):
        recorded.run(at="middle")


def test_a_run_missing_a_placeholder_label_is_reported_not_forked(recorded: Recorded):
    spec = recorded.spec(name="unlabelled", select=("label:batch=other",))
    spec = ExperimentSpec(**{**_fields(spec), "command": (*spec.command, "{label:ticket}")})
    experiment = recorded.experiment(spec)
    (branch,) = experiment.branches
    assert branch.run is None and branch.error and "has no label 'ticket'" in branch.error


def _fields(spec: ExperimentSpec) -> dict:  # type: ignore[type-arg]
    return {name: getattr(spec, name) for name in spec.__dataclass_fields__}


def test_fork_step_and_placeholders():
    from forkpoint.models import Exchange, Kind, Run, Summary

    def step(n: int, kind: Kind) -> Exchange:
        return Exchange(run_id="r", step=n, method="POST", route="/", request_headers=(),
                        request_body=b"", fingerprint="", summary=Summary(kind, "openai_chat"))  # fmt: skip

    run = Run("01R", name="t-1", labels={"ticket": "refund {me}", "n": "2"})
    steps = [
        step(0, Kind.TOOL),
        step(1, Kind.LLM),
        step(2, Kind.TOOL),
        step(3, Kind.LLM),
        step(4, Kind.TOOL),
    ]
    assert (fork_step("first-llm", run, steps), fork_step("last-llm", run, steps)) == (1, 3)
    assert fork_step("4", run, steps) == 4
    with pytest.raises(ConfigError, match="no model call"):
        fork_step("first-llm", run, steps[:1])
    assert substitute(["agent", "{run}", "--name={name}", "{label:ticket}", "{label:n}{x}"], run) == (
        "agent", "01R", "--name=t-1", "refund {me}", "2{x}",
    )  # fmt: skip
    with pytest.raises(ConfigError, match="has no name"):
        substitute(["{name}"], Run("01S"))
