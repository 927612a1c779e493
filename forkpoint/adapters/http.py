"""The language-agnostic adapter: the agent's state over `GET`/`PUT` of one URL."""

from __future__ import annotations

import aiohttp

from forkpoint.adapters.protocol import State

DEFAULT_CONTENT_TYPE = "application/octet-stream"


class HttpAdapter:
    """An agent's `/state` endpoint, through the proxy's own client session."""

    def __init__(self, url: str, session: aiohttp.ClientSession, *, name: str = "agent"):
        self.url = url
        self.name = name
        self._session = session

    async def pull(self) -> State:
        async with self._session.get(self.url) as response:
            response.raise_for_status()
            data = await response.read()
            return State(response.headers.get("Content-Type", DEFAULT_CONTENT_TYPE), data)

    async def restore(self, state: State) -> None:
        async with self._session.put(
            self.url, data=state.data, headers={"Content-Type": state.content_type}
        ) as response:
            response.raise_for_status()
