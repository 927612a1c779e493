"""The web view's fixtures: a demo cassette recorded through the real CLI (the support agent,
its real openai SDK streaming from a scripted upstream, its HTTP tools), the web view served
by the real `forkpoint ui` command, and a real headless Chromium (Debian's, driven by
Playwright; scripts/bootstrap installs it).

Screenshots: the browser tests write theirs to $FORKPOINT_UI_SCREENSHOTS when it is set
(`FORKPOINT_UI_SCREENSHOTS=docs .venv/bin/python -m pytest tests/ui` made the README's).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from examples.support_agent.script import support_script
from examples.support_agent.tools_service import create_app
from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.testing.upstream import ScriptedUpstream
from tests.conftest import RunningUpstream
from tests.runner import ROOT, command_env
from tests.runner import forkpoint as run_forkpoint

CHROMIUM = "/usr/bin/chromium"
# No sandbox (root in a container), no GPU, and nothing that calls out: the machines are offline.
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]  # fmt: skip
AGENT = [sys.executable, str(ROOT / "examples" / "support_agent" / "agent.py")]
TICKET = "Hi, my order A1001 (trail running shoes) arrived but they don't fit. Can I get a refund?"


class Tools:
    """The support agent's tool service on its own loop thread."""

    def __init__(self) -> None:
        self._thread = LoopThread("ui-tools")
        self.url = self._thread.call(self._start())

    async def _start(self) -> str:
        self._runner = web.AppRunner(create_app(), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    def stop(self) -> None:
        self._thread.call(self._runner.cleanup())
        self._thread.close()


@dataclass(frozen=True)
class Demo:
    """A cassette holding the support agent's run (`demo-ticket`, 7 steps: model calls streamed,
    tool calls), a fork of it at step 2 with a cheaper model (`cheaper-model`), then a replay
    of it, offline."""

    cassette: Path
    parent: str
    fork: str


def record_demo(cassette: Path) -> Demo:
    llm = RunningUpstream(ScriptedUpstream(support_script, chunk_delay=0.005))
    try:
        ids = []
        for args in (
            ["record", "--name", "demo-ticket"],
            ["fork", "demo-ticket", "--at", "2", "--model", "gpt-4o-mini", "--name",
             "cheaper-model"],
        ):  # fmt: skip
            tools = Tools()  # fresh: no refund issued yet, as the recording found it
            try:
                done = run_forkpoint(
                    *args, "--cassette", cassette, "--upstream", llm.url,
                    "--route", f"tools={tools.url}", "--", *AGENT, TICKET,
                    env={"OPENAI_API_KEY": "sk-test", "SUPPORT_MODEL": "gpt-4o"}, clean=True,
                )  # fmt: skip
            finally:
                tools.stop()
            assert done.returncode == 0, done.stderr
            ids.append(done.run_id)
    finally:
        llm.stop()
    replayed = run_forkpoint("replay", "--cassette", cassette, "demo-ticket", "--", *AGENT,
                             TICKET, env={"SUPPORT_MODEL": "gpt-4o"}, clean=True)  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    return Demo(cassette, ids[0], ids[1])


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    return record_demo(tmp_path_factory.mktemp("demo") / "demo.db")


class UiProcess:
    """`forkpoint ui` as a user starts it, on a free port."""

    def __init__(self, cassette: Path | str, *args: str) -> None:
        where = "--store" if str(cassette).startswith("postgresql://") else "--cassette"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "forkpoint", "ui", where, str(cassette), "--port", "0",
             *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
            env=command_env(clean=True),
        )  # fmt: skip
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith("forkpoint ui on "), line + self.stop()
        self.url = line.split()[3]  # ends with "/"

    def stop(self) -> str:
        """Stop it (SIGINT, as Ctrl-C) and return what it said on stderr."""
        if self.process.poll() is None:
            self.process.send_signal(2)
        try:
            _, err = self.process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return err


@pytest.fixture
def start_ui() -> Iterator:  # type: ignore[type-arg]
    started: list[UiProcess] = []

    def start(cassette: Path | str, *args: str) -> UiProcess:
        started.append(UiProcess(cassette, *args))
        return started[-1]

    yield start
    for ui in started:
        err = ui.stop()
        assert ui.process.returncode == 0, err
        assert "Traceback" not in err, err


@pytest.fixture(scope="module")
def browser() -> Iterator:  # type: ignore[type-arg]
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run scripts/bootstrap"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser):  # type: ignore[no-untyped-def]
    """A fresh page; a script error or a dialog (an alert that escaped) fails the test."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    opened.on("dialog", lambda dialog: (problems.append(f"dialog: {dialog.message}"),
                                        dialog.dismiss()))  # fmt: skip
    yield opened
    context.close()
    assert not problems, problems


def screenshot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    """Keep a screenshot where $FORKPOINT_UI_SCREENSHOTS says (the README's are in docs/)."""
    where = os.environ.get("FORKPOINT_UI_SCREENSHOTS")
    if where:
        bottom = page.evaluate("document.querySelector('main').getBoundingClientRect().bottom")
        size = page.viewport_size
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], bottom)}
        page.screenshot(path=str(ROOT / where / name), clip=clip)
