"""--store and FORKPOINT_STORE: every command that takes --cassette reaches any store."""

from __future__ import annotations

from forkpoint.cassettes.open import open_store
from forkpoint.models import Run
from tests.pg import postgres_url as postgres_url  # the fixture
from tests.runner import forkpoint


def test_store_option_env_and_cassette(postgres_url, tmp_path):
    store = open_store(postgres_url)
    store.create_run(Run("01INPG", name="in-postgres"))
    store.close()
    by_option = forkpoint("runs", "--store", postgres_url)
    assert by_option.returncode == 0 and "01INPG" in by_option.stdout, by_option.stderr
    by_env = forkpoint("show", "in-postgres", env={"FORKPOINT_STORE": postgres_url})
    assert by_env.returncode == 0 and "01INPG" in by_env.stdout, by_env.stderr
    # an explicit --cassette wins over the environment's store
    file = forkpoint("runs", "--cassette", tmp_path / "absent.db",
                     env={"FORKPOINT_STORE": postgres_url})  # fmt: skip
    assert file.returncode == 2 and "no cassette at" in file.stderr
    both = forkpoint("runs", "--store", postgres_url, "--cassette", tmp_path / "x.db")
    assert both.returncode == 2 and "--cassette or --store, not both" in both.stderr
    path = forkpoint("runs", "--store", tmp_path / "absent.db")  # a path: an SQLite file
    assert path.returncode == 2 and "no cassette at" in path.stderr
