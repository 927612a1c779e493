"""Wakes on workers: `serve --park --wake-agent NAME` on the real PostgreSQL server parks a run
whose launch wakes on workers; its answer becomes a wake job, and a real `forkpoint worker`
with that agent claims it and resumes the run through its own in-process proxy, exactly once,
even when the worker that took it is killed mid-wake."""

from __future__ import annotations

import asyncio
import signal
import sys

import httpx
from aiohttp import web

from forkpoint.models import Origin, RunStatus
from tests.park.conftest import (
    API_KEY,
    APPROVAL,
    PARK,
    ROOT,
    ApprovalsUpstream,
    exchanges_of,
    kill,
    park_of,
    start_agent,
    start_serve,
    status_of,
    wait_for,
)
from tests.runner import forkpoint as run_forkpoint

AGENT = f"approver={sys.executable} {ROOT / 'tests/park/approval_agent.py'}"


class HoldingUpstream(ApprovalsUpstream):
    """Its model calls wait while `holding` (a woken agent caught mid-run)."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = False
        self.app.middlewares.append(self._hold)

    @web.middleware
    async def _hold(self, request: web.Request, handler):  # type: ignore[no-untyped-def]
        while self.holding and request.path.endswith("/chat/completions"):
            await asyncio.sleep(0.1)
        return await handler(request)


def _answer(url: str, run_id: str) -> None:
    answered = httpx.post(f"{url}/_forkpoint/runs/{run_id}/answer", content=APPROVAL,
                          headers={"Content-Type": "application/json"}, timeout=30)  # fmt: skip
    assert answered.status_code == 200, answered.text


def _parked(postgres_url: str, upstream_url: str, run_id: str):  # type: ignore[no-untyped-def]
    serve, url = start_serve(postgres_url, upstream_url, *PARK, "--wake-agent", "approver")
    agent = start_agent(url, run_id)
    wait_for(lambda: park_of(postgres_url, run_id), timeout=90)
    assert agent.wait(30) != 0  # ended by parking
    return serve, url


def test_an_answered_run_is_woken_by_a_worker_once(start_upstream, postgres_url, workers):  # type: ignore[no-untyped-def]
    approvals = start_upstream(ApprovalsUpstream())
    serve, url = _parked(postgres_url, approvals.url, "wake-w1")
    try:
        approvals.upstream.reset()
        _answer(url, "wake-w1")  # serve's wake loop queues a wake job, starts nothing itself
        worker = workers.start(postgres_url, AGENT, env={"OPENAI_API_KEY": API_KEY})
        wait_for(lambda: status_of(postgres_url, "wake-w1") is RunStatus.FINISHED, timeout=120)
        log = workers.stop(worker)
    finally:
        kill(serve)
    exchanges = exchanges_of(postgres_url, "wake-w1")
    assert [e.origin for e in exchanges] == [Origin.LIVE, Origin.ANSWERED, Origin.LIVE]
    assert exchanges[1].response_body == APPROVAL
    assert "alice" in exchanges[2].request_body.decode()  # the woken agent had its answer
    assert approvals.upstream.paths() == ["/v1/chat/completions"]  # only the step after it
    assert log.count("woken with agent approver") == 1, log
    assert park_of(postgres_url, "wake-w1") is None


def test_a_worker_killed_mid_wake_leaves_it_to_the_retry(start_upstream, postgres_url,
                                                         workers):  # type: ignore[no-untyped-def]  # fmt: skip
    approvals = start_upstream(HoldingUpstream())
    serve, url = _parked(postgres_url, approvals.url, "wake-w2")
    try:
        approvals.upstream.holding = True  # the woken agent's next model call waits
        _answer(url, "wake-w2")
        env = {"OPENAI_API_KEY": API_KEY}
        first = workers.start(postgres_url, AGENT, env=env, lease=2.0)
        wait_for(lambda: park_of(postgres_url, "wake-w2") is None, timeout=90)  # claimed, woken
        wait_for(lambda: approvals.upstream.arrivals[-1][0].endswith("/chat/completions"),
                 timeout=60)  # fmt: skip
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
        approvals.upstream.holding = False
        second = workers.start(postgres_url, AGENT, env=env, lease=2.0)
        wait_for(lambda: status_of(postgres_url, "wake-w2") is RunStatus.FINISHED, timeout=120)
        log = workers.stop(second)
    finally:
        kill(serve)
    exchanges = exchanges_of(postgres_url, "wake-w2")
    assert [e.origin for e in exchanges if e.complete] == [Origin.LIVE, Origin.ANSWERED,
                                                           Origin.LIVE]  # fmt: skip
    assert sum(e.origin is Origin.ANSWERED for e in exchanges) == 1
    assert "woken by a lost worker and did not end; resuming it" in log, log


def test_forkpoint_answer_queues_the_wake_for_the_workers(start_upstream, postgres_url,
                                                          workers):  # type: ignore[no-untyped-def]  # fmt: skip
    """With no serve running, `forkpoint answer` is the answering side: it queues the wake."""
    approvals = start_upstream(ApprovalsUpstream())
    serve, _ = _parked(postgres_url, approvals.url, "wake-w3")
    kill(serve)
    answered = run_forkpoint("answer", "wake-w3", "--store", postgres_url, "--body",
                             APPROVAL.decode(), env={"OPENAI_API_KEY": API_KEY})  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    assert "forkpoint: run wake-w3 queued for the workers (a wake job)" in answered.stderr
    worker = workers.start(postgres_url, AGENT, env={"OPENAI_API_KEY": API_KEY})
    wait_for(lambda: status_of(postgres_url, "wake-w3") is RunStatus.FINISHED, timeout=120)
    log = workers.stop(worker)
    assert log.count("woken with agent approver") == 1, log
    origins = [e.origin for e in exchanges_of(postgres_url, "wake-w3")]
    assert origins == [Origin.LIVE, Origin.ANSWERED, Origin.LIVE]
