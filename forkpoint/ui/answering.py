"""The web view's one write: a person answers a parked run from its page.

The form posts to `runs/RUN/answer` and is answered by `forkpoint.api.aanswer`, the function
behind `forkpoint answer`, with its rules: exactly once (a second answer is refused, naming
who answered when), at most `limit` bytes, masked as every recorded body is; the cassette is
opened for writing for that call alone. A cross-site post cannot make it: the form carries a
token made by this process (`csrf`), checked in constant time, and a browser's `Origin` or
`Sec-Fetch-Site` saying another site is refused; beyond loopback the host's token rule holds
as for every page.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from aiohttp import web

from forkpoint.api import Options, Reader
from forkpoint.api.options import store_location
from forkpoint.api.parking import aanswer
from forkpoint.errors import ConfigError
from forkpoint.models import Park, Waker

__all__ = ["FORM_LIMIT", "AnswerForm", "Refused"]

# The largest form accepted (bytes, as posted): an answer a person types or pastes.
FORM_LIMIT = 1 << 20


class Refused(Exception):
    """A post the form does not take: its HTTP status and one line why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Answer:
    status: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


class AnswerForm:
    """Checks and carries out the answer form's posts over `options`' cassette."""

    def __init__(self, options: Options, *, limit: int = FORM_LIMIT) -> None:
        self.options = options
        self.limit = min(limit, options.max_body)
        self.csrf = secrets.token_urlsafe(32)  # per process: a page of this view carries it

    async def answer(self, request: web.Request, run: str) -> Park:
        """Answer parked `run` with the posted form; Refused for a post not taken (the
        store's own refusals, AlreadyAnswered, NotParked, RunNotFound, pass through)."""
        _same_site(request)
        given = await self.read(request)
        by = f"web {request.remote or '?'}"
        try:
            park = await aanswer(run, given.body, status=given.status, headers=given.headers,
                                 by=by, options=self.options)  # fmt: skip
        except ConfigError as error:  # a bad status, a body too large: nothing stored
            raise Refused(400, str(error)) from None
        await asyncio.to_thread(self._to_workers, park.run_id)
        return park

    def _to_workers(self, run_id: str) -> None:
        """A run that wakes on workers: its wake job queued, as `forkpoint answer` does (a
        serve's wake loop would queue it too; the queue keeps one)."""
        with Reader(self.options) as reader:
            launch = reader.launch(run_id)
        if launch is not None and launch.waker is Waker.WORKERS:
            from forkpoint.jobs.wakes import enqueue_wake  # the workers extra

            enqueue_wake(store_location(self.options.cassette), launch)

    async def read(self, request: web.Request) -> Answer:
        if request.content_type != "application/x-www-form-urlencoded":
            raise Refused(415, "post the answer form (application/x-www-form-urlencoded)")
        if request.content_length is not None and request.content_length > self.limit:
            raise Refused(413, f"the answer is over the form's limit ({self.limit} bytes)")
        raw = await request.content.read(self.limit + 1)
        if len(raw) > self.limit:
            raise Refused(413, f"the answer is over the form's limit ({self.limit} bytes)")
        fields: dict[str, str] = {}
        for name, value in parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True):
            fields.setdefault(name, value)
        if not hmac.compare_digest(fields.get("csrf", "").encode(), self.csrf.encode()):
            raise Refused(403, "the form's token is missing or stale: reload the run's page "
                          "and answer from there")  # fmt: skip
        return Answer(fields.get("status", "").strip() or "200",
                      _headers(fields.get("headers", "")),
                      fields.get("body", "").replace("\r\n", "\n").encode())  # fmt: skip


def _headers(text: str) -> tuple[tuple[str, str], ...]:
    """`Name: value` lines (blank lines skipped), as `forkpoint answer --header` takes them."""
    pairs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise Refused(400, f"header {line.strip()!r} is not 'Name: value'")
        pairs.append((name.strip(), value.strip()))
    return tuple(pairs)


def _same_site(request: web.Request) -> None:
    """Refuse a post a browser says came from another site (the token refuses it anyway)."""
    if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
        raise Refused(403, "the answer form takes posts from its own pages only")
    origin = request.headers.get("Origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.host:
        raise Refused(403, "the answer form takes posts from its own pages only")
