"""`record --park` parks a run (exit 75, its agent gone); `forkpoint answer` wakes it in the
foreground, every recorded step served from the cassette, and it ends as an uninterrupted run
would. Real processes, the real openai SDK, a scripted upstream on a real socket."""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import Origin, ParkState, RunStatus
from tests.park.conftest import (
    AGENT,
    API_KEY,
    APPROVAL,
    PARK,
    agent_pid,
    final_line,
    forkpoint,
    gone,
)
from tests.runner import forkpoint as run_forkpoint
from tests.runner import invoke


def record(cassette: Path, upstream, *flags: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return forkpoint(cassette, "record", "--upstream", upstream.url, *flags, "--", *AGENT, env=env)


def parked_run(cassette: Path, approvals) -> str:  # type: ignore[no-untyped-def]
    parked = record(cassette, approvals, *PARK)
    assert parked.returncode == 75, parked.stderr
    return parked.run_id


def test_a_parked_run_wakes_on_its_answer_as_if_it_had_never_stopped(approvals, tmp_path):
    whole = record(tmp_path / "whole.db", approvals)
    assert whole.returncode == 0, whole.stderr
    assert approvals.upstream.paths() == ["/v1/chat/completions", "/approvals/refund",
                                          "/v1/chat/completions"]  # fmt: skip
    approvals.upstream.reset()

    cassette = tmp_path / "parked.db"
    parked = record(cassette, approvals, *PARK)
    assert parked.returncode == 75, parked.stderr
    run_id = parked.run_id
    lines = [line for line in parked.stderr.splitlines() if line.startswith("forkpoint:")]
    assert lines == [
        f"forkpoint: run {run_id} parked at step 1, waiting on rule 'POST /approvals*'; its "
        f"agent was ended; answer it with: forkpoint answer {run_id} --body @FILE"
    ]
    assert gone(agent_pid(parked))  # its process group was ended, nothing of it left
    assert approvals.upstream.paths() == ["/v1/chat/completions"]  # the approval went nowhere
    store = SqliteStore(cassette)
    park = store.parked(run_id)
    assert store.find_run(run_id).status is RunStatus.PARKED
    assert park is not None and park.step == 1 and park.state is ParkState.PARKED
    assert b'"amount":250' in park.request.request_body.replace(b" ", b"")
    store.close()

    approvals.upstream.reset()
    answer_file = tmp_path / "approval.json"
    answer_file.write_bytes(APPROVAL)
    woken = forkpoint(cassette, "answer", run_id, "--body", f"@{answer_file}")
    assert woken.returncode == 0, woken.stderr
    assert final_line(woken) == final_line(whole)
    # zero upstream calls for the recorded steps: only the step after the answer went live
    assert approvals.upstream.paths() == ["/v1/chat/completions"]
    assert "alice" in approvals.upstream.requests[0].body.decode()
    store = SqliteStore(cassette)
    run = store.find_run(run_id)
    exchanges = store.exchanges(run_id)
    assert run.status is RunStatus.FINISHED
    assert [e.origin for e in exchanges] == [Origin.LIVE, Origin.ANSWERED, Origin.LIVE]
    assert exchanges[1].status == 200 and exchanges[1].response_body == APPROVAL
    assert store.parked(run_id) is None  # woken
    store.close()


def test_a_woken_run_that_parks_again_parks_again(approvals, tmp_path):
    cassette = tmp_path / "c.db"
    first = record(cassette, approvals, *PARK, env={"APPROVALS": "2"})
    assert first.returncode == 75, first.stderr
    again = forkpoint(cassette, "answer", first.run_id, "--body", '{"approved": 1}',
                      env={"APPROVALS": "2"})  # fmt: skip
    assert again.returncode == 75, again.stderr
    assert f"run {first.run_id} parked at step 2" in again.stderr
    assert gone(agent_pid(again))
    done = forkpoint(cassette, "answer", first.run_id, "--body", '{"approved": 2}')
    assert done.returncode == 0, done.stderr
    assert '"approved": 1' in final_line(done) and '"approved": 2' in final_line(done)
    store = SqliteStore(cassette)
    origins = [e.origin for e in store.exchanges(first.run_id)]
    assert origins == [Origin.LIVE, Origin.ANSWERED, Origin.ANSWERED, Origin.LIVE]
    store.close()


def test_a_second_answer_is_refused_naming_who_answered_when(approvals, tmp_path):
    cassette = tmp_path / "c.db"
    run_id = parked_run(cassette, approvals)
    first = forkpoint(cassette, "answer", run_id, "--no-wake", "--body", "{}")
    assert first.returncode == 0, first.stderr
    second = forkpoint(cassette, "answer", run_id, "--no-wake", "--body", '{"approved": false}')
    assert second.returncode == 2
    assert re.fullmatch(
        rf"forkpoint: run {run_id} step 1 was answered already, by cli \S+ at "
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: a parked step takes one answer\n",
        second.stderr,
    ), second.stderr
    store = SqliteStore(cassette)
    assert store.exchanges(run_id)[1].response_body == b"{}"
    store.close()


def test_bad_answers_are_clear_errors_and_store_nothing(approvals, tmp_path):
    cassette = tmp_path / "c.db"
    run_id = parked_run(cassette, approvals)
    finished = record(cassette, approvals)
    assert finished.returncode == 0, finished.stderr
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * (2 * 2**20))
    for args, says in [
        (("nosuchrun", "--body", "{}"), "no run"),
        ((finished.run_id, "--body", "{}"), "not parked"),
        ((run_id, "--status", "abc", "--body", "{}"), "not an HTTP status"),
        ((run_id, "--status", "1000", "--body", "{}"), "not an HTTP status"),
        ((run_id, "--max-body", "1", "--body", f"@{big}"), "over --max-body"),
        ((run_id, "--header", "nocolon", "--body", "{}"), "not NAME:VALUE"),
        ((run_id,), "give the answer's body"),
    ]:
        refused = forkpoint(cassette, "answer", *args)
        assert refused.returncode == 2, (args, refused.stderr)
        assert says in refused.stderr and len(refused.stderr.splitlines()) == 1, refused.stderr
    store = SqliteStore(cassette)
    park = store.parked(run_id)
    assert park is not None and park.state is ParkState.PARKED
    assert len(store.exchanges(run_id)) == 1
    store.close()


def test_a_wake_needs_the_secrets_it_was_started_with_and_no_artifact_holds_one(
    approvals, tmp_path
):
    cassette = tmp_path / "c.db"
    run_id = parked_run(cassette, approvals)
    store = SqliteStore(cassette)
    launch = store.launch(run_id)
    store.close()
    assert launch is not None and "OPENAI_API_KEY" in launch.needs
    assert "OPENAI_API_KEY" not in dict(launch.env)
    # without the key in its environment: said before anything is stored or started
    missing = run_forkpoint("answer", run_id, "--body", "{}", cassette=cassette, clean=True)
    assert missing.returncode == 2
    assert missing.stderr.startswith(f"forkpoint: run {run_id} needs OPENAI_API_KEY to wake")
    store = SqliteStore(cassette)
    assert store.parked(run_id).state is ParkState.PARKED  # type: ignore[union-attr]
    store.close()
    woken = forkpoint(cassette, "answer", run_id, "--body", '{"api_key": "' + API_KEY + '"}')
    assert woken.returncode == 0, woken.stderr
    for path in tmp_path.rglob("*"):  # the cassette, its WAL, the journals
        if path.is_file():
            assert API_KEY.encode() not in path.read_bytes(), path


def test_runs_lists_what_parked_runs_wait_on_and_wake_answers_and_wakes_one(approvals, tmp_path):
    cassette = tmp_path / "c.db"
    run_id = parked_run(cassette, approvals)
    listed = invoke("runs", "--status", "parked", cassette=cassette)
    header, row = listed.stdout.splitlines()
    assert header.split() == ["id", "step", "state", "since", "deadline", "waits", "on"]
    assert re.fullmatch(rf"{run_id}\s+1\s+parked\s+\d+s ago\s+-\s+rule 'POST /approvals\*'", row), (
        row
    )
    as_json = orjson.loads(invoke("runs", "--status", "parked", "--json", cassette=cassette).stdout)
    assert as_json["id"] == run_id and as_json["state"] == "parked" and as_json["deadline"] is None
    assert run_id not in invoke("runs", "--status", "finished", cassette=cassette).stdout
    woken = forkpoint(cassette, "wake", run_id, "--status", "200", "--body", APPROVAL.decode())
    assert woken.returncode == 0, woken.stderr
    assert "alice" in final_line(woken)
    assert invoke("runs", "--status", "parked", cassette=cassette).stdout.splitlines()[1:] == []


def test_under_record_an_on_wake_hook_is_run_by_answer(approvals, tmp_path):
    cassette = tmp_path / "c.db"
    told = tmp_path / "told"
    hook = tmp_path / "hook.sh"
    hook.write_text(f'#!/bin/sh\necho "$FORKPOINT_RUN $1 $2 $3" > {told}\n')
    hook.chmod(0o755)
    parked = record(cassette, approvals, *PARK, "--on-wake", str(hook))
    assert parked.returncode == 75, parked.stderr
    handed = forkpoint(cassette, "answer", parked.run_id, "--body", "{}")
    assert handed.returncode == 0, handed.stderr
    assert "handed to its --on-wake hook" in handed.stderr
    assert told.read_text().split() == [parked.run_id, parked.run_id, "forkpoint", "resume"]
    store = SqliteStore(cassette)
    assert store.parked(parked.run_id) is None  # woken: the hook has it
    assert [p.run_id for p in store.parks(states=("woken",))] == [parked.run_id]
    store.close()
