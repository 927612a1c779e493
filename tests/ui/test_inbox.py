"""The inbox in a real headless Chromium: a run parked by `record --park` listed with what it
waits on, answered from its page once (a stale page's second answer refused, naming who and
when), then woken by `forkpoint wake` to the same end; a hostile pending request stays text;
a post without the form's token, or from another site, stores nothing."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import orjson
from playwright.sync_api import expect

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import Origin, Park, ParkState, Run, RunStatus
from tests.builders import exchange, llm
from tests.park.conftest import (
    AGENT,
    APPROVAL,
    PARK,
    ApprovalsUpstream,
    exchanges_of,
    final_line,
    forkpoint,
    kill,
    park_of,
    start_agent,
    start_serve,
    status_of,
    wait_for,
)
from tests.ui.conftest import screenshot
from tests.ui.test_browser import IMG, XSS


def _parked_by_record(cassette: Path, upstream_url: str) -> str:
    parked = forkpoint(cassette, "record", "--name", "refund-approval", "--upstream",
                       upstream_url, *PARK, "--", *AGENT)  # fmt: skip
    assert parked.returncode == 75, parked.stderr
    return parked.run_id


def _store_park(cassette: Path, run_id: str, body: bytes, *, route: str = "/approvals/refund",
                name: str | None = None) -> None:  # fmt: skip
    """A run with one model call, parked at step 1 on a pending POST of `body`."""
    store = SqliteStore(cassette)
    store.create_run(Run(run_id, name=name))
    store.add_exchanges([llm(0, run_id=run_id, text="plan")])
    request = exchange(run_id=run_id, step=1, route=route, request_body=body, status=None,
                       response_headers=(), response_body=b"", fingerprint="fp1")  # fmt: skip
    store.park(Park(request, "rule 'POST /approvals*'", deadline=request.started_at + 3600))
    store.close()


def test_a_parked_run_is_answered_once_from_its_page_then_woken(start_upstream, tmp_path,
                                                                start_ui, page, browser):  # type: ignore[no-untyped-def]  # fmt: skip
    approvals = start_upstream(ApprovalsUpstream())
    whole = forkpoint(tmp_path / "whole.db", "record", "--upstream", approvals.url, "--",
                      *AGENT)  # fmt: skip
    assert whole.returncode == 0, whole.stderr
    cassette = tmp_path / "parked.db"
    run_id = _parked_by_record(cassette, approvals.url)
    ui = start_ui(cassette)

    page.goto(ui.url)
    badge = page.locator("a.inbox-badge")
    expect(badge).to_have_text("1 parked: inbox")
    page.locator("form.filters select[name=status]").select_option("parked")
    page.locator("form.filters button").click()
    expect(page.locator("table.runs tbody tr")).to_have_count(1)
    expect(page.locator("table.runs tbody tr .badge")).to_have_text("parked")
    badge.click()
    row = page.locator("#parked tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("refund-approval")
    expect(row).to_contain_text("rule 'POST /approvals*'")
    expect(row).to_contain_text("POST /approvals/refund")
    expect(row.locator("pre.body")).to_contain_text('"amount":250')
    screenshot(page, "ui-inbox.png")
    inbox = orjson.loads(httpx.get(f"{ui.url}inbox.json").content)
    assert [(p["run"], p["state"], p["step"]) for p in inbox["parks"]] == [(run_id, "parked", 1)]

    stale = browser.new_context().new_page()  # the same run's page, open in a second tab
    stale.goto(f"{ui.url}runs/{run_id}")
    row.get_by_role("link").first.click()
    form = page.locator("form.answer")
    form.locator("textarea[name=body]").fill(APPROVAL.decode())
    form.locator("input[name=status]").fill("201")
    form.locator("textarea[name=headers]").fill(
        "X-Approved-By: alice\nAuthorization: Bearer sk-secret-9f8e7d6c5b4a39281706"
    )
    form.get_by_role("button", name="Answer").click()
    expect(page).to_have_url(re.compile(f"/runs/{run_id}\\?answered#park$"))
    park = page.locator("section.park")
    expect(park).to_have_attribute("data-state", "answered")
    expect(park).to_contain_text("Answered by web 127.0.0.1")
    expect(park).to_contain_text(f"forkpoint wake {run_id}")
    expect(page.locator("form.answer")).to_have_count(0)

    stale.locator("form.answer textarea[name=body]").fill('{"approved": false}')
    stale.get_by_role("button", name="Answer").click()
    expect(stale.locator("h1")).to_contain_text("409")
    expect(stale.locator("main")).to_contain_text(
        f"run {run_id} step 1 was answered already, by web 127.0.0.1 at"
    )
    stale.context.close()

    store = SqliteStore(cassette)
    answered = store.exchanges(run_id)[1]
    assert store.parked(run_id).state is ParkState.ANSWERED  # type: ignore[union-attr]
    store.close()
    assert answered.origin is Origin.ANSWERED and answered.status == 201
    assert answered.response_body == APPROVAL  # the first answer, not the stale page's
    assert ("X-Approved-By", "alice") in answered.response_headers
    assert "sk-secret-9f8e7d6c5b4a39281706" not in str(answered.response_headers)  # masked

    approvals.upstream.reset()
    woken = forkpoint(cassette, "wake", run_id)
    assert woken.returncode == 0, woken.stderr
    assert final_line(woken).replace("201", "200") == final_line(whole)
    assert approvals.upstream.paths() == ["/v1/chat/completions"]  # only the step after it
    store = SqliteStore(cassette)
    assert store.find_run(run_id).status is RunStatus.FINISHED, woken.stderr
    store.close()
    page.reload()
    expect(page.locator("#run-status")).to_have_text("finished")
    expect(page.locator("section.park")).to_have_count(0)


def test_a_hostile_pending_request_stays_text(tmp_path, start_ui, page):  # type: ignore[no-untyped-def]
    cassette = tmp_path / "hostile.db"
    _store_park(cassette, "01HOSTILEPARK", orjson.dumps({IMG: XSS, "note": XSS}),
                route=f"/approvals/{IMG}", name=XSS)  # fmt: skip
    ui = start_ui(cassette)
    page.goto(f"{ui.url}inbox")
    row = page.locator("#parked tbody tr")
    expect(row.locator("pre.body")).to_contain_text(XSS)
    expect(row.locator("td.pending code")).to_contain_text(IMG)
    expect(row.locator("td.id a")).to_have_text(XSS)
    row.locator("td.id a").click()
    expect(page.locator("section.park pre.pending-body")).to_contain_text(XSS)
    expect(page.locator("section.park h4 code")).to_contain_text(IMG)
    assert page.evaluate("window.__xss") is None
    assert page.locator("script").count() == 1  # forkpoint.js alone
    assert page.locator("img").count() == 0


def test_an_answer_without_the_forms_token_stores_nothing(tmp_path, start_ui, page):  # type: ignore[no-untyped-def]
    cassette = tmp_path / "csrf.db"
    _store_park(cassette, "01CSRF", b'{"amount": 900}')
    ui = start_ui(cassette)
    page.goto(f"{ui.url}runs/01CSRF")
    page.locator("form.answer input[name=csrf]").evaluate("input => input.remove()")
    page.locator("form.answer textarea[name=body]").fill('{"approved": true}')
    page.get_by_role("button", name="Answer").click()
    expect(page.locator("h1")).to_contain_text("403")
    expect(page.locator("main")).to_contain_text("the form's token is missing or stale")

    url = f"{ui.url}runs/01CSRF/answer"
    forged = httpx.post(url, data={"csrf": "guessed", "body": "{}"})
    assert forged.status_code == 403
    token = re.search(r'name="csrf" value="([^"]+)"', httpx.get(f"{ui.url}runs/01CSRF").text)
    assert token is not None
    elsewhere = httpx.post(url, data={"csrf": token[1], "body": "{}"},
                           headers={"Origin": "http://evil.example"})  # fmt: skip
    assert elsewhere.status_code == 403
    assert httpx.get(f"{url}").status_code == 405  # a GET never answers
    store = SqliteStore(cassette)
    assert store.parked("01CSRF").state is ParkState.PARKED  # type: ignore[union-attr]
    assert [e.step for e in store.exchanges("01CSRF")] == [0]
    assert store.find_run("01CSRF").status is RunStatus.PARKED
    store.close()

    too_big = httpx.post(url, data={"csrf": token[1], "body": "x" * (2 << 20)})
    assert too_big.status_code == 413
    bad = httpx.post(url, data={"csrf": token[1], "status": "abc", "body": "{}"})
    assert bad.status_code == 400
    done = httpx.post(f"{url}.json", data={"csrf": token[1], "body": '{"ok": true}'})
    assert done.status_code == 200, done.text
    assert orjson.loads(done.content)["state"] == "answered"


def test_answered_under_serve_its_wake_loop_wakes_it(start_upstream, tmp_path, page):  # type: ignore[no-untyped-def]
    """The same form under `serve --park`'s /_forkpoint/ui/: serve's wake loop wakes the run
    as a local process, which finishes live from its answered step."""
    approvals = start_upstream(ApprovalsUpstream())
    store = tmp_path / "served.db"
    serve, url = start_serve(store, approvals.url, *PARK)
    try:
        agent = start_agent(url, "refund-9")
        wait_for(lambda: park_of(store, "refund-9"), timeout=90)
        assert agent.wait(30) != 0  # ended by parking
        page.goto(f"{url}/_forkpoint/ui/inbox")
        page.locator("#parked tbody tr td.id a").click()
        page.locator("form.answer textarea[name=body]").fill(APPROVAL.decode())
        page.get_by_role("button", name="Answer").click()
        expect(page).to_have_url(re.compile("/_forkpoint/ui/runs/refund-9\\?answered#park$"))
        wait_for(lambda: status_of(store, "refund-9") is RunStatus.FINISHED, timeout=120)
        origins = [e.origin for e in exchanges_of(store, "refund-9")]
        assert origins == [Origin.LIVE, Origin.ANSWERED, Origin.LIVE]
    finally:
        kill(serve)
