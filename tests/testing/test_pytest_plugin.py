"""The pytest plugin, driven through pytest's own `pytester`: inner test sessions record against
a scripted upstream on a thread of this process, then replay with it stopped.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from forkpoint.testing.upstream import Prompt, Reply, ScriptedUpstream, ToolCallSpec

pytest_plugins = ["pytester"]
# Inner sessions run in a subprocess: in-process, pytester restores sys.modules afterwards, and
# modules first imported by the inner session (httpx's transports) come back as new copies whose
# exception classes the openai SDK no longer recognizes, breaking later tests.

AGENT = '''
import openai
import pytest

TOOLS = [{"type": "function", "function": {"name": "lookup_order", "parameters": {
    "type": "object", "properties": {"order_id": {"type": "string"}}}}}]


def solve(question):
    """Ask, run the tool the model asks for, ask again: two LLM steps."""
    with openai.OpenAI(api_key="sk-plugin-secret", max_retries=0) as client:
        messages = [{"role": "user", "content": question}]
        first = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
        call = first.choices[0].message.tool_calls[0]
        messages += [
            {"role": "assistant", "tool_calls": [{"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
            {"role": "tool", "tool_call_id": call.id, "content": "shipped"},
        ]
        final = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
        return final.choices[0].message.content
'''


def lookup_then_answer(prompt: Prompt) -> Reply:
    if not prompt.tool_results:
        return Reply(tool_calls=(ToolCallSpec("lookup_order", {"order_id": "A1001"}),))
    return Reply(text=f"Order status: {prompt.tool_results[-1]}")


@pytest.fixture
def tool_upstream(start_upstream):  # type: ignore[no-untyped-def]
    return start_upstream(ScriptedUpstream(lookup_then_answer))


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    """An inner session held to the same warning rules as this suite."""
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    return pytester


def write_test(pytester: pytest.Pytester, body: str, name: str = "test_agent") -> Path:
    return pytester.makepyfile(**{name: AGENT + textwrap.dedent(body)})


def run(pytester: pytest.Pytester, *args: str, upstream: str | None = None) -> pytest.RunResult:
    extra = ("--forkpoint-upstream", upstream) if upstream else ()
    return pytester.runpytest_subprocess("-q", *extra, *args)


TICKET = """
def test_ticket(forkpoint):
    assert solve("Where is order A1001?") == "Order status: shipped"
    assert [c.name for c in forkpoint.run.tool_calls] == ["lookup_order"]
    assert len(forkpoint.run.steps) == 2 and forkpoint.exchanges[0].summary.model == "gpt-4o"
"""


def test_record_once_then_replay_offline(inner, tool_upstream):
    write_test(inner, TICKET)
    run(inner, "--forkpoint-record=once", upstream=tool_upstream.url).assert_outcomes(passed=1)
    cassette = inner.path / "cassettes" / "test_agent" / "test_ticket.yaml"
    content = cassette.read_text()
    assert "sk-plugin-secret" not in content and "authorization" not in content.lower()
    assert '    body: |-\n      {\n        "model": "gpt-4o",\n' in content  # pretty-printed JSON
    sent = tool_upstream.request_count
    assert sent == 2
    tool_upstream.stop()

    run(inner).assert_outcomes(passed=1)  # the default mode replays, with no upstream at all
    assert tool_upstream.request_count == sent


def test_pytest_recordings_record_mode_spelling_works_too(inner, tool_upstream):
    write_test(inner, TICKET)
    run(inner, "--record-mode=once", upstream=tool_upstream.url).assert_outcomes(passed=1)
    assert (inner.path / "cassettes" / "test_agent" / "test_ticket.yaml").exists()
    tool_upstream.stop()
    run(inner, "--record-mode=none").assert_outcomes(passed=1)
    bad = run(inner, "--record-mode=sometimes").stderr.str()
    # ours, or pytest-recording's own check where it is installed and owns the flag
    assert "takes none, once, new_episodes, all" in bad or "invalid choice: 'sometimes'" in bad


def test_a_changed_prompt_fails_with_the_divergence_report(inner, tool_upstream):
    write_test(inner, TICKET)
    run(inner, "--forkpoint-record=once", upstream=tool_upstream.url).assert_outcomes(passed=1)
    write_test(inner, TICKET.replace("Where is order A1001?", "Where is order A1002?"))
    result = run(inner)
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    assert "forkpoint divergence" in output
    assert '$.messages[0].content: "Where is order A1001?" → "Where is order A1002?"' in output


def test_a_divergence_the_agent_swallows_still_fails_the_test(inner, tool_upstream):
    write_test(inner, TICKET)
    run(inner, "--forkpoint-record=once", upstream=tool_upstream.url).assert_outcomes(passed=1)
    write_test(
        inner,
        """
        def test_ticket(forkpoint):
            try:
                solve("something else")
            except openai.BadRequestError:
                pass
        """,
    )
    result = run(inner)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*the test diverged from *test_ticket.yaml*", "*step 0*"])


def test_none_without_a_cassette_says_how_to_record_one(inner):
    write_test(inner, TICKET)
    result = run(inner)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*no cassette at *test_ticket.yaml: record it with pytest --record-mode=once*"]
    )
    assert "During handling" not in result.stdout.str()


def test_once_records_only_what_is_missing(inner, tool_upstream):
    write_test(inner, TICKET)
    run(inner, "--forkpoint-record=once", upstream=tool_upstream.url).assert_outcomes(passed=1)
    run(inner, "--forkpoint-record=once", upstream=tool_upstream.url).assert_outcomes(passed=1)
    assert tool_upstream.request_count == 2


def test_all_records_again_over_the_cassette(inner, start_upstream):
    first = start_upstream(ScriptedUpstream())
    write_test(inner, "def test_echo(forkpoint):\n    assert 'hi' in ask('hi')\n" + ASK)
    run(inner, "--forkpoint-record=once", upstream=first.url).assert_outcomes(passed=1)
    cassette = inner.path / "cassettes" / "test_agent" / "test_echo.yaml"
    assert "[gpt-4o] hi" in cassette.read_text()
    second = start_upstream(ScriptedUpstream(lambda prompt: Reply(text="hi again")))
    run(inner, "--forkpoint-record=all", upstream=second.url).assert_outcomes(passed=1)
    assert second.request_count == 1 and "hi again" in cassette.read_text()
    assert "[gpt-4o] hi" not in cassette.read_text()
    run(inner, "--forkpoint-record=rewrite", upstream=second.url).assert_outcomes(passed=1)
    assert second.request_count == 2


ASK = """
def ask(question):
    with openai.OpenAI(api_key="k", max_retries=0) as client:
        return client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": question}]
        ).choices[0].message.content
"""


def test_new_episodes_replays_what_it_has_and_records_the_rest(inner, upstream):
    write_test(
        inner, ASK + "\ndef test_q(forkpoint):\n    assert ask('one') == '[gpt-4o] one'\n"
        "    assert ask('two') == '[gpt-4o] two'\n"
    )  # fmt: skip
    run(inner, "--forkpoint-record=once", upstream=upstream.url).assert_outcomes(passed=1)
    assert upstream.request_count == 2
    headers = (  # what the agent sees of a replayed answer: no header of forkpoint's own
        "\n    with openai.OpenAI(api_key='k', max_retries=0) as client:\n"
        "        raw = client.chat.completions.with_raw_response.create(\n"
        "            model='gpt-4o', messages=[{'role': 'user', 'content': 'one'}])\n"
        "    assert not [h for h in raw.headers if h.lower().startswith('x-forkpoint')]\n"
    )
    write_test(
        inner, ASK + "\ndef test_q(forkpoint):\n    assert ask('two') == '[gpt-4o] two'\n"
        "    assert ask('three') == '[gpt-4o] three'\n" + headers
    )  # fmt: skip
    run(inner, "--forkpoint-record=new_episodes", upstream=upstream.url).assert_outcomes(passed=1)
    assert [r.json["messages"][0]["content"] for r in upstream.requests] == ["one", "two", "three"]
    document = yaml.safe_load((inner.path / "cassettes/test_agent/test_q.yaml").read_text())
    asked = [
        yaml.safe_load(i["request"]["body"])["messages"][0]["content"]
        for i in document["interactions"]
    ]
    assert asked == ["one", "two", "three"]  # what the cassette held as it was, then the new
    assert [i["forkpoint"]["step"] for i in document["interactions"]] == [0, 1, 2]
    upstream.stop()
    run(inner).assert_outcomes(passed=1)


def test_a_failed_test_writes_no_cassette(inner, upstream):
    write_test(inner, ASK + "\ndef test_q(forkpoint):\n    ask('one')\n    assert False\n")
    run(inner, "--forkpoint-record=once", upstream=upstream.url).assert_outcomes(failed=1)
    assert not (inner.path / "cassettes").exists()


def test_an_unknown_record_mode_lists_the_valid_ones(inner):
    write_test(inner, TICKET)
    result = run(inner, "--forkpoint-record=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*takes none, once, new_episodes, all (or rewrite*, not 'sometimes'"]
    )


def test_cassette_paths_follow_the_test_and_the_marker(inner, upstream, tmp_path):
    elsewhere = tmp_path / "elsewhere" / "abs.yaml"
    write_test(
        inner,
        ASK
        + f"""
class TestGroup:
    def test_in_class(self, forkpoint):
        ask("a")

@pytest.mark.parametrize("word", ["x", "y z"])
def test_param(forkpoint, word):
    ask(word)

@pytest.mark.forkpoint("shared.yaml")
def test_shared_1():
    ask("s")

@pytest.mark.forkpoint(cassette="shared.yaml")
def test_shared_2():
    ask("s")

@pytest.mark.forkpoint(cassette={str(elsewhere)!r})
def test_absolute(forkpoint):
    assert forkpoint.cassette == __import__("pathlib").Path({str(elsewhere)!r})
    ask("b")
""",
        name="test_paths",
    )
    run(inner, "--forkpoint-record=once", upstream=upstream.url).assert_outcomes(passed=6)
    folder = inner.path / "cassettes" / "test_paths"
    assert sorted(p.name for p in folder.iterdir()) == [
        "TestGroup.test_in_class.yaml", "shared.yaml", "test_param[x].yaml", "test_param[y-z].yaml",
    ]  # fmt: skip
    assert elsewhere.exists()
    upstream.stop()
    run(inner).assert_outcomes(passed=6)


def test_marker_options_are_checked(inner):
    write_test(inner, "@pytest.mark.forkpoint(speed=2)\ndef test_fork():\n    pass\n")
    result = run(inner)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*unknown option speed; it takes cassette, upstream, routes*"])


def test_a_marker_forks_the_cassette_with_a_change(inner, tool_upstream):
    write_test(inner, TICKET)
    run(inner, "--forkpoint-record=once", upstream=tool_upstream.url).assert_outcomes(passed=1)
    tool_upstream.upstream.reset()
    write_test(
        inner,
        """
@pytest.mark.forkpoint(cassette="test_ticket.yaml", fork_at=1, model="gpt-4o-mini",
                       system_prompt="Be brief.")
def test_ticket_cheaper(forkpoint):
    assert solve("Where is order A1001?") == "Order status: shipped"
    assert [e.origin for e in forkpoint.exchanges] == ["replayed", "live"]
""",
    )
    run(inner, upstream=tool_upstream.url).assert_outcomes(passed=1)
    [live] = tool_upstream.requests  # step 0 came from the cassette
    assert live.json["model"] == "gpt-4o-mini"
    assert live.json["messages"][0] == {"role": "system", "content": "Be brief."}


def test_a_hand_broken_cassette_fails_naming_file_and_line(inner, upstream):
    write_test(inner, TICKET)
    cassette = inner.path / "cassettes" / "test_agent" / "test_ticket.yaml"
    cassette.parent.mkdir(parents=True)
    cassette.write_text("interactions:\n- request: {method: POST\n  response: oops\n")
    result = run(inner)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_ticket.yaml, line 3: not valid YAML*"])


def test_a_session_that_does_not_use_it_is_untouched(inner):
    inner.makepyfile(
        test_plain="import os\n\ndef test_env():\n    assert 'FORKPOINT_URL' not in os.environ\n"
    )
    run(inner).assert_outcomes(passed=1)
    assert not (inner.path / "cassettes").exists()


DOOR = """
import httpx2

def test_ticket(forkpoint):
    print("door:", httpx2.HTTPTransport.handle_request.__module__)
    assert solve("Where is order A1001?") == "Order status: shipped"
"""


def test_httpx_clients_take_the_in_process_door_unless_sockets_are_asked_for(inner, tool_upstream):
    write_test(inner, DOOR)
    cassette = inner.path / "cassettes" / "test_agent" / "test_ticket.yaml"
    recorded = {}
    for flags in ((), ("--forkpoint-sockets",)):
        result = run(inner, "-s", "--forkpoint-record=all", *flags, upstream=tool_upstream.url)
        result.assert_outcomes(passed=1)
        door = "httpx2._transports.default" if flags else "forkpoint.testing.httpx_door"
        assert f"door: {door}" in result.stdout.str()
        recorded[flags] = yaml.safe_load(cassette.read_text())["interactions"]
    # the same cassette either way, but for the times and the ids the upstream made up
    assert recorded[()][0]["request"] == recorded[("--forkpoint-sockets",)][0]["request"]
    for through_door, over_socket in zip(*recorded.values(), strict=True):
        for side in ("request", "response"):
            assert through_door[side].keys() == over_socket[side].keys()
        assert through_door["request"]["headers"] == over_socket["request"]["headers"]
        assert through_door["response"]["status"] == over_socket["response"]["status"]
        assert (
            through_door["response"]["headers"].keys() == over_socket["response"]["headers"].keys()
        )
    tool_upstream.stop()
    for flags in ((), ("--forkpoint-sockets",)):
        run(inner, *flags).assert_outcomes(passed=1)
