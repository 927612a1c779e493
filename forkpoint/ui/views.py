"""`Views`: the web view's pages behind one aiohttp handler, wherever it is served: on its own
(`forkpoint ui`) or inside a proxy (`forkpoint serve`, under `/_forkpoint/ui/`).

It routes paths itself, so the two hosts need only hand it a request and the path under
them; every link it writes is relative to the page it is on (`root`), so pages work under any
prefix the host puts in front: a mount, a reverse proxy, the token's `/t/TOKEN/`. Store reads
run on the view's own threads, never on the event loop, which may be a proxy's; nothing is
ever written. Any path with `.json` at its end answers the page's data as JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from importlib.resources import files
from typing import Any, TypeVar
from urllib.parse import quote, unquote

import orjson
from aiohttp import web
from markupsafe import Markup

from forkpoint.api import Options, Reader
from forkpoint.compare.experiment_render import experiment_json
from forkpoint.compare.render import diff_json
from forkpoint.doors.reach import is_loopback
from forkpoint.errors import (
    AlreadyAnswered,
    CassetteError,
    ConfigError,
    ForkpointError,
    NotParked,
    RunNotFound,
)
from forkpoint.models import Run
from forkpoint.ui import inbox, live, pages
from forkpoint.ui.answering import AnswerForm, Refused
from forkpoint.ui.render import Templates
from forkpoint.ui.runs import Query, runs_page

T = TypeVar("T")
log = logging.getLogger(__name__)

# Pages are read, never framed, never sniffed as another type; scripts only from here.
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' "
    "'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
STATIC = {"forkpoint.css": "text/css", "forkpoint.js": "text/javascript"}
# Live pages followed at once at most: each polls the store.
STREAMS = 64
RETIRE = 10.0  # seconds a replaced reader stays open for the reads under way on it


class Views:
    """The web view over `reader`. `mount` is where a host serves it (`/_forkpoint/ui`, or
    "" on its own); `guard_host`: answer only requests addressed to a loopback name, so a web
    page elsewhere cannot read it through a DNS name rebound to 127.0.0.1."""

    def __init__(
        self, reader: Reader, *, mount: str = "", guard_host: bool = True, store_flag: str = "",
        form: AnswerForm | None = None,
    ) -> None:  # fmt: skip
        self.reader = reader
        self.form = form
        self.mount = mount
        self.guard_host = guard_host
        self.store_flag = store_flag
        self.templates = Templates(location=_shown_location(reader.location))
        self.templates.env.globals["csrf"] = form.csrf if form else ""
        self.templates.env.globals["served"] = bool(mount)  # inside serve, whose loop wakes
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="forkpoint-ui")
        self._closing: asyncio.Event | None = None
        self._streams = 0

    async def __call__(self, request: web.Request, path: str) -> web.StreamResponse:
        """Answer `request` for `path`, what follows the mount in its (encoded) path."""
        if self.guard_host and not is_loopback(request.url.host or ""):
            return self.error_page(421, "forkpoint ui answers only requests to a loopback name "
                               "(127.0.0.1, localhost)", "./")  # fmt: skip
        path = path.partition("?")[0]
        if request.method not in ("GET", "HEAD") and not _answering(request.method, path):
            return self.error_page(405, "forkpoint ui only reads (but for a parked run's "
                                   "answer form): use GET", "./")  # fmt: skip
        if not path.startswith("/"):  # the mount itself, without its slash: links need it
            raise web.HTTPFound(self.mount.rsplit("/", 1)[-1] + "/")
        parts = [unquote(part) for part in path[1:].split("/")]
        root = "../" * (len(parts) - 1) or "./"
        while len(parts) > 1 and parts[-1] == "":
            parts.pop()
        try:
            return await self._route(request, parts, root)
        except web.HTTPException:
            raise
        except RunNotFound as error:
            return self.error_page(404, str(error), root)
        except (ConfigError, CassetteError) as error:
            return self.error_page(400 if isinstance(error, ConfigError) else 503, str(error), root)
        except ForkpointError as error:
            return self.error_page(500, str(error), root)
        except Exception as error:  # a bug: one line for the user, the trace for debugging
            log.error("forkpoint ui: %s answering %s: %s", type(error).__name__, path, error)
            log.debug("forkpoint ui: the failure in full", exc_info=True)
            return self.error_page(500, f"forkpoint ui failed on this page: {error}", root)

    async def close(self) -> None:
        """End the live streams (the host is stopping) and the reader's threads."""
        self._event().set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _route(self, request: web.Request, parts: list[str], root: str) -> web.StreamResponse:
        parts[-1], as_json = _json_suffix(parts[-1])
        head, *rest = parts
        if head in ("", "runs") and not rest:
            data = await self._read(runs_page, self.reader, Query.of(request.query))
            return self._page("runs.html", data, root, as_json, "runs")
        if head == "runs" and len(rest) == 1:
            flag = self.store_flag
            data = await self._read(pages.run_page, self.reader, rest[0], store_flag=flag)
            return self._page("run.html", data, root, as_json, "run")
        if head == "runs" and len(rest) == 2 and rest[1] == "answer":
            return await self._answer(request, rest[0], root, as_json)
        if head == "runs" and len(rest) == 2 and rest[1] == "events":
            return await self._events(request, rest[0])
        if head == "runs" and len(rest) == 3 and rest[1] == "steps" and rest[2].isdigit():
            return await self._step(request, rest[0], int(rest[2]), root, as_json)
        if head == "diff":
            return await self._diff(request, rest, root, as_json)
        if head == "experiments" and len(rest) <= 1:
            return await self._experiments(rest, root, as_json)
        if head == "inbox" and not rest:
            after = request.query.get("after", "")
            data = await self._read(inbox.inbox_page, self.reader, after=after)
            return self._page("inbox.html", data, root, as_json, "inbox")
        if head == "static" and len(rest) == 1 and rest[0] in STATIC:
            return web.Response(text=_static(rest[0]), content_type=STATIC[rest[0]],
                                headers=HEADERS)  # fmt: skip
        return self.error_page(404, f"forkpoint ui has no page /{'/'.join(parts)}", root)

    async def _step(
        self, request: web.Request, ref: str, step: int, root: str, as_json: bool
    ) -> web.StreamResponse:
        data, shown = await self._read(pages.step_page, self.reader, ref, step,
                                       store_flag=self.store_flag)  # fmt: skip
        if as_json:
            return _json(data)
        if "part" in request.query:  # the step opened inside its run's page: links from there
            html = self.templates.render("step_detail.html", root="../", s=data, shown=shown)
            return _html(html)
        return self._page("step.html", {"s": data, "shown": shown}, root, False, "step")

    async def _diff(
        self, request: web.Request, rest: list[str], root: str, as_json: bool
    ) -> web.StreamResponse:
        if not rest:
            a, b = request.query.get("a", "").strip(), request.query.get("b", "").strip()
            if a and b:
                raise web.HTTPFound(f"{root}diff/{_segment(a)}/{_segment(b)}")
            return self._page("diff_form.html", {"a": a, "b": b}, root, as_json, "diff")
        if len(rest) != 2:
            return self.error_page(404, "a diff names two runs: diff/A/B", root)
        found = await self._read(self.reader.diff, rest[0], rest[1])
        if as_json:
            return _json(diff_json(found))
        from forkpoint.compare.html import diff_body

        body = Markup(diff_body(found, links=_Links(root)))
        return self._page("diff.html", {"body": body, "a": found.a.run, "b": found.b.run},
                          root, False, "diff")  # fmt: skip

    async def _experiments(self, rest: list[str], root: str, as_json: bool) -> web.StreamResponse:
        if not rest:
            data = await self._read(pages.experiments_page, self.reader)
            return self._page("experiments.html", data, root, as_json, "experiments")
        found = await self._read(self.reader.experiment_results, rest[0])
        if as_json:
            return _json(experiment_json(found))
        from forkpoint.compare.experiment_html import experiment_body

        body = Markup(experiment_body(found, links=_Links(root)))
        data = {"body": body, "name": found.name}
        return self._page("experiment.html", data, root, False, "experiments")

    async def _answer(
        self, request: web.Request, ref: str, root: str, as_json: bool
    ) -> web.StreamResponse:
        """The answer form's post (the view's one write): answered, back to the run's page,
        which says who wakes it now; refused, a page saying why (who answered first)."""
        if request.method != "POST" or self.form is None:
            return self.error_page(405, "answer a parked run from its page's form (POST)", root)
        try:
            park = await self.form.answer(request, ref)
        except Refused as refused:
            return self.error_page(refused.status, str(refused), root)
        except (AlreadyAnswered, NotParked) as error:
            return self.error_page(409, str(error), root)
        finally:
            self._renew_reader()
        if as_json:
            return _json({
                "run": park.run_id, "step": park.step, "state": str(park.state),
                "answered_by": park.answered_by, "answered_at": park.answered_at,
            })  # fmt: skip
        raise web.HTTPSeeOther(f"{root}runs/{_segment(park.run_id)}?answered#park",
                               headers=HEADERS)  # fmt: skip

    def _renew_reader(self) -> None:
        """A reader of its own for the pages after a write: an SQLite read-only connection
        kept open while this process opened and closed a writer of the same file was seen to
        keep reading the file as it was then (what other processes wrote later never showed).
        The old reader is closed once the reads under way on it are done."""
        old, self.reader = self.reader, Reader(Options(cassette=self.reader.location))
        asyncio.get_running_loop().call_later(RETIRE, self._retire, old)

    def _retire(self, old: Reader) -> None:
        with contextlib.suppress(RuntimeError):  # the view closed meanwhile: its pool too
            self._pool.submit(old.close)

    async def _events(self, request: web.Request, ref: str) -> web.StreamResponse:
        """The run's steps that the client has not seen, as they are committed, until the run
        ends; then an `end` event, after which the page stops listening."""
        if self._streams >= STREAMS:
            return self.error_page(503, f"forkpoint ui follows {STREAMS} live pages at most", "./")
        run = await self._read(self.reader.run, ref)
        ranges = live.seen(request.headers.get("Last-Event-ID") or request.query.get("after"))
        response = web.StreamResponse(headers={
            **HEADERS, "Content-Type": "text/event-stream", "X-Accel-Buffering": "no",
        })  # fmt: skip
        self._streams += 1
        try:
            await response.prepare(request)
            await response.write(b"retry: 1000\n\n")
            await self._follow(response, run, ranges)
        except (ConnectionResetError, asyncio.CancelledError):
            pass  # the page went away, or the host stops
        finally:
            self._streams -= 1
        return response

    async def _follow(
        self, response: web.StreamResponse, run: Run, ranges: tuple[tuple[int, int], ...]
    ) -> None:
        sent: set[int] = set()
        count, idle = -1, 0.0
        closing = self._event()
        while not closing.is_set():
            now, run = await self._read(_count_and_run, self.reader, run.id)
            if now != count:
                exchanges = await self._read(self.reader.exchanges, run.id, damaged=[])
                fresh = [e for e in exchanges if not live.holds(ranges, e.step, sent)]
                if fresh:
                    sent.update(e.step for e in fresh)
                    shown = [e.step for e in exchanges if live.holds(ranges, e.step, sent)]
                    data = self.templates.live_steps(run, exchanges, fresh)
                    await response.write(live.event("steps", data, live.cursor(shown)))
                    idle = 0.0
                count = now
            if str(run.status) != "running":
                await response.write(live.event("end", str(run.status)))
                return
            if idle >= live.KEEPALIVE:
                await response.write(b": keep-alive\n\n")
                idle = 0.0
            try:
                await asyncio.wait_for(closing.wait(), live.POLL)
            except TimeoutError:
                idle += live.POLL

    def _page(
        self, template: str, data: dict[str, Any], root: str, as_json: bool, section: str
    ) -> web.Response:
        if as_json:
            return _json(data)
        return _html(self.templates.render(template, root=root, section=section, **data))

    def error_page(self, status: int, message: str, root: str = "./") -> web.Response:
        html = self.templates.render("error.html", root=root, section="error", status=status,
                                     message=message)  # fmt: skip
        return _html(html, status=status)

    async def _read(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, partial(call, *args, **kwargs))

    def _event(self) -> asyncio.Event:
        if self._closing is None:
            self._closing = asyncio.Event()
        return self._closing


class _Links:
    """Links from a page at `root` to runs and diffs, for the bodies compare renders."""

    def __init__(self, root: str) -> None:
        self.root = root

    def run(self, run: Run) -> str:
        return f"{self.root}runs/{_segment(run.id)}"

    def diff(self, a: Run, b: Run) -> str:
        return f"{self.root}diff/{_segment(a.id)}/{_segment(b.id)}"


@functools.cache
def _static(name: str) -> str:
    """A file of the view's script or style, read once."""
    return (files("forkpoint.ui") / "static" / name).read_text("utf-8")


def _count_and_run(reader: Reader, run_id: str) -> tuple[int, Run]:
    return reader.step_count(run_id), reader.run(run_id)


def _answering(method: str, path: str) -> bool:
    """A post of the answer form (`/runs/RUN/answer`), the one request that may write."""
    parts = path.strip("/").split("/")
    return (
        method == "POST"
        and len(parts) == 3
        and parts[0] == "runs"
        and parts[2] in ("answer", "answer.json")
    )


def _json_suffix(part: str) -> tuple[str, bool]:
    return (part[:-5], True) if part.endswith(".json") else (part, False)


def _segment(text: str) -> str:
    return quote(text, safe="")


def _json(data: Any) -> web.Response:
    body = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str)
    return web.Response(body=body, content_type="application/json", headers=HEADERS)


def _html(text: str, *, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html", headers=HEADERS)


def _shown_location(location: str) -> str:
    """Where the cassette is, as a page may show it: a database URL without its password."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(location)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":****@")
        return urlunsplit(parts._replace(netloc=netloc))
    return location
