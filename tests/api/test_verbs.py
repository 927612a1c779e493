"""The public API as a script, asyncio code and a notebook use it: `forkpoint.record(...)`."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

import forkpoint
from forkpoint import Change, Options

AGENT = r"""
import json, os, sys, urllib.request
body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": sys.argv[1]}]})
request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                                 body.encode(), {"content-type": "application/json"})
with urllib.request.urlopen(request) as response:
    print(json.load(response)["choices"][0]["message"]["content"])
"""


@pytest.fixture
def agent(tmp_path: Path) -> list[str]:
    path = tmp_path / "agent.py"
    path.write_text(AGENT)
    return [sys.executable, str(path)]


def test_the_package_exports_its_api_and_version():
    assert forkpoint.__version__ and "record" in forkpoint.__all__ and "Options" in dir(forkpoint)
    for name in forkpoint.__all__:
        assert getattr(forkpoint, name) is not None, name
    with pytest.raises(AttributeError):
        forkpoint.nothing_of_that_name  # noqa: B018


def test_the_sync_verbs_work_inside_a_running_event_loop_as_in_a_notebook(
    upstream, cassette, agent
):
    """Jupyter runs cells inside an event loop: asyncio.run() would refuse."""
    options = Options(cassette=cassette, upstream=upstream.url, name="in-a-loop")

    async def cell() -> tuple[forkpoint.RunResult, forkpoint.RunResult]:
        recorded = forkpoint.record([*agent, "hello"], options)  # sync, inside the loop
        forked = forkpoint.fork(
            "in-a-loop", [*agent, "hello"], at=0, change=Change(model="gpt-4o-mini"),
            options=options,
        )  # fmt: skip
        return recorded, forked

    recorded, forked = asyncio.run(cell())
    assert (recorded.exit_code, recorded.status, recorded.steps) == (0, "finished", 1)
    assert forked.status == "finished" and forked.run_id != recorded.run_id
    shown = forkpoint.show(forked.run_id, Options(cassette=cassette))
    assert shown.run.parent_id == recorded.run_id
    assert shown.exchanges[0].summary and shown.exchanges[0].summary.model == "gpt-4o-mini"


def test_the_awaitable_verbs_run_alongside_other_tasks(upstream, cassette, agent):
    options = Options(cassette=cassette, upstream=upstream.url)

    async def main() -> list[forkpoint.RunResult]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticking = asyncio.create_task(ticker())
        results = await asyncio.gather(
            forkpoint.arecord([*agent, "a"], options), forkpoint.arecord([*agent, "b"], options)
        )
        ticking.cancel()
        assert ticks > 3  # the loop went on while both runs recorded
        return list(results)

    first, second = asyncio.run(main())
    assert first.exit_code == second.exit_code == 0
    assert {r.run.id for r in forkpoint.runs(Options(cassette=cassette))} == {
        first.run_id, second.run_id,
    }  # fmt: skip


def test_a_mock_can_be_a_python_callable(upstream, cassette, agent):
    seen = []

    def answer(request: forkpoint.MockRequest) -> dict[str, object]:
        seen.append(request.json()["model"])
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": "mocked"}}]}

    options = Options(cassette=cassette, upstream=upstream.url, name="base")
    forkpoint.record([*agent, "hello"], options)
    sent = upstream.request_count
    change = Change(mocks=(forkpoint.mock("POST /v1/chat/completions", answer),))
    forked = forkpoint.fork("base", [*agent, "hello"], at=0, change=change, options=options)
    assert forked.exit_code == 0 and seen == ["gpt-4o"]
    assert upstream.request_count == sent  # the mock answered, not the model


def test_a_fork_without_an_upstream_goes_where_its_parent_went(start_upstream, cassette, agent):
    """Found by a user: live steps went to api.openai.com, with the agent's key, although the
    parent was recorded against a local server."""
    local = start_upstream()
    forkpoint.record([*agent, "hello"], Options(cassette=cassette, upstream=local.url, name="p"))
    sent = local.request_count
    options = Options(cassette=cassette)  # no upstream named
    forked = forkpoint.fork("p", [*agent, "hello"], at=0, change=Change(model="gpt-4o-mini"),
                            options=options)  # fmt: skip
    assert forked.exit_code == 0 and local.request_count == sent + 1
    [step] = forkpoint.show(forked.run_id, options).exchanges
    assert step.upstream == f"{local.url}/v1/chat/completions"
