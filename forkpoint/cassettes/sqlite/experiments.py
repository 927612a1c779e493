"""The SQLite cassette's `ExperimentStore`: `experiments` (name, times, spec JSON) and
`experiment_runs` (each selected run, its branch run or the error, and a JSON result)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from forkpoint.cassettes.rows import EXPERIMENT_COUNTS, damaged, dump_json
from forkpoint.cassettes.sqlite.connection import Connection
from forkpoint.cassettes.store import StoredBranch, StoredExperiment
from forkpoint.errors import AlreadyRecorded, ConfigError


class SqliteExperiments:
    _db: Connection
    path: Path

    def create_experiment(self, experiment: StoredExperiment) -> None:
        name, created_at, ended_at, spec = experiment
        with self._db.writing() as conn:
            if conn.execute("SELECT 1 FROM experiments WHERE name=?", (name,)).fetchone():
                raise ConfigError(f"{self.path} already has an experiment {name!r}")
            conn.execute(
                "INSERT INTO experiments VALUES (?,?,?,?)",
                (name, created_at, ended_at, dump_json(spec)),
            )

    def add_experiment_branch(self, name: str, branch: StoredBranch) -> None:
        seq, source_id, branch_id, error, result = branch
        with self._db.writing() as conn:
            try:
                conn.execute(
                    "INSERT INTO experiment_runs VALUES (?,?,?,?,?,?)",
                    (name, seq, source_id, branch_id, error, dump_json(result)),
                )
            except sqlite3.IntegrityError as failure:
                if "FOREIGN KEY" in str(failure):
                    raise ConfigError(
                        f"no experiment {name!r}, or no run {source_id} / {branch_id}, "
                        f"in {self.path}"
                    ) from None
                raise AlreadyRecorded(f"experiment {name!r} already has branch {seq}") from None

    def experiment_counts(self, name: str) -> tuple[int, int]:
        with self._db.reading() as conn:
            exists = "SELECT 1 FROM sqlite_master WHERE type='table' AND name='experiment_runs'"
            if conn.execute(exists).fetchone() is None:  # a version-1 file, read-only
                return 0, 0
            row = conn.execute(EXPERIMENT_COUNTS.replace("%s", "?"), (name,)).fetchone()
        return int(row[0]), int(row[1] or 0)

    def finish_experiment(self, name: str, *, ended_at: float) -> None:
        with self._db.writing() as conn:
            query = "UPDATE experiments SET ended_at=? WHERE name=?"
            if not conn.execute(query, (ended_at, name)).rowcount:
                raise ConfigError(f"no experiment {name!r} in {self.path}")

    def get_experiment(self, name: str) -> tuple[StoredExperiment, list[StoredBranch]]:
        found = self._experiments("WHERE name=?", (name,))
        if not found:
            raise ConfigError(
                f"no experiment {name!r} in {self.path} (see: forkpoint experiment list)"
            )
        with self._db.reading() as conn:
            rows = conn.execute(
                "SELECT seq, source_id, branch_id, error, result FROM experiment_runs "
                "WHERE experiment=? ORDER BY seq",
                (name,),
            ).fetchall()
        try:
            branches = [StoredBranch(s, src, b, e, orjson.loads(r)) for s, src, b, e, r in rows]
        except orjson.JSONDecodeError as error:
            raise damaged(f"experiment {name!r}", "a branch's result", error) from None
        return found[0], branches

    def list_experiments(self) -> list[StoredExperiment]:
        return self._experiments("ORDER BY created_at, name", ())

    def _experiments(self, where: str, params: Sequence[Any]) -> list[StoredExperiment]:
        with self._db.reading() as conn:
            # A version-1 cassette written before experiments, opened read-only, has none.
            exists = "SELECT 1 FROM sqlite_master WHERE type='table' AND name='experiments'"
            if conn.execute(exists).fetchone() is None:
                return []
            query = f"SELECT name, created_at, ended_at, spec FROM experiments {where}"
            rows = conn.execute(query, params).fetchall()
        try:
            return [StoredExperiment(n, c, e, orjson.loads(spec)) for n, c, e, spec in rows]
        except orjson.JSONDecodeError as error:
            raise damaged(f"{self.path}'s experiments", "a spec", error) from None
