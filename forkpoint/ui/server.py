"""`forkpoint ui`: the web view on its own, over a cassette, until interrupted.

On loopback (the default) it answers requests to a loopback name alone. Bound beyond it, every
request needs the token, as the proxy's do (`forkpoint.doors.reach`, `forkpoint.doors.auth`):
`http://HOST:PORT/t/TOKEN/`, whose prefix the page's relative links keep.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from forkpoint.api import Options, Reader
from forkpoint.api.sync import run_sync
from forkpoint.cassettes.open import is_postgres
from forkpoint.doors.auth import tokens
from forkpoint.doors.reach import is_loopback, token_for
from forkpoint.importing import require_extra
from forkpoint.runtime.loop_thread import until_stopped

# Both ways in (`forkpoint ui`, serve's mount) come through here: the pages' modules need it.
require_extra("ui", "the web view (forkpoint ui, serve's /_forkpoint/ui/)")

from forkpoint.ui.answering import AnswerForm  # noqa: E402 (after the check)
from forkpoint.ui.views import Views  # noqa: E402 (after the check)

__all__ = ["UiServing", "aserve_ui", "serve_ui", "store_flag", "views_for"]


@dataclass(frozen=True, slots=True)
class UiServing:
    """Where the web view listens, and the token it needs (shown to its user once)."""

    url: str
    token: str | None = None
    token_made: bool = False


def views_for(options: Options, *, mount: str = "", loopback: bool = True) -> Views:
    """The web view over `options`' cassette; `loopback`: it listens on loopback only."""
    reader = Reader(options)
    return Views(reader, mount=mount, guard_host=loopback, store_flag=store_flag(options),
                 form=AnswerForm(options))  # fmt: skip


def store_flag(options: Options) -> str:
    """What a command needs to find the same cassette: ` --cassette PATH` when one was given
    (a PostgreSQL URL's password left out: the page shows `$FORKPOINT_STORE` instead)."""
    given = options.cassette
    if given is None:
        return ""
    if is_postgres(given):
        return ' --store "$FORKPOINT_STORE"'
    return f" --cassette {shlex.quote(str(given))}"


async def aserve_ui(
    options: Options = Options(),
    *,
    host: str = "127.0.0.1",
    port: int = 8767,
    token: str | None = None,
    ready: Callable[[UiServing], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve the web view until SIGINT or SIGTERM (or `stop`); `ready` is told where."""
    token, made = token_for(host, token)
    views = views_for(options, loopback=is_loopback(host) and token is None)

    async def handle(request: web.Request) -> web.StreamResponse:
        return await views(request, request.raw_path)

    app = web.Application(middlewares=[_refused_page(views), *tokens(token, None)])
    app.router.add_route("*", "/{tail:.*}", handle)

    async def ending(_: web.Application) -> None:
        await views.close()

    app.on_shutdown.append(ending)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, reuse_address=True).start()
        bound_host, bound_port = runner.addresses[0][:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        if ready is not None:
            ready(UiServing(f"http://{shown}:{bound_port}/", token, made))
        await (stop.wait() if stop is not None else until_stopped())
    finally:
        await runner.cleanup()
        views.reader.close()


def serve_ui(
    options: Options = Options(),
    *,
    host: str = "127.0.0.1",
    port: int = 8767,
    token: str | None = None,
    ready: Callable[[UiServing], None] | None = None,
) -> None:
    run_sync(aserve_ui(options, host=host, port=port, token=token, ready=ready))


def _refused_page(views: Views) -> Middleware:
    """The token's refusal as a page a person reads, not an API's JSON error."""

    @web.middleware
    async def page(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        if response.status != 401:
            return response
        message = (
            "this forkpoint ui needs its token: open http://HOST:PORT/t/TOKEN/ (the token "
            "was given with --token or FORKPOINT_TOKEN, or printed when it started)"
        )
        return views.error_page(401, message)

    return page
