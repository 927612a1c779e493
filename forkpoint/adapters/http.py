"""The language-agnostic adapter: the agent's state over `GET`/`PUT` of one URL."""

from __future__ import annotations

import json

import aiohttp

from forkpoint.adapters.protocol import State

DEFAULT_CONTENT_TYPE = "application/octet-stream"


class AdapterError(Exception):
    """An agent's state endpoint answered with an error."""


def _reason(body: bytes) -> str:
    """An error body's message: `{"error": …}` as the agent helper sends it, else its text."""
    text = body[:500].decode("utf-8", errors="replace").strip()
    try:
        found = json.loads(text)
    except ValueError:
        return text or "(no body)"
    return str(found.get("error", text)) if isinstance(found, dict) else text


class HttpAdapter:
    """An agent's `/state` endpoint, through the proxy's own client session."""

    def __init__(self, url: str, session: aiohttp.ClientSession, *, name: str = "agent"):
        self.url = url
        self.name = name
        self._session = session

    async def pull(self) -> State:
        # A redirect is an error, not followed: the proxy fetches the URL it was given only.
        async with self._session.get(self.url, allow_redirects=False) as response:
            data = await response.read()
            if response.status >= 300:  # say what the agent said, not only its status
                raise AdapterError(f"{response.status} from {self.url}: {_reason(data)}")
            return State(response.headers.get("Content-Type", DEFAULT_CONTENT_TYPE), data)

    async def restore(self, state: State) -> None:
        async with self._session.put(
            self.url, data=state.data, headers={"Content-Type": state.content_type},
            allow_redirects=False,
        ) as response:  # fmt: skip
            if response.status >= 300:
                raise AdapterError(
                    f"{response.status} from {self.url}: {_reason(await response.read())}"
                )
