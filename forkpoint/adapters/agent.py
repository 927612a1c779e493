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

import http.client
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

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
    body = json.dumps({"url": state_url, "name": name}).encode()
    try:
        state.restored_step = _register(url, run, body, timeout)["restored_step"]
    except (OSError, http.client.HTTPException, ValueError, KeyError) as error:
        server.shutdown()
        server.server_close()
        raise ForkpointError(f"forkpoint adapter: cannot register with {url}: {error}") from error
    return state


def _register(url: str, run: str, body: bytes, timeout: float) -> Any:
    """POST the registration (the proxy restores the state before it answers). Over
    http.client: urllib's opener makes a TLS context first, loading the system's certificates,
    which cost a woken agent tens of milliseconds for a plain HTTP call to loopback."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname, parts.port, timeout=timeout)
    try:
        path = f"{parts.path.rstrip('/')}/r/{run}/_forkpoint/adapters"
        connection.request("POST", path, body, {"Content-Type": CONTENT_TYPE})
        response = connection.getresponse()
        answer = response.read()
    finally:
        connection.close()
    if response.status >= 400:
        raise ValueError(f"HTTP {response.status}: {answer[:300].decode(errors='replace')}")
    return json.loads(answer)


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
