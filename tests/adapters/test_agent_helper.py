"""The agent helper (`attach`) as an agent uses it, under a real proxy."""

from __future__ import annotations

import sys
from pathlib import Path

from forkpoint import Options, record

AGENT = r"""
import json, os, urllib.request
from forkpoint.adapters.agent import attach
state = attach(default={"seen": []})
state["seen"] = {"a set", "is not JSON"}
body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                                 body.encode(), {"content-type": "application/json"})
urllib.request.urlopen(request).read()
"""


def test_a_state_that_is_not_json_is_a_failed_snapshot_that_says_why(
    upstream, cassette, tmp_path: Path
):
    """Found by a user: the snapshot said only "ServerDisconnectedError"."""
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    result = record([sys.executable, str(agent)], Options(cassette=cassette, upstream=upstream.url))
    assert result.exit_code == 0
    from forkpoint import snapshots

    [snapshot] = snapshots(result.run_id, Options(cassette=cassette)).snapshots
    assert not snapshot.ok
    assert "not JSON" in (snapshot.error or "") and "set is not JSON serializable" in (
        snapshot.error or ""
    )


TOKENED_AGENT = r"""
import json, os, urllib.request
from forkpoint.adapters.agent import attach
state = attach(default={"notes": ["kept"]})
body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                                 body.encode(), {"content-type": "application/json"})
print(json.loads(urllib.request.urlopen(request).read())["choices"][0]["message"]["content"])
"""


def test_a_command_under_a_proxy_with_a_token_is_given_it(upstream, cassette, tmp_path: Path):
    """Its base URLs carry the token, so its requests and its adapter's registration pass."""
    agent = tmp_path / "agent.py"
    agent.write_text(TOKENED_AGENT)
    options = Options(cassette=cassette, upstream=upstream.url, token="t0ken-of-the-proxy")
    result = record([sys.executable, str(agent)], options)
    assert result.exit_code == 0 and result.steps == 1
    from forkpoint import snapshots

    [snapshot] = snapshots(result.run_id, Options(cassette=cassette)).snapshots
    assert snapshot.ok and snapshot.size == len(b'{"notes": ["kept"]}')
    assert "t0ken" not in repr(upstream.requests)


def test_a_refused_registration_says_what_the_proxy_answered(monkeypatch):
    """The helper registers over http.client (urllib's opener loaded the system's TLS
    certificates first, tens of ms of every woken agent's start): a refusal still says why."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import pytest

    from forkpoint.adapters.agent import attach
    from forkpoint.errors import ForkpointError

    paths: list[str] = []

    class Refuse(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            paths.append(self.path)
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b'{"error": {"message": "forkpoint: this proxy needs its token"}}'
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("FORKPOINT_URL", f"http://127.0.0.1:{server.server_address[1]}/t/x")
        monkeypatch.setenv("FORKPOINT_RUN", "r1")
        with pytest.raises(ForkpointError, match=r"cannot register .*HTTP 401: .*needs its token"):
            attach(default={"n": 1})
    finally:
        server.shutdown()
        server.server_close()
    assert paths == ["/t/x/r/r1/_forkpoint/adapters"]
