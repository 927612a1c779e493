"""Text from a cassette reaches the terminal seen, not obeyed: escapes are shown as escapes."""

from __future__ import annotations

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import Run
from tests.builders import llm
from tests.runner import invoke

HOSTILE = "ticket\x1b]0;pwned\x07\x1b[2J\x1b[31m\u202eevil\r"


def test_runs_show_and_diff_print_names_and_answers_with_their_escapes_visible(cassette):
    store = SqliteStore(cassette)
    for run_id in ("a", "b"):
        store.create_run(Run(id=run_id, name=HOSTILE + run_id))
        answer = b'{"choices":[{"message":{"content":"done \\u001b[2J"}}]}'
        store.add_exchanges([llm(0, run_id=run_id, text=HOSTILE, response_body=answer)])
    store.close()
    for command in (["runs"], ["show", "a"], ["diff", "a", "b"]):
        done = invoke(*command, cassette=cassette)
        assert done.exit_code == 0, done.output
        assert "\x1b" not in done.output and "\x07" not in done.output, command
        assert "\u202e" not in done.output and "\r" not in done.output, command
        if command != ["diff", "a", "b"]:
            assert "ticket\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31m\\u202eevil\\x0d" in done.output


def test_an_error_naming_a_hostile_run_is_shown_harmless(cassette):
    SqliteStore(cassette).close()
    done = invoke("show", "no-such\x1b[2J", cassette=cassette)
    assert done.exit_code == 2 and "no-such\\x1b[2J" in done.output and "\x1b" not in done.output
