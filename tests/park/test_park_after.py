"""`serve --park-after`: a request its upstream is slow to answer parks the run (its agent
ended) while serve keeps waiting on the upstream; the late answer is recorded as any other and
wakes the run, which is served it from the cassette. Real processes, sockets, the openai SDK."""

from __future__ import annotations

import time

from forkpoint.models import Origin, RunStatus
from tests.park.conftest import (
    AGENT,
    agent_pid,
    exchanges_of,
    final_line,
    forkpoint,
    gone,
    kill,
    park_of,
    start_agent,
    start_serve,
    status_of,
    wait_for,
)

SLOW = {"TOOL": "/slow/lookup"}


def test_a_slow_upstream_parks_the_run_and_its_late_answer_wakes_it(approvals, tmp_path):
    approvals.upstream.slow_for = 6.0
    store = tmp_path / "c.db"
    serve, url = start_serve(store, approvals.url, "--park-after", "1s")
    try:
        agent = start_agent(url, "lookup-1", SLOW)
        park = wait_for(lambda: park_of(store, "lookup-1"), timeout=90)
        assert park.waits_on == f"upstream {approvals.url}/slow/lookup after 1s"
        assert agent.wait(30) != 0 and gone(agent.pid)  # ended while the upstream thinks
        assert status_of(store, "lookup-1") is RunStatus.PARKED
        slow_asked = next(t for p, t in approvals.upstream.arrivals if p == "/slow/lookup")
        assert time.time() - slow_asked < approvals.upstream.slow_for  # parked before it answered
        wait_for(lambda: status_of(store, "lookup-1") is RunStatus.FINISHED, timeout=120)
    finally:
        kill(serve)
    # the slow tool was asked once: its late answer was recorded, then served to the woken run
    assert approvals.upstream.paths() == [
        "/v1/chat/completions", "/slow/lookup", "/v1/chat/completions",
    ]  # fmt: skip
    exchanges = exchanges_of(store, "lookup-1")
    assert [e.origin for e in exchanges] == [Origin.LIVE, Origin.LIVE, Origin.LIVE]
    assert exchanges[1].response_body == b'{"slow": "done"}' and exchanges[1].complete
    assert '"slow": "done"' in approvals.upstream.requests[-1].json["messages"][0]["content"]


def test_under_record_the_late_answer_is_kept_and_wake_goes_on_with_it(approvals, tmp_path):
    approvals.upstream.slow_for = 4.0
    cassette = tmp_path / "c.db"
    parked = forkpoint(cassette, "record", "--upstream", approvals.url, "--park-after", "1s",
                       "--", *AGENT, env=SLOW)  # fmt: skip
    assert parked.returncode == 75, parked.stderr
    assert gone(agent_pid(parked))
    assert f"its upstream has answered: wake it with forkpoint wake {parked.run_id}" in (
        parked.stderr
    )
    woken = forkpoint(cassette, "wake", parked.run_id)
    assert woken.returncode == 0, woken.stderr
    assert '"slow": "done"' in final_line(woken)
    assert approvals.upstream.paths().count("/slow/lookup") == 1
