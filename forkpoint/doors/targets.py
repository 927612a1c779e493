"""Where a request to the gateway goes: its engine config, its run and its route.

An agent's request names its run by a `/r/RUN/` prefix or the run header; the interceptor's
carry, besides, the origin they were going to (with the interceptor's secret), which alone
serves them. A request line never says where a request goes: only the routes do.
"""

from __future__ import annotations

import dataclasses
import hmac
from collections.abc import Callable
from urllib.parse import urlsplit

from forkpoint.engine.config import (
    INTERCEPT_HEADER,
    ORIGIN_HEADER,
    RUN_HEADER,
    EngineConfig,
    Routes,
)

RUN_PREFIX = "/r/"


def target_of(
    raw_path: str, get: Callable[[str], str | None], config: EngineConfig, secret: str | None
) -> tuple[EngineConfig, str | None, str]:
    """The engine config, run id and route of a request (`get` reads a header): the
    interceptor's (marked with its `secret`) carry the origin they were going to, which alone
    serves them; the agents' are as they came."""
    origin = get(ORIGIN_HEADER)
    marked = get(INTERCEPT_HEADER) or ""
    if origin is not None and secret and hmac.compare_digest(marked, secret):
        netloc = urlsplit(origin).netloc
        # `--route HOST=URL` sends a host's intercepted traffic elsewhere (a mock server)
        routes = Routes(prefixes={netloc: config.routes.prefixes.get(netloc, origin)})
        route = f"/{netloc}{raw_path}"
        return dataclasses.replace(config, routes=routes), get(RUN_HEADER), route
    run_id, route = split_run(_path_of(raw_path), get(RUN_HEADER))
    return config, run_id, route


def split_run(raw_path: str, run_header: str | None) -> tuple[str | None, str]:
    """The run id named by a `/r/<id>/` prefix (or the run header) and the route after it."""
    if raw_path.startswith(RUN_PREFIX):
        run_id, _, rest = raw_path[len(RUN_PREFIX) :].partition("/")
        return run_id, "/" + rest
    return run_header, raw_path


def _path_of(target: str) -> str:
    """The path and query of a request target. An absolute-form target
    (`GET http://host/path`, as a client sends to a forward proxy) is taken for its path
    alone: the gateway never goes where a request line says, only where its routes do."""
    if target.startswith("/"):
        return target
    parts = urlsplit(target)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
