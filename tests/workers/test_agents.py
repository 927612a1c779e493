"""A worker's agents: its own configuration, names a queue can carry, commands never shelled."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpoint.api.config import find_project_config
from forkpoint.errors import ConfigError
from forkpoint.workers import Agent, parse_agents
from tests.runner import invoke


def test_agents_come_from_the_project_file_then_the_command_line(tmp_path: Path):
    (tmp_path / "forkpoint.toml").write_text(
        '[agents]\nsupport = "python agent.py {label:ticket}"\nbilling = "node bill.js {run}"\n'
    )
    configured = find_project_config(tmp_path).agents
    agents = parse_agents(["support=python other.py '{label:ticket}' --fast"], configured)
    assert agents == {
        "support": Agent("support", ("python", "other.py", "{label:ticket}", "--fast")),
        "billing": Agent("billing", ("node", "bill.js", "{run}")),
    }


def test_the_pyproject_table_names_agents_too(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[tool.forkpoint.agents]\nqa = "python qa.py"\n')
    assert find_project_config(tmp_path).agents == (("qa", "python qa.py"),)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("support", "give NAME=COMMAND"),
        ("support=", "agent 'support' has no command"),
        ("a b=python x.py", "agent name 'a b'"),
        (f"{'x' * 31}=python x.py", "at most 30"),
        ("qa=python 'x.py", "does not parse"),
    ],
)
def test_a_bad_agent_is_one_clear_error(given: str, message: str):
    with pytest.raises(ConfigError, match=message):
        parse_agents([given])


def test_agents_that_are_not_a_table_of_commands_are_refused(tmp_path: Path):
    (tmp_path / "forkpoint.toml").write_text("agents = ['python x.py']\n")
    with pytest.raises(ConfigError, match="agents must be a table of NAME"):
        find_project_config(tmp_path)


def test_a_worker_needs_a_postgresql_store_and_an_agent(tmp_path: Path):
    local = invoke("worker", "--store", str(tmp_path / "x.db"), "--agent", "qa=python x.py")
    assert local.exit_code == 2 and "takes jobs from a PostgreSQL store" in local.stderr
    bare = invoke("worker", "--store", "postgresql://127.0.0.1:1/none")
    assert bare.exit_code == 2 and "give this worker an agent to run" in bare.stderr


def test_on_workers_takes_an_agent_not_a_command():
    both = invoke("experiment", "--select", "label:a=b", "--at", "0", "--on-workers",
                  "--agent", "qa", "--", "python", "x.py")  # fmt: skip
    assert both.exit_code == 2 and "not a command" in both.stderr
    alone = invoke("experiment", "--select", "label:a=b", "--at", "0", "--on-workers")
    assert alone.exit_code == 2 and "--on-workers and --agent NAME go together" in alone.stderr
    local = invoke("experiment", "--select", "label:a=b", "--at", "0", "--on-workers",
                   "--agent", "qa", "--store", "x.db")  # fmt: skip
    assert local.exit_code == 2 and "needs a PostgreSQL store" in local.stderr
