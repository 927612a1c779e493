"""The stdio door: `forkpoint mcp -- CMD`, an MCP server command that puts forkpoint in front of
the real one, as the gateway does for HTTP.

The agent starts it as it would start CMD and speaks MCP over its stdin and stdout. Each message
the agent writes (a line of JSON-RPC) becomes one POST to the proxy, on the route
`/mcp-stdio/NAME` of the agent's run, and the proxy decides it like any request: served from
the cassette, mocked, failed, or forwarded live to the real server, which this door starts only
then (`doors.stdio_server`: the proxy reaches it on loopback, where the door registered it). So
one engine and one recorder see every step, and a stdio tool call takes its step number among
the run's model calls in the order the agent made them. The door translates and nothing more:
the answer's messages (one JSON object, or one per event of a stream) go to the agent's stdout
as lines, in order.

Messages are handed over one at a time, each once the proxy has taken the one before it (its
answer's head came), so the server gets them in the agent's order, an `initialize` before the
`notifications/initialized` after it; their answers stream back side by side. An answer that
breaks off is a server that crashed (now, or when recorded): the door closes the agent's stdout
and exits, as the server would have.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import aiohttp

from forkpoint.doors.stdio_server import TOKEN_HEADER, Handshake, ServerBridge
from forkpoint.engine.dialects import jsonrpc
from forkpoint.engine.dialects.mcp import STDIO_PREFIX
from forkpoint.errors import ConfigError

log = logging.getLogger(__name__)

# The exit code when a replayed server crashed (the code it exited with was not recorded).
CRASHED = 1
_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}

Send = Callable[[bytes], Awaitable[None]]


class StdioDoor:
    """One agent's MCP server `cmd`, named `name` in run `run_id` of the proxy at `proxy_url`
    (its base URL, token prefix and all)."""

    def __init__(
        self, cmd: Sequence[str], *, name: str, proxy_url: str, run_id: str | None, send: Send
    ):
        self._cmd = list(cmd)
        self._name = name
        run = f"/r/{run_id}" if run_id else ""
        self._base = proxy_url.rstrip("/") + run
        self._send = send
        self._token = secrets.token_urlsafe(24)
        self._handshake = Handshake()
        self._answers: set[asyncio.Task[None]] = set()
        self._ended = asyncio.Event()
        self._code: int | None = None
        self._bridge = ServerBridge(
            self._cmd, token=self._token, handshake=self._handshake, unrelated=send,
            exited=self._server_exited,
        )  # fmt: skip
        self._client: aiohttp.ClientSession | None = None
        self._starting: asyncio.Task[None] | None = None

    async def run(self, lines: AsyncIterator[bytes]) -> int:
        """Serve the agent's messages until it closes its end or the server crashes; the exit
        code the agent sees (the server's, where one ran)."""
        self._client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        try:
            await self._register(await self._bridge.listen())
            reading = asyncio.create_task(self._read(lines))
            ended = asyncio.create_task(self._ended.wait())
            await asyncio.wait([reading, ended], return_when=asyncio.FIRST_COMPLETED)
            reading.cancel()
            ended.cancel()
            if self._answers and self._code is None:  # what the agent still waits for
                await asyncio.wait(self._answers)
        finally:
            for task in self._answers:
                task.cancel()
            code = await self._bridge.close()
            await self._client.close()
        if self._code is not None:
            return self._code
        return code or 0

    async def _register(self, url: str) -> None:
        assert self._client is not None
        where = f"{self._base}/_forkpoint/mcp"
        try:
            async with self._client.post(where, json={"url": url, "name": self._name}) as answer:
                if answer.status != 200:
                    text = (await answer.text())[:300]
                    raise ConfigError(f"the forkpoint proxy refused this MCP server: {text}")
                live = (await answer.json()).get("live") is True
        except aiohttp.ClientError as error:
            raise ConfigError(
                f"no forkpoint proxy at {self._base} (FORKPOINT_URL): {error}"
            ) from error
        if live:  # a recording: the server starts beside the agent's first message
            self._starting = asyncio.create_task(self._bridge.start())

    async def _read(self, lines: AsyncIterator[bytes]) -> None:
        async for data in lines:
            message = jsonrpc.parse(data)
            if message is None:  # as a server answers a line it cannot read
                await self._send(jsonrpc.error(None, "Parse error", code=-32700))
                continue
            self._handshake.saw(message, data)
            await self._hand_over(message, data)

    async def _hand_over(self, message: jsonrpc.Message, data: bytes) -> None:
        """POST one message; once its answer's head is here, stream the answer on its own."""
        assert self._client is not None
        headers = {**_HEADERS, TOKEN_HEADER: self._token}
        url = f"{self._base}{STDIO_PREFIX}{self._name}"
        try:
            response = await self._client.post(url, data=data, headers=headers)
        except aiohttp.ClientError as error:  # the proxy is gone: nothing answers any more
            log.error("forkpoint mcp: lost the forkpoint proxy: %s", error)
            self._crashed(CRASHED)
            return
        task = asyncio.create_task(self._relay(response, message))
        self._answers.add(task)
        task.add_done_callback(self._answers.discard)

    async def _relay(self, response: aiohttp.ClientResponse, message: jsonrpc.Message) -> None:
        """The answer's messages to the agent, each as it comes."""
        try:
            content_type = response.headers.get("content-type", "")
            if content_type.startswith("text/event-stream"):
                events = jsonrpc.Events()
                async for data in response.content.iter_any():
                    for said in events.feed(data):
                        await self._send(_answering(said, message))
            else:
                body = await response.read()
                if message.kind is jsonrpc.Kind.REQUEST:
                    await self._send(_whole(body, response.status, message))
        except (aiohttp.ClientError, ValueError):  # it broke off: a crashed server
            self._crashed(CRASHED)
        finally:
            response.release()

    def _server_exited(self, code: int) -> None:
        log.warning("forkpoint mcp: the MCP server %s exited with code %d", self._cmd[0], code)
        self._crashed(code)

    def _crashed(self, code: int) -> None:
        if self._code is None:
            self._code = code
        self._ended.set()


def _answering(data: bytes, message: jsonrpc.Message) -> bytes:
    """A message of the answer to `message`: an error with no id is the request's."""
    found = jsonrpc.parse(data)
    if found is None or found.kind is not jsonrpc.Kind.RESPONSE or found.id is not None:
        return data
    return jsonrpc.dumps({**found.value, "id": message.id})


def _whole(body: bytes, status: int, message: jsonrpc.Message) -> bytes:
    """The answer to a request that came whole: its message, or (anything else) an error."""
    if jsonrpc.parse(body) is not None:
        return _answering(body, message)
    text = body.decode(errors="replace").strip()[:500] or f"HTTP {status}"
    return jsonrpc.error(message.id, f"forkpoint: {text}")


async def stdin_lines(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """The agent's messages, line by line, until it closes its end."""
    splitter = jsonrpc.Lines()
    while data := await reader.read(1 << 16):
        for found in splitter.feed(data):
            yield found
    if rest := splitter.rest():
        yield rest


@contextlib.asynccontextmanager
async def standard_streams() -> AsyncIterator[tuple[asyncio.StreamReader, Send]]:
    """This process's stdin as a reader, and a sender of lines to its stdout."""
    import sys

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=jsonrpc.MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, sys.stdout
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)

    async def send(data: bytes) -> None:
        with contextlib.suppress(ConnectionError):  # the agent is gone
            writer.write(jsonrpc.line(data))
            await writer.drain()

    try:
        yield reader, send
    finally:
        writer.close()
