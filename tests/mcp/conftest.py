"""MCP servers and agents no one here wrote, run through forkpoint as a user runs them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import Exchange

HERE = Path(__file__).resolve().parent
TOOL_SERVER = [sys.executable, str(HERE / "tool_server.py")]
SDK_CLIENT = [sys.executable, str(HERE / "agents" / "sdk_client.py")]
FORKPOINT = str(Path(sys.executable).with_name("forkpoint"))


def door(*server: str, name: str | None = None) -> list[str]:
    """The command an agent's MCP configuration names: forkpoint's door before the server."""
    named = ["--name", name] if name else []
    return [FORKPOINT, "mcp", *named, "--", *server]


def steps(cassette: Path, run_id: str) -> list[Exchange]:
    """A run's exchanges, as the cassette holds them."""
    store = SqliteStore(cassette)
    try:
        return store.exchanges(run_id)
    finally:
        store.close()


def said(stdout: str) -> list[dict[str, object]]:
    """The JSON lines an agent printed."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def started(marker: Path) -> int:
    """How many times the tool server started (it writes its pid to the marker)."""
    return len(marker.read_text().split()) if marker.exists() else 0


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "started"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class HttpServer:
    """The tool server over streamable HTTP, in a process of its own, until stopped."""

    def __init__(self, marker: Path, *, json_response: bool = False):
        self.port = free_port()
        env = {
            **os.environ,
            "FP_MCP_MARKER": str(marker),
            "FP_MCP_JSON": "1" if json_response else "0",
        }
        self._process = subprocess.Popen(
            [*TOOL_SERVER, "http", str(self.port)], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("the MCP tool server did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=10)


@pytest.fixture
def http_server(marker: Path) -> Iterator[type[HttpServer]]:
    servers: list[HttpServer] = []

    def start(*, json_response: bool = False) -> HttpServer:
        servers.append(HttpServer(marker, json_response=json_response))
        return servers[-1]

    yield start  # type: ignore[misc]
    for server in servers:
        server.stop()
