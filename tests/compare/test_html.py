"""The HTML page: a valid, self-contained document with the diff's tables, values escaped."""

from __future__ import annotations

from html.parser import HTMLParser

from forkpoint.compare.diff import diff_runs, diff_stored
from forkpoint.compare.html import diff_body, diff_html
from forkpoint.models import Exchange, Run, Usage
from tests.builders import llm

VOID = {"meta", "br", "link", "img", "input", "hr"}


class Page(HTMLParser):
    """Collects tags and text, and checks every non-void element is closed in order."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str | None]] = []
        self.open: list[str] = []
        self.text: list[str] = []
        self.doctype: str | None = None

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += attrs
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open.pop() == tag, f"</{tag}> closes nothing open"

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    page.close()
    assert page.open == [], f"unclosed: {page.open}"
    return page


def test_the_page_is_valid_and_self_contained(shop, store):
    parent = shop.record("parent")
    shop.fork(parent, "child", model="gpt-4o-mini")
    page = parse(diff_html(diff_stored(store, "parent", "child")))
    assert page.doctype == "DOCTYPE html"
    assert page.tags[:4] == ["html", "head", "meta", "title"] and "style" in page.tags
    assert page.tags.count("table") == 3 and "td" in page.tags
    assert not {"script", "link", "img", "iframe", "object"} & set(page.tags)
    assert all(name not in ("src", "href") for name, _ in page.attributes)
    text = "".join(page.text)
    assert "http://" not in text and "https://" not in text and "url(" not in text
    assert "First difference: step 2." in text and "refund_policy" in text
    assert "replayed prefix" in text and "+[gpt-4o-mini]" in text


def test_values_from_the_cassette_are_escaped():
    def answer(run_id: str, text: str) -> Exchange:
        return llm(run_id=run_id, text=text, fingerprint="x")

    hostile = '<script>alert("x")</script><img src="https://evil.example/x.png">'
    html = diff_html(
        diff_runs(Run("a", name="<b>"), [answer("a", "fine")], Run("b"), [answer("b", hostile)])
    )
    page = parse(html)
    assert (
        "script" not in page.tags and "img" not in page.tags and "b" in page.tags
    )  # <b>A</b> only
    assert hostile in "".join(page.text)


def test_each_step_says_what_b_took_more_than_a():
    def step(run_id: str, ms: float, tokens: int) -> Exchange:
        usage = Usage(input=tokens, output=10)
        return llm(run_id=run_id, usage=usage, duration_ms=ms, fingerprint="x")

    found = diff_runs(Run("a"), [step("a", 800.0, 1000)], Run("b"), [step("b", 650.0, 400)])
    row = next(r for r in parse(diff_html(found)).text if "tok" in r)
    assert row.startswith("-150 ms, -600 tok, -$")


def test_the_web_view_links_the_runs_it_shows():
    class Links:
        def run(self, run: Run) -> str:
            return f"runs/{run.id}"

        def diff(self, a: Run, b: Run) -> str:
            return f"diff/{a.id}/{b.id}"

    found = diff_runs(Run("a", name='"><i>'), [llm(run_id="a")], Run("b"), [llm(run_id="b")])
    body = diff_body(found, links=Links())
    assert '<a href="runs/a">&quot;&gt;&lt;i&gt; (a)</a>' in body
    assert diff_html(found).count("<a ") == 0  # the file keeps no links
