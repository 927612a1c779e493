"""The web view in a real headless Chromium: a person's way through a recorded cassette (runs,
a fork, its steps, a streamed answer, its parent, the diff), a recording watched live, an XSS
attempt in every recorded place, and a run of 1,000 steps."""

from __future__ import annotations

import re
import time
from pathlib import Path

import openai
import orjson
from playwright.sync_api import expect

from forkpoint.api import Options, Reader
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.errors import ForkpointError
from forkpoint.models import Chunk, Run, Snapshot
from tests.builders import llm, tool
from tests.cli.test_serve import start_serve, stop
from tests.ui.conftest import screenshot


def test_runs_then_a_fork_its_streamed_answer_its_parent_and_the_diff(demo, start_ui, page):  # type: ignore[no-untyped-def]
    with Reader(Options(cassette=demo.cassette)) as reader:
        answer = reader.show(demo.fork).exchanges[-1].summary.text  # type: ignore[union-attr]
    assert answer
    ui = start_ui(demo.cassette)
    page.goto(ui.url)
    rows = page.locator("table.runs tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("demo-ticket")
    expect(rows.nth(1)).to_contain_text("cheaper-model")
    expect(rows.nth(1)).to_contain_text("fork @ 2")
    expect(rows.nth(2)).to_contain_text("replay")
    screenshot(page, "ui-runs.png")

    page.get_by_role("link", name=demo.fork).click()
    expect(page.locator("h1")).to_contain_text("cheaper-model")
    expect(page.locator("#lanes .lane")).to_have_count(7)
    expect(page.locator("#lanes .bar.o-replayed")).to_have_count(2)  # steps 0 and 1
    expect(page.locator("#lanes .lane").nth(6).locator(".bar > i").first).to_be_attached()
    last = page.locator("#step-6")
    expect(last.locator("summary")).to_contain_text("stream")
    last.locator("summary").click()
    expect(last.locator("pre.text")).to_have_text(answer)
    expect(last.locator("table.events tbody tr").first).to_be_visible()
    expect(last.locator(".fork-here code.cmd")).to_have_text(
        f"forkpoint fork {demo.fork} --at 6 --cassette {demo.cassette} -- YOUR_AGENT_COMMAND"
    )
    expect(last.locator("td.masked").first).to_have_text("[redacted]")  # the agent's API key
    screenshot(page, "ui-run.png")

    page.locator(".lineage a.parent").click()
    expect(page).to_have_url(re.compile(f"/runs/{demo.parent}$"))
    expect(page.locator("h1")).to_contain_text("demo-ticket")
    page.go_back()
    page.locator(".lineage a.diff-link").click()
    expect(page.locator(".report h1")).to_contain_text("demo-ticket")
    expect(page.locator(".report")).to_contain_text("B is a fork of A at step 2")
    expect(page.locator(".report")).to_contain_text("gpt-4o-mini")


def test_a_recording_grows_on_the_page_as_serve_records_it(upstream, tmp_path, page):  # type: ignore[no-untyped-def]
    """`forkpoint serve` records; its own /_forkpoint/ui/ page shows each step as it lands."""
    process, url = start_serve(tmp_path / "live.db", upstream.url)
    try:
        client = openai.OpenAI(base_url=f"{url}/r/live-run/v1", api_key="sk-test", max_retries=0)

        def ask(question: str) -> None:
            client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": question}]
            )

        ask("first")
        page.goto(f"{url}/_forkpoint/ui/runs")
        page.get_by_role("link", name="live-run").click()
        expect(page.locator("#run-status")).to_have_text("running")
        expect(page.locator("#steps > li")).to_have_count(1, timeout=10_000)
        loaded = page.evaluate("performance.timeOrigin")
        for index in range(2, 5):
            ask(f"question {index}")
            expect(page.locator("#steps > li")).to_have_count(index, timeout=10_000)
            expect(page.locator("#lanes .lane")).to_have_count(index)
        assert page.evaluate("performance.timeOrigin") == loaded  # no reload: the same page
        expect(page.locator("#totals")).to_contain_text("4 steps")
        page.locator("#step-3 summary").click()
        expect(page.locator("#step-3 pre.text")).to_have_text("[gpt-4o] question 4")
    finally:
        assert stop(process) == 0


def test_a_run_recorded_elsewhere_ends_on_the_page(upstream, tmp_path, start_ui, page):  # type: ignore[no-untyped-def]
    """`forkpoint ui` in its own process follows what `forkpoint serve` records, through
    the store, until the run ends."""
    cassette = tmp_path / "shared.db"
    process, url = start_serve(cassette, upstream.url)
    stopped = False
    try:
        client = openai.OpenAI(base_url=f"{url}/r/watched/v1", api_key="sk-test", max_retries=0)
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "a"}])
        _wait_for_steps(cassette, "watched", 1)
        ui = start_ui(cassette)
        page.goto(f"{ui.url}runs/watched")
        expect(page.locator(".live-dot")).to_be_visible()
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "b"}])
        expect(page.locator("#steps > li")).to_have_count(2, timeout=10_000)
        assert stop(process) == 0
        stopped = True
        expect(page.locator("#run-status")).to_have_text("finished", timeout=10_000)
        expect(page.locator(".live-dot")).to_have_count(0)
    finally:
        if not stopped:
            stop(process)


XSS = "<script>window.__xss = 1; alert('xss')</script>"
IMG = "<img src=x onerror=\"window.__xss = 1; alert('xss')\">"


def test_a_hostile_recording_stays_text(tmp_path, start_ui, page):  # type: ignore[no-untyped-def]
    """Markup in a run's name and labels, a header's name and value, a JSON and a text body,
    a stream's events, a tool call and an error shows as the characters it is."""
    cassette = tmp_path / "hostile.db"
    store = SqliteStore(cassette)
    store.create_run(Run("01HOSTILE", name=IMG, labels={IMG: XSS}, error=XSS))
    chunks = [Chunk(5.0, f"data: {XSS}\n\n".encode()), Chunk(9.0, b"data: [DONE]\n\n")]
    store.add_exchanges([
        llm(0, run_id="01HOSTILE", text=XSS, model=IMG,
            request_headers=((IMG, XSS), ("content-type", "application/json")),
            request_body=orjson.dumps({IMG: XSS}),
            response_headers=(("content-type", "text/html"), ("x-note", IMG)),
            response_body=XSS.encode()),
        llm(1, run_id="01HOSTILE", text=XSS, response_headers=(("content-type", "text/event-stream"),),
            response_body=b"".join(c.data for c in chunks), chunks=chunks, error=IMG),
        tool(2, run_id="01HOSTILE", route=f"/tools/{XSS}"),
    ])  # fmt: skip
    store.add_snapshot(Snapshot("01HOSTILE", 1, IMG, data=b"{}"))
    store.close()
    ui = start_ui(cassette)
    page.goto(ui.url)
    expect(page.locator("table.runs")).to_contain_text(IMG)
    expect(page.locator("table.runs")).to_contain_text(XSS)
    page.get_by_role("link", name="01HOSTILE").click()
    expect(page.locator("h1")).to_contain_text(IMG)
    expect(page.locator("p.error")).to_have_text(XSS)
    for step in range(3):
        page.locator(f"#step-{step} summary").click()
        expect(page.locator(f"#step-{step} .step-detail")).to_be_visible()
    details = page.locator("#steps")
    expect(details.locator("table.headers th").filter(has_text=IMG)).to_have_count(1)
    expect(details.locator("pre.body").filter(has_text=XSS)).to_have_count(1)
    expect(details.locator("table.events code").filter(has_text=XSS)).to_have_count(1)
    expect(details.locator(".failure pre")).to_have_text(IMG)
    page.goto(f"{ui.url}runs/01HOSTILE/steps/0")
    expect(page.locator(".json .j-key").first).to_have_text(IMG)
    assert page.evaluate("window.__xss") is None
    assert page.locator("script").count() == 1  # forkpoint.js alone
    assert page.locator("img").count() == 0


def test_a_run_of_a_thousand_steps_renders(tmp_path, start_ui, page):  # type: ignore[no-untyped-def]
    cassette = tmp_path / "long.db"
    _thousand_steps(cassette)
    ui = start_ui(cassette)
    began = time.perf_counter()
    page.goto(f"{ui.url}runs/long")
    expect(page.locator("#steps > li")).to_have_count(1000)
    expect(page.locator("#lanes .lane")).to_have_count(1000)
    loaded = time.perf_counter() - began
    assert loaded < 15, f"the 1,000-step page took {loaded:.1f} s"
    page.locator("#step-998 summary").click()
    # (expect's polling of a 1,000-step page starved the page's own fetch here; waiting for
    # the selector does not)
    page.wait_for_selector("#step-998 pre.text", timeout=15_000)
    expect(page.locator("#step-998 pre.text")).to_have_text("answer 998")


def _thousand_steps(cassette: Path, steps: int = 1000) -> None:
    """A run of `steps` exchanges, a streamed model call then a tool call, over and over."""
    store = SqliteStore(cassette)
    store.create_run(Run("01LONGRUN", name="long"))
    began = time.time() - steps
    exchanges = []
    for step in range(steps):
        at = began + step
        if step % 2:
            exchanges.append(tool(step, run_id="01LONGRUN", started_at=at, duration_ms=40.0,
                                  ttfb_ms=30.0, route=f"/tools/lookup/{step}"))  # fmt: skip
            continue
        chunks = [Chunk(20.0 + 10 * i, f'data: {{"n": {i}}}\n\n'.encode()) for i in range(30)]
        exchanges.append(llm(
            step, run_id="01LONGRUN", text=f"answer {step}",
            started_at=at, duration_ms=330.0, ttfb_ms=20.0, chunks=chunks,
            response_body=b"".join(c.data for c in chunks),
            response_headers=(("content-type", "text/event-stream"),),
        ))  # fmt: skip
    store.add_exchanges(exchanges)
    store.close()


def _wait_for_steps(cassette: Path, run: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with Reader(Options(cassette=cassette)) as reader:
                if reader.step_count(run) >= count:
                    return
        except ForkpointError:  # the cassette or the run may not be written yet
            pass
        time.sleep(0.05)
    raise AssertionError(f"run {run} has fewer than {count} steps")
