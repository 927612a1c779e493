"""--ignore, --normalize and --optional on the command line, and the project file, with a
real openai client in a process of its own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.runner import forkpoint as run_forkpoint

AGENT = """
import os, openai
client = openai.OpenAI(max_retries=0)
answer = client.chat.completions.create(
    model="gpt-4o", messages=[{"role": "user", "content": "hi, attempt " + os.environ["ATTEMPT"]}],
    metadata={"attempt": os.environ["ATTEMPT"]})
print(answer.choices[0].message.content)
"""


@pytest.fixture
def recorded(upstream, tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "agent.py").write_text(AGENT)
    done = forkpoint(
        tmp_path, "record", "--upstream", upstream.url, "--", sys.executable, "agent.py",
        attempt="first",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return tmp_path, done.run_id


def forkpoint(cwd: Path, *args: str, attempt: str):  # type: ignore[no-untyped-def]
    return run_forkpoint(
        *args, cassette=cwd / "c.db", cwd=cwd,
        env={"OPENAI_API_KEY": "sk-test", "ATTEMPT": attempt},
    )  # fmt: skip


def replay(cwd: Path, run: str, *options: str):  # type: ignore[no-untyped-def]
    return forkpoint(
        cwd, "replay", run, *options, "--", sys.executable, "agent.py", attempt="second"
    )


def test_a_replay_that_differs_in_a_field_diverges_unless_told_to_ignore_it(recorded):
    cwd, run = recorded
    assert replay(cwd, run).returncode != 0
    done = replay(cwd, run, "--ignore", "metadata.attempt", "--normalize", r"attempt \w+")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[gpt-4o] hi, attempt first\n"  # the recorded answer


def test_a_function_normalizer_is_loaded_from_the_project(recorded):
    cwd, run = recorded
    (cwd / "matching.py").write_text(
        "def attempt(method, route, body):\n"
        "    body.pop('metadata', None)\n"
        "    body['messages'][0]['content'] = 'hi'\n"
        "    return body\n"
    )
    done = replay(cwd, run, "--normalize", "matching:attempt")
    assert done.returncode == 0, done.stderr


def test_the_project_file_sets_them_once(recorded):
    cwd, run = recorded
    (cwd / "forkpoint.toml").write_text(
        'ignore = ["$.metadata.attempt"]\nnormalize = ["attempt \\\\w+"]\n'
    )
    done = replay(cwd, run)
    assert done.returncode == 0, done.stderr
    (cwd / "forkpoint.toml").write_text('ignor = ["x"]\n')
    done = replay(cwd, run)
    assert done.returncode == 2 and "unknown keys ['ignor']" in done.stderr
