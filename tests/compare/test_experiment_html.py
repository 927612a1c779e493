"""The experiment page: a well-formed, self-contained HTML document with every value escaped."""

from __future__ import annotations

import sqlite3
from html.parser import HTMLParser

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.compare.experiment_html import experiment_html
from forkpoint.compare.experiment_results import load_experiment
from tests.compare.test_experiment_render import build

VOID = {"meta", "br", "hr", "img", "input", "link"}


class Checker(HTMLParser):
    """Records the document's shape and fails on unbalanced tags or outside resources."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.seen: set[str] = set()
        self.doctype = ""
        self.text: list[str] = []

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        assert tag != "script" and not any(name in ("src", "href") for name, _ in attrs), tag
        self.seen.add(tag)
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, (self.open, tag)
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> Checker:
    checker = Checker()
    checker.feed(page)
    checker.close()
    assert checker.open == [], checker.open
    return checker


def test_the_page_is_valid_and_self_contained(tmp_path):
    page = experiment_html(build(tmp_path / "c.db"))
    checker = parse(page)
    assert checker.doctype == "DOCTYPE html"
    assert {"html", "head", "title", "style", "body", "table", "pre"} <= checker.seen
    text = "".join(checker.text)
    assert "forkpoint experiment mini" in text and "1 of 2 changed their tool calls" in text
    assert "good: passed 1 of 2 (parents 2 of 2); 1 regressed, 0 fixed" in text
    assert "gpt-4o says 1" in text and "mini says 1" in text  # both answers, side by side
    assert "crashed: command exited with 1" in text and "has no label 'ticket'" in text


def test_values_from_the_cassette_are_escaped(tmp_path):
    build(tmp_path / "c.db")
    with sqlite3.connect(tmp_path / "c.db") as conn:
        conn.execute("UPDATE runs SET name = '<script>alert(1)</script>' WHERE id = 'p1'")
    conn.close()
    store = SqliteStore(tmp_path / "c.db")
    page = experiment_html(load_experiment(store, "mini"))
    store.close()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    parse(page)
