"""A forkpoint command tunes the garbage collector of its own process (runtime.collector)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.cli import main
from forkpoint.runtime import collector


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


def test_a_command_collects_the_young_generation_less_often_and_the_others_as_before(
    thresholds: tuple[int, int, int], tmp_path: Path
) -> None:
    SqliteStore(tmp_path / "c.db").close()
    gc.set_threshold(700, 7, 9)
    result = CliRunner().invoke(main, ["runs", "--cassette", str(tmp_path / "c.db")])
    assert result.exit_code == 0, result.output
    assert gc.get_threshold() == (collector.YOUNG, 7, 9)
