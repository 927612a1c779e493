"""Optional routes: side calls that do not decide what an agent does.

Coding agents and SDKs send telemetry, event logs, metrics, error reports and feature-flag
fetches beside their model calls; under `--intercept` forkpoint sees them all. Their bodies
hold timestamps, counters and ids that differ on every run, and the agent does the same
whatever they answer (they fail offline, and it carries on). A replay serves such a request
its recorded answer when one matches, and otherwise answers it with an empty success: it is
never a divergence.

A route is `[METHOD ]GLOB`, the glob over the route forkpoint sees: `/{host}{path}` for an
intercepted request (`/api.anthropic.com/api/event_logging/v2/batch`), the path for one that
came by the base URL. A glob's `*` matches across `/`.
"""

from __future__ import annotations

import fnmatch
import functools
import re

from forkpoint.models import Headers

# What the research into Claude Code, Codex and the SDKs saw them send on the side.
DEFAULT_OPTIONAL: tuple[str, ...] = (
    # Anthropic: Claude Code's event logging and feature flags (GrowthBook)
    "/api.anthropic.com/api/event_logging/*",
    "/api.anthropic.com/api/eval/*",
    # Statsig, Datadog and Sentry (feature gates, logs and error reports of many CLIs)
    "/statsig.anthropic.com/*",
    "/*.statsig.com/*",
    "/*.statsigapi.net/*",
    "/featuregates.org/*",
    "/http-intake.logs.*datadoghq.com/*",
    "/*.ingest.sentry.io/*",
    "/*.ingest.*.sentry.io/*",
    # OpenTelemetry over HTTP, to any collector (a GET of a metrics API is a tool call)
    "POST */v1/metrics",
    "POST */v1/traces",
    "POST */v1/logs",
    # OpenAI: Codex's analytics, the Agents SDK's trace export
    "/ab.chatgpt.com/*",
    "/chatgpt.com/backend-api/codex/analytics-events/*",
    "POST */v1/traces/ingest",
)


@functools.lru_cache(maxsize=256)
def _compiled(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regex for every pattern, matched against `METHOD path`."""
    rules = []
    for text in patterns:
        method, sep, glob = text.strip().partition(" ")
        if not sep:
            method, glob = "", method
        verb = re.escape(method.upper()) if method else r"[^ ]+"
        rules.append(f"(?:{verb} {fnmatch.translate(glob.strip())})")
    return re.compile("|".join(rules) or r"(?!)")


def is_optional(method: str, route: str, patterns: tuple[str, ...]) -> bool:
    """Whether `method route` (its query left out) is one of the optional `patterns`."""
    return _compiled(patterns).match(f"{method.upper()} {route.partition('?')[0]}") is not None


def empty_success(request_headers: Headers) -> tuple[int, Headers, bytes]:
    """The answer to an optional request the recording lacks: 200 with `{}` for a JSON
    request, an empty body for any other (an empty protobuf message, for OTLP)."""
    content_type = next((v for k, v in request_headers if k.lower() == "content-type"), "")
    if "json" in content_type.lower():
        return 200, (("content-type", "application/json"), ("content-length", "2")), b"{}"
    return 200, (("content-length", "0"),), b""
