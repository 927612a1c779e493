"""The web view over HTTP, as `forkpoint ui` and `forkpoint serve` serve it: every page as
JSON too, the diff page the same report as `forkpoint diff --html`, filters and pages over many
runs, the live stream resuming from `Last-Event-ID`, the token, the host guard, and a cassette
left exactly as it was."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import subprocess
import sys
import time

import pytest
import requests

from forkpoint.api import Options, Reader, diff
from forkpoint.cassettes.open import open_store
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.compare.html import diff_body
from forkpoint.compare.render import diff_json
from forkpoint.errors import CassetteError
from forkpoint.models import Mode, Run, RunStatus
from tests.builders import llm
from tests.cli.test_serve import start_serve, stop
from tests.pg import postgres_url as postgres_url  # the fixture
from tests.runner import ROOT, command_env
from tests.ui.conftest import UiProcess


def test_every_page_answers_its_data_as_json(demo, start_ui):  # type: ignore[no-untyped-def]
    ui = start_ui(demo.cassette)
    runs = requests.get(f"{ui.url}runs.json", timeout=10).json()
    assert [(r["name"], r["mode"], r["depth"], r["steps"]) for r in runs["runs"]] == [
        ("demo-ticket", "record", 0, 7), ("cheaper-model", "fork", 1, 7), (None, "replay", 1, 7),
    ]  # fmt: skip
    assert runs["runs"][1]["parent_id"] == demo.parent
    run = requests.get(f"{ui.url}runs/{demo.fork}.json", timeout=10).json()
    assert [s["origin"] for s in run["steps"]] == ["replayed"] * 2 + ["live"] * 5
    assert run["parent"] == {"id": demo.parent, "name": "demo-ticket"}
    assert run["totals"]["replayed"]["steps"] == 2
    step = requests.get(f"{ui.url}runs/{demo.fork}/steps/6.json", timeout=10).json()
    assert step["model"] == "gpt-4o-mini" and step["streamed"]
    assert step["response"]["events"][-1] == {
        "offset_ms": step["response"]["events"][-1]["offset_ms"], "event": "message",
        "data": "[DONE]",
    }  # fmt: skip
    offsets = [e["offset_ms"] for e in step["response"]["events"]]
    assert offsets == sorted(offsets) and offsets[-1] > 0
    assert ["authorization", "[redacted]"] in step["request"]["headers"]
    assert '"stream":true' in step["request"]["body"].replace(" ", "")
    shown = requests.get(f"{ui.url}diff/{demo.parent}/{demo.fork}.json", timeout=10).json()
    assert shown == diff_json(diff(demo.parent, demo.fork, Options(cassette=demo.cassette)))
    assert requests.get(f"{ui.url}experiments.json", timeout=10).json() == {"experiments": []}
    assert requests.get(f"{ui.url}inbox.json", timeout=10).json() == {
        "parks": [], "after": "", "next": None
    }


def test_the_diff_page_is_the_html_report_with_its_runs_linked(demo, start_ui):  # type: ignore[no-untyped-def]
    ui = start_ui(demo.cassette)
    page = requests.get(f"{ui.url}diff/demo-ticket/cheaper-model", timeout=10).text
    report = page.partition('<div class="report">\n')[2].partition(
        '\n</div>\n<p class="json-link">'
    )[0]
    assert f'<a href="../../runs/{demo.fork}">' in report
    unlinked = re.sub(r"</?a[^>]*>", "", report)
    expected = diff_body(diff(demo.parent, demo.fork, Options(cassette=demo.cassette)))
    assert unlinked == expected
    assert "<th>B - A</th>" in expected  # each step's delta of time, tokens and cost


def test_runs_are_filtered_and_paged_as_trees_newest_first(tmp_path, start_ui):  # type: ignore[no-untyped-def]
    cassette = tmp_path / "many.db"
    store = SqliteStore(cassette)
    day = 86_400.0
    for index in range(120):
        status = RunStatus.CRASHED if index % 10 == 0 else RunStatus.FINISHED
        store.create_run(Run(f"01RUN{index:03}", name=f"ticket-{index}", status=status,
                             labels={"batch": "a" if index < 60 else "b"},
                             created_at=1_780_000_000 + index * day))  # fmt: skip
    store.create_run(Run("01RUN000X", name="ticket-0-fork", mode=Mode.FORK, parent_id="01RUN000",
                         fork_step=0, created_at=1_780_000_000 + 200 * day))  # fmt: skip
    store.close()
    ui = start_ui(cassette)

    def ids(query: str = "") -> list[str]:
        found = requests.get(f"{ui.url}runs.json{query}", timeout=10).json()
        return [row["id"] for row in found["runs"]]

    assert ids() == [f"01RUN{i:03}" for i in range(119, 69, -1)]
    assert ids("?page=3") == [*(f"01RUN{i:03}" for i in range(19, 0, -1)), "01RUN000", "01RUN000X"]
    assert ids("?status=crashed")[:2] == ["01RUN110", "01RUN100"]
    assert ids("?label=batch%3Da&name=ticket-5") == [f"01RUN{i:03}" for i in range(59, 49, -1)] + [
        "01RUN005"
    ]
    assert ids("?select=mode:fork") == ["01RUN000X"]  # its parent left out: a root of its own
    moment = time.strftime("%Y-%m-%d", time.localtime(1_780_000_000 + 118 * day))
    assert ids(f"?since={moment}") == ["01RUN119", "01RUN118", "01RUN000X"]  # by id
    bad = requests.get(f"{ui.url}runs?since=yesterday", timeout=10)
    assert bad.status_code == 400
    assert "&#39;yesterday&#39; is not an ISO date" in bad.text
    html = requests.get(f"{ui.url}runs?page=2&status=finished", timeout=10).text
    assert 'href="./runs?status=finished&amp;page=3" rel="next"' in html


def test_a_live_page_resumes_from_the_last_event_id(tmp_path, start_ui):  # type: ignore[no-untyped-def]
    cassette = tmp_path / "live.db"
    store = SqliteStore(cassette)
    store.create_run(Run("01LIVE", name="live"))
    store.add_exchanges([llm(step, run_id="01LIVE", text=f"answer {step}") for step in range(5)])
    ui = start_ui(cassette)
    headers = {"Last-Event-ID": "0-2", "Accept": "text/event-stream"}
    with requests.get(f"{ui.url}runs/01LIVE/events", headers=headers, stream=True,
                      timeout=10) as events:  # fmt: skip
        assert events.headers["Content-Type"] == "text/event-stream"
        lines = events.iter_lines(decode_unicode=True)
        name, ident, data = _next_event(lines)
        assert (name, ident) == ("steps", "0-4")
        assert [s["step"] for s in data["steps"]] == [3, 4]
        assert 'id="step-3"' in data["steps"][0]["row"] and "5 steps" in data["totals"]
        store.add_exchanges([llm(5, run_id="01LIVE", text="answer 5")])  # written as it reads
        name, ident, data = _next_event(lines)
        assert (name, ident, [s["step"] for s in data["steps"]]) == ("steps", "0-5", [5])
        store.finish_run("01LIVE", RunStatus.FINISHED)
        assert _next_event(lines)[:2] == ("end", None)
    store.close()
    with requests.get(f"{ui.url}runs/01LIVE/events?after=0-1,3", stream=True, timeout=10) as again:
        lines = again.iter_lines(decode_unicode=True)
        name, ident, data = _next_event(lines)
        assert (ident, [s["step"] for s in data["steps"]]) == ("0-5", [2, 4, 5])


def test_a_postgresql_store_is_browsed_and_followed(postgres_url, start_ui):  # type: ignore[no-untyped-def]
    store = open_store(postgres_url)
    try:
        store.create_run(Run("01PGRUN", name="on-postgres"))
        store.add_exchanges([llm(0, run_id="01PGRUN", text="first")])
        ui = start_ui(postgres_url)
        listed = requests.get(f"{ui.url}runs.json", timeout=10).json()["runs"]
        assert [row["name"] for row in listed] == ["on-postgres"]
        page = requests.get(f"{ui.url}runs/on-postgres", timeout=10).text
        assert 'data-live="../runs/01PGRUN/events?after=0"' in page
        assert "--store &#34;$FORKPOINT_STORE&#34;" in page  # its password never on a page
        with requests.get(f"{ui.url}runs/01PGRUN/events?after=0", stream=True,
                          timeout=10) as events:  # fmt: skip
            lines = events.iter_lines(decode_unicode=True)
            store.add_exchanges([llm(1, run_id="01PGRUN", text="second")])
            name, ident, data = _next_event(lines)
            assert (name, ident, [s["step"] for s in data["steps"]]) == ("steps", "0-1", [1])
    finally:
        store.close()


def _next_event(lines):  # type: ignore[no-untyped-def]
    """The next server-sent event: its name, id and data (JSON when it is)."""
    import json

    name = ident = None
    data: list[str] = []
    for line in lines:
        if line == "" and name is not None:
            text = "\n".join(data)
            return name, ident, json.loads(text) if text.startswith("{") else text
        field, _, value = line.partition(": ")
        if field == "event":
            name = value
        elif field == "id":
            ident = value
        elif field == "data":
            data.append(value)
    raise AssertionError("the stream ended")


def test_the_token_guards_every_page_and_links_keep_it(demo, start_ui):  # type: ignore[no-untyped-def]
    ui = start_ui(demo.cassette, "--token", "s3cret")
    refused = requests.get(f"{ui.url}runs", timeout=10)
    assert refused.status_code == 401
    assert "needs its token" in refused.text and "text/html" in refused.headers["Content-Type"]
    assert requests.get(f"{ui.url}t/wrong/runs", timeout=10).status_code == 401
    page = requests.get(f"{ui.url}t/s3cret/runs/{demo.fork}", timeout=10)
    assert page.status_code == 200
    hrefs = re.findall(r'(?:href|src|data-src)="([^"]+)"', page.text)
    assert hrefs and not [h for h in hrefs if h.startswith(("/", "http")) and h != "data:,"]
    header = {"X-Forkpoint-Token": "s3cret"}
    assert requests.get(f"{ui.url}runs.json", headers=header, timeout=10).status_code == 200


def test_beyond_loopback_a_token_is_made_up(demo):  # type: ignore[no-untyped-def]
    ui = UiProcess(demo.cassette, "--host", "0.0.0.0")
    try:
        port = ui.url.rstrip("/").rsplit(":", 1)[1]
        local = f"http://127.0.0.1:{port}/"
        assert requests.get(f"{local}runs", timeout=10).status_code == 401
    finally:
        err = ui.stop()
    assert ui.process.returncode == 0, err
    token = re.search(r"open http://\S+/t/(\S+)/$", err, re.MULTILINE)
    assert token, err


def test_answers_only_loopback_names_and_only_reads(demo, start_ui):  # type: ignore[no-untyped-def]
    before = hashlib.sha256(demo.cassette.read_bytes()).hexdigest()
    ui = start_ui(demo.cassette)
    assert requests.get(ui.url, headers={"Host": "evil.example"}, timeout=10).status_code == 421
    assert requests.post(f"{ui.url}runs", timeout=10).status_code == 405
    for path in ("", "runs", f"runs/{demo.fork}", f"runs/{demo.fork}/steps/3",
                 f"runs/{demo.fork}/steps/3?part", f"diff/{demo.parent}/{demo.fork}",
                 "experiments", "inbox", "diff", "static/forkpoint.js"):  # fmt: skip
        answer = requests.get(f"{ui.url}{path}", timeout=10)
        assert answer.status_code == 200, (path, answer.text)
        assert "script-src 'self'" in answer.headers["Content-Security-Policy"]
    missing = requests.get(f"{ui.url}runs/nothing-here", timeout=10)
    assert missing.status_code == 404 and "no run &#39;nothing-here&#39;" in missing.text
    assert requests.get(f"{ui.url}runs/{demo.fork}/steps/99", timeout=10).status_code == 404
    assert hashlib.sha256(demo.cassette.read_bytes()).hexdigest() == before


def test_serve_shows_the_web_view_behind_its_token(upstream, tmp_path):  # type: ignore[no-untyped-def]
    process, url = start_serve(tmp_path / "served.db", upstream.url, "--token", "tok")
    try:
        assert process.stdout is not None
        assert (
            process.stdout.readline().strip()
            == f"forkpoint web view on {url}/t/TOKEN/_forkpoint/ui/"
        )
        assert requests.get(f"{url}/_forkpoint/ui/runs", timeout=10).status_code == 401
        root = requests.get(f"{url}/t/tok/_forkpoint/ui", allow_redirects=False, timeout=10)
        assert (root.status_code, root.headers["Location"]) == (302, "ui/")
        runs = requests.get(f"{url}/t/tok/_forkpoint/ui/", timeout=10)
        assert runs.status_code == 200 and "No run recorded yet" in runs.text
    finally:
        assert stop(process) == 0


def test_without_jinja2_ui_names_the_extra(tmp_path):  # type: ignore[no-untyped-def]
    blocked = (
        "import sys; sys.modules['jinja2'] = None; from forkpoint.cli import main; "
        "main(['ui', '--cassette', sys.argv[1]])"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocked, str(tmp_path / "none.db")],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env=command_env(clean=True),
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        "forkpoint: the web view (forkpoint ui, serve's /_forkpoint/ui/) needs the extra ui "
        "(no module named jinja2): pip install 'forkpoint[ui]'\n"
    )


def test_what_does_not_read_is_named_and_the_rest_shown(tmp_path, start_ui):  # type: ignore[no-untyped-def]
    cassette = tmp_path / "damaged.db"
    store = SqliteStore(cassette)
    for run_id in ("01GOOD", "01ODD"):
        store.create_run(Run(run_id, name=run_id.lower()))
        store.add_exchanges([llm(step, run_id=run_id) for step in range(3)])
    store.close()
    with sqlite3.connect(cassette) as raw:  # as a newer forkpoint, or a broken disk, left it
        raw.execute("UPDATE runs SET status = 'hibernating' WHERE id = '01ODD'")
        raw.execute(
            "UPDATE exchanges SET tool_calls = 'not json' WHERE run_id = '01GOOD' AND step = 1"
        )
    ui = start_ui(cassette)
    runs = requests.get(f"{ui.url}runs.json", timeout=10).json()
    assert [(row["id"], row["steps"]) for row in runs["runs"]] == [("01GOOD", 2)]
    assert len(runs["damaged"]) == 2 and "01ODD" in runs["damaged"][0]
    page = requests.get(f"{ui.url}runs/01GOOD", timeout=10)
    assert page.status_code == 200 and "Left out, as they could not be read" in page.text
    assert 'id="step-2"' in page.text and 'id="step-1"' not in page.text


def test_a_reader_never_creates_a_cassette(tmp_path):  # type: ignore[no-untyped-def]
    with Reader(Options(cassette=tmp_path / "absent.db")) as reader:
        with pytest.raises(CassetteError, match="no cassette at"):
            reader.runs()
    assert not (tmp_path / "absent.db").exists()


def test_a_killed_proxys_journal_is_shown_and_its_run_crashed(tmp_path, start_ui):  # type: ignore[no-untyped-def]
    from forkpoint.runtime.recording.journal import Journal, journal_dir
    from tests.runtime.test_unmerged import chat, died

    cassette = tmp_path / "killed.db"
    store = SqliteStore(cassette)
    journal = Journal(journal_dir(store))
    run = Run("01KILLED", name="killed", owner=journal.owner)
    store.create_run(run)
    store.add_exchanges([chat(0, "stored", run.id)])
    for step in range(3):
        journal.entry(chat(step, f"journaled {step}", run.id))
    died(journal)
    store.close()
    ui = start_ui(cassette)
    page = requests.get(f"{ui.url}runs/{run.id}.json", timeout=10).json()
    assert page["run"]["status"] == "crashed" and not page["live"]
    assert [(s["step"], s["journaled"]) for s in page["steps"]] == [
        (0, False), (1, True), (2, True),
    ]  # fmt: skip
    html = requests.get(f"{ui.url}runs/{run.id}", timeout=10).text
    assert "its forkpoint process is gone" in html and ">journal</span>" in html
