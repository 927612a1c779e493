"""ForkpointSession outside forkpoint: a plain in-memory Agents SDK session."""

from __future__ import annotations

import asyncio

import pytest
from agents.memory.session import Session

from forkpoint.adapters.openai_agents import ForkpointSession


@pytest.fixture(autouse=True)
def outside_forkpoint(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.delenv("FORKPOINT_URL", raising=False)
    monkeypatch.delenv("FORKPOINT_RUN", raising=False)


def test_it_is_an_agents_sdk_session_keeping_items_as_json():
    session = ForkpointSession("s1")
    assert isinstance(session, Session) and session.restored_step is None

    async def use() -> None:
        await session.add_items(
            [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
        )
        await session.add_items([{"role": "user", "content": "c"}])
        assert await session.get_items(limit=2) == [
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ]
        assert await session.pop_item() == {"role": "user", "content": "c"}
        assert len(await session.get_items()) == 2
        await session.clear_session()
        assert await session.get_items() == [] and await session.pop_item() is None

    asyncio.run(use())
    assert session.state == {"items": []}
