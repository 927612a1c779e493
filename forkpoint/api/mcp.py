"""`forkpoint mcp -- CMD`: an MCP stdio server recorded, replayed and forked with its run.

The door (`doors.stdio`) needs the proxy and the run of the agent that started it. forkpoint
gives the agent `FORKPOINT_URL` and `FORKPOINT_RUN`, but MCP clients start a stdio server with
a few variables of their own only (the Python and TypeScript SDKs pass HOME, PATH, SHELL, TERM,
USER and LOGNAME, and what the server's configuration names), so the door looks in its own
environment first, then in those its parent processes were started with (Linux's
`/proc/PID/environ`), nearest first: the agent's is there, as forkpoint set it.
Started by no forkpoint (no such variables anywhere), the door is CMD itself: it replaces its
own process by CMD's, so a configuration that names it works everywhere.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from forkpoint.errors import ConfigError

__all__ = ["default_name", "find_proxy", "serve_stdio"]

# How many parent processes the door looks through for the run (an agent may start a server
# through a launcher: npx, uv run, a shell).
ANCESTORS = 8
# Launchers and interpreters: a server's name is what they run, not them.
_LAUNCHERS = frozenset(
    {"python", "python3", "node", "npx", "bunx", "bun", "deno", "uv", "uvx", "pipx", "sh",
     "bash", "run", "exec"}
)  # fmt: skip
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def find_proxy(
    environ: Mapping[str, str] = os.environ, *, pid: int | None = None, proc: Path = Path("/proc")
) -> tuple[str, str | None] | None:
    """The proxy URL and run id this door serves: from `environ`, else from the environment a
    parent process was started with; None when no forkpoint started any of them."""
    if environ.get("FORKPOINT_URL"):
        return environ["FORKPOINT_URL"], environ.get("FORKPOINT_RUN") or None
    pid = os.getppid() if pid is None else pid
    for _ in range(ANCESTORS):
        if pid <= 1:
            return None
        found = _environ(proc / str(pid))
        if found.get("FORKPOINT_URL"):
            return found["FORKPOINT_URL"], found.get("FORKPOINT_RUN") or None
        pid = _parent(proc / str(pid))
    return None


def _environ(process: Path) -> dict[str, str]:
    try:
        raw = (process / "environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {key: value for key, _, value in pairs}


def _parent(process: Path) -> int:
    try:
        stat = (process / "stat").read_text()
    except OSError:
        return 0
    # `PID (COMM) STATE PPID …`: the command may hold spaces and parentheses
    fields = stat.rpartition(")")[2].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0


def default_name(cmd: Sequence[str]) -> str:
    """The server's name in its route (`/mcp-stdio/NAME`), from its command: what the command
    runs, without directories (they differ between machines) or an extension:
    `python /srv/tools/server.py` → `server`, `npx -y @scope/server-everything` →
    `server-everything`."""
    words = [Path(word).name for word in cmd if word]
    chosen = next((w for w in words if w not in _LAUNCHERS and not w.startswith("-")), None)
    name = (chosen or (words[0] if words else "server")).removesuffix(".exe")
    name = re.sub(r"\.(py|js|mjs|cjs|ts)$", "", name)
    return _UNSAFE.sub("-", name).strip("-.") or "server"


def serve_stdio(cmd: Sequence[str], *, name: str | None = None) -> int:
    """Run the stdio door for `cmd` on this process's stdin and stdout until the agent closes
    them; the exit code. Without a forkpoint proxy to serve, `cmd` replaces this process."""
    if not cmd:
        raise ConfigError("forkpoint mcp needs the server's command: forkpoint mcp -- CMD …")
    found = find_proxy()
    if found is None:
        try:
            os.execvp(cmd[0], list(cmd))
        except OSError as error:
            raise ConfigError(f"cannot run {cmd[0]!r}: {error.strerror}") from error
    url, run_id = found
    return asyncio.run(_serve(list(cmd), name or default_name(cmd), url, run_id))


async def _serve(cmd: list[str], name: str, url: str, run_id: str | None) -> int:
    from forkpoint.doors.stdio import StdioDoor, standard_streams, stdin_lines

    async with standard_streams() as (reader, send):
        door = StdioDoor(cmd, name=name, proxy_url=url, run_id=run_id, send=send)
        return await door.run(stdin_lines(reader))
