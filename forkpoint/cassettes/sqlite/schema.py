"""The SQLite cassette's schema, and the conversions between its rows and the models."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson
import sqlite_utils

from forkpoint.models import Chunk, Headers, Mode, Run, RunStatus

SCHEMA_VERSION = 1
# PRAGMA application_id marks the file as a forkpoint cassette ("fkpt").
APPLICATION_ID = 0x666B7074


def create_schema(db: sqlite_utils.Database) -> None:
    """Tables, indexes and the PRAGMAs that mark the file as a cassette of this version."""
    db.table("runs").create(
        {
            "id": str, "name": str, "labels": str, "status": str, "mode": str,
            "parent_id": str, "fork_step": int, "change": str, "created_at": float,
            "ended_at": float, "error": str,
        },
        pk="id",
        foreign_keys=[("parent_id", "runs", "id")],
    )  # fmt: skip
    db.table("blobs").create({"hash": str, "size": int, "codec": str, "data": bytes}, pk="hash")
    db.table("exchanges").create(
        {
            "run_id": str, "step": int, "method": str, "route": str, "upstream": str,
            "request_headers": str, "request_body": str, "fingerprint": str,
            "status": int, "response_headers": str, "response_body": str,
            "streamed": int, "complete": int, "error": str, "origin": str,
            "started_at": float, "ttfb_ms": float, "duration_ms": float,
            "kind": str, "dialect": str, "model": str, "input_tokens": int,
            "output_tokens": int, "cached_tokens": int, "reasoning_tokens": int,
            "tool_calls": str, "finish_reason": str, "text": str,
        },
        pk=("run_id", "step"),
        foreign_keys=[("run_id", "runs", "id")],
    )  # fmt: skip
    db.table("chunks").create(
        {"run_id": str, "step": int, "seq": int, "offset_ms": float, "size": int, "end": int},
        pk=("run_id", "step", "seq"),
    )
    db.table("snapshots").create(
        {
            "run_id": str, "step": int, "adapter": str, "content_type": str,
            "body": str, "size": int, "error": str, "taken_at": float, "duration_ms": float,
        },
        pk=("run_id", "step", "adapter"),
        foreign_keys=[("run_id", "runs", "id")],
    )  # fmt: skip
    db.table("runs").create_index(["name"])
    db.table("exchanges").create_index(["run_id", "fingerprint"])
    create_experiment_tables(db)
    db.execute(f"PRAGMA application_id={APPLICATION_ID}")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def create_experiment_tables(db: sqlite_utils.Database) -> None:
    """`experiments` (name, times, spec JSON) and `experiment_runs` (each selected run, its
    branch run or the error, and a JSON result). Also run on a cassette written before these
    tables existed (same schema version: none was released without them)."""
    db.table("experiments").create(
        {"name": str, "created_at": float, "ended_at": float, "spec": str},
        pk="name",
        if_not_exists=True,
    )
    db.table("experiment_runs").create(
        {
            "experiment": str, "seq": int, "source_id": str, "branch_id": str, "error": str,
            "result": str,
        },
        pk=("experiment", "seq"),
        foreign_keys=[
            ("experiment", "experiments", "name"),
            ("source_id", "runs", "id"),
            ("branch_id", "runs", "id"),
        ],
        if_not_exists=True,
    )  # fmt: skip


def cut_chunks(body: bytes, sizes: list[tuple[float, int]]) -> list[Chunk]:
    chunks, position = [], 0
    for offset_ms, size in sizes:
        chunks.append(Chunk(offset_ms, body[position : position + size]))
        position += size
    return chunks


def dump_headers(headers: Headers) -> str:
    return orjson.dumps([list(pair) for pair in headers]).decode()


def load_headers(text: str | None) -> Headers:
    return tuple((name, value) for name, value in orjson.loads(text or "[]"))


def run_from_row(row: tuple[Any, ...]) -> Run:
    (id_, name, labels, status, mode, parent, fork_step, change, created, ended, error) = row
    return Run(
        id=id_,
        name=name,
        labels=orjson.loads(labels or "{}"),
        status=RunStatus(status),
        mode=Mode(mode),
        parent_id=parent,
        fork_step=fork_step,
        change=None if change is None else orjson.loads(change),
        created_at=created,
        ended_at=ended,
        error=error,
    )


def explain(path: Path, error: sqlite3.DatabaseError) -> str:
    text = str(error)
    if "locked" in text or "busy" in text:
        return f"{path} is locked by another process (still locked after the busy timeout)"
    if "not a database" in text or "malformed" in text:
        return f"{path} is not a readable SQLite cassette ({text})"
    return f"{path}: {text}"
