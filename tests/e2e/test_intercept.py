"""`--intercept` end to end: scripts with no forkpoint in them (requests, httpx, aiohttp, curl,
the openai SDK with a fixed base URL) recorded, replayed offline and forked.

The tool services and the fake model API speak HTTPS with a test CA's certificates; the
interceptor is told to trust that CA (`--upstream-ca`), the scripts trust forkpoint's CA
through the bundle the CLI hands them. forkpoint's own CA lives in a temporary
XDG_CONFIG_HOME.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from forkpoint import api
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import Exchange, Origin, Run, RunStatus
from forkpoint.runtime.intercept import InterceptOptions
from forkpoint.testing.https import TestCA
from tests.https_services import HOST_A, HOST_B, LLMService, Service, tool_app
from tests.runner import Ran, invoke, start_forkpoint
from tests.runner import forkpoint as run_forkpoint

AGENTS = Path(__file__).parent / "agents"
CLIENTS = [sys.executable, str(AGENTS / "intercept_clients.py")]
LLM_AGENT = [sys.executable, str(AGENTS / "intercept_llm.py")]


@dataclass
class Recorded:
    """A run of the clients script recorded through `forkpoint record --intercept`."""

    run_id: str
    lines: list[dict[str, Any]]
    stderr: str
    search: Service
    refunds: Service
    cassette: Path
    env: dict[str, str]
    ca: TestCA


def forkpoint(*args: str, env: dict[str, str]) -> Ran:
    return run_forkpoint(*args, env=env)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    base = tmp_path_factory.mktemp("intercept")
    ca = TestCA(base / "test-ca")
    search = Service(tool_app("search"), ca, HOST_A)
    refunds = Service(tool_app("refunds"), ca, HOST_B)
    cassette = base / "cassette.db"
    env = {"XDG_CONFIG_HOME": str(base / "config"), "FORKPOINT_CASSETTE": str(cassette)}
    done = forkpoint(
        "record", "--intercept", "--upstream-ca", str(ca.cert_path), "--",
        *CLIENTS, search.url, refunds.url, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    yield Recorded(
        done.run_id, [json.loads(line) for line in done.stdout.splitlines()], done.stderr,
        search, refunds, cassette,
        env, ca,
    )  # fmt: skip
    search.stop()
    refunds.stop()


def test_record_captures_every_client_with_no_code_change(recorded):
    assert [line["client"] for line in recorded.lines] == [
        "requests", "httpx", "aiohttp", "curl", "refund",
    ]  # fmt: skip
    for line in recorded.lines[:4]:
        assert line["body"]["tool"] == "search" and line["body"]["q"] == line["client"]
    run, exchanges = stored(recorded.cassette, recorded.run_id)
    assert run.status is RunStatus.FINISHED
    search = recorded.search.url.removeprefix("https://")
    refunds = recorded.refunds.url.removeprefix("https://")
    assert [e.route for e in exchanges] == [
        *(f"/{search}/v1/search?q={client}" for client in ("requests", "httpx", "aiohttp", "curl")),
        f"/{refunds}/v1/refund",
    ]
    assert {e.summary.kind for e in exchanges if e.summary} == {"tool"}
    # no credential, not even the proxy's, reaches the cassette
    assert all(k.lower() != "proxy-authorization" for e in exchanges for k, _ in e.request_headers)

    shown = forkpoint("show", recorded.run_id, env=recorded.env)
    assert shown.returncode == 0, shown.stderr
    assert f"GET /{search}/v1/search?q=curl" in shown.stdout
    assert f"POST /{refunds}/v1/refund" in shown.stdout


def test_replay_with_the_services_stopped_returns_the_same_bodies(recorded):
    recorded.search.stop()
    recorded.refunds.stop()
    replayed = forkpoint(
        "replay", recorded.run_id, "--intercept", "--",
        *CLIENTS, recorded.search.url, recorded.refunds.url, env=recorded.env,
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    replay_id = replayed.run_id
    assert [json.loads(line) for line in replayed.stdout.splitlines()] == recorded.lines
    assert {e.origin for e in stored(recorded.cassette, replay_id)[1]} == {Origin.REPLAYED}


def test_a_fork_mocks_one_tool_host(recorded, tmp_path):
    refunds = Service(tool_app("refunds again"), recorded.ca, HOST_B)
    (tmp_path / "search.json").write_text('{"tool": "mocked", "q": "any"}')
    try:
        result = api.fork(
            recorded.run_id,
            [*CLIENTS, recorded.search.url, refunds.url],
            at=0,
            change=api.make_change(mocks=[f"{HOST_A}:*/v1/search=@search.json"], base_dir=tmp_path),
            options=api.Options(
                cassette=recorded.cassette,
                intercept=InterceptOptions(
                    upstream_ca=str(recorded.ca.cert_path), confdir=config_dir(recorded)
                ),
            ),
        )
    finally:
        refunds.stop()
    assert result.exit_code == 0
    _, exchanges = stored(recorded.cassette, result.run_id)
    assert [e.origin for e in exchanges] == [Origin.MOCKED] * 4 + [Origin.LIVE]
    assert json.loads(exchanges[0].response_body) == {"tool": "mocked", "q": "any"}
    assert json.loads(exchanges[4].response_body)["tool"] == "refunds again"


def test_an_llm_call_through_the_interceptor_is_read_with_its_dialect(tmp_path, cassette, capfd):
    ca = TestCA(tmp_path / "test-ca")
    llm = LLMService(ca)
    options = InterceptOptions(upstream_ca=str(ca.cert_path), confdir=tmp_path / "forkpoint")
    try:
        recorded = api.record(
            [*LLM_AGENT, f"{llm.url}/v1"], api.Options(cassette=cassette, intercept=options)
        )
    finally:
        llm.stop()
    assert recorded.exit_code == 0 and recorded.steps == 2
    answers = capfd.readouterr().out
    assert answers.count("Where is order A1?") == 2  # the fake model echoes the question
    _, (plain, streamed) = stored(cassette, recorded.run_id)
    for exchange, model in ((plain, "gpt-4o"), (streamed, "gpt-4o-mini")):
        assert exchange.route == f"/{llm.url.removeprefix('https://')}/v1/chat/completions"
        assert exchange.summary is not None
        assert (exchange.summary.kind, exchange.summary.dialect) == ("llm", "openai_chat")
        assert exchange.summary.model is not None and exchange.summary.model.startswith(model)
        assert exchange.summary.usage is not None and exchange.summary.usage.output > 0
        assert ("authorization", "[redacted]") in {(k.lower(), v) for k, v in exchange.request_headers}  # fmt: skip
    assert plain.chunks is None
    assert streamed.chunks is not None and len(streamed.chunks) > 1

    # replayed offline (the fake model API is gone), streams included
    replayed = api.replay(
        recorded.run_id,
        [*LLM_AGENT, f"{llm.url}/v1"],
        api.Options(cassette=cassette, intercept=options),
    )
    assert replayed.exit_code == 0 and replayed.status is RunStatus.FINISHED
    assert capfd.readouterr().out == answers


def stored(cassette: Path, run_id: str) -> tuple[Run, list[Exchange]]:
    store = SqliteStore(cassette, create=False)
    try:
        return store.get_run(run_id), store.exchanges(run_id)
    finally:
        store.close()


def config_dir(recorded: Recorded) -> Path:
    return Path(recorded.env["XDG_CONFIG_HOME"]) / "forkpoint"


def test_serve_intercept_tells_runs_apart_by_proxy_user(tmp_path, cassette):
    ca = TestCA(tmp_path / "test-ca")
    tools = Service(tool_app("tools"), ca, HOST_A)
    port = free_port()
    serving = start_forkpoint(
        "serve", "--cassette", cassette, "--port", "0", "--intercept", "--intercept-port", port,
        "--upstream-ca", ca.cert_path, env={"XDG_CONFIG_HOME": str(tmp_path / "config")},
    )  # fmt: skip
    try:
        assert serving.stdout is not None
        gateway, intercepting = serving.stdout.readline(), serving.stdout.readline()
        assert gateway.startswith("forkpoint serving on http://127.0.0.1:")
        assert f"HTTPS_PROXY=http://RUN:@127.0.0.1:{port}" in intercepting
        bundle = intercepting.rpartition("SSL_CERT_FILE=")[2].rstrip(")\n")
        for run in ("alpha", "beta"):
            done = subprocess.run(
                ["curl", "-sS", "--fail", "--proxy", f"http://{run}:@127.0.0.1:{port}",
                 "--cacert", bundle, f"{tools.url}/v1/search?q={run}"],
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert json.loads(done.stdout)["q"] == run, done.stderr
    finally:
        serving.send_signal(signal.SIGINT)
        serving.communicate(timeout=30)
        tools.stop()
    for run in ("alpha", "beta"):
        _, exchanges = stored(cassette, run)
        assert [e.route.rpartition("=")[2] for e in exchanges] == [run]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_ca_prints_the_certificate_and_how_to_trust_it(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    shown = invoke("ca", env=env)
    assert shown.exit_code == 0
    cert = Path(shown.stdout.strip())
    assert cert.parent == tmp_path / "forkpoint" and cert.read_bytes().startswith(b"-----BEGIN")
    assert (
        "update-ca-certificates" in shown.stderr and f"NODE_EXTRA_CA_CERTS={cert}" in shown.stderr
    )
    bundle = invoke("ca", "--bundle", env=env)
    assert cert.read_bytes().strip() in Path(bundle.stdout.strip()).read_bytes()
