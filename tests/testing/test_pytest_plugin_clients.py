"""The pytest plugin with real SDK clients, async tests and xdist workers: record, then replay
with the upstream stopped, and the inner tests compare what they saw both times."""

from __future__ import annotations

import textwrap

import pytest

from forkpoint.testing.upstream import ScriptedUpstream

pytest_plugins = ["pytester"]

# Each inner test saves what its client saw on recording and checks replay sees the same.
SEEN = """
import json, os, pathlib

def same_as_recorded(name, seen):
    path = pathlib.Path(__file__).parent / f"{name}.seen.json"
    if os.environ.get("FORKPOINT_TEST_PHASE") == "record":
        path.write_text(json.dumps(seen))
    else:
        assert seen == json.loads(path.read_text())
"""


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    return pytester


def record_then_replay(pytester, monkeypatch, upstream, *args, passed: int) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FORKPOINT_TEST_PHASE", "record")
    result = pytester.runpytest_subprocess(
        "-q", "--forkpoint-record=once", "--forkpoint-upstream", upstream.url, *args
    )
    result.assert_outcomes(passed=passed)
    sent = upstream.request_count
    assert sent >= passed
    upstream.stop()
    monkeypatch.setenv("FORKPOINT_TEST_PHASE", "replay")
    pytester.runpytest_subprocess("-q", *args).assert_outcomes(passed=passed)
    assert upstream.request_count == sent


def test_the_openai_client_streaming_and_not(inner, monkeypatch, start_upstream):
    upstream = start_upstream(ScriptedUpstream(chunk_delay=0.01))
    inner.makepyfile(
        test_openai=SEEN
        + textwrap.dedent(
            """
            import openai

            def test_chat(forkpoint):
                with openai.OpenAI(api_key="sk-secret", max_retries=0) as client:
                    answer = client.chat.completions.create(
                        model="gpt-4o", messages=[{"role": "user", "content": "hello"}])
                    stream = client.chat.completions.create(
                        model="gpt-4o", messages=[{"role": "user", "content": "one two three"}],
                        stream=True, stream_options={"include_usage": True})
                    chunks = [c.model_dump() for c in stream]
                same_as_recorded("chat", [answer.model_dump(), chunks])
                assert [e.streamed for e in forkpoint.run.steps] == [False, True]
                assert len(forkpoint.run.steps[1].chunks) >= 4
            """
        )
    )
    record_then_replay(inner, monkeypatch, upstream, passed=1)
    content = (inner.path / "cassettes/test_openai/test_chat.yaml").read_text()
    assert "data: [DONE]" in content and "    chunks:\n    - [" in content


def test_the_anthropic_client(inner, monkeypatch, start_upstream):
    upstream = start_upstream(ScriptedUpstream())
    inner.makepyfile(
        test_anthropic=SEEN
        + textwrap.dedent(
            """
            import anthropic

            def test_messages(forkpoint):
                with anthropic.Anthropic(api_key="sk-ant-secret", max_retries=0) as client:
                    message = client.messages.create(
                        model="claude-haiku-4-5", max_tokens=100,
                        messages=[{"role": "user", "content": "hello"}])
                    with client.messages.stream(
                        model="claude-haiku-4-5", max_tokens=100,
                        messages=[{"role": "user", "content": "a b c"}]) as stream:
                        events = [e.model_dump() for e in stream]
                same_as_recorded("anthropic", [message.model_dump(), events])
                assert [e.route for e in forkpoint.exchanges] == ["/anthropic/v1/messages"] * 2
                assert forkpoint.exchanges[0].summary.model == "claude-haiku-4-5"
            """
        )
    )
    record_then_replay(inner, monkeypatch, upstream, passed=1)
    assert (
        "sk-ant-secret"
        not in (inner.path / "cassettes/test_anthropic/test_messages.yaml").read_text()
    )


ASYNC_AGENT = """
import asyncio
import openai

async def ask_all(questions):
    async with openai.AsyncOpenAI(api_key="k", max_retries=0) as client:
        answers = await asyncio.gather(*(
            client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": q}])
            for q in questions))
    return [a.choices[0].message.content for a in answers]
"""


def test_async_tests_with_asyncio_run_and_with_anyio(inner, monkeypatch, upstream):
    inner.makepyfile(
        test_async=ASYNC_AGENT
        + textwrap.dedent(
            """
            import pytest

            def test_asyncio_run(forkpoint):
                questions = [f"q{i}" for i in range(4)]
                assert asyncio.run(ask_all(questions)) == [f"[gpt-4o-mini] {q}" for q in questions]
                assert len(forkpoint.run.steps) == 4

            @pytest.fixture
            def anyio_backend():
                return "asyncio"

            @pytest.mark.anyio
            async def test_anyio(forkpoint):
                assert await ask_all(["x", "y"]) == ["[gpt-4o-mini] x", "[gpt-4o-mini] y"]
                assert len(forkpoint.run.steps) == 2
            """
        )
    )
    record_then_replay(inner, monkeypatch, upstream, passed=2)


def test_xdist_workers_each_run_their_own_proxies(inner, monkeypatch, upstream):
    tests = "\n".join(
        f"def test_{i}(forkpoint):\n    assert asyncio.run(ask_all(['w{i}'])) == ['[gpt-4o-mini] w{i}']\n"
        for i in range(6)
    )
    inner.makepyfile(test_workers=ASYNC_AGENT + tests)
    monkeypatch.setenv("FORKPOINT_UPSTREAM", upstream.url)  # the env var serves as the option
    result = inner.runpytest_subprocess("-q", "-n", "2", "--forkpoint-record=once")
    result.assert_outcomes(passed=6)
    assert upstream.request_count == 6
    assert len(list((inner.path / "cassettes/test_workers").glob("*.yaml"))) == 6
    upstream.stop()
    inner.runpytest_subprocess("-q").assert_outcomes(passed=6)  # what the workers wrote replays
