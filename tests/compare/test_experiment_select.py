"""Choosing an experiment's runs: each filter, combined, and the default to recorded runs."""

from __future__ import annotations

from datetime import datetime

import pytest

from forkpoint.cassettes.memory import MemoryStore
from forkpoint.compare.experiment_select import select_runs
from forkpoint.errors import ConfigError, RunNotFound
from forkpoint.models import Mode, Run, RunStatus


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()  # local time, as the filters read it


@pytest.fixture
def store() -> MemoryStore:
    store = MemoryStore()
    runs = [
        Run("01A", name="ticket-1", labels={"batch": "demo", "tier": "gold"}, status=RunStatus.FINISHED,
            created_at=at("2026-11-01T09:00")),
        Run("01B", name="ticket-2", labels={"batch": "demo"}, status=RunStatus.CRASHED,
            created_at=at("2026-11-02T23:59")),
        Run("01C", name="nightly", labels={"batch": "other"}, status=RunStatus.FINISHED,
            created_at=at("2026-11-03T00:00")),
        Run("01D", name="mini/ticket-1", labels={"batch": "demo", "experiment": "mini"},
            status=RunStatus.FINISHED, mode=Mode.FORK, parent_id="01A", created_at=at("2026-11-04T10:00")),
        Run("01E", labels={"batch": "demo"}, status=RunStatus.DIVERGED, mode=Mode.REPLAY,
            parent_id="01A", created_at=at("2026-11-04T11:00")),
    ]  # fmt: skip
    for run in runs:
        store.create_run(run)
    return store


def ids(store: MemoryStore, *filters: str) -> list[str]:
    return [run.id for run in select_runs(store, (), filters)]


def test_labels_select_recorded_runs_only_by_default(store):
    # 01D (an experiment's branch) and 01E (a replay) keep the label but are not recordings
    assert ids(store, "label:batch=demo") == ["01A", "01B"]
    assert ids(store, "label:tier") == ["01A"]
    assert ids(store, "label:batch=demo", "mode:any") == ["01A", "01B", "01D", "01E"]
    assert ids(store, "label:batch=demo", "mode:fork") == ["01D"]


def test_name_status_and_parent(store):
    assert ids(store, "name:ticket-*") == ["01A", "01B"]
    assert ids(store, "name:*ticket-1", "mode:any") == ["01A", "01D"]
    assert ids(store, "status:finished") == ["01A", "01C"]
    assert ids(store, "parent:ticket-1") == ["01D", "01E"]  # children: no mode default
    assert ids(store, "parent:01A", "status:diverged") == ["01E"]


def test_time_range(store):
    assert ids(store, "since:2026-11-02") == ["01B", "01C"]
    assert ids(store, "until:2026-11-02") == ["01A", "01B"]  # a date: that whole day
    assert ids(store, "since:2026-11-02T00:00", "until:2026-11-03T00:00") == ["01B"]
    offset = datetime.fromtimestamp(at("2026-11-01T09:00")).astimezone().isoformat()
    assert ids(store, f"since:{offset}", f"until:{offset}") == []  # until is exclusive


def test_filters_combine_with_and(store):
    assert ids(store, "label:batch=demo", "status:crashed", "since:2026-11-02") == ["01B"]
    assert ids(store, "label:batch=demo", "name:nightly") == []


def test_runs_given_by_reference(store):
    found = select_runs(store, ("ticket-2", "01A", "ticket-1"), ())
    assert [run.id for run in found] == ["01A", "01B"]  # each once, oldest first
    with pytest.raises(RunNotFound):
        select_runs(store, ("nope",), ())


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        (("colour:red",), "expected KEY:VALUE with KEY one of label, name"),
        (("label:",), "expected KEY:VALUE"),
        (("status:done",), "'done' is not one of running, finished, crashed, diverged"),
        (("mode:live",), "'live' is not one of record, replay, fork"),
        (("since:yesterday",), "is not an ISO date or date-time"),
        ((), "choose the runs to fork"),
    ],
)
def test_bad_filters_say_what_is_expected(store, filters, message):
    with pytest.raises(ConfigError, match=message):
        select_runs(store, (), filters)


def test_runs_and_filters_are_not_mixed(store):
    with pytest.raises(ConfigError, match="not both"):
        select_runs(store, ("01A",), ("label:batch=demo",))
