"""Moving runs between the SQLite cassette and files, through the Python API."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpoint import api
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.cassettes.transfer import FORMATS, guess_format
from forkpoint.errors import ConfigError, RunNotFound
from forkpoint.models import Exchange, Run, RunStatus


def seed(cassette: Path) -> Run:
    store = SqliteStore(cassette)
    parent = Run(id="01PARENT", name="parent", status=RunStatus.FINISHED)
    run = Run(
        id="01CHILD",
        name="child",
        labels={"team": "a"},
        parent_id=parent.id,
        status=RunStatus.FINISHED,
    )
    store.create_run(parent)
    store.create_run(run)
    store.add_exchanges(
        [
            Exchange(
                run_id=run.id, step=0, method="POST", route="/v1/chat/completions",
                request_headers=(("content-type", "application/json"),),
                request_body=b'{"model": "gpt-4o", "messages": []}', fingerprint="f",
                status=200, response_headers=(("content-type", "application/json"),),
                response_body=b'{"model": "gpt-4o", "choices": []}',
            )
        ]
    )  # fmt: skip
    store.close()
    return run


@pytest.mark.parametrize("fmt, suffix", [("vcr", ".yaml"), ("jsonl", ".jsonl"), ("har", ".har")])
def test_every_format_round_trips_into_a_new_run(tmp_path, fmt, suffix):
    source = tmp_path / "source.db"
    seed(source)
    path = tmp_path / f"child{suffix}"
    path.write_text(api.export_run("child", fmt=fmt, options=api.Options(cassette=source)))
    target = tmp_path / "target.db"
    first, steps = _imported(api.import_run(path, options=api.Options(cassette=target)))
    second, _ = _imported(api.import_run(path, name="again", options=api.Options(cassette=target)))
    assert steps == 1 and first.id != second.id
    assert (first.name, second.name, first.parent_id) == ("child", "again", None)
    assert first.labels == {"team": "a", "imported_from": path.name}
    store = SqliteStore(target)
    [exchange] = store.exchanges(first.id)
    store.close()
    assert exchange.run_id == first.id and exchange.summary is not None
    assert exchange.summary.model == "gpt-4o"


def test_formats_are_guessed_from_the_name_then_the_content(tmp_path):
    assert [guess_format(Path(f"x{s}"))[0] for s in (".yml", ".ndjson", ".har")] == [
        "vcr",
        "jsonl",
        "har",
    ]
    for content, fmt in (('{"forkpoint": 1}', "jsonl"), ('{"log": {}}', "har"),
                         ("interactions: []", "vcr")):  # fmt: skip
        (tmp_path / "x").write_text(content)
        assert guess_format(tmp_path / "x") == (fmt, guess_format(tmp_path / "x")[1])
    assert set(FORMATS) == {"vcr", "jsonl", "har"}


def test_unknown_runs_and_formats_are_errors(tmp_path):
    cassette = tmp_path / "c.db"
    seed(cassette)
    with pytest.raises(RunNotFound):
        api.export_run("nope", fmt="vcr", options=api.Options(cassette=cassette))
    with pytest.raises(ConfigError, match="unknown format 'xml': use one of vcr, jsonl, har"):
        api.export_run("child", fmt="xml", options=api.Options(cassette=cassette))


def _imported(imported: api.Imported) -> tuple[Run, int]:
    return imported.run, imported.steps
