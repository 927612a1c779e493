"""The in-memory store beyond the contract: its messages name the cassette file it stands for."""

from __future__ import annotations

import pytest

from forkpoint.cassettes.memory import MemoryStore
from forkpoint.errors import CassetteError, RunNotFound
from forkpoint.models import Exchange


def test_messages_name_the_label():
    store = MemoryStore("tests/cassettes/t.yaml")
    with pytest.raises(RunNotFound, match=r"no run 'nope' in tests/cassettes/t\.yaml"):
        store.find_run("nope")
    orphan = Exchange("other", 0, "GET", "/x", (), b"", "f")
    with pytest.raises(CassetteError, match=r"no run other in tests/cassettes/t\.yaml"):
        store.add_exchanges([orphan])
    store.close()
    with pytest.raises(CassetteError, match=r"the cassette tests/cassettes/t\.yaml is closed"):
        store.list_runs()
