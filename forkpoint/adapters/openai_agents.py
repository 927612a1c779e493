"""An OpenAI Agents SDK session whose items live in forkpoint's agent state.

    from forkpoint.adapters.openai_agents import ForkpointSession

    session = ForkpointSession()
    await Runner.run(agent, "Where is my order?", session=session)

The conversation the SDK keeps in a session is then snapshotted at each model call and comes
back on a fork or a resume, like any state given to `forkpoint.adapters.agent.attach`;
`session.state` holds it (under "items"), and the agent may keep its own fields there too.
Outside forkpoint it is an in-memory session. It needs no import of the SDK: the SDK's
`Session` is a protocol, and its items are JSON.
"""

from __future__ import annotations

from typing import Any

import orjson

from forkpoint.adapters.agent import AgentState, attach

ADAPTER = "openai-agents"


class ForkpointSession:
    def __init__(self, session_id: str = "forkpoint", *, name: str = ADAPTER):
        self.session_id = session_id
        self.session_settings = None
        self.state: AgentState = attach(default={"items": []}, name=name)

    @property
    def restored_step(self) -> int | None:
        return self.state.restored_step

    @property
    def _items(self) -> list[Any]:
        items: list[Any] = self.state["items"]
        return items

    async def get_items(self, limit: int | None = None) -> list[Any]:
        items = self._items
        return list(items[-limit:] if limit else items)

    async def add_items(self, items: list[Any]) -> None:
        # as JSON, the form a snapshot keeps: SDK objects become the dicts it reads back
        self._items.extend(orjson.loads(orjson.dumps(items, default=_plain)))

    async def pop_item(self) -> Any | None:
        return self._items.pop() if self._items else None

    async def clear_session(self) -> None:
        self._items.clear()


def _plain(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_unset=True)
    raise TypeError(f"cannot keep {type(value).__name__} in a forkpoint session")
