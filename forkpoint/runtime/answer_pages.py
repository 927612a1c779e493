"""Serve's endpoints for parked runs (`/_forkpoint/runs/RUN/...`): an answer over HTTP
(`answers.deliver`, as `forkpoint answer` gives one) and the launch of an agent serve did not
start. Apart from `answers`, which `forkpoint answer` imports without aiohttp."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import NamedTuple
from urllib.parse import parse_qs, unquote

import orjson
from aiohttp import web

from forkpoint.cassettes.store import Store
from forkpoint.engine.matching import MatchConfig
from forkpoint.errors import AlreadyAnswered, ConfigError, ForkpointError, NotParked, RunNotFound
from forkpoint.models import Park
from forkpoint.runtime.answers import deliver

# How serve's endpoint is told the answer's status and headers, beside its body.
STATUS_HEADER = "X-Forkpoint-Status"
ANSWER_HEADER = "X-Forkpoint-Header"  # repeatable, `Name: value`


class AnswerPages:
    """`POST /_forkpoint/runs/RUN/answer`, mounted on `serve` (behind its token, as every
    request is): the request's body is the answer's; its status is the `X-Forkpoint-Status`
    header or `?status=N` (default 200), its headers its Content-Type and each
    `X-Forkpoint-Header: Name: value`. 200 with the park, 404 for an unknown run, 409 for a
    run not parked or answered already (who and when), 400 for a bad status, 413 past
    --max-body."""

    def __init__(
        self, store: Store, *, match: MatchConfig, max_body: int,
        on_launch: Callable[[str, Launched], None] | None = None,
        on_answer: Callable[[Park], None] | None = None,
        on_answering: Callable[[str], None] | None = None,
    ):  # fmt: skip
        self.store = store
        self.match = match
        self.max_body = max_body
        self.on_launch = on_launch
        self.on_answer = on_answer  # told of each answer stored (serve wakes its run at once)
        self.on_answering = on_answering  # told of the run first, before the store can tell

    async def __call__(self, request: web.Request, path: str) -> web.StreamResponse:
        run, _, verb = path.strip("/").partition("/")
        if request.method == "POST" and verb == "launch" and run and self.on_launch:
            return await self._launch(request, unquote(run))
        if request.method != "POST" or verb != "answer" or not run:
            return _error(404, f"forkpoint has no endpoint {request.method} {request.path}")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"the answer is over --max-body ({self.max_body} bytes)")
        query = parse_qs(request.query_string)
        status = request.headers.get(STATUS_HEADER) or (query.get("status") or ["200"])[0]
        headers: list[tuple[str, str]] = []
        if request.content_type and request.headers.get("Content-Type"):
            headers.append(("content-type", request.headers["Content-Type"]))
        for line in request.headers.getall(ANSWER_HEADER, []):
            name, sep, value = line.partition(":")
            if not sep or not name.strip():
                return _error(400, f"{ANSWER_HEADER} {line!r} is not 'Name: value'")
            headers.append((name.strip(), value.strip()))
        peer = request.remote or "?"
        if self.on_answering is not None:
            self.on_answering(unquote(run))
        try:
            park = await asyncio.to_thread(
                deliver, self.store, unquote(run), body, status=status, headers=tuple(headers),
                by=f"http {peer}", match=self.match, max_body=self.max_body,
            )  # fmt: skip
        except RunNotFound as error:
            return _error(404, str(error))
        except (AlreadyAnswered, NotParked) as error:
            return _error(409, str(error))
        except ConfigError as error:
            return _error(400, str(error))
        except ForkpointError as error:
            return _error(503, str(error))
        if self.on_answer is not None:
            self.on_answer(park)
        return web.json_response(
            {
                "run": park.run_id,
                "step": park.step,
                "state": str(park.state),
                "answered_by": park.answered_by,
                "answered_at": park.answered_at,
            }
        )

    async def _launch(self, request: web.Request, run: str) -> web.StreamResponse:
        """`POST /_forkpoint/runs/RUN/launch` `{"command": [...], "cwd": DIR, "env": {...},
        "pid": N}`: how an agent this proxy did not start was started, so that its run can be
        woken (the run keeps it without its secrets) and its process group ended on parking."""
        try:
            fields = orjson.loads(await request.read())
            launched = Launched(
                tuple(str(word) for word in fields["command"]),
                str(fields.get("cwd") or "."),
                {str(k): str(v) for k, v in (fields.get("env") or {}).items()},
                int(fields["pid"]) if fields.get("pid") is not None else None,
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            message = 'give {"command": [...], "cwd": DIR, "env": {...}, "pid": N}'
            return _error(400, message)
        if not launched.command:
            return _error(400, "the launch's command is empty")
        assert self.on_launch is not None
        self.on_launch(run, launched)
        return web.json_response({"run": run})

    async def close(self) -> None:
        return None


class Launched(NamedTuple):
    """How an agent a proxy did not start was started, as it says (`AnswerPages._launch`)."""

    command: tuple[str, ...]
    cwd: str
    env: dict[str, str]
    pid: int | None


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": f"forkpoint: {message}"}}, status=status)
