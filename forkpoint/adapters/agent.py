"""The helper a Python agent imports: one call makes its state snapshot-able and restorable.

    from forkpoint.adapters.agent import attach

    state = attach(default={"notes": [], "plan": None})   # a dict: mutate it as you go

Under forkpoint (`FORKPOINT_URL` and `FORKPOINT_RUN` set by `forkpoint record/fork/resume`)
it serves the dict as JSON on `GET/PUT /state` from a background thread and registers that URL
with the proxy; for a fork or a resume the proxy puts the snapshot back before `attach`
returns, so the returned dict is the restored state. Outside forkpoint it returns `default`
and does nothing else. It needs no event loop, so sync and asyncio agents use it alike.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from forkpoint.errors import ForkpointError

CONTENT_TYPE = "application/json"


class AgentState(dict[str, Any]):
    """The agent's state: a dict, plus the step a fork or resume restored it from."""

    restored_step: int | None = None


def attach(
    default: dict[str, Any] | None = None, *, name: str = "agent", timeout: float = 30.0
) -> AgentState:
    """Serve `default` (or the state forkpoint restores) to the proxy and return it."""
    state = AgentState(default or {})
    url, run = os.environ.get("FORKPOINT_URL"), os.environ.get("FORKPOINT_RUN")
    if not url or not run:
        return state
    server = _serve(state)
    state_url = f"http://127.0.0.1:{server.server_address[1]}/state"
    request = urllib.request.Request(
        f"{url}/r/{run}/_forkpoint/adapters",
        data=json.dumps({"url": state_url, "name": name}).encode(),
        headers={"Content-Type": CONTENT_TYPE},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            state.restored_step = json.loads(response.read())["restored_step"]
    except (urllib.error.URLError, ValueError, KeyError) as error:
        server.shutdown()
        raise ForkpointError(f"forkpoint adapter: cannot register with {url}: {error}") from error
    return state


def _serve(state: AgentState) -> ThreadingHTTPServer:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        # keep-alive: the proxy pulls at every step, over one connection and one thread
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path != "/state":
                return self.send_error(404)
            try:
                with lock:
                    body = json.dumps(state).encode()
            except (TypeError, ValueError) as error:  # the proxy records why, not a reset
                message = f"the agent's state is not JSON: {error}"
                return self._reply(500, json.dumps({"error": message}).encode())
            self._reply(200, body)

        def do_PUT(self) -> None:
            if self.path != "/state":
                return self.send_error(404)
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                restored = json.loads(raw)
                if not isinstance(restored, dict):
                    raise ValueError("the state is not a JSON object")
            except ValueError as error:
                return self._reply(400, json.dumps({"error": str(error)}).encode())
            with lock:
                state.clear()
                state.update(restored)
            self._reply(204, b"")

        def _reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(
            self, format: str, *args: Any
        ) -> None:  # quiet: the agent's stderr is its own
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="forkpoint-state", daemon=True).start()
    return server
