"""The adapter contract: how the proxy pulls an agent's own state and puts it back.

HTTP traffic shows what an agent asked and was told, not what it held: its memory, plan,
scratchpad or files. An adapter gives that state as opaque bytes with a content type, at a
step boundary, and takes it back when a fork or a resume starts the agent again.

    class Adapter(Protocol):
        name: str
        async def pull(self) -> State        # the state now; raise on failure
        async def restore(self, state: State) -> None  # ValueError: a state it refuses

The proxy pulls when an LLM request arrives (the agent is waiting on it, so its state is
consistent) or every N exchanges / T seconds. A pull that fails or times out is recorded as a
failed snapshot; it never delays or fails the agent's request.

Wire form, for agents in any language (`forkpoint.adapters.http`): the agent serves
`GET /state` (the state, with its Content-Type) and `PUT /state` (replace it) and registers
that URL with `POST $FORKPOINT_URL/_forkpoint/adapters` `{"url": …, "name": …}` — under
`/r/$FORKPOINT_RUN/` or with the `X-Forkpoint-Run` header. For a fork or a resume, the proxy
answers the registration by restoring the snapshot (a `PUT /state`) before it replies, and
the reply's JSON says which step the state is from. Python agents use
`forkpoint.adapters.agent.attach`, which does all of this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class State:
    content_type: str
    data: bytes


class Adapter(Protocol):
    name: str

    async def pull(self) -> State: ...

    async def restore(self, state: State) -> None: ...
