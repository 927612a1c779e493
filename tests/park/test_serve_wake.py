"""`serve --park`: a run parks (its agent's process group ended), the answer endpoint answers it,
and serve wakes it as a local process, an `--on-wake` hook, or at its deadline; a parked run
survives serve's kill -9, and of two answers at once exactly one wins, on SQLite and
PostgreSQL. Real processes, sockets, the openai SDK and a scripted upstream."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest

from forkpoint.models import Origin, ParkState, RunStatus
from tests.cli.test_serve import children_of
from tests.park.conftest import (
    APPROVAL,
    PARK,
    exchanges_of,
    gone,
    kill,
    park_of,
    start_agent,
    start_serve,
    status_of,
    wait_for,
)
from tests.runner import command_env
from tests.runner import forkpoint as run_forkpoint


def parked(store: str | Path, run_id: str):  # type: ignore[no-untyped-def]
    return wait_for(lambda: park_of(store, run_id), timeout=90)


def finished(store: str | Path, run_id: str) -> None:
    wait_for(lambda: status_of(store, run_id) is RunStatus.FINISHED, timeout=120)


def answer(
    url: str, run_id: str, body: bytes = APPROVAL, headers: dict[str, str] | None = None
) -> httpx.Response:
    return httpx.post(f"{url}/_forkpoint/runs/{run_id}/answer", content=body,
                      headers={"Content-Type": "application/json", **(headers or {})}, timeout=30)  # fmt: skip


def test_the_answer_endpoint_wakes_a_local_agent(approvals, tmp_path):
    store = tmp_path / "c.db"
    serve, url = start_serve(store, approvals.url, *PARK)
    try:
        agent = start_agent(url, "refund-1")
        park = parked(store, "refund-1")
        assert park.waits_on == "rule 'POST /approvals*'" and park.step == 1
        assert agent.wait(30) != 0 and gone(agent.pid)  # its process group ended
        assert approvals.upstream.paths() == ["/v1/chat/completions"]
        asked = time.time()
        answered = answer(url, "refund-1", headers={"X-Forkpoint-Status": "201"})
        assert answered.status_code == 200, answered.text
        assert answered.json()["step"] == 1 and answered.json()["answered_by"].startswith("http ")
        finished(store, "refund-1")
        woke_at = next(t for p, t in approvals.upstream.arrivals[1:] if p == "/v1/chat/completions")
        print(f"\nwake latency (answer -> the woken agent's next live request): "
              f"{(woke_at - asked) * 1000:.0f} ms")  # fmt: skip
    finally:
        kill(serve)
    # the approval never reached the upstream; recorded steps were served, not asked again
    assert approvals.upstream.paths() == ["/v1/chat/completions", "/v1/chat/completions"]
    assert "alice" in approvals.upstream.requests[1].body.decode()
    exchanges = exchanges_of(store, "refund-1")
    assert [e.origin for e in exchanges] == [Origin.LIVE, Origin.ANSWERED, Origin.LIVE]
    assert exchanges[1].status == 201


def test_a_parked_run_survives_serves_kill_9_and_wakes_exactly_once(approvals, tmp_path):
    store = tmp_path / "c.db"
    first, url = start_serve(store, approvals.url, *PARK)
    try:
        agent = start_agent(url, "refund-2")
        parked(store, "refund-2")
        assert agent.wait(30) != 0  # ended by parking
    finally:
        kill(first)  # kill -9 between the park and its answer
    # answered while no serve runs: the park waits, answered, for a proxy to wake it
    done = run_forkpoint("answer", "refund-2", "--store", str(store), "--body", APPROVAL.decode())
    assert done.returncode == 0, done.stderr
    assert "wakes where its launch says" in done.stderr
    assert park_of(store, "refund-2").state is ParkState.ANSWERED
    second, url = start_serve(store, approvals.url, *PARK)  # between the answer and the wake
    try:
        finished(store, "refund-2")
        time.sleep(2)  # a second wake would have started by now
    finally:
        kill(second)
    assert approvals.upstream.paths().count("/v1/chat/completions") == 2  # woken once
    origins = [e.origin for e in exchanges_of(store, "refund-2")]
    assert origins == [Origin.LIVE, Origin.ANSWERED, Origin.LIVE]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_answers_at_once_through_two_replicas_exactly_one_wins(
    kind, approvals, tmp_path, request
):
    store = tmp_path / "c.db" if kind == "sqlite" else request.getfixturevalue("postgres_url")
    one, url_one = start_serve(store, approvals.url, *PARK)
    two, url_two = start_serve(store, approvals.url, *PARK)
    try:
        agent = start_agent(url_one, "refund-3")
        parked(store, "refund-3")
        assert agent.wait(30) != 0  # ended by parking
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            got = list(pool.map(
                lambda where: answer(where[0], "refund-3", where[1]),
                [(url_one, b'{"approved": "one"}'), (url_two, b'{"approved": "two"}')],
            ))  # fmt: skip
        assert sorted(r.status_code for r in got) == [200, 409], [r.text for r in got]
        loser = next(r for r in got if r.status_code == 409)
        assert "answered already, by http" in loser.json()["error"]["message"]
        finished(store, "refund-3")
        time.sleep(2)
    finally:
        kill(one)
        kill(two)
    winner = next(r for r in got if r.status_code == 200)
    exchanges = exchanges_of(store, "refund-3")
    assert [e.origin for e in exchanges] == [Origin.LIVE, Origin.ANSWERED, Origin.LIVE]
    assert exchanges[1].response_body.decode() in winner.request.content.decode()
    assert approvals.upstream.paths().count("/v1/chat/completions") == 2  # woken once


def test_a_deadline_answers_as_a_timeout_and_wakes(approvals, tmp_path):
    store = tmp_path / "c.db"
    serve, url = start_serve(store, approvals.url, *PARK, "--park-timeout", "2s")
    try:
        agent = start_agent(url, "refund-4")
        park = parked(store, "refund-4")
        assert agent.wait(30) != 0
        assert park.deadline == pytest.approx(park.parked_at + 2)
        finished(store, "refund-4")
    finally:
        kill(serve)
    exchanges = exchanges_of(store, "refund-4")
    assert [e.origin for e in exchanges] == [Origin.LIVE, Origin.ANSWERED, Origin.LIVE]
    assert exchanges[1].status == 504
    assert orjson.loads(exchanges[1].response_body)["error"]["type"] == "timeout"
    assert "504" in approvals.upstream.requests[-1].body.decode()  # the agent saw the timeout


def test_an_on_wake_hook_gets_the_run_and_the_resume_line(approvals, tmp_path):
    store = tmp_path / "c.db"
    told = tmp_path / "told.json"
    hook = tmp_path / "hook.py"
    bin_dir = os.path.dirname(sys.executable)
    hook.write_text(
        "import json, os, subprocess, sys\n"
        f"open({str(told)!r}, 'w').write(json.dumps({{'argv': sys.argv[1:], "
        "'run': os.environ['FORKPOINT_RUN'], 'resume': os.environ['FORKPOINT_RESUME']}))\n"
        f"env = dict(os.environ, PATH={bin_dir!r} + ':' + os.environ.get('PATH', ''))\n"
        "subprocess.Popen(sys.argv[2:], env=env, start_new_session=True)\n"
    )
    serve, url = start_serve(store, approvals.url, *PARK, "--on-wake", f"{sys.executable} {hook}")
    try:
        agent = start_agent(url, "refund-5")
        parked(store, "refund-5")
        assert agent.wait(30) != 0  # ended by parking
        assert answer(url, "refund-5").status_code == 200
        finished(store, "refund-5")
    finally:
        kill(serve)
    seen = orjson.loads(told.read_bytes())
    assert seen["run"] == "refund-5" and seen["argv"][0] == "refund-5"
    assert seen["argv"][1:4] == ["forkpoint", "resume", "refund-5"]
    assert seen["resume"].startswith("forkpoint resume refund-5 ")
    assert "--park 'POST /approvals*'" in seen["resume"]


def test_the_answer_endpoint_needs_the_token_beyond_loopback(approvals, tmp_path):
    store = tmp_path / "c.db"
    serve, url = start_serve(store, approvals.url, *PARK, "--host", "0.0.0.0", "--token", "T0k")
    here = url.replace("0.0.0.0", "127.0.0.1")
    try:
        agent = start_agent(f"{here}/t/T0k", "refund-6", token="T0k")
        parked(store, "refund-6")
        assert agent.wait(30) != 0  # ended by parking
        refused = answer(here, "refund-6")
        assert refused.status_code == 401
        assert park_of(store, "refund-6").state is ParkState.PARKED  # nothing stored
        assert answer(here, "refund-6", headers={"X-Forkpoint-Token": "T0k"}).status_code == 200
        finished(store, "refund-6")
    finally:
        kill(serve)


def test_the_endpoints_errors_are_clear_and_store_nothing(approvals, tmp_path):
    store = tmp_path / "c.db"
    serve, url = start_serve(store, approvals.url, *PARK, "--max-body", "1")
    try:
        agent = start_agent(url, "refund-7")
        parked(store, "refund-7")
        assert agent.wait(30) != 0  # ended by parking
        assert answer(url, "nosuch").status_code == 404
        assert answer(url, "refund-7", headers={"X-Forkpoint-Status": "abc"}).status_code == 400
        assert answer(url, "refund-7", b"x" * (2 * 2**20)).status_code == 413
        assert park_of(store, "refund-7").state is ParkState.PARKED
        assert len(exchanges_of(store, "refund-7")) == 1
    finally:
        kill(serve)


def commands_under(pid: int) -> set[str]:
    """The command lines of `pid`'s children, as they are now."""
    found = set()
    for child in children_of(pid):
        with contextlib.suppress(OSError):
            found.add(Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode())
    return found


def test_serve_wakes_a_run_in_its_own_proxy_and_starts_its_agent_alone(approvals, tmp_path):
    """A wake was `forkpoint resume RUN -- CMD`, a second forkpoint (a Python start, imports,
    the store opened, a proxy) before the agent: most of what a wake cost beyond the agent's
    own start. Serve resumes the run in its own proxy and starts the agent alone."""
    store = tmp_path / "c.db"
    serve, url = start_serve(store, approvals.url, *PARK)
    seen: set[str] = set()
    try:
        agent = start_agent(url, "refund-8")
        parked(store, "refund-8")
        assert agent.wait(30) != 0  # ended by parking
        assert answer(url, "refund-8").status_code == 200
        deadline = time.monotonic() + 120
        while status_of(store, "refund-8") is not RunStatus.FINISHED:
            assert time.monotonic() < deadline, "the woken run did not finish"
            seen |= commands_under(serve.pid)
            time.sleep(0.01)
    finally:
        kill(serve)
    woken = [line for line in seen if "approval_agent.py" in line]
    assert woken and not any(" -m forkpoint " in line for line in woken), seen  # serve's child
    assert approvals.upstream.paths().count("/v1/chat/completions") == 2  # woken once
    exchanges = exchanges_of(store, "refund-8")
    assert [e.origin for e in exchanges] == [Origin.LIVE, Origin.ANSWERED, Origin.LIVE]


def test_a_launch_made_under_other_options_wakes_in_a_resume_of_its_own(approvals, tmp_path):
    """A serve whose options differ from those the run was launched with (its rules, what it
    masks) wakes it as its launch says: `forkpoint resume` with the launch's options."""
    store = tmp_path / "c.db"
    first, url = start_serve(store, approvals.url, *PARK)
    try:
        agent = start_agent(url, "refund-9")
        parked(store, "refund-9")
        assert agent.wait(30) != 0  # ended by parking
    finally:
        kill(first)
    other, url = start_serve(store, approvals.url, *PARK, "--redact", "x-other-secret")
    seen: set[str] = set()
    try:
        assert answer(url, "refund-9").status_code == 200
        deadline = time.monotonic() + 120
        while status_of(store, "refund-9") is not RunStatus.FINISHED:
            assert time.monotonic() < deadline, "the woken run did not finish"
            seen |= commands_under(other.pid)
            time.sleep(0.01)
    finally:
        kill(other)
    assert any(" resume refund-9 " in line for line in seen), seen
    exchanges = exchanges_of(store, "refund-9")
    assert [e.origin for e in exchanges] == [Origin.LIVE, Origin.ANSWERED, Origin.LIVE]


def test_a_wake_whose_waker_is_killed_after_its_claim_is_woken_once_by_another(
    approvals, tmp_path
):
    """serve claimed the wake, then died (kill -9) before the agent started: the park stayed
    `waking` and no waker ever took it again. Past its lease another serve wakes it, once."""
    store = tmp_path / "c.db"
    began = tmp_path / "began"
    hook = tmp_path / "hook.py"
    bin_dir = os.path.dirname(sys.executable)
    hook.write_text(
        "import os, subprocess, sys, time\n"
        f"if not os.path.exists({str(began)!r}):\n"
        f"    open({str(began)!r}, 'w').close()\n"
        "    time.sleep(3600)  # the first waker is killed meanwhile, and this with it\n"
        f"env = dict(os.environ, PATH={bin_dir!r} + ':' + os.environ.get('PATH', ''))\n"
        "subprocess.Popen(sys.argv[2:], env=env, start_new_session=True)\n"
    )
    on_wake = ("--on-wake", f"{sys.executable} {hook}")
    first, url = start_serve(store, approvals.url, *PARK, *on_wake)
    try:
        agent = start_agent(url, "refund-10")
        parked(store, "refund-10")
        assert agent.wait(30) != 0  # ended by parking
        assert answer(url, "refund-10").status_code == 200
        wait_for(began.exists)
        assert park_of(store, "refund-10").state is ParkState.WAKING
    finally:
        kill(first)  # kill -9 after the claim, before the agent started
    second, _ = start_serve(store, approvals.url, *PARK, *on_wake, "--wake-lease", "1s")
    try:
        finished(store, "refund-10")
        time.sleep(2)  # a second wake would have started by now
    finally:
        kill(second)
    assert approvals.upstream.paths().count("/v1/chat/completions") == 2  # woken once
    origins = [e.origin for e in exchanges_of(store, "refund-10")]
    assert origins == [Origin.LIVE, Origin.ANSWERED, Origin.LIVE]


def test_an_agent_serve_woke_does_not_outlive_serve(approvals, tmp_path):
    """A woken agent is served by the serve that woke it: killed with serve (kill -9), it is
    told to end (SIGTERM), rather than left calling a proxy that is gone."""
    store = tmp_path / "c.db"
    woken, go = tmp_path / "woken.pid", tmp_path / "go"
    script = tmp_path / "agent.sh"
    script.write_text(
        f"while [ ! -e {go} ]; do sleep 0.05; done\n"  # once serve knows how it started
        'curl -sf -o /dev/null -X POST -H "Content-Type: application/json" -d "{}" '
        '"$FORKPOINT_URL/r/$FORKPOINT_RUN/approvals/x" || exit 3\n'
        f'echo $$ > {woken}\n'  # only once woken: the approval, answered from the store
        "exec sleep 300\n"
    )
    serve, url = start_serve(store, approvals.url, *PARK)
    try:
        env = command_env(None, {"FORKPOINT_URL": url, "FORKPOINT_RUN": "refund-11"}, clean=True)
        agent = subprocess.Popen(["sh", str(script)], env=env, start_new_session=True)
        launch = {"command": ["sh", str(script)], "cwd": str(tmp_path), "env": env,
                  "pid": agent.pid}  # fmt: skip
        told = httpx.post(f"{url}/_forkpoint/runs/refund-11/launch", json=launch)
        assert told.status_code == 200, told.text
        go.touch()
        parked(store, "refund-11")
        assert agent.wait(30) != 0  # ended by parking
        assert answer(url, "refund-11").status_code == 200
        pid = int(wait_for(lambda: woken.exists() and woken.read_text().strip()))
        assert not gone(pid)
    finally:
        kill(serve)  # the whole of serve's group, by kill -9: the woken agent has its own
    wait_for(lambda: gone(pid), timeout=10)
