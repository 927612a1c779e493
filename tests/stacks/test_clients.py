"""Clients beyond the openai and anthropic SDKs, each through `forkpoint record -- python
agent.py` exactly as a user runs it (issue 27): google-genai, ollama, cohere, openai's
AzureOpenAI, groq and cerebras.

The user has pointed the client at its server with the client's own variable
(`OLLAMA_HOST=127.0.0.1:PORT`…), here a wire-faithful fake; forkpoint must set that variable to
the proxy and send the requests on to the server it named. Then the recording is replayed with
that server stopped and `HTTPS_PROXY` at a sentinel (a call that bypasses the proxy fails
there or at the stopped server), the agent seeing exactly what it saw; then forked with
`--model` to a fresh server, the new model sent where the API reads it (the body, or the path
for Gemini and an Azure deployment) and shown for the live steps.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import Exchange, Origin
from forkpoint.testing.upstream import ReceivedRequest, ScriptedUpstream
from tests.runner import forkpoint
from tests.stacks.conftest import STACKS, Sentinel
from tests.stacks.scripts import support_script

pytestmark = pytest.mark.stacks


def _path_model(request: ReceivedRequest) -> str:
    """The model a request named: Gemini's and Azure's are in the path."""
    if "/deployments/" in request.path:
        return request.path.split("/deployments/")[1].split("/")[0]
    if "/models/" in request.path:
        return request.path.split("/models/")[1].split(":")[0]
    return str(request.json["model"])


@dataclass(frozen=True)
class Client:
    name: str
    agent: tuple[str, ...]  # the program's arguments, after the interpreter
    variable: str  # the base-URL variable the client reads
    route: str  # the proxy's route prefix for it
    dialect: str
    model: str
    steps: int
    given: Callable[[str], str] = lambda url: url  # what the user had set, from the server's URL
    env: dict[str, str] = field(default_factory=dict)  # the key, and what else the user sets


CLIENTS = [
    Client("gemini", ("gemini_agent.py",), "GOOGLE_GEMINI_BASE_URL", "gemini", "gemini",
           "gemini-2.5-flash", 6, env={"GEMINI_API_KEY": "g-key"}),
    Client("ollama", ("ollama_agent.py",), "OLLAMA_HOST", "ollama", "ollama_chat", "llama3.2",
           7, given=lambda url: url.removeprefix("http://")),  # as Ollama's docs write it
    Client("cohere", ("cohere_agent.py",), "CO_API_URL", "cohere", "cohere_chat",
           "command-a-03-2025", 6, env={"CO_API_KEY": "co-key"}),
    Client("azure", ("azure_openai_agent.py",), "AZURE_OPENAI_ENDPOINT", "azure", "openai_chat",
           "support-gpt-4o", 6, env={"AZURE_OPENAI_API_KEY": "az-key"}),
    Client("groq", ("compatible_agent.py", "groq", "llama-3.3-70b-versatile"), "GROQ_BASE_URL",
           "groq", "openai_chat", "llama-3.3-70b-versatile", 2, env={"GROQ_API_KEY": "gq-key"}),
    Client("cerebras", ("compatible_agent.py", "cerebras", "llama3.1-8b"), "CEREBRAS_BASE_URL",
           "cerebras", "openai_chat", "llama3.1-8b", 2, env={"CEREBRAS_API_KEY": "cb-key"}),
]  # fmt: skip


@pytest.fixture
def sentinel() -> Any:
    watching = Sentinel()
    yield watching
    watching.close()


def _env(client: Client, server: str, sentinel: Sentinel) -> dict[str, str]:
    """What the user's shell holds: the client pointed at its server, the key, and (the test's
    own) every proxy variable at the sentinel, loopback exempt."""
    proxies = {name: sentinel.url for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")}
    proxies |= {name.lower(): url for name, url in proxies.items()}
    return {
        client.variable: client.given(server), **client.env, **proxies,
        "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
    }  # fmt: skip


def _exchanges(cassette: Path, run_id: str) -> list[Exchange]:
    store = SqliteStore(cassette, read_only=True)
    try:
        return store.exchanges(run_id)
    finally:
        store.close()


def _agent(client: Client, *extra: str) -> list[str]:
    return [sys.executable, str(STACKS / client.agent[0]), *client.agent[1:], *extra]


@pytest.mark.parametrize("client", CLIENTS, ids=lambda c: c.name)
def test_a_client_is_recorded_replayed_offline_and_forked(
    client: Client, tmp_path: Path, start_upstream: Any, sentinel: Sentinel
) -> None:
    cassette = tmp_path / "c.db"
    server = start_upstream(ScriptedUpstream(support_script, chunk_delay=0.001, compress=True))
    env = _env(client, server.url, sentinel)
    recorded = forkpoint("record", "--name", "rec", "--", *_agent(client), cassette=cassette,
                         env=env, clean=True)  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr
    steps = _exchanges(cassette, recorded.run_id)
    assert len(steps) == server.request_count == client.steps, recorded.stderr
    for step in steps:
        assert step.route.startswith(f"/{client.route}/"), step.route
        assert step.summary is not None and step.summary.dialect in (
            client.dialect,
            "ollama_generate",
        )
        assert (step.summary.model, step.origin, step.complete) == (client.model, Origin.LIVE, True)
        if not step.streamed or client.dialect != "openai_chat":  # Chat streams tell no usage
            assert step.summary.usage is not None and step.summary.usage.output > 0
    streams = [s for s in steps if s.streamed]
    assert max(len(s.chunks or ()) for s in streams) > 2  # kept as they came, not whole
    tool_calls = [c.name for s in steps if s.summary for c in s.summary.tool_calls]
    assert tool_calls[0] == "lookup_order"
    server.stop()

    replayed = forkpoint("replay", "rec", "--", *_agent(client), cassette=cassette, env=env,
                         clean=True)  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout) == json.loads(recorded.stdout)
    assert f"{client.steps} of {client.steps} recorded served" in replayed.stderr
    assert sentinel.attempts == []

    fresh = start_upstream(ScriptedUpstream(support_script, compress=True))
    forked = forkpoint("fork", "rec", "--at", "1", "--model", "other-model", "--route",
                       f"{client.route}={fresh.url}", "--", *_agent(client), cassette=cassette,
                       env=env, clean=True)  # fmt: skip
    assert forked.returncode == 0, forked.stderr
    assert "changed no request" not in forked.stderr
    assert {_path_model(r) for r in fresh.requests} == {"other-model"}
    branch = _exchanges(cassette, forked.run_id)
    assert [e.origin for e in branch] == [Origin.REPLAYED] + [Origin.LIVE] * (len(branch) - 1)
    assert {e.summary.model for e in branch[1:] if e.summary} == {"other-model"}
    assert sentinel.attempts == []
