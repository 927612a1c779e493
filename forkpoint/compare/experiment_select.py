"""Which runs an experiment forks: filters on label, name, status, time, parent and mode.

A filter is `KEY:VALUE`; every filter given must hold (they combine with AND):

    label:K=V    label K is V          label:K       the run has label K
    name:GLOB    its name matches GLOB (fnmatch: `ticket-*`)
    status:S     running, finished, crashed or diverged
    since:WHEN   created at or after WHEN;  until:WHEN  created before WHEN
    parent:RUN   a child (fork, replay) of RUN (id, id prefix or name)
    mode:M       record, replay, fork, or any

WHEN is an ISO date or date-time (`2026-11-03`, `2026-11-03T14:30`, with or without an
offset; without one it is local time). `until:` a date includes that whole day.

Unless a `mode:` or `parent:` filter says otherwise only recorded runs are chosen: forks and
replays, among them the branches of an earlier experiment (which keep their parent's labels),
would otherwise be picked up again by the filters that chose their parents.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from forkpoint.cassettes.store import Store
from forkpoint.errors import ConfigError
from forkpoint.models import Mode, Run, RunStatus

__all__ = ["Filter", "parse_filter", "select_runs"]

KEYS = ("label", "name", "status", "since", "until", "parent", "mode")


@dataclass(frozen=True, slots=True)
class Filter:
    """One parsed filter: its text (for messages and the stored spec) and its test."""

    text: str
    key: str
    test: Callable[[Run], bool]


def parse_filter(text: str, store: Store) -> Filter:
    """A filter from its `KEY:VALUE` text; `store` resolves `parent:RUN`."""
    key, sep, value = text.partition(":")
    if not sep or key not in KEYS or not value:
        raise ConfigError(
            f"--select {text!r}: expected KEY:VALUE with KEY one of {', '.join(KEYS)}"
        )
    return Filter(text, key, _test(key, value, text, store))


def _test(key: str, value: str, text: str, store: Store) -> Callable[[Run], bool]:
    if key == "label":
        name, has_value, wanted = value.partition("=")
        if has_value:
            return lambda run: run.labels.get(name) == wanted
        return lambda run: name in run.labels
    if key == "name":
        return lambda run: run.name is not None and fnmatch.fnmatchcase(run.name, value)
    if key == "status":
        status = _choice(RunStatus, value, text)
        return lambda run: run.status == status
    if key == "mode":
        if value == "any":
            return lambda run: True
        mode = _choice(Mode, value, text)
        return lambda run: run.mode == mode
    if key == "parent":
        parent = store.find_run(value).id
        return lambda run: run.parent_id == parent
    since = key == "since"
    moment = _moment(value, text, end_of_day=not since)
    return (
        (lambda run: run.created_at >= moment) if since else (lambda run: run.created_at < moment)
    )


def _choice[E: (RunStatus, Mode)](kind: type[E], value: str, text: str) -> E:
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(member.value for member in kind)
        raise ConfigError(f"--select {text!r}: {value!r} is not one of {known}") from None


def _moment(value: str, text: str, *, end_of_day: bool) -> float:
    """Epoch seconds for an ISO date or date-time; a bare date ends at midnight if `end_of_day`."""
    try:
        if len(value) == 10:  # a date alone: YYYY-MM-DD
            day = date.fromisoformat(value) + timedelta(days=1 if end_of_day else 0)
            return datetime(day.year, day.month, day.day).timestamp()
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise ConfigError(
            f"--select {text!r}: {value!r} is not an ISO date or date-time (2026-11-03T14:30)"
        ) from None


def select_runs(store: Store, refs: Sequence[str], filters: Sequence[str]) -> list[Run]:
    """The runs named by `refs`, or else those all `filters` choose, oldest first, each once."""
    if refs and filters:
        raise ConfigError("give runs or --select filters, not both")
    if refs:
        found = {run.id: run for run in (store.find_run(ref) for ref in refs)}
        return sorted(found.values(), key=lambda run: run.id)
    if not filters:
        raise ConfigError(
            "choose the runs to fork: RUN… or --select FILTER (e.g. label:batch=demo)"
        )
    parsed = [parse_filter(text, store) for text in filters]
    if not any(f.key in ("mode", "parent") for f in parsed):
        parsed.append(Filter("mode:record", "mode", lambda run: run.mode == Mode.RECORD))
    return [run for run in store.list_runs() if all(f.test(run) for f in parsed)]
