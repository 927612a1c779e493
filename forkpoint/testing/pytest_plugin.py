"""The pytest plugin: a test's API traffic served from its own cassette, through the proxy.

    @pytest.mark.forkpoint                     # or ask for the `forkpoint` fixture
    def test_refund(forkpoint):
        agent.run("refund order A1001")        # its clients read OPENAI_BASE_URL …
        assert [c.name for c in forkpoint.run.tool_calls] == ["lookup_order", "refund"]

Each test gets a gateway of its own on a free port, with OPENAI_BASE_URL, ANTHROPIC_BASE_URL
(and the rest `forkpoint record` sets) pointing at it for the test's duration. httpx and httpx2
clients (the openai and anthropic SDKs among them) reach it through the in-process door, with
no connection (`forkpoint.testing.httpx_door`; `--forkpoint-sockets` sends them over the socket
too); every other client, and any subprocess, over its socket. Cassettes live at
`<test dir>/cassettes/<module>/<test>.yaml`; `--forkpoint-record` picks replay or recording.

Loaded in every pytest session that has forkpoint installed, so until a test asks for the
fixture it imports only the record modes (to check `--forkpoint-record`), never the proxy.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from forkpoint.runtime.loop_thread import LoopThread
    from forkpoint.testing.harness import CassetteProxy

_CALL_PASSED = pytest.StashKey[bool]()


MODES_HELP = (
    "none (replay only, the default), once (record missing cassettes), new_episodes "
    "(record what cassettes lack), all (re-record every cassette)."
)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    group = parser.getgroup("forkpoint", "forkpoint cassettes")
    group.addoption("--forkpoint-record", default=None, metavar="MODE", help=MODES_HELP)
    # pytest-recording's users type --record-mode: the same flag works here, unless
    # pytest-recording itself is installed, which owns it (forkpoint then reads its value).
    if importlib.util.find_spec("pytest_recording") is None:
        group.addoption(
            "--record-mode", default=None, metavar="MODE", help="The same as --forkpoint-record."
        )
    group.addoption(
        "--forkpoint-sockets",
        action="store_true",
        help="Send httpx clients over the proxy's socket too (by default they take the "
        "in-process door, which answers the same with no connection).",
    )
    group.addoption(
        "--forkpoint-upstream",
        default=None,
        metavar="URL",
        help="Where recording sends requests [env FORKPOINT_UPSTREAM; default: the real APIs].",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "forkpoint(cassette=None, *, upstream=None, routes=None, ignore=(), normalize=(), "
        "optional=(), pace='fast'): serve the test's API traffic from a forkpoint cassette.",
    )
    from forkpoint.errors import ConfigError
    from forkpoint.testing.record_mode import RecordMode

    try:
        RecordMode.parse(record_mode(config))
    except ConfigError as error:
        raise pytest.UsageError(str(error)) from None


def record_mode(config: pytest.Config) -> str:
    """--forkpoint-record, else --record-mode (ours or pytest-recording's), else `none`."""
    chosen = config.getoption("--forkpoint-record") or config.getoption("--record-mode", None)
    return str(chosen or "none")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_CALL_PASSED] = report.passed
    return report


@pytest.fixture(scope="session")
def _forkpoint_loop() -> Iterator[LoopThread]:
    """The loop thread every test's proxy runs on, one per session (per xdist worker)."""
    from forkpoint.runtime.loop_thread import LoopThread

    thread = LoopThread("forkpoint-proxies")
    yield thread
    thread.close()


@pytest.fixture
def forkpoint(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, _forkpoint_loop: LoopThread
) -> Iterator[CassetteProxy]:
    """The test's proxy: `.url`, `.run` (`.steps`, `.tool_calls`), `.exchanges`, `.unplayed`.

    A passing test that recorded writes its cassette; a request the cassette lacks fails the
    test with the divergence report.
    """
    from forkpoint.errors import ForkpointError
    from forkpoint.testing.harness import CassetteProxy, default_cassette, options_for

    node = request.node
    marker = node.get_closest_marker("forkpoint")
    class_name = request.cls.__name__ if request.cls else None
    try:
        proxy = CassetteProxy(
            options_for(
                marker.args if marker else (),
                marker.kwargs if marker else {},
                default=default_cassette(Path(node.path), node.name, class_name),
                record=record_mode(request.config),
                upstream=request.config.getoption("--forkpoint-upstream"),
                name=node.nodeid,
            ),
            loop=_forkpoint_loop,
        )
        env = proxy.start()
    except ForkpointError as error:
        failure: str | None = f"forkpoint: {error}"
    else:
        failure = None
    if failure is not None:  # outside the `except`, so the report shows no exception chain
        pytest.fail(failure, pytrace=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    sockets = request.config.getoption("--forkpoint-sockets")
    if proxy.door is not None and not sockets:
        from forkpoint.testing.httpx_door import route

        route(monkeypatch, proxy.door, proxy.origin)
    yield proxy
    passed = node.stash.get(_CALL_PASSED, False)
    proxy.stop(save=passed)
    report = "\n\n".join(proxy.divergences())
    if not report:
        return
    if passed:  # the agent swallowed the error: the test must not pass on a broken replay
        pytest.fail(f"forkpoint: the test diverged from {proxy.cassette}\n{report}", pytrace=False)
    node.add_report_section("teardown", "forkpoint divergence", report)


@pytest.fixture(autouse=True)
def _forkpoint_marker(request: pytest.FixtureRequest) -> None:
    """A marked test gets the proxy without asking for the fixture."""
    if request.node.get_closest_marker("forkpoint") is not None:
        request.getfixturevalue("forkpoint")
