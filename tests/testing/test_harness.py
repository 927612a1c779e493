"""One test's proxy without pytest around it: options, paths, modes, and what it serves."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from forkpoint.api import Options
from forkpoint.errors import ConfigError
from forkpoint.testing.harness import (
    CassetteOptions,
    CassetteProxy,
    Served,
    default_cassette,
    options_for,
)
from forkpoint.testing.record_mode import RecordMode
from tests.e2e.test_big_response import MIB, expected, fetched, start_upstream, stop_upstream


def ask(url: str, question: str) -> str:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": question}]}
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(json.loads(response.read())["choices"][0]["message"]["content"])


def test_default_cassettes_sit_beside_the_test_module():
    test_file = Path("/repo/tests/agents/test_refund.py")
    assert default_cassette(test_file, "test_a") == Path(
        "/repo/tests/agents/cassettes/test_refund/test_a.yaml"
    )
    assert (
        default_cassette(test_file, "test_b[x/y z]", "TestGroup").name
        == "TestGroup.test_b[x-y-z].yaml"
    )


def test_the_marker_wins_over_the_command_line(monkeypatch):
    monkeypatch.setenv("FORKPOINT_UPSTREAM", "http://env")
    default = Path("/t/cassettes/test_m/test_a.yaml")
    setup = options_for((), {}, default=default, record="once", upstream=None, name="n")
    options = setup.options
    assert (options.upstream, dict(options.routes), setup.record) == (
        "http://env", {"anthropic": "http://env"}, RecordMode.ONCE,
    )  # fmt: skip
    setup = options_for(
        ("shared.yaml",), {"upstream": "http://marker", "routes": {"tools": "http://tools"},
        "ignore": ["user"], "normalize": ["id=\\d+"], "optional": ["/t/*"], "pace": "x2"},
        default=default, record="rewrite", upstream="http://cli", name="n",
    )  # fmt: skip
    options = setup.options
    assert setup.cassette == Path("/t/cassettes/test_m/shared.yaml")
    assert dict(options.routes) == {"anthropic": "http://marker", "tools": "http://tools"}
    assert (options.normalize, options.optional) == (("id=\\d+",), ("/t/*",))
    assert (options.ignore, options.pace.factor, setup.record) == (
        ("user",),
        2.0,
        RecordMode.ALL,
    )
    monkeypatch.delenv("FORKPOINT_UPSTREAM")
    plain = options_for((), {}, default=default, record="none", upstream=None, name="n")
    # nothing named: a recording goes to the real APIs, a fork where its cassette's went
    assert (plain.options.upstream, dict(plain.options.routes)) == (None, {})


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((), {"speed": 3}, "unknown option speed"),
        (("a", "b"), {}, "more than one positional argument"),
        ((), {"pace": "slowly"}, "--pace takes"),
    ],
)
def test_bad_options_are_config_errors(args, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        options_for(args, kwargs, default=Path("x.yaml"), record="none", upstream=None, name="n")
    with pytest.raises(ConfigError, match="takes none, once, new_episodes, all"):
        RecordMode.parse("sometimes")


@pytest.mark.parametrize(
    "record, exists, served",
    [
        (RecordMode.NONE, True, Served.REPLAY),
        (RecordMode.ONCE, True, Served.REPLAY),
        (RecordMode.ONCE, False, Served.RECORD),
        (RecordMode.NEW_EPISODES, True, Served.NEW_EPISODES),
        (RecordMode.NEW_EPISODES, False, Served.RECORD),
        (RecordMode.ALL, True, Served.RECORD),
    ],
)
def test_how_a_test_is_served(tmp_path, record, exists, served):
    cassette = tmp_path / "c.yaml"
    if exists:
        cassette.write_text("interactions: []\n")
    assert CassetteProxy(CassetteOptions(cassette=cassette, record=record)).served is served


def test_record_then_replay_with_what_is_left_unplayed(tmp_path, upstream, monkeypatch):
    cassette = tmp_path / "c.yaml"
    recording = CassetteProxy(
        CassetteOptions(
            cassette=cassette, record=RecordMode.ONCE, options=Options(upstream=upstream.url)
        )
    )
    env = recording.start()
    assert env["OPENAI_BASE_URL"] == f"{recording.url}/v1" == recording.openai_base_url
    assert recording.anthropic_base_url == f"{recording.url}/anthropic"
    assert [ask(recording.url, q) for q in ("a", "b")] == ["[gpt-4o] a", "[gpt-4o] b"]
    recording.stop(save=True)
    recording.stop(save=True)  # a second stop does nothing
    upstream.stop()

    monkeypatch.setenv("OPENAI_API_KEY", "sk-real")
    replaying = CassetteProxy(CassetteOptions(cassette=cassette))
    env = replaying.start()
    assert "OPENAI_API_KEY" not in env  # a key that is set stays as it is
    assert ask(replaying.url, "b") == "[gpt-4o] b"
    [left] = replaying.unplayed
    assert b'"a"' in left.request_body
    assert ask(replaying.url, "a") == "[gpt-4o] a"
    assert replaying.unplayed == [] and replaying.divergences() == []
    assert replaying.run.mode == "replay" and len(replaying.exchanges) == 2
    before = cassette.read_text()
    replaying.stop(save=True)
    assert cassette.read_text() == before  # a replay never rewrites its cassette


def test_a_body_in_pieces_goes_into_the_cassette_whole_and_replays_exact(tmp_path):
    size = 6 * MIB  # past the tee's budget: recorded in pieces, in the store in memory
    upstream, url = start_upstream(size)
    cassette = tmp_path / "big.yaml"
    try:
        recording = CassetteProxy(
            CassetteOptions(cassette=cassette, record=RecordMode.ONCE, options=Options(upstream=url))
        )
        recording.start()
        got = fetched(f"{recording.url}/v1/plain", run=None)
        (recorded,) = recording.exchanges
        assert recorded.pieces  # held in part, the rest in pieces, until the cassette is written
        recording.stop(save=True)
    finally:
        stop_upstream(upstream)
    assert got == (size, expected(size), "end")
    replaying = CassetteProxy(CassetteOptions(cassette=cassette))
    replaying.start()
    try:
        assert fetched(f"{replaying.url}/v1/plain", run=None) == got
    finally:
        replaying.stop(save=False)


def test_new_episodes_with_nothing_new_leaves_the_cassette_byte_identical(
    tmp_path, upstream
):
    """Issue 25.6: a new_episodes run that asked nothing new rewrote every cassette (a new run
    id, new timestamps): a pull request full of noise."""
    cassette = tmp_path / "c.yaml"

    def run_test(record: RecordMode, *questions: str) -> list[str]:
        proxy = CassetteProxy(
            CassetteOptions(cassette=cassette, record=record,  # named as the plugin names it
                            options=Options(upstream=upstream.url, name="tests/t.py::test_q"))
        )  # fmt: skip
        proxy.start()
        answers = [ask(proxy.url, q) for q in questions]
        proxy.stop(save=True)
        return answers

    run_test(RecordMode.ONCE, "a", "b")
    recorded = cassette.read_bytes()
    written = cassette.stat().st_mtime_ns
    assert run_test(RecordMode.NEW_EPISODES, "b", "a") == ["[gpt-4o] b", "[gpt-4o] a"]
    assert cassette.read_bytes() == recorded and cassette.stat().st_mtime_ns == written
    assert upstream.request_count == 2

    # a new request: only its episode is added, after what the cassette held, as it was
    assert run_test(RecordMode.NEW_EPISODES, "b", "c", "a")[1] == "[gpt-4o] c"
    grown = cassette.read_bytes()
    held, ending = recorded.rsplit(b"version: 1\n", 1)
    assert grown.startswith(held) and grown.endswith(b"version: 1\n") and not ending
    added = grown[len(held) :]
    assert added.count(b"- request:") == 1 and b'"c"' in added and b"step: 2" in added
    assert upstream.request_count == 3
    assert run_test(RecordMode.NEW_EPISODES, "c", "a", "b") and cassette.read_bytes() == grown
