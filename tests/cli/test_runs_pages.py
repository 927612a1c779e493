"""`forkpoint runs` on a cassette of many runs: the newest page unless asked for more."""

from __future__ import annotations

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import Run
from tests.runner import invoke


def test_runs_lists_the_newest_page_and_says_so(tmp_path):
    cassette = tmp_path / "many.db"
    store = SqliteStore(cassette)
    for index in range(5):
        store.create_run(Run(f"01RUN{index}", name=f"run {index}"))
    store.close()
    page = invoke("runs", "--last", "2", cassette=cassette)
    assert page.exit_code == 0, page.output
    listed = [line.split()[0] for line in page.stdout.splitlines()[1:]]
    assert listed == ["01RUN3", "01RUN4"]
    assert "the newest 2 runs (older ones: --last N, --all)" in page.stderr
    every = invoke("runs", "--all", cassette=cassette)
    assert [line.split()[0] for line in every.stdout.splitlines()[1:]] == [
        f"01RUN{i}" for i in range(5)
    ]
    assert "newest" not in every.stderr
