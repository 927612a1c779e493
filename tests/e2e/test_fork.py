"""Fork through the real CLI: the support agent (real openai SDK, HTTP tools) recorded once,
then forked with a cheaper model, a new prompt, mocked tools, and forked again."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from examples.support_agent.script import support_script
from examples.support_agent.tools_service import ORDERS, REFUNDS, create_app
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import Origin, RunStatus
from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.testing.upstream import ScriptedUpstream
from tests.runner import Ran
from tests.runner import forkpoint as run_forkpoint

ROOT = Path(__file__).resolve().parents[2]
AGENT = [sys.executable, str(ROOT / "examples/support_agent/agent.py")]
TICKET = "Please refund order A1001, the shoes don't fit."
# the support run: 0 llm→lookup_order, 1 GET order, 2 llm→refund_policy, 3 GET policy,
# 4 llm→issue_refund, 5 POST refund, 6 llm answer
AFTER_LOOKUP = 2


class Tools:
    """The example's tool service, counting what reaches it; restartable with fresh state."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self._thread = LoopThread("tools")
        self._runner: web.AppRunner | None = None
        self.url = self._thread.call(self._start())

    async def _start(self) -> str:
        @web.middleware
        async def count(request: web.Request, handler):  # type: ignore[no-untyped-def]
            self.paths.append(f"{request.method} {request.path}")
            return await handler(request)

        app = self._app = create_app()
        app.middlewares.append(count)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    def reset(self) -> None:
        """Back to no refunds issued, as after a restart."""
        fresh = create_app()
        for key in (ORDERS, REFUNDS):
            self._app[key].clear()
            self._app[key].update(fresh[key]) if key is ORDERS else self._app[key].extend(
                fresh[key]
            )
        self.paths.clear()

    def stop(self) -> None:
        assert self._runner is not None
        self._thread.call(self._runner.cleanup())
        self._thread.close()


@pytest.fixture
def tools() -> Iterator[Tools]:
    service = Tools()
    yield service
    service.stop()


@pytest.fixture
def llm(start_upstream):  # type: ignore[no-untyped-def]
    return start_upstream(ScriptedUpstream(support_script))


def forkpoint(cassette: Path, *args: str, ticket: str = TICKET) -> Ran:
    return run_forkpoint(*args, "--", *AGENT, ticket, cassette=cassette,
                         env={"OPENAI_API_KEY": "sk-test"}, clean=True)  # fmt: skip


def routes(llm, tools) -> list[str]:  # type: ignore[no-untyped-def]
    return ["--upstream", llm.url, "--route", f"tools={tools.url}"]


@pytest.fixture
def parent(cassette, llm, tools):  # type: ignore[no-untyped-def]
    recorded = forkpoint(cassette, "record", "--name", "parent", *routes(llm, tools))
    assert recorded.returncode == 0, recorded.stderr
    assert "Refund of $89.90 issued for order A1001" in recorded.stdout  # terse gpt-4o-mini
    tools.reset()
    return recorded.run_id


def exchanges(cassette: Path, run_id: str):  # type: ignore[no-untyped-def]
    store = SqliteStore(cassette)
    try:
        run = store.find_run(run_id)
        return run, store.exchanges(run.id)
    finally:
        store.close()


def test_fork_with_a_cheaper_model_replays_the_prefix_and_rewrites_the_rest(
    cassette, llm, tools, parent
):
    llm.upstream.reset()
    tools.paths.clear()
    forked = forkpoint(
        cassette,
        "fork",
        "parent",
        "--at",
        str(AFTER_LOOKUP),
        "--model",
        "gpt-4o",
        "--system-prompt",
        "Answer warmly.",
        "--name",
        "bigger",
        *routes(llm, tools),
    )
    assert forked.returncode == 0, forked.stderr
    assert "Good news! Order A1001" in forked.stdout  # gpt-4o answers at length
    # steps < 2 (the first model call and the order lookup) never reached an upstream
    assert [r.json["model"] for r in llm.upstream.requests] == ["gpt-4o"] * 3
    assert all(
        r.json["messages"][0] == {"role": "system", "content": "Answer warmly."}
        for r in llm.upstream.requests
    )
    assert "GET /orders/A1001" not in tools.paths
    child_id = forked.run_id
    child, child_steps = exchanges(cassette, child_id)
    _, parent_steps = exchanges(cassette, child.parent_id)
    assert (child.fork_step, child.status, child.change) == (
        2,
        RunStatus.FINISHED,
        {"model": "gpt-4o", "system_prompt": "Answer warmly."},
    )
    assert [e.origin for e in child_steps[:2]] == [Origin.REPLAYED] * 2
    assert all(e.origin is Origin.LIVE for e in child_steps[2:])
    for mine, theirs in zip(child_steps[:2], parent_steps[:2], strict=True):
        assert (mine.response_body, mine.request_body) == (
            theirs.response_body,
            theirs.request_body,
        )
    runs = run_forkpoint("runs", cassette=cassette).stdout
    assert "└─ " + child_id in runs and "fork @ step 2" in runs


def test_a_mocked_tool_never_reaches_the_tool_service(cassette, llm, tools, parent, tmp_path):
    strict = tmp_path / "strict-policy.json"
    strict.write_text(json.dumps({"policy": "Refunds within 7 days only.", "window_days": 7}))
    tools.paths.clear()
    forked = forkpoint(
        cassette,
        "fork",
        "parent",
        "--at",
        str(AFTER_LOOKUP),
        "--mock",
        f"GET /tools/refund-policy=@{strict}",
        *routes(llm, tools),
    )
    assert forked.returncode == 0, forked.stderr
    assert "No refund for order A1001" in forked.stdout and "7-day refund window" in forked.stdout
    assert tools.paths == []  # policy mocked, and no refund was issued
    _, steps = exchanges(cassette, forked.run_id)
    assert [e.origin for e in steps] == [
        Origin.REPLAYED,
        Origin.REPLAYED,
        Origin.LIVE,
        Origin.MOCKED,
        Origin.LIVE,
    ]


def test_a_mock_that_raises_gives_the_agent_a_clear_500_and_is_recorded(
    cassette, llm, tools, parent, tmp_path
):
    # A mock module in the directory forkpoint runs from loads with no PYTHONPATH, as a
    # --check does (`python -m` rules).
    (tmp_path / "broken_mocks.py").write_text(
        "def policy(request):\n    raise RuntimeError('policy db down')\n"
    )
    result = run_forkpoint(
        "fork", "parent", "--at", "2", "--mock", "/tools/refund-policy=broken_mocks:policy",
        *routes(llm, tools), "--", *AGENT, TICKET,
        cassette=cassette, cwd=tmp_path, env={"OPENAI_API_KEY": "k"},
    )  # fmt: skip
    _, steps = exchanges(cassette, result.run_id)
    mocked = steps[3]
    assert mocked.status == 500 and mocked.origin is Origin.MOCKED
    assert "broken_mocks:policy" in (mocked.error or "") and "policy db down" in (
        mocked.error or ""
    )


def test_fork_of_a_fork_and_fork_at_the_ends(cassette, llm, tools, parent):
    first = forkpoint(
        cassette, "fork", "parent", "--at", "4", "--model", "gpt-4o", *routes(llm, tools)
    )
    first_id = first.run_id
    tools_before = len(tools.paths)
    llm.upstream.reset()
    second = forkpoint(cassette, "fork", first_id, "--at", "7", *routes(llm, tools))  # all of it
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[0] == first.stdout.splitlines()[0]
    assert llm.upstream.request_count == 0 and len(tools.paths) == tools_before
    _, steps = exchanges(cassette, second.run_id)
    assert len(steps) == 7 and all(e.origin is Origin.REPLAYED for e in steps)
    at_zero = forkpoint(
        cassette, "fork", "parent", "--at", "0", "--model", "gpt-4o-mini", *routes(llm, tools)
    )
    assert at_zero.returncode == 0
    _, steps = exchanges(cassette, at_zero.run_id)
    assert all(e.origin is Origin.LIVE for e in steps)


def test_a_divergence_before_the_fork_fails_or_forks_there(cassette, llm, tools, parent):
    other_ticket = "Please refund order A1005, the headphones crackle."
    # --no-restore: the agent starts fresh with its new ticket (restored, it would go on with
    # the parent's conversation and never ask about A1005)
    fresh = ("fork", "parent", "--at", "4", "--no-restore", *routes(llm, tools))
    failed = forkpoint(cassette, *fresh, ticket=other_ticket)
    assert failed.returncode != 0 and "forkpoint divergence" in failed.stderr
    assert "A1001" in failed.stderr and "A1005" in failed.stderr  # the body diff
    live = forkpoint(cassette, *fresh, "--on-divergence", "live", ticket=other_ticket)
    assert live.returncode == 0, live.stderr
    assert "A1005" in live.stdout
    child, _ = exchanges(cassette, live.run_id)
    assert child.fork_step == 0  # the first request already differed: it forked there


@pytest.mark.parametrize(
    "args, message",
    [
        (("fork", "nope", "--at", "1"), "no run 'nope'"),
        (("fork", "parent", "--at", "99"), "it has 7 steps"),
        (("fork", "parent", "--at", "1", "--mock", "garbage"), "expected ROUTE=SPEC"),
    ],
)
def test_bad_fork_requests_are_clear_errors_with_exit_code_2(cassette, parent, args, message):
    result = forkpoint(cassette, *args)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_a_fork_spec_file_holds_the_options(cassette, llm, tools, parent, tmp_path):
    (tmp_path / "prompt.txt").write_text("Be kind.")
    spec = tmp_path / "fork.toml"
    spec.write_text(
        f'at = 2\nmodel = "gpt-4o"\nsystem_prompt = "@prompt.txt"\nname = "from-spec"\n'
        f'[route]\ntools = "{tools.url}"\n'
    )
    llm.upstream.reset()
    result = forkpoint(cassette, "fork", "parent", "--spec", str(spec), "--upstream", llm.url)
    assert result.returncode == 0, result.stderr
    assert llm.upstream.requests[0].json["messages"][0]["content"] == "Be kind."
    child, _ = exchanges(cassette, "from-spec")
    assert child.change == {"model": "gpt-4o", "system_prompt": "Be kind."}


def test_a_forks_record_says_what_went_upstream_and_its_replay_still_matches(
    cassette, llm, tools, parent
):
    """Issue 25.5: a fork's records kept the agent's model and system prompt while the upstream
    got the changed ones, so `show`, exports and the web view misstated what was sent."""
    llm.upstream.reset()
    forked = forkpoint(
        cassette, "fork", "parent", "--at", str(AFTER_LOOKUP), "--model", "gpt-4o",
        "--system-prompt", "Answer warmly.", *routes(llm, tools),
    )  # fmt: skip
    assert forked.returncode == 0, forked.stderr
    sent = [r.body for r in llm.upstream.requests]
    _, steps = exchanges(cassette, forked.run_id)
    live_llm = [e for e in steps[AFTER_LOOKUP:] if e.route.endswith("/chat/completions")]
    assert [e.request_body for e in live_llm] == sent  # byte for byte what the upstream got
    for e in live_llm:
        body = json.loads(e.request_body)
        assert body["model"] == "gpt-4o"
        assert body["messages"][0] == {"role": "system", "content": "Answer warmly."}
    for e in steps[:AFTER_LOOKUP]:  # served from the parent: as its agent sent them
        assert json.loads(e.request_body or b"{}").get("model") in (None, "gpt-4o-mini")
    # what a reader shows: every format states the model and prompt that were sent
    shown = json.loads(run_forkpoint("show", forked.run_id, "--json", cassette=cassette).stdout)
    models = [e.get("model") for e in shown["exchanges"][AFTER_LOOKUP:] if e.get("model")]
    assert models and set(models) == {"gpt-4o"}
    for fmt in ("har", "jsonl", "vcr"):
        exported = run_forkpoint("export", forked.run_id, "--format", fmt, cassette=cassette)
        assert exported.returncode == 0, exported.stderr
        assert exported.stdout.count("Answer warmly.") >= len(live_llm), fmt
    # a replay of the fork, by the same agent, still matches every step, offline
    llm.upstream.reset()
    tools.paths.clear()
    replayed = forkpoint(cassette, "replay", forked.run_id)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == forked.stdout
    assert llm.upstream.request_count == 0 and tools.paths == []
    # and a fork of the fork replays its changed steps too, then goes live with its own change
    again = forkpoint(cassette, "fork", forked.run_id, "--at", "6", "--model", "gpt-4.1",
                      *routes(llm, tools))  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert [r.json["model"] for r in llm.upstream.requests] == ["gpt-4.1"]
    _, steps = exchanges(cassette, again.run_id)
    assert all(e.origin is Origin.REPLAYED for e in steps[:6])
    assert json.loads(steps[6].request_body)["model"] == "gpt-4.1"
