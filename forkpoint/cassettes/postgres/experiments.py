"""The PostgreSQL store's `ExperimentStore`: the SQLite cassette's two experiment tables."""

from __future__ import annotations

import orjson
import psycopg
from psycopg import errors

from forkpoint.cassettes.postgres.connection import Database
from forkpoint.cassettes.rows import EXPERIMENT_COUNTS, damaged, dump_json
from forkpoint.cassettes.store import StoredBranch, StoredExperiment
from forkpoint.errors import AlreadyRecorded, ConfigError


class PostgresExperiments:
    _db: Database
    label: str

    def create_experiment(self, experiment: StoredExperiment) -> None:
        name, created_at, ended_at, spec = experiment

        def work(conn: psycopg.Connection) -> None:
            try:
                with conn.transaction():
                    conn.execute("INSERT INTO experiments VALUES (%s,%s,%s,%s)",
                                 (name, created_at, ended_at, dump_json(spec)))  # fmt: skip
            except errors.UniqueViolation:
                raise ConfigError(f"{self.label} already has an experiment {name!r}") from None

        self._db.run(work, write=True)

    def add_experiment_branch(self, name: str, branch: StoredBranch) -> None:
        seq, source_id, branch_id, error, result = branch

        def work(conn: psycopg.Connection) -> None:
            try:
                with conn.transaction():
                    conn.execute(
                        "INSERT INTO experiment_runs VALUES (%s,%s,%s,%s,%s,%s)",
                        (name, seq, source_id, branch_id, error, dump_json(result)),
                    )
            except errors.ForeignKeyViolation:
                raise ConfigError(f"no experiment {name!r}, or no run {source_id} / "
                                  f"{branch_id}, in {self.label}") from None  # fmt: skip
            except errors.UniqueViolation:
                raise AlreadyRecorded(f"experiment {name!r} already has branch {seq}") from None

        self._db.run(work, write=True)

    def experiment_counts(self, name: str) -> tuple[int, int]:
        row = self._db.run(lambda conn: conn.execute(EXPERIMENT_COUNTS, (name,)).fetchone())
        return (int(row[0]), int(row[1] or 0)) if row else (0, 0)

    def finish_experiment(self, name: str, *, ended_at: float) -> None:
        changed = self._db.run(
            lambda conn: (
                conn.execute(
                    "UPDATE experiments SET ended_at=%s WHERE name=%s", (ended_at, name)
                ).rowcount
            ),
            write=True,
        )
        if not changed:
            raise ConfigError(f"no experiment {name!r} in {self.label}")

    def get_experiment(self, name: str) -> tuple[StoredExperiment, list[StoredBranch]]:
        found = self._experiments("WHERE name=%s", (name,))
        if not found:
            raise ConfigError(
                f"no experiment {name!r} in {self.label} (see: forkpoint experiment list)"
            )
        rows = self._db.run(lambda conn: conn.execute(
            "SELECT seq, source_id, branch_id, error, result FROM experiment_runs "
            "WHERE experiment=%s ORDER BY seq", (name,)).fetchall())  # fmt: skip
        try:
            branches = [StoredBranch(s, src, b, e, orjson.loads(r)) for s, src, b, e, r in rows]
        except orjson.JSONDecodeError as error:
            raise damaged(f"experiment {name!r}", "a branch's result", error) from None
        return found[0], branches

    def list_experiments(self) -> list[StoredExperiment]:
        return self._experiments("ORDER BY created_at, name", ())

    def _experiments(self, where: str, params: tuple[object, ...]) -> list[StoredExperiment]:
        rows = self._db.run(lambda conn: conn.execute(
            f"SELECT name, created_at, ended_at, spec FROM experiments {where}",  # type: ignore[arg-type]
            params).fetchall())  # fmt: skip
        try:
            return [StoredExperiment(n, c, e, orjson.loads(spec)) for n, c, e, spec in rows]
        except orjson.JSONDecodeError as error:
            raise damaged(f"{self.label}'s experiments", "a spec", error) from None
