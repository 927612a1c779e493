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
