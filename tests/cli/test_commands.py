"""The CLI as a user runs it: a real process, a real agent command, a real cassette."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import RunStatus
from tests.runner import Ran
from tests.runner import forkpoint as run_forkpoint

AGENT = """
import os, sys, openai
client = openai.OpenAI(max_retries=0)
for question in sys.argv[1:]:
    answer = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": question}])
    print(answer.choices[0].message.content)
print("run", os.environ["FORKPOINT_RUN"], file=sys.stderr)
"""


def forkpoint(*args: str, cassette: Path, env: dict[str, str] | None = None) -> Ran:
    return run_forkpoint(
        *args, cassette=cassette, env={"OPENAI_API_KEY": "sk-cli-secret", **(env or {})}
    )


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    path = tmp_path / "agent.py"
    path.write_text(AGENT)
    return path


def test_record_show_runs_and_replay(upstream, cassette, agent):
    recorded = forkpoint(
        "record",
        "--name",
        "cli-run",
        "--label",
        "team=support",
        "--upstream",
        upstream.url,
        "--",
        sys.executable,
        str(agent),
        "hello",
        "again",
        cassette=cassette,
    )
    assert recorded.returncode == 0, recorded.stderr
    # stdout is the command's alone: forkpoint speaks on stderr
    assert recorded.stdout == "[gpt-4o] hello\n[gpt-4o] again\n"
    run_id = recorded.run_id
    assert f"run {run_id}" in recorded.stderr and "finished, 2 steps" in recorded.stderr

    shown = json.loads(forkpoint("show", "cli-run", "--json", cassette=cassette).stdout)
    assert shown["id"] == run_id and shown["status"] == "finished" and shown["steps"] == 2
    assert shown["labels"] == {"team": "support"}
    first = shown["exchanges"][0]
    assert (first["step"], first["kind"], first["model"]) == (0, "llm", "gpt-4o")
    assert first["usage"]["input"] > 0 and first["usage"]["output"] > 0

    table = forkpoint("show", run_id[:10], cassette=cassette).stdout
    assert "POST /v1/chat/completions" in table and "gpt-4o" in table

    sent = upstream.request_count
    upstream.stop()
    replayed = forkpoint(
        "replay",
        "cli-run",
        "--",
        sys.executable,
        str(agent),
        "hello",
        "again",
        cassette=cassette,
        env={"OPENAI_API_KEY": ""},
    )
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == "[gpt-4o] hello\n[gpt-4o] again\n"
    assert upstream.request_count == sent

    listed = [
        json.loads(line)
        for line in forkpoint("runs", "--json", cassette=cassette).stdout.splitlines()
    ]
    assert [(r["status"], r["steps"], r["mode"]) for r in listed] == [
        ("finished", 2, "record"),
        ("finished", 2, "replay"),
    ]
    assert listed[1]["parent_id"] == run_id
    assert "cli-run" in forkpoint("runs", cassette=cassette).stdout
    assert b"sk-cli-secret" not in cassette.read_bytes()


def test_the_command_exit_code_is_kept_and_the_run_marked_crashed(upstream, cassette, tmp_path):
    crash = tmp_path / "crash.py"
    crash.write_text("import sys; sys.exit(3)")
    result = forkpoint(
        "record", "--upstream", upstream.url, "--", sys.executable, str(crash), cassette=cassette
    )
    assert result.returncode == 3
    store = SqliteStore(cassette)
    [run] = store.list_runs()
    store.close()
    assert run.status is RunStatus.CRASHED and run.error == "command exited with 3"


def test_a_replay_that_diverges_fails_the_agent_and_says_why(upstream, cassette, agent):
    forkpoint(
        "record",
        "--name",
        "r",
        "--upstream",
        upstream.url,
        "--",
        sys.executable,
        str(agent),
        "hello",
        cassette=cassette,
    )
    replayed = forkpoint(
        "replay", "r", "--", sys.executable, str(agent), "goodbye", cassette=cassette
    )
    assert replayed.returncode == 1
    assert "forkpoint divergence" in replayed.stderr and '"hello" → "goodbye"' in replayed.stderr
    assert "diverged" in replayed.stderr


def test_output_without_a_final_newline_stays_as_the_command_wrote_it(upstream, cassette, tmp_path):
    """`forkpoint record -- prog | jq` must see prog's output alone."""
    prog = tmp_path / "prog.py"
    prog.write_text("import sys; sys.stdout.write('{\"answer\": 42}')")
    done = forkpoint(
        "record", "--upstream", upstream.url, "--", sys.executable, str(prog), cassette=cassette
    )
    assert done.returncode == 0 and done.stdout == '{"answer": 42}'
    assert json.loads(done.stdout) == {"answer": 42}


def test_a_replay_that_diverges_exits_non_zero_even_if_the_agent_swallows_it(
    upstream, cassette, tmp_path
):
    swallow = tmp_path / "swallow.py"
    swallow.write_text(AGENT.replace(
        "    answer = client.chat.completions.create(",
        "    try:\n        answer = client.chat.completions.create(",
    ).replace(
        "    print(answer.choices[0].message.content)",
        "    except openai.APIStatusError:\n        continue\n"
        "    print(answer.choices[0].message.content)",
    ).replace(
        'model="gpt-4o", messages=[{"role": "user", "content": question}])',
        '    model="gpt-4o", messages=[{"role": "user", "content": question}])',
    ))  # fmt: skip
    forkpoint("record", "--name", "r", "--upstream", upstream.url, "--", sys.executable,
              str(swallow), "hello", cassette=cassette)  # fmt: skip
    replayed = forkpoint(
        "replay", "r", "--", sys.executable, str(swallow), "goodbye", cassette=cassette
    )
    assert replayed.returncode == 3, replayed.stderr  # the README's documented exit code
    assert "diverged" in replayed.stderr
    forked = forkpoint(  # its prefix is a replay too
        "fork", "r", "--at", "1", "--", sys.executable, str(swallow), "goodbye", cassette=cassette
    )
    assert forked.returncode == 3, forked.stderr
    assert "diverged" in forked.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("show", "nope"), "no run 'nope'"),
        (("replay", "nope", "--", "true"), "no run 'nope'"),
    ],
)
def test_unknown_runs_are_a_clear_error_with_exit_code_2(upstream, cassette, agent, args, message):
    forkpoint(
        "record", "--upstream", upstream.url, "--", sys.executable, str(agent), cassette=cassette
    )
    result = forkpoint(*args, cassette=cassette)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_a_missing_cassette_is_a_clear_error(tmp_path):
    result = forkpoint("runs", cassette=tmp_path / "absent.db")
    assert result.returncode == 2 and "no cassette at" in result.stderr
    assert not (tmp_path / "absent.db").exists()


def test_a_command_that_cannot_start_is_a_clear_error(cassette, upstream):
    result = forkpoint(
        "record", "--upstream", upstream.url, "--", "/no/such/binary", cassette=cassette
    )
    assert result.returncode == 2 and "cannot start '/no/such/binary'" in result.stderr


def test_an_unknown_event_loop_is_a_clear_error(cassette, upstream):
    result = forkpoint(
        "record", "--upstream", upstream.url, "--", sys.executable, "-c", "pass",
        cassette=cassette, env={"FORKPOINT_LOOP": "trio"},
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "FORKPOINT_LOOP='trio': use uvloop or asyncio" in result.stderr


def test_every_command_is_documented_with_an_example():
    import click

    from forkpoint.cli import main

    context = click.Context(main)
    names = main.list_commands(context)
    assert {"record", "fork", "resume", "serve", "runs", "export", "import", "copy"} <= set(names)
    for name in names:
        command = main.get_command(context, name)
        assert command is not None and command.help and "Example:" in command.help, name


def test_a_command_that_reads_the_cassette_does_not_import_the_proxy(tmp_path):
    """`forkpoint runs` starts in the time its own imports take, not the proxy's."""
    probe = (
        "import sys\n"
        "from forkpoint.cli import main\n"
        "try:\n"
        "    main(['runs'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in ('aiohttp', 'forkpoint.runtime.proxy') if m in sys.modules))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
        env={**os.environ, "FORKPOINT_CASSETTE": str(tmp_path / "none.db")},
    )  # fmt: skip
    assert ran.stdout.strip().splitlines()[-1] == "[]", ran.stdout + ran.stderr
