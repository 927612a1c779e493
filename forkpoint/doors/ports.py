"""What a front door needs from the running proxy, as protocols: the door depends on these, and
`forkpoint.runtime` provides them (or, for `Pages`, the command), so the doors import nothing
above them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from typing import Protocol

from aiohttp import web

from forkpoint.adapters.protocol import Adapter
from forkpoint.engine.frames import Frame
from forkpoint.engine.session import Session
from forkpoint.models import Blob, Ending, Exchange, Headers, Piece, Run, Snapshot, Ticket

Item = Exchange | Snapshot | Run | Blob | Ticket | Ending


class Sessions(Protocol):
    async def get(self, run_id: str | None) -> Session:
        """The session of a run id (None: the proxy's default run); raises ConfigError for an
        id the proxy will not serve."""
        ...

    def ready(self, run_id: str | None) -> Session | None:
        """The session of a run id when it is open and numbers its own steps, for a caller
        on any thread that must not wait; None otherwise."""
        ...

    def allocate(self, session: Session) -> int | None:
        """The provisional step (a ticket, `models.Ticket`) of a request that just arrived,
        when the store numbers the session's steps (other proxies may serve its run too): the
        store gives the step when it writes the request, so nothing waits on it; None when the
        session numbers its own."""
        ...


class Recorder(Protocol):
    def submit(self, item: Item) -> None:
        """Hand over a completed item (a run to create, an exchange, a snapshot, a piece of a
        body); never blocks."""
        ...

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait (blocking: the door calls it on a thread) until what was submitted is
        committed, or held in the journal; False on timeout."""
        ...


class Pieces(Protocol):
    def piece(self, piece: Piece) -> bytes:
        """The stored bytes of a piece of a recorded body; raises CassetteError (blocking: the
        door reads on a thread)."""
        ...


class Snapshots(Protocol):
    def on_request(self, run_id: str, step: int, *, llm: bool) -> list[asyncio.Task[None]]:
        """Start the state pulls due at this step; the door holds the answer until they end."""
        ...

    async def pull(self, run_id: str, step: int) -> None:
        """Pull every adapter of the run now, whatever the policy (the run parks): the
        snapshots are handed to the recorder before this returns."""
        ...

    def forget(self, run_id: str) -> None:
        """The run's agent is gone (parked): its adapters are pulled no more."""
        ...

    async def attach(self, session: Session, adapter: Adapter) -> int | None:
        """Register an agent's adapter, first restoring its snapshot in a fork or a resume;
        the step its state was restored from, if any."""
        ...


class UpstreamResponse(Protocol):
    status: int
    headers: Headers

    def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives; raises UpstreamError if the upstream cuts or stalls."""
        ...

    def release(self) -> None: ...


class UpstreamSocket(Protocol):
    """A websocket to an upstream. `status` is 101 when it opened; any other is the upstream
    refusing the handshake with that answer (and the socket carries nothing)."""

    status: int
    headers: Headers
    protocol: str | None
    close_code: int  # once `messages` has ended
    close_reason: str

    def messages(self) -> AsyncIterator[Frame]:
        """The upstream's messages as they arrive, until it closes; raises UpstreamError if
        the connection breaks."""
        ...

    async def send(self, frame: Frame) -> None: ...

    async def close(self) -> None: ...


class Sender(Protocol):
    async def send(
        self, method: str, url: str, headers: Headers, body: bytes | AsyncIterable[bytes]
    ) -> UpstreamResponse:
        """Send a request, its body whole or as it comes (an upload; chunked unless `headers`
        give its Content-Length); raises UpstreamError when no response head arrives."""
        ...

    async def websocket(
        self, url: str, headers: Headers, protocols: tuple[str, ...]
    ) -> UpstreamSocket:
        """Open a websocket (ws:// or wss://); raises UpstreamError when no answer comes."""
        ...


class Pages(Protocol):
    """Pages the gateway serves beside the proxy under a path (the web view, `forkpoint.ui`):
    given the request and what follows that path in it; closed as the proxy stops."""

    async def __call__(self, request: web.Request, path: str) -> web.StreamResponse: ...

    async def close(self) -> None: ...
